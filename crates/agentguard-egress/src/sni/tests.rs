//! The ClientHello reader against hand-made hellos (split anywhere, across records, hostile)
//! and against a real one from rustls.

use super::{Hello, server_name};

/// A ClientHello handshake message body with these extensions.
fn body(extensions: &[Vec<u8>]) -> Vec<u8> {
    let mut b = vec![3, 3];
    b.extend([7u8; 32]); // random
    b.push(0); // session id
    b.extend([0, 2, 0x13, 0x01]); // one cipher suite
    b.extend([1, 0]); // compression: null
    let ext: Vec<u8> = extensions.concat();
    b.extend((ext.len() as u16).to_be_bytes());
    b.extend(ext);
    b
}

fn sni_extension(names: &[&str]) -> Vec<u8> {
    let mut list = Vec::new();
    for name in names {
        list.push(0);
        list.extend((name.len() as u16).to_be_bytes());
        list.extend(name.as_bytes());
    }
    let mut data = (list.len() as u16).to_be_bytes().to_vec();
    data.extend(list);
    let mut ext = vec![0, 0];
    ext.extend((data.len() as u16).to_be_bytes());
    ext.extend(data);
    ext
}

/// The handshake message in records of at most `record` bytes each.
fn records(body: &[u8], record: usize) -> Vec<u8> {
    let mut message = vec![1];
    message.extend(&(body.len() as u32).to_be_bytes()[1..]);
    message.extend(body);
    message
        .chunks(record)
        .flat_map(|chunk| {
            let mut r = vec![0x16, 3, 1];
            r.extend((chunk.len() as u16).to_be_bytes());
            r.extend(chunk);
            r
        })
        .collect()
}

fn hello(name: &str) -> Vec<u8> {
    records(&body(&[vec![0, 23, 0, 0], sni_extension(&[name])]), 16384)
}

#[test]
fn the_name_is_read_from_a_whole_hello() {
    assert_eq!(
        server_name(&hello("pkgs.example.test")),
        Hello::Complete(Some("pkgs.example.test".into()))
    );
    assert_eq!(
        server_name(&records(&body(&[]), 16384)),
        Hello::Complete(None),
        "no extensions at all"
    );
    assert_eq!(
        server_name(&records(&body(&[vec![0, 23, 0, 0]]), 16384)),
        Hello::Complete(None),
        "no server_name extension"
    );
}

#[test]
fn every_prefix_is_incomplete_and_records_may_split_the_message() {
    let whole = hello("pkgs.example.test");
    for cut in 0..whole.len() {
        assert_eq!(
            server_name(&whole[..cut]),
            Hello::Incomplete,
            "cut at {cut}"
        );
    }
    let split = records(
        &body(&[vec![0, 23, 0, 0], sni_extension(&["pkgs.example.test"])]),
        7,
    );
    assert_eq!(
        server_name(&split),
        Hello::Complete(Some("pkgs.example.test".into())),
        "a ClientHello in records of 7 bytes"
    );
}

#[test]
fn what_is_not_tls_or_not_a_clean_hello_is_refused() {
    assert_eq!(server_name(b"GET / HTTP/1.1\r\n"), Hello::NotTls);
    assert_eq!(server_name(&[0x16, 2, 0]), Hello::NotTls);
    let two = records(
        &body(&[
            sni_extension(&["a.example.test"]),
            sni_extension(&["b.example.test"]),
        ]),
        16384,
    );
    assert!(
        matches!(server_name(&two), Hello::Malformed(_)),
        "two extensions"
    );
    let names = records(
        &body(&[sni_extension(&["a.example.test", "b.example.test"])]),
        16384,
    );
    assert!(
        matches!(server_name(&names), Hello::Malformed(_)),
        "two names"
    );
    let mut truncated_body = body(&[sni_extension(&["pkgs.example.test"])]);
    truncated_body.truncate(truncated_body.len() - 3);
    // The message length claims more than the extensions hold.
    let mut lying = records(&truncated_body, 16384);
    let fake_len = (truncated_body.len() as u32 + 3).to_be_bytes();
    lying[6..9].copy_from_slice(&fake_len[1..]);
    lying[3..5].copy_from_slice(&((truncated_body.len() + 4) as u16).to_be_bytes());
    assert!(!matches!(server_name(&lying), Hello::Complete(_)));
    let server_hello = {
        let mut r = records(&body(&[]), 16384);
        r[5] = 2;
        r
    };
    assert!(matches!(server_name(&server_hello), Hello::Malformed(_)));
}

#[test]
fn a_real_client_hello_from_rustls_carries_its_name() {
    use std::sync::Arc;

    let roots = rustls::RootCertStore::empty();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("pkgs.example.test").unwrap();
    let mut client = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut bytes = Vec::new();
    client.write_tls(&mut bytes).unwrap();
    assert_eq!(
        server_name(&bytes),
        Hello::Complete(Some("pkgs.example.test".into()))
    );
}

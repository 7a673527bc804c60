//! The receipt line taken off stderr.

use super::{RECEIPT_MARK, Receipt};

fn feed(chunks: &[&[u8]]) -> (Vec<u8>, Option<Vec<u8>>) {
    let mut taker = Receipt::new(true);
    let mut found = None;
    let mut passed = Vec::new();
    for chunk in chunks {
        passed.extend_from_slice(&taker.take(chunk, &mut found));
    }
    passed.extend(taker.rest());
    (passed, found)
}

#[test]
fn the_first_line_is_taken_only_when_it_is_a_receipt() {
    let line = format!("{RECEIPT_MARK}{{\"decision\":\"allow\"}}\nafter\n");
    let (passed, found) = feed(&[line.as_bytes()]);
    assert_eq!(passed, b"after\n");
    assert_eq!(found.as_deref(), Some(&b"{\"decision\":\"allow\"}"[..]));
    // Split across reads at every byte.
    for cut in 1..line.len() {
        let (a, b) = line.as_bytes().split_at(cut);
        let (passed, found) = feed(&[a, b]);
        assert_eq!(passed, b"after\n", "cut {cut}");
        assert!(found.is_some(), "cut {cut}");
    }
    // An engine's error is stderr, all of it.
    let (passed, found) = feed(&[b"docker: Error response\n"]);
    assert_eq!(
        (passed.as_slice(), found),
        (&b"docker: Error response\n"[..], None)
    );
    // An engine's warning before the container started is passed on; the receipt after it
    // is still taken.
    let warned = format!("WARNING: no swap limit\n{line}");
    for cut in 1..warned.len() {
        let (a, b) = warned.as_bytes().split_at(cut);
        let (passed, found) = feed(&[a, b]);
        assert_eq!(passed, b"WARNING: no swap limit\nafter\n", "cut {cut}");
        assert!(found.is_some(), "cut {cut}");
    }
    // A mark with no end of line is stderr too.
    let (passed, found) = feed(&[RECEIPT_MARK.as_bytes()]);
    assert_eq!((passed.as_slice(), found), (RECEIPT_MARK.as_bytes(), None));
}

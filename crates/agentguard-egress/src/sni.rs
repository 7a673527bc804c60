//! Reading the server name a TLS client asks for, from its ClientHello, without decrypting
//! anything (DESIGN.md, "TLS name check on tunnels").
//!
//! After the `200`, the proxy reads the client's first TLS records and requires the
//! ClientHello's `server_name` to equal the CONNECT host, so a client cannot present another
//! name to a server it may reach (domain fronting). The handshake message may span several
//! records and arrive in any number of TCP segments; [`server_name`] is called on everything
//! read so far and says whether more is needed. Pure, and a fuzz target.

/// The most handshake bytes read before the ClientHello must be complete.
pub(crate) const MAX_HELLO: usize = 64 * 1024;

/// What the bytes read so far say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hello {
    /// Not enough bytes yet: read more.
    Incomplete,
    /// The first byte is not a TLS handshake record.
    NotTls,
    /// A TLS record, but not a well-formed ClientHello (why).
    Malformed(&'static str),
    /// A whole ClientHello, and its `host_name`, if it has one.
    Complete(Option<String>),
}

/// Reads the ClientHello at the start of `buf`.
pub fn server_name(buf: &[u8]) -> Hello {
    let Some(&first) = buf.first() else {
        return Hello::Incomplete;
    };
    if first != 0x16 || buf.get(1).is_some_and(|&major| major != 3) {
        return Hello::NotTls;
    }
    // Reassemble the handshake message from the records read so far.
    let mut message = Vec::new();
    let mut pos = 0;
    while pos < buf.len() {
        let Some(header) = buf.get(pos..pos + 5) else {
            return Hello::Incomplete;
        };
        if header[0] != 0x16 {
            return Hello::Malformed(
                "a record that is not a handshake before the ClientHello ended",
            );
        }
        let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        if len == 0 || len > 16 * 1024 + 2048 {
            return Hello::Malformed("a record length out of range");
        }
        let Some(fragment) = buf.get(pos + 5..pos + 5 + len) else {
            return Hello::Incomplete;
        };
        message.extend_from_slice(fragment);
        pos += 5 + len;
        if message.len() >= 4 {
            if message[0] != 1 {
                return Hello::Malformed("the first handshake message is not a ClientHello");
            }
            let body = (usize::from(message[1]) << 16)
                | (usize::from(message[2]) << 8)
                | usize::from(message[3]);
            if body + 4 > MAX_HELLO {
                return Hello::Malformed("the ClientHello is longer than 64 KiB");
            }
            if message.len() >= body + 4 {
                return match hello_name(&message[4..body + 4]) {
                    Ok(name) => Hello::Complete(name),
                    Err(why) => Hello::Malformed(why),
                };
            }
        }
    }
    if pos > MAX_HELLO {
        return Hello::Malformed("no ClientHello within 64 KiB");
    }
    Hello::Incomplete
}

/// A cursor over a ClientHello's fields; every read is bounds-checked.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        if self.0.len() < n {
            return Err("a field runs past the end of the ClientHello");
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8_len(&mut self) -> Result<&'a [u8], &'static str> {
        let n = usize::from(self.take(1)?[0]);
        self.take(n)
    }

    fn u16_len(&mut self) -> Result<&'a [u8], &'static str> {
        let len = self.take(2)?;
        self.take(usize::from(u16::from_be_bytes([len[0], len[1]])))
    }
}

/// The `host_name` of the `server_name` extension of a ClientHello body (RFC 8446 4.1.2,
/// RFC 6066 3). Two `server_name` extensions, or two host names, are malformed: a reader
/// that took the first and a server that took the last would disagree.
fn hello_name(body: &[u8]) -> Result<Option<String>, &'static str> {
    let mut c = Cursor(body);
    c.take(2 + 32)?; // legacy_version, random
    c.u8_len()?; // legacy_session_id
    if c.u16_len()?.len() % 2 != 0 {
        return Err("an odd cipher suite list");
    }
    c.u8_len()?; // legacy_compression_methods
    if c.0.is_empty() {
        return Ok(None);
    }
    let mut extensions = Cursor(c.u16_len()?);
    if !c.0.is_empty() {
        return Err("bytes after the extensions");
    }
    let mut name = None;
    let mut seen = false;
    while !extensions.0.is_empty() {
        let kind = extensions.take(2)?;
        let data = extensions.u16_len()?;
        if kind != [0, 0] {
            continue;
        }
        if seen {
            return Err("two server_name extensions");
        }
        seen = true;
        let mut list = Cursor(data);
        let mut entries = Cursor(list.u16_len()?);
        if !list.0.is_empty() {
            return Err("bytes after the server name list");
        }
        while !entries.0.is_empty() {
            let name_type = entries.take(1)?[0];
            let host = entries.u16_len()?;
            if name_type != 0 {
                continue;
            }
            if name.is_some() {
                return Err("two host names in server_name");
            }
            let host = std::str::from_utf8(host).map_err(|_| "a host name that is not text")?;
            name = Some(host.to_owned());
        }
    }
    Ok(name)
}

#[cfg(test)]
mod tests;

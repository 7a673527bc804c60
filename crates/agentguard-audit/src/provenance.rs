//! Who started a run and with what: the `invoker` object (this process's uid, user name,
//! host name and pid, and the client a front end names), `agentguard_version`, the
//! `config_sha256` of the config in force, and the exact `argv`: what `container_run` events
//! carry so a log says what ran after the config has changed (docs/audit.md).

use std::sync::OnceLock;

use serde_json::{Map, Value};

use crate::event::{Event, recorded_text};

/// This build's version, as `agentguard --version` prints it.
pub const AGENTGUARD_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The SHA-256 of `data` in lower-case hex (a config file's bytes, for `config_sha256`).
pub fn sha256_hex(data: &[u8]) -> String {
    crate::digest::sha256_hex(data)
}

/// The SHA-256 of `value`'s canonical form (keys sorted by byte order at every depth, no
/// whitespace: the audit chain's own), so equal JSON gives one digest whatever its key order
/// (a config given as keyword arguments, for `config_sha256`).
pub fn canonical_sha256(value: &Value) -> String {
    let mut out = String::new();
    crate::chain::canonical(value, &mut out);
    crate::digest::sha256_hex(out.as_bytes())
}

/// This process: uid, user name (from /etc/passwd; absent when it has none), host name and
/// pid, read once.
fn this_process() -> &'static Map<String, Value> {
    static PROCESS: OnceLock<Map<String, Value>> = OnceLock::new();
    PROCESS.get_or_init(|| {
        let mut map = Map::new();
        let uid = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|status| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix("Uid:"))
                    .and_then(|rest| rest.split_whitespace().next())
                    .and_then(|v| v.parse::<u32>().ok())
            });
        if let Some(uid) = uid {
            map.insert("uid".into(), uid.into());
            if let Some(user) = user_name(uid) {
                map.insert("user".into(), recorded_text(&user).into());
            }
        }
        if let Ok(host) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
            map.insert("host".into(), recorded_text(host.trim()).into());
        }
        map.insert("pid".into(), std::process::id().into());
        map
    })
}

/// The name /etc/passwd gives `uid`.
fn user_name(uid: u32) -> Option<String> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let id: u32 = fields.nth(1)?.parse().ok()?;
        (id == uid && !name.is_empty()).then(|| name.to_owned())
    })
}

/// The `invoker` object: this process, and `client` (a front end's caller, such as an MCP
/// client's name and version, capped) when there is one.
pub fn invoker(client: Option<&str>) -> Value {
    let mut map = this_process().clone();
    if let Some(client) = client {
        map.insert(
            "client".into(),
            crate::event::capped(client).into_owned().into(),
        );
    }
    Value::Object(map)
}

impl Event {
    /// Adds what proves what ran: `invoker`, `agentguard_version`, and `config_sha256` when the
    /// config's digest is known.
    pub fn provenance(self, config_sha256: Option<&str>, client: Option<&str>) -> Event {
        let event = self
            .data("invoker", invoker(client))
            .data("agentguard_version", AGENTGUARD_VERSION);
        match config_sha256 {
            Some(digest) => event.data("config_sha256", digest),
            None => event,
        }
    }

    /// Adds `argv`, the exact argv placed in the container, each element cut as a param value
    /// is ([`recorded_text`]).
    pub fn argv(self, argv: &[String]) -> Event {
        let argv: Vec<Value> = argv.iter().map(|a| recorded_text(a).into()).collect();
        self.data("argv", argv)
    }
}

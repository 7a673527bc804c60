//! The isolation receipt: what the container looks like from inside, checked before the
//! command runs. Each check reads `/proc` (or asks the kernel) and never dials anything:
//!
//! - `interfaces`: the network interfaces are `lo` only (`/proc/net/dev`);
//! - `routes`: no IPv4 or IPv6 route through anything but `lo` (`/proc/net/route`,
//!   `/proc/net/ipv6_route`; a table the kernel does not show is accepted only when `lo` is
//!   the only interface, so no route can lead elsewhere);
//! - `ids`: every user and group id (real, effective, saved, file system) is the run's;
//! - `capabilities`: the effective, permitted, bounding and ambient sets are empty (gVisor
//!   shows no ambient set: it is empty when the permitted one is);
//! - `no_new_privs`: set (`/proc/self/status`; gVisor does not show the line, so there the
//!   kernel is asked with `prctl(PR_GET_NO_NEW_PRIVS)`, and the receipt says which);
//! - `root_read_only`: the root file system is mounted read-only (`statvfs` saying so; where
//!   it does not, as under gVisor, the last mount at `/` in `/proc/self/mountinfo`);
//! - `seccomp` (when asked, `--seccomp`: runs whose runtime agentguard calls itself): a
//!   seccomp filter is in force (`Seccomp: 2` in `/proc/self/status`), so a runtime that
//!   skips the filter it was given (one built without seccomp support does so silently) is
//!   refused;
//! - `proxy` (egress runs): the egress proxy accepts on its socket.
//!
//! In a cluster's pod (`--cluster`) the network is the pod's own, confined by the run's
//! NetworkPolicy, which nothing inside can read without dialing: `interfaces` and `routes` are
//! then recorded as seen and not required, and say so; every other check is the same.
//!
//! The receipt is one line, `RECEIPT_MARK` then a JSON object, written to stderr in one
//! `write` before the command starts, so it is the first line the engine's client reads
//! there and nothing the command prints can come before it.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

/// What begins the receipt line (an ASCII record separator, then a word).
pub(crate) const RECEIPT_MARK: &str = "\u{1e}agentguard-receipt ";

/// One check: its name, whether it held, and what was seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Check {
    pub(crate) name: &'static str,
    pub(crate) ok: bool,
    pub(crate) observed: String,
}

/// What the run must look like.
pub(crate) struct Expect<'a> {
    /// The run's user and group ids.
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    /// The egress proxy's socket, for an egress run.
    pub(crate) socket: Option<&'a str>,
    /// A cluster's pod: the network is the pod's, confined by a NetworkPolicy.
    pub(crate) cluster: bool,
    /// The run was given a seccomp filter that must show in force.
    pub(crate) seccomp: bool,
}

impl Expect<'_> {
    /// The run's user and group ids.
    pub(crate) fn ids(&self) -> (u32, u32) {
        (self.uid, self.gid)
    }
}

/// What a cluster's receipt says of the network checks it records without requiring them.
pub(crate) const CLUSTER_NETWORK: &str =
    "seen, not required: on a cluster the run's NetworkPolicy confines the pod";

/// Every check, reading the `/proc` under `root` (`/` in a container; a fake tree in tests).
pub(crate) fn take(root: &Path, expect: &Expect<'_>) -> Vec<Check> {
    let status = read(&root.join("proc/self/status")).unwrap_or_default();
    let interfaces = interfaces(root);
    let only_lo = interfaces.ok;
    let mut network = [interfaces, routes(root, only_lo)];
    if expect.cluster {
        for seen in &mut network {
            seen.ok = true;
            seen.observed = format!("{} ({CLUSTER_NETWORK})", seen.observed);
        }
    }
    let [interfaces, routes] = network;
    let mut checks = vec![
        interfaces,
        routes,
        ids(&status, expect),
        capabilities(&status),
        no_new_privs(&status),
        root_read_only(root),
    ];
    if expect.seccomp {
        checks.push(seccomp(&status));
    }
    if let Some(socket) = expect.socket {
        checks.push(proxy(socket));
    }
    checks
}

fn check(name: &'static str, ok: bool, observed: impl Into<String>) -> Check {
    Check {
        name,
        ok,
        observed: observed.into(),
    }
}

fn interfaces(root: &Path) -> Check {
    let Ok(dev) = read(&root.join("proc/net/dev")) else {
        return check("interfaces", false, "/proc/net/dev cannot be read");
    };
    let names: Vec<&str> = dev
        .lines()
        .skip(2)
        .filter_map(|l| l.split_once(':').map(|(name, _)| name.trim()))
        .collect();
    let ok = !names.is_empty() && names.iter().all(|n| *n == "lo");
    check("interfaces", ok, names.join(","))
}

fn routes(root: &Path, only_lo: bool) -> Check {
    // IPv4: `Iface Destination Gateway ...`, one line per route after a header.
    let v4 = read(&root.join("proc/net/route")).ok();
    // IPv6: the device is the last field of each line; no header.
    let v6 = read(&root.join("proc/net/ipv6_route")).ok();
    let mut elsewhere: Vec<String> = Vec::new();
    if let Some(v4) = &v4 {
        for line in v4.lines().skip(1) {
            let mut fields = line.split_whitespace();
            if let (Some(iface), Some(dest)) = (fields.next(), fields.next())
                && iface != "lo"
            {
                elsewhere.push(format!("ipv4 {dest} via {iface}"));
            }
        }
    }
    if let Some(v6) = &v6 {
        for line in v6.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if let (Some(dest), Some(device)) = (fields.first(), fields.last())
                && *device != "lo"
            {
                elsewhere.push(format!("ipv6 {dest} via {device}"));
            }
        }
    }
    if !elsewhere.is_empty() {
        return check("routes", false, elsewhere.join(", "));
    }
    match (&v4, &v6) {
        (Some(_), Some(_)) => check("routes", true, "lo only"),
        // A table the kernel does not show (gVisor, or IPv6 off): no route can lead
        // anywhere but `lo` when `lo` is the only interface.
        _ if only_lo => check(
            "routes",
            true,
            format!(
                "lo only ({} not shown; lo is the only interface)",
                if v4.is_none() { "ipv4" } else { "ipv6" }
            ),
        ),
        _ => check(
            "routes",
            false,
            "the route tables cannot be read and an interface other than lo exists",
        ),
    }
}

/// The numbers of a `/proc/self/status` line such as `Uid:\t1\t1\t1\t1`.
fn field<'a>(status: &'a str, name: &str) -> Option<Vec<&'a str>> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .map(|rest| rest.split_whitespace().collect())
}

fn ids(status: &str, expect: &Expect<'_>) -> Check {
    let (Some(uids), Some(gids)) = (field(status, "Uid:"), field(status, "Gid:")) else {
        return check("ids", false, "no Uid: or Gid: line in /proc/self/status");
    };
    let all =
        |ids: &[&str], want: u32| ids.len() == 4 && ids.iter().all(|i| *i == want.to_string());
    let ok = all(&uids, expect.uid) && all(&gids, expect.gid);
    check(
        "ids",
        ok,
        format!("uid {} gid {}", uids.join("/"), gids.join("/")),
    )
}

fn seccomp(status: &str) -> Check {
    match field(status, "Seccomp:").as_deref() {
        Some(["2"]) => check("seccomp", true, "filter (mode 2)"),
        Some([mode]) => check("seccomp", false, format!("mode {mode}: no filter in force")),
        _ => check("seccomp", false, "no Seccomp: line in /proc/self/status"),
    }
}

fn capabilities(status: &str) -> Check {
    let mut seen = Vec::new();
    let mut ok = true;
    let mut permitted_empty = false;
    for (name, line) in [
        ("eff", "CapEff:"),
        ("prm", "CapPrm:"),
        ("bnd", "CapBnd:"),
        ("amb", "CapAmb:"),
    ] {
        let value = field(status, line).and_then(|v| v.first().map(|s| s.to_string()));
        match value {
            Some(hex) => {
                let empty = u64::from_str_radix(&hex, 16) == Ok(0);
                ok &= empty;
                permitted_empty |= name == "prm" && empty;
                seen.push(format!("{name} {hex}"));
            }
            // gVisor shows no ambient set; an ambient capability must also be permitted, so
            // an empty permitted set means an empty ambient one.
            None if name == "amb" && permitted_empty => {
                seen.push("amb absent (empty: prm is)".into());
            }
            None => {
                ok = false;
                seen.push(format!("{name} absent"));
            }
        }
    }
    check("capabilities", ok, seen.join(" "))
}

fn no_new_privs(status: &str) -> Check {
    match field(status, "NoNewPrivs:").and_then(|v| v.first().map(|s| s.to_string())) {
        Some(flag) => check("no_new_privs", flag == "1", format!("{flag} (/proc)")),
        // gVisor's /proc/self/status has no such line: the kernel is asked instead.
        None => match rustix::thread::no_new_privs() {
            Ok(set) => check("no_new_privs", set, format!("{} (prctl)", u8::from(set))),
            Err(e) => check("no_new_privs", false, format!("unknown: {e}")),
        },
    }
}

/// The most of one `/proc` file read: far more than any table here holds in a container.
const MAX_PROC_FILE: usize = 256 * 1024;

/// A `/proc` file's text, read in as few calls as it takes (gVisor makes each of them costly,
/// and `read_to_string`'s small first reads add several): one open, reads of up to 64 KiB
/// until the end, one close.
fn read(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut bytes = vec![0u8; 64 * 1024];
    let mut len = 0;
    loop {
        if len == bytes.len() {
            if len >= MAX_PROC_FILE {
                return Err(std::io::Error::other("larger than the receipt reads"));
            }
            bytes.resize(len * 2, 0);
        }
        match file.read(&mut bytes[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    bytes.truncate(len);
    String::from_utf8(bytes).map_err(std::io::Error::other)
}

/// Whether the root file system is mounted read-only: `statvfs` saying so is enough (one
/// call); gVisor's never does, so the last `/proc/self/mountinfo` line mounted at `/` (a later
/// mount there hides an earlier one) is read then, and `statvfs`'s answer stands only when that
/// table cannot be read.
fn root_read_only(root: &Path) -> Check {
    let stat = rustix::fs::statvfs(root);
    if let Ok(stat) = &stat
        && stat.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY)
    {
        return check("root_read_only", true, "ro (statvfs)");
    }
    if let Ok(table) = read(&root.join("proc/self/mountinfo")) {
        let options = table.lines().rev().find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.get(4) == Some(&"/")).then(|| fields.get(5).copied().unwrap_or(""))
        });
        return match options {
            Some(options) => {
                let ro = options.split(',').any(|o| o == "ro");
                check(
                    "root_read_only",
                    ro,
                    format!("{} (mountinfo)", if ro { "ro" } else { "rw" }),
                )
            }
            None => check("root_read_only", false, "no mount at / in mountinfo"),
        };
    }
    match stat {
        Ok(_) => check("root_read_only", false, "rw (statvfs)"),
        Err(e) => check("root_read_only", false, format!("statvfs failed: {e}")),
    }
}

fn proxy(socket: &str) -> Check {
    match std::os::unix::net::UnixStream::connect(socket) {
        Ok(_) => check("proxy", true, "accepts"),
        Err(e) => check("proxy", false, format!("{socket}: {e}")),
    }
}

/// The receipt line: `RECEIPT_MARK` then
/// `{"decision":"allow"|"deny","failed":[names],"checks":{name: observed},"micros":N}`.
pub(crate) fn line(checks: &[Check], started: Instant) -> String {
    let failed: Vec<String> = checks
        .iter()
        .filter(|c| !c.ok)
        .map(|c| json_string(c.name))
        .collect();
    let observed: Vec<String> = checks
        .iter()
        .map(|c| format!("{}:{}", json_string(c.name), json_string(&c.observed)))
        .collect();
    format!(
        "{RECEIPT_MARK}{{\"decision\":\"{}\",\"failed\":[{}],\"checks\":{{{}}},\"micros\":{}}}\n",
        if failed.is_empty() { "allow" } else { "deny" },
        failed.join(","),
        observed.join(","),
        started.elapsed().as_micros()
    )
}

/// `text` as a JSON string (quotes, backslashes and control characters escaped).
fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\u{:04x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Takes the receipt and writes it to stderr in one write; true when every check held.
pub(crate) fn give(expect: &Expect<'_>) -> bool {
    let started = Instant::now();
    let checks = take(Path::new("/"), expect);
    let text = line(&checks, started);
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
    checks.iter().all(|c| c.ok)
}

#[cfg(test)]
mod tests;

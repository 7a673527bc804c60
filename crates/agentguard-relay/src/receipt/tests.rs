//! The receipt's decision from fake `/proc` trees: a good one, then each failing check.

use std::path::Path;
use std::time::Instant;

use super::{Check, Expect, line, take};

const DEV_LO: &str = "Inter-|   Receive                                                |  Transmit\n face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0\n";
const DEV_ETH0: &str = "Inter-|   Receive\n face |bytes\n    lo: 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n  eth0: 1234 5 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n";
const ROUTE_EMPTY: &str =
    "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n";
const ROUTE_DEFAULT: &str = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\neth0\t00000000\t010011AC\t0003\t0\t0\t0\t00000000\t0\t0\t0\n";
const V6_LO: &str = "00000000000000000000000000000001 80 00000000000000000000000000000000 00 00000000000000000000000000000000 00000000 00000001 00000000 00000001       lo\n";
const V6_ETH0: &str = "00000000000000000000000000000000 00 00000000000000000000000000000000 00 fe800000000000000000000000000001 00000400 00000001 00000000 00000003     eth0\n";
const STATUS: &str = "Name:\tsh\nUid:\t65534\t65534\t65534\t65534\nGid:\t65534\t65534\t65534\t65534\nCapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\n";

const MOUNTS_RO: &str = "8 8 0:8 / / ro  - 9p none ro,trans=fd\n11 8 0:10 / /proc rw,noexec  - proc none rw\n17 8 0:16 / /tmp rw  - tmpfs none rw,mode=01777\n";
const MOUNTS_RW: &str = "600 500 0:50 / / rw,relatime - overlay overlay rw,lowerdir=/a\n";

const EXPECT: Expect<'static> = Expect {
    uid: 65534,
    gid: 65534,
    socket: None,
    cluster: false,
    seccomp: false,
};

/// A fake root with `files` (relative path, text) under `proc/`.
fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let path = dir.path().join("proc").join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    dir
}

fn good() -> Vec<(&'static str, String)> {
    vec![
        ("net/dev", DEV_LO.into()),
        ("net/route", ROUTE_EMPTY.into()),
        ("net/ipv6_route", V6_LO.into()),
        ("self/status", STATUS.into()),
        ("self/mountinfo", MOUNTS_RO.into()),
    ]
}

fn with(replace: &str, text: Option<&str>) -> Vec<Check> {
    let files: Vec<(&str, String)> = good()
        .into_iter()
        .filter_map(|(p, t)| match (p == replace, text) {
            (false, _) => Some((p, t)),
            (true, Some(t)) => Some((p, t.to_owned())),
            (true, None) => None,
        })
        .collect();
    let borrowed: Vec<(&str, &str)> = files.iter().map(|(p, t)| (*p, t.as_str())).collect();
    let dir = tree(&borrowed);
    take(dir.path(), &EXPECT)
}

fn get<'a>(checks: &'a [Check], name: &str) -> &'a Check {
    checks.iter().find(|c| c.name == name).unwrap()
}

#[test]
fn a_sealed_container_passes_every_check() {
    let checks = with("", None);
    for c in &checks {
        assert!(c.ok, "{c:?}");
    }
    assert_eq!(get(&checks, "interfaces").observed, "lo");
    assert_eq!(get(&checks, "routes").observed, "lo only");
    assert_eq!(get(&checks, "root_read_only").observed, "ro (mountinfo)");
    assert_eq!(get(&checks, "no_new_privs").observed, "1 (/proc)");
    // Without a mount table, statvfs answers: a temporary folder is writable.
    let checks = with("self/mountinfo", None);
    assert_eq!(get(&checks, "root_read_only").observed, "rw (statvfs)");
    assert!(!get(&checks, "root_read_only").ok);
}

#[test]
fn gvisors_status_without_an_ambient_set_passes_only_with_no_permitted_one() {
    let status = STATUS.replace("CapAmb:\t0000000000000000\n", "");
    let checks = with("self/status", Some(&status));
    let caps = get(&checks, "capabilities");
    assert!(caps.ok && caps.observed.contains("amb absent"), "{caps:?}");
    let permitted = status.replace("CapPrm:\t0000000000000000", "CapPrm:\t00000000a80405fb");
    let checks = with("self/status", Some(&permitted));
    assert!(!get(&checks, "capabilities").ok, "{checks:?}");
}

#[test]
fn each_broken_isolation_fails_its_check_by_name() {
    let failing = |replace: &str, text: Option<&str>, name: &str, needle: &str| {
        let checks = with(replace, text);
        let c = get(&checks, name);
        assert!(!c.ok, "{name} should fail: {c:?}");
        assert!(c.observed.contains(needle), "{name}: {c:?}");
    };
    failing("net/dev", Some(DEV_ETH0), "interfaces", "lo,eth0");
    failing(
        "self/mountinfo",
        Some(MOUNTS_RW),
        "root_read_only",
        "rw (mountinfo)",
    );
    failing("net/dev", None, "interfaces", "cannot be read");
    failing(
        "net/route",
        Some(ROUTE_DEFAULT),
        "routes",
        "ipv4 00000000 via eth0",
    );
    failing(
        "net/ipv6_route",
        Some(&format!("{V6_LO}{V6_ETH0}")),
        "routes",
        "via eth0",
    );
    let other_uid = STATUS.replace("Uid:\t65534\t65534\t65534\t65534", "Uid:\t0\t0\t0\t0");
    failing("self/status", Some(&other_uid), "ids", "uid 0/0/0/0");
    let saved_root = STATUS.replace(
        "Uid:\t65534\t65534\t65534\t65534",
        "Uid:\t65534\t65534\t0\t65534",
    );
    failing(
        "self/status",
        Some(&saved_root),
        "ids",
        "65534/65534/0/65534",
    );
    let bounding = STATUS.replace("CapBnd:\t0000000000000000", "CapBnd:\t00000000a80425fb");
    failing(
        "self/status",
        Some(&bounding),
        "capabilities",
        "bnd 00000000a80425fb",
    );
    let effective = STATUS.replace("CapEff:\t0000000000000000", "CapEff:\t0000000000000400");
    failing(
        "self/status",
        Some(&effective),
        "capabilities",
        "eff 0000000000000400",
    );
    let privs = STATUS.replace("NoNewPrivs:\t1", "NoNewPrivs:\t0");
    failing("self/status", Some(&privs), "no_new_privs", "0 (/proc)");
}

#[test]
fn unshown_route_tables_pass_only_when_lo_is_the_only_interface() {
    let checks = with("net/ipv6_route", None);
    let routes = get(&checks, "routes");
    assert!(
        routes.ok && routes.observed.contains("ipv6 not shown"),
        "{routes:?}"
    );
    let dir = tree(&[("net/dev", DEV_ETH0), ("self/status", STATUS)]);
    let checks = take(dir.path(), &EXPECT);
    assert!(!get(&checks, "routes").ok, "{checks:?}");
}

#[test]
fn gvisor_without_the_no_new_privs_line_asks_the_kernel_and_says_so() {
    let status = STATUS.replace("NoNewPrivs:\t1\n", "");
    let checks = with("self/status", Some(&status));
    let c = get(&checks, "no_new_privs");
    assert!(c.observed.ends_with("(prctl)"), "{c:?}");
    // This test process has not set it: the kernel's answer is used, never a skip.
    assert_eq!(c.ok, c.observed.starts_with('1'), "{c:?}");
}

/// Asked for (a runtime agentguard calls itself), the filter must show as mode 2; a runtime
/// that skipped it (mode 0) or a status without the line fails the check by name. Not asked
/// for (the engines, where gVisor shows 0 beneath its own kernel), there is no such check.
#[test]
fn a_seccomp_filter_is_required_only_when_asked_for() {
    let asked = Expect {
        seccomp: true,
        ..EXPECT
    };
    let status = |mode: &str| format!("{STATUS}Seccomp:\t{mode}\nSeccomp_filters:\t1\n");
    for (text, ok, observed) in [
        (status("2"), true, "filter (mode 2)"),
        (status("0"), false, "mode 0: no filter in force"),
        (STATUS.to_owned(), false, "no Seccomp: line"),
    ] {
        let mut files = good();
        files.retain(|(p, _)| *p != "self/status");
        files.push(("self/status", text));
        let borrowed: Vec<(&str, &str)> = files.iter().map(|(p, t)| (*p, t.as_str())).collect();
        let dir = tree(&borrowed);
        let c = take(dir.path(), &asked)
            .into_iter()
            .find(|c| c.name == "seccomp")
            .unwrap();
        assert_eq!(c.ok, ok, "{c:?}");
        assert!(c.observed.starts_with(observed), "{c:?}");
        let unasked = take(dir.path(), &EXPECT);
        assert!(unasked.iter().all(|c| c.name != "seccomp"), "{unasked:?}");
    }
}

#[test]
fn the_proxy_check_connects_to_the_socket_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("proxy.sock");
    let socket_text = socket.to_str().unwrap().to_owned();
    let expect = Expect {
        socket: Some(&socket_text),
        ..EXPECT
    };
    let absent = take(Path::new("/"), &expect);
    assert!(!get(&absent, "proxy").ok, "{absent:?}");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let present = take(Path::new("/"), &expect);
    assert!(get(&present, "proxy").ok, "{present:?}");
}

#[test]
fn the_line_is_one_json_object_after_the_mark() {
    let checks = with("net/dev", Some(DEV_ETH0));
    let text = line(&checks, Instant::now());
    let json = text.strip_prefix(super::RECEIPT_MARK).unwrap();
    assert!(json.ends_with('\n') && !json[..json.len() - 1].contains('\n'));
    let value: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(value["decision"], "deny");
    assert!(
        value["failed"]
            .as_array()
            .unwrap()
            .contains(&"interfaces".into())
    );
    assert_eq!(value["checks"]["interfaces"], "lo,eth0");
    assert!(value["micros"].is_u64());
    let quoted = vec![Check {
        name: "ids",
        ok: true,
        observed: "a \"quote\" \\ and \n".into(),
    }];
    let value: serde_json::Value = serde_json::from_str(
        line(&quoted, Instant::now())
            .strip_prefix(super::RECEIPT_MARK)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(value["checks"]["ids"], "a \"quote\" \\ and \n");
    assert_eq!(value["decision"], "allow");
}

#[test]
fn a_clusters_pod_records_its_network_without_requiring_lo_and_checks_the_rest() {
    let mut files = good();
    files.retain(|(p, _)| !p.starts_with("net/"));
    files.push(("net/dev", DEV_ETH0.into()));
    files.push(("net/route", ROUTE_DEFAULT.into()));
    files.push(("net/ipv6_route", V6_ETH0.into()));
    let borrowed: Vec<(&str, &str)> = files.iter().map(|(p, t)| (*p, t.as_str())).collect();
    let dir = tree(&borrowed);
    let cluster = Expect {
        cluster: true,
        ..EXPECT
    };
    let checks = take(dir.path(), &cluster);
    for name in ["interfaces", "routes"] {
        let c = get(&checks, name);
        assert!(c.ok, "{c:?}");
        assert!(c.observed.contains(super::CLUSTER_NETWORK), "{c:?}");
    }
    assert!(get(&checks, "interfaces").observed.starts_with("lo,eth0 "));
    assert!(get(&checks, "routes").observed.contains("via eth0"));
    // The same pod is refused outside a cluster.
    let checks = take(dir.path(), &EXPECT);
    assert!(!get(&checks, "interfaces").ok && !get(&checks, "routes").ok);
    // Everything else is still required on a cluster.
    let root = STATUS.replace("Uid:\t65534\t65534\t65534\t65534", "Uid:\t0\t0\t0\t0");
    std::fs::write(dir.path().join("proc/self/status"), root).unwrap();
    let checks = take(dir.path(), &cluster);
    assert!(!get(&checks, "ids").ok, "{checks:?}");
}

#[test]
fn a_proc_file_is_read_whole_up_to_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let big = "x".repeat(100_000);
    std::fs::write(dir.path().join("big"), &big).unwrap();
    assert_eq!(super::read(&dir.path().join("big")).unwrap(), big);
    let huge = "x".repeat(super::MAX_PROC_FILE + 1);
    std::fs::write(dir.path().join("huge"), huge).unwrap();
    assert!(super::read(&dir.path().join("huge")).is_err());
    assert!(super::read(&dir.path().join("absent")).is_err());
}

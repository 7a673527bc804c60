//! Policy files: the keys of `[egress]` with routes and secrets, checked at load.

use super::load_policy;

fn write(text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.toml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

#[test]
fn a_policy_file_loads_what_it_grants() {
    let (_dir, path) = write(
        r#"allow = ["pkgs.example.com", "*.files.example.com"]
allow_ports = [443, 8443]
allow_cidrs = ["10.1.0.0/16"]
nameservers = ["127.0.0.1:53"]

[secrets]
token = { env = "EXAMPLE_TOKEN" }

[routes.api]
upstream = "HTTPS://API.example.com/"
secret = "token"
header = "Authorization"
value = "Bearer {secret}"
methods = ["GET", "POST"]
"#,
    );
    let policy = load_policy(&path).unwrap();
    let grant = &policy.grant;
    let hosts: Vec<String> = grant.hosts.iter().map(ToString::to_string).collect();
    assert_eq!(hosts, ["pkgs.example.com", "*.files.example.com"]);
    assert_eq!(grant.ports.iter().copied().collect::<Vec<_>>(), [443, 8443]);
    assert_eq!(grant.cidrs.len(), 1);
    let methods: Vec<&str> = grant.routes["https://api.example.com"]
        .iter()
        .map(String::as_str)
        .collect();
    assert_eq!(methods, ["GET", "POST"]);
    assert_eq!(
        policy.sha256,
        agentguard_audit::sha256_hex(&std::fs::read(&path).unwrap())
    );
}

#[test]
fn defaults_are_443_and_get_head() {
    let (_dir, path) = write(
        "allow = [\"pkgs.example.com\"]\n[secrets]\nt = { env = \"T\" }\n[routes.r]\nupstream = \"https://r.example.com\"\nsecret = \"t\"\nheader = \"X-Key\"\nvalue = \"{secret}\"\n",
    );
    let grant = load_policy(&path).unwrap().grant;
    assert_eq!(grant.ports.iter().copied().collect::<Vec<_>>(), [443]);
    assert_eq!(
        grant.routes["https://r.example.com"]
            .iter()
            .collect::<Vec<_>>(),
        ["GET", "HEAD"]
    );
}

#[test]
fn anything_else_is_refused_naming_the_key() {
    for (text, needle) in [
        (
            "allow = [\"a.example.com\"]\nproxy_port = 3128\n",
            "proxy_port",
        ),
        ("[egress]\nallow = [\"a.example.com\"]\n", "egress"),
        ("allow = [\"10.0.0.1\"]\n", "allow"),
        (
            "allow = [\"a.example.com\"]\nallow_ports = []\n",
            "allow_ports",
        ),
        ("allow_cidrs = [\"10.0.0.0/33\"]\n", "allow_cidrs"),
        ("nameservers = [\"nowhere\"]\n", "nameservers"),
        (
            "[secrets]\nt = { env = \"T\" }\n[routes.r]\nupstream = \"https://r.example.com\"\nsecret = \"t\"\nheader = \"X-Key\"\nvalue = \"{secret}\"\nmethods = [\"get\"]\n",
            "routes.r.methods",
        ),
    ] {
        let (_dir, path) = write(text);
        let error = load_policy(&path).unwrap_err().to_string();
        assert!(error.contains(needle), "{text}: {error}");
    }
}

#[test]
fn only_a_bounded_regular_file_is_read() {
    // A device would never end, a FIFO would hang the load: both are refused at once.
    let error = load_policy(std::path::Path::new("/dev/zero"))
        .unwrap_err()
        .to_string();
    assert!(error.contains("reading"), "{error}");
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    assert!(load_policy(&fifo).is_err());
    let big = dir.path().join("big.toml");
    std::fs::write(&big, format!("# {}\n", "x".repeat(1024 * 1024))).unwrap();
    let error = load_policy(&big).unwrap_err().to_string();
    assert!(error.contains("larger than 1024 KiB"), "{error}");
}

#[test]
fn a_loaded_file_gives_the_proxy_its_policy_resolver_and_routes() {
    use std::os::unix::fs::PermissionsExt;
    let (dir, path) = write(
        "allow = [\"pkgs.example.com\"]\nallow_ports = [8443]\nnameservers = [\"127.0.0.1:5353\"]\n[secrets]\nt = { file = \"token\" }\n[routes.r]\nupstream = \"https://r.example.com\"\nsecret = \"t\"\nheader = \"X-Key\"\nvalue = \"{secret}\"\npaths = [\"/v1/*\"]\n",
    );
    let loaded = load_policy(&path).unwrap();
    let policy = loaded
        .policy
        .clone()
        .expect("a file with allow has a policy");
    assert!(policy.ports.contains(8443) && !policy.ports.contains(443));
    assert_eq!(loaded.nameservers, ["127.0.0.1:5353".parse().unwrap()]);
    // The secret is read when the routes are built, not at load, relative to the file.
    let error = loaded.build_routes().unwrap_err().to_string();
    assert!(error.contains("token"), "{error}");
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret\n").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let routes = loaded.build_routes().unwrap();
    assert_eq!(routes.len(), 1);
    assert_eq!(routes[0].name(), "r");
    // A file of routes only reaches nothing by CONNECT.
    let (_dir, path) = write(
        "[secrets]\nt = { env = \"T\" }\n[routes.r]\nupstream = \"https://r.example.com\"\nsecret = \"t\"\nheader = \"X-Key\"\nvalue = \"{secret}\"\n",
    );
    assert!(load_policy(&path).unwrap().policy.is_none());
}

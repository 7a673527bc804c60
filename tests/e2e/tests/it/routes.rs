//! Credential routes from inside real containers: Python's urllib calls an API route (the
//! proxy adds the bearer token upstream, the upstream's echo of it comes back redacted), a
//! path outside the route is refused, pip installs from a basic-auth index through a second
//! route, and a scan of the container's environment, `/proc/*/environ`, `/proc/*/cmdline`
//! and files finds no trace of the secret, which only agentguard's own environment holds.
//! The run's audit log verifies and holds the route events, never the secret.

use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;

use agentguard_e2e::Folder;
use agentguard_test_support::index::{WHEEL_NAME, WHEEL_SCRIPT, index_files};
use agentguard_test_support::{Answer, FakeDns, TestCa, TlsUpstream, UpstreamOptions};
use anyhow::{Context, Result, ensure};

use crate::combo_or_skip;

const PROBE: &str = include_str!("../../route_probe.py");
const UPSTREAM: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
/// The public start of the secret: what the probe looks for.
const MARKER: (&str, &str) = ("AGSE", "KRIT");
const TOKEN_ENV: &str = "AGENTGUARD_E2E_ROUTE_TOKEN";

/// A secret no one can guess: the marker and 24 random hex digits.
fn secret() -> Result<String> {
    let mut bytes = [0u8; 12];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut bytes)?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("{}{}{hex}", MARKER.0, MARKER.1))
}

/// A hostile upstream (issue 34, items 1 and 2): `/reason` reflects the credential in its
/// status line; `/range` honours a `Range` over the credential (a 206 with that piece, which
/// the proxy must never ask for); `/cut` reflects it cut in the middle of the secret.
fn hostile(head: &str, _body: &[u8]) -> Vec<u8> {
    let header = |name: &str| {
        head.split("\r\n").find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    };
    let auth = header("authorization").unwrap_or_default();
    let path = head.split_whitespace().nth(1).unwrap_or("/");
    let answer = |status: &str, body: &str| {
        format!(
            "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    };
    match path {
        "/reason" => answer(&format!("401 Invalid credentials {auth}"), ""),
        "/range" => match header("range").and_then(|r| r.strip_prefix("bytes=").map(str::to_owned))
        {
            Some(range) => {
                let (from, to) = range.split_once('-').unwrap_or(("0", ""));
                let from = from.parse::<usize>().unwrap_or(0).min(auth.len());
                let to = to
                    .parse::<usize>()
                    .map_or(auth.len(), |t| (t + 1).min(auth.len()));
                answer("206 Partial Content", &auth[from..to.max(from)])
            }
            None => answer("200 OK", &auth),
        },
        "/cut" => answer("200 OK", &auth[..auth.len() / 2 + 4]),
        _ => answer("404 Not Found", ""),
    }
}

/// `user:secret` in base64, as the index checks it.
fn basic(user: &str, secret: &str) -> Result<String> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import base64,sys; print(base64.b64encode(sys.argv[1].encode()).decode())",
        ])
        .arg(format!("{user}:{secret}"))
        .output()
        .context("python3 encodes the basic credential")?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

#[tokio::test(flavor = "multi_thread")]
async fn from_inside_a_route_serves_an_api_and_an_index_and_the_secret_is_nowhere() -> Result<()> {
    let combo =
        combo_or_skip!("from_inside_a_route_serves_an_api_and_an_index_and_the_secret_is_nowhere");
    let secret = secret()?;
    let ca = TestCa::new("agentguard e2e route CA");
    let dir = Folder::new(&combo.unique("routes"), (65534, 65534))?;
    std::fs::write(dir.join("route_probe.py"), PROBE)?;
    let ca_file = dir.0.with_extension("ca.pem");
    std::fs::write(&ca_file, ca.pem())?;
    let wheel_path = dir.0.with_extension("whl");
    let status = Command::new("python3")
        .args(["-c", WHEEL_SCRIPT])
        .arg(&wheel_path)
        .status()?;
    ensure!(status.success(), "building the test wheel failed");
    let names = [
        "api.example.test",
        "index.example.test",
        "hostile.example.test",
    ];
    let api = TlsUpstream::start(UPSTREAM, 0, ca.server_config(&names)).await;
    let hostile_options = UpstreamOptions {
        answer: Some(Answer::new(hostile)),
        ..UpstreamOptions::default()
    };
    let hostile =
        TlsUpstream::start_with(UPSTREAM, 0, ca.server_config(&names), hostile_options).await?;
    let index_options = UpstreamOptions {
        files: index_files(std::fs::read(&wheel_path)?),
        authorization: Some(format!("Basic {}", basic("token", &secret)?)),
        ..UpstreamOptions::default()
    };
    let index =
        TlsUpstream::start_with(UPSTREAM, 0, ca.server_config(&names), index_options).await?;
    let dns = FakeDns::start().await;
    for name in names {
        dns.answer(name, &[UPSTREAM]);
    }
    let config = dir.0.with_extension("toml");
    let audit = dir.0.with_extension("audit.jsonl");
    std::fs::write(
        &config,
        format!(
            r#"image = "{image}"
engine = "{engine}"
{runtime}workspace = "{workspace}"
workspace_mode = "rw"
timeout = 300
max_output_bytes = 65536

[environment]
PROBE_MARKER_HEAD = "{head}"
PROBE_MARKER_TAIL = "{tail}"

[egress]
nameservers = ["{dns}"]

[audit]
path = "{audit}"

[secrets]
token = {{ env = "{TOKEN_ENV}" }}

[routes.api]
upstream = "https://api.example.test:{api_port}"
secret = "token"
header = "Authorization"
value = "Bearer {{secret}}"
paths = ["/echo"]
env = "API_URL"
allow_cidrs = ["127.0.0.2/32"]
ca_file = "{ca}"

[routes.index]
upstream = "https://index.example.test:{index_port}/"
secret = "token"
scheme = "basic"
user = "token"
paths = ["/simple/", "/files/"]
env = "INDEX_URL"
allow_cidrs = ["127.0.0.2/32"]
ca_file = "{ca}"

[routes.hostile]
upstream = "https://hostile.example.test:{hostile_port}"
secret = "token"
header = "Authorization"
value = "Bearer {{secret}}"
env = "HOSTILE_URL"
allow_cidrs = ["127.0.0.2/32"]
ca_file = "{ca}"

[commands.probe]
argv = ["python3", "/workspace/route_probe.py"]
network = "egress"
routes = ["api", "index", "hostile"]
"#,
            image = combo.pytest_image,
            engine = combo.program(),
            runtime = combo.runtime_line(),
            workspace = dir.0.display(),
            head = MARKER.0,
            tail = MARKER.1,
            dns = dns.addr(),
            audit = audit.display(),
            api_port = api.addr().port(),
            index_port = index.addr().port(),
            hostile_port = hostile.addr().port(),
            ca = ca_file.display(),
        ),
    )?;
    let out = tokio::task::block_in_place(|| {
        Command::new(&combo.binary)
            .args(["run", "--config"])
            .arg(&config)
            .args(["probe", "--json"])
            .env(TOKEN_ENV, &secret)
            .output()
    })?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let json: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap_or_default();
    let said = json["stdout"].as_str().unwrap_or_default().to_owned();
    ensure!(
        out.status.code() == Some(0) && said.contains("done=1"),
        "exit {:?}\n{said}\n{stderr}",
        out.status.code()
    );
    let seen: std::collections::BTreeMap<&str, &str> =
        said.lines().filter_map(|l| l.split_once('=')).collect();
    let want = [
        ("no_proxy", "127.0.0.1,localhost"),
        ("echo_status", "200"),
        ("echo_redacted", "yes"),
        (
            "outside_status",
            "403 403 path_not_allowed: route api allows the paths /echo, not \"/private\"",
        ),
        ("pip_exit", "0"),
        ("agprobe", "42"),
        ("traces", "none"),
        // Issue 34, items 1 and 2: the upstream's reason phrase never passes, its pieces never.
        ("reason", "401 Unauthorized"),
        ("ranged", "200 Bearer [REDACTED]|200 Bearer [REDACTED]"),
        ("cut", "200 Bearer [REDACTED]"),
    ];
    let wrong: Vec<String> = want
        .iter()
        .filter(|(key, value)| seen.get(key) != Some(value))
        .map(|(key, value)| format!("{key}: got {:?}, want {value:?}", seen.get(key)))
        .collect();
    ensure!(
        wrong.is_empty(),
        "{}:\n{}\n{said}",
        combo.label(),
        wrong.join("\n")
    );
    ensure!(
        seen.get("api_url")
            .is_some_and(|u| u.starts_with("http://127.0.0.1:") && u.ends_with("/api")),
        "API_URL: {said}"
    );
    for (what, text) in [
        ("the run's output and --json", &stdout),
        ("the diagnostics", &stderr),
    ] {
        ensure!(!text.contains(&secret), "the secret is in {what}");
        // No piece either: any 8 characters of it.
        for start in 0..=secret.len() - 8 {
            let piece = &secret[start..start + 8];
            ensure!(
                !text.contains(piece),
                "{piece:?} of the secret is in {what}"
            );
        }
    }
    // The proxy added it upstream: the bearer token to the API, basic auth to the index.
    let api_heads: Vec<String> = api.seen().into_iter().map(|s| s.head).collect();
    ensure!(
        api_heads.len() == 1 && api_heads[0].contains(&format!("Bearer {secret}")),
        "the API saw {api_heads:?}"
    );
    let index_paths: Vec<String> = index
        .seen()
        .iter()
        .filter_map(|s| s.head.split_whitespace().nth(1).map(str::to_owned))
        .collect();
    ensure!(
        index_paths == ["/simple/agprobe/", format!("/files/{WHEEL_NAME}").as_str()],
        "the index saw {index_paths:?}"
    );
    let verify = Command::new(&combo.binary)
        .args(["audit", "verify"])
        .arg(&audit)
        .output()?;
    ensure!(verify.status.success(), "the audit log does not verify");
    let log = std::fs::read_to_string(&audit)?;
    ensure!(!log.contains(&secret), "the secret is in the audit log");
    let mut reasons: Vec<String> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["kind"] == "egress_route")
        .map(|e| {
            format!(
                "{}:{}",
                e["subject"]["route"].as_str().unwrap_or("?"),
                e["reason"].as_str().unwrap_or("?")
            )
        })
        .collect();
    reasons.sort();
    ensure!(
        reasons
            == [
                "api:ok",
                "api:path_not_allowed",
                "hostile:ok",
                "hostile:ok",
                "hostile:ok",
                "hostile:ok",
                "index:ok",
                "index:ok"
            ],
        "route events: {reasons:?}"
    );
    ensure!(
        json["egress"]["allowed"] == 7
            && json["egress"]["denied"] == 1
            && json["egress"]["refused"][0]["target"] == "route api GET /private",
        "egress counts: {}",
        json["egress"]
    );
    println!(
        "{}: routes served an API and an index from inside; {} of the container's files scanned, no trace of the secret",
        combo.label(),
        seen.get("scanned_files").unwrap_or(&"?")
    );
    for path in [config, audit, ca_file, wheel_path] {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

//! Demo 7: a credential route. A hardened container calls a local HTTPS API through
//! `$API_URL` (its own loopback, the relay, the run's proxy, which adds the bearer token over
//! verified TLS) and prints what came back; then it prints its own environment, which holds
//! the route's URL and no token. The token lives only in agentguard's environment.

use std::path::{Path, PathBuf};

use agentguard_container::EngineKind;
use anyhow::{Result, bail};

use crate::demo_egress::Peers;
use crate::image;

/// The variable agentguard reads the demo's token from.
const TOKEN_ENV: &str = "AGENTGUARD_DEMO_API_TOKEN";

/// What the container runs: the API's echo of the request, then its environment.
const CALL: &str = "import os, urllib.request\nbody = urllib.request.urlopen(os.environ['API_URL'] + '/echo', timeout=30).read().decode()\nprint('the API saw:', [l for l in body.splitlines() if l.lower().startswith('authorization')])\nprint('the container has:', sorted(k for k in os.environ if k.endswith('_URL') or 'TOKEN' in k or k.lower() == 'no_proxy'))\nprint('API_URL =', os.environ['API_URL'])";

pub(crate) fn run(
    agentguard: &Path,
    peers: &Peers,
    kind: EngineKind,
    runtime: Option<&str>,
) -> Result<()> {
    println!(
        "\n== demo 7/7: a credential route: the container calls an API with a token it never holds"
    );
    image::ensure_pytest_image(kind.program_name())?;
    let mut bytes = [0u8; 12];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut bytes)?;
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let config = write_config(peers, kind, runtime)?;
    println!("$ cat {}", config.display());
    print!("{}", std::fs::read_to_string(&config)?);
    let args = ["run", "--config", &config.to_string_lossy(), "call"];
    println!("$ {TOKEN_ENV}=... agentguard {}", args.join(" "));
    let out = std::process::Command::new(agentguard)
        .args(args)
        .env(TOKEN_ENV, &token)
        .output()?;
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    print!("{said}");
    let log = peers.dir.join("route.jsonl");
    println!(
        "\n$ agentguard audit show {} --kind egress_route",
        log.display()
    );
    let show = std::process::Command::new(agentguard)
        .args(["audit", "show"])
        .arg(&log)
        .args(["--kind", "egress_route"])
        .output()?;
    let shown = String::from_utf8_lossy(&show.stdout).into_owned();
    print!("{shown}");
    let leaked = [
        &said,
        &shown,
        &String::from_utf8_lossy(&out.stderr).into_owned(),
    ]
    .iter()
    .any(|text| text.contains(&token));
    if !out.status.success() || !said.contains("Bearer [REDACTED]") || leaked {
        bail!("the credential route demo did not behave as documented");
    }
    println!("(the token was added upstream and appears nowhere the container or the log can see)");
    Ok(())
}

fn write_config(peers: &Peers, kind: EngineKind, runtime: Option<&str>) -> Result<PathBuf> {
    let config = peers.dir.join("route.toml");
    let runtime_line = runtime
        .map(|r| format!("runtime = \"{r}\"\n"))
        .unwrap_or_default();
    let call = CALL
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n");
    std::fs::write(
        &config,
        format!(
            r#"image = "{image}"
engine = "{engine}"
{runtime_line}timeout = 120

[egress]
nameservers = ["{ns}"]

[secrets]
api = {{ env = "{TOKEN_ENV}" }}

[routes.api]
upstream = "https://pkgs.example.test:{port}/"
secret = "api"
header = "Authorization"
value = "Bearer {{secret}}"
paths = ["/echo"]
env = "API_URL"
allow_cidrs = ["127.0.0.2/32"]
ca_file = "{ca}"

[commands.call]
argv = ["python3", "-c", "{call}"]
network = "egress"
routes = ["api"]

[audit]
path = "route.jsonl"
"#,
            image = image::PYTEST_IMAGE,
            engine = kind.program_name(),
            ns = peers.ns,
            port = peers.port,
            ca = peers.ca_path,
        ),
    )?;
    Ok(config)
}

//! The composition without a container engine: the fake engine (test-support) runs the
//! "container" as a host process, but the relay, the per-run proxy on its UNIX socket, the
//! fake DNS server, the TLS upstream with its test CA and curl are all real. The same
//! properties are proven from inside real containers by the e2e suite.

mod relay_data;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;

use agentguard_audit::{AuditSink, Decision, Kind, MemorySink};
use agentguard_container::{ContainerSpec, Engine};
use agentguard_policy::{TargetPolicy, parse_cidr};
use agentguard_sandbox::relay::RelayProgram;
use agentguard_sandbox::{EgressCounts, Error, Network, RunOptions, Sandbox, SandboxBuilder};
use agentguard_test_support::{FakeDns, FakeEngine, TestCa, TlsUpstream, free_port};

const UPSTREAM: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

struct World {
    engine: FakeEngine,
    dns: FakeDns,
    upstream: TlsUpstream,
    ca_file: tempfile::NamedTempFile,
    runs: tempfile::TempDir,
    audit: Arc<MemorySink>,
}

impl World {
    async fn start() -> World {
        let ca = TestCa::new("sandbox test CA");
        let upstream =
            TlsUpstream::start(UPSTREAM, 0, ca.server_config(&["good.example.test"])).await;
        let dns = FakeDns::start().await;
        dns.answer("good.example.test", &[UPSTREAM]);
        dns.answer("evil.example.test", &[UPSTREAM]);
        let ca_file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(ca_file.path(), ca.pem()).unwrap();
        World {
            engine: FakeEngine::new(),
            dns,
            upstream,
            ca_file,
            runs: tempfile::tempdir().unwrap(),
            audit: Arc::new(MemorySink::new(None)),
        }
    }

    /// A sandbox whose `fetch` command asks for `host` with curl through the proxy variables.
    fn sandbox(&self, host: &str) -> SandboxBuilder {
        let port = self.upstream.addr().port();
        let script = format!(
            "curl -sS --max-time 20 --cacert {} https://{host}:{port}/ 2>&1; echo \" curl=$?\"",
            self.ca_file.path().display()
        );
        let spec = ContainerSpec::builder("localhost/tools:latest")
            .engine(Engine::parse(&self.engine.path().to_string_lossy()).unwrap())
            .command("fetch", ["sh", "-c", script.as_str()])
            .command("offline", ["echo", "no network"])
            .build()
            .unwrap();
        Sandbox::builder(spec)
            .audit(Arc::clone(&self.audit) as Arc<dyn AuditSink>)
            .network(Network::Egress)
            .command_network("offline", Network::None)
            .egress_policy(
                TargetPolicy::builder()
                    .allow("good.example.test")
                    .allow_port(port)
                    .allow_cidr(parse_cidr("127.0.0.2/32").unwrap())
                    .build()
                    .unwrap(),
            )
            .nameserver(self.dns.addr())
            .proxy_port(free_port())
            .runs_dir(self.runs.path().join("runs"))
    }

    fn runs_left(&self) -> Vec<String> {
        std::fs::read_dir(self.runs.path().join("runs"))
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

#[tokio::test]
async fn an_allowed_host_answers_through_the_relay_and_the_run_counts_it() {
    let world = World::start().await;
    let sandbox = world.sandbox("good.example.test").build().unwrap();
    let identity = sandbox.identity();
    let finished = sandbox
        .run(
            &sandbox.invoke("fetch", &[]).unwrap(),
            &identity,
            RunOptions::default(),
        )
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&finished.result.stdout);
    assert!(
        stdout.contains("hello from 127.0.0.2") && stdout.contains("curl=0"),
        "{stdout}"
    );
    assert_eq!(
        finished.egress,
        Some(EgressCounts {
            allowed: 1,
            ..EgressCounts::default()
        })
    );
    let records = world.audit.records();
    let connect = records
        .iter()
        .find(|r| r.kind == Kind::EgressConnect)
        .expect("the CONNECT is audited");
    assert_eq!(connect.decision, Decision::Allow);
    assert_eq!(connect.subject["run"], identity.name.as_str());
    assert_eq!(connect.subject["client"], identity.name.as_str());
    assert!(records.iter().any(|r| r.kind == Kind::ContainerRun));
    // The relay's mount and entrypoint were in the argv; nothing is left of the run.
    let calls = world.engine.calls().join("\n");
    assert!(
        calls.contains("--entrypoint /run/agentguard/relay"),
        "{calls}"
    );
    assert_eq!(world.runs_left(), Vec::<String>::new());
}

#[tokio::test]
async fn a_host_off_the_allowlist_gets_403_and_is_counted_as_denied() {
    let world = World::start().await;
    let sandbox = world.sandbox("evil.example.test").build().unwrap();
    let finished = sandbox
        .run(
            &sandbox.invoke("fetch", &[]).unwrap(),
            &sandbox.identity(),
            RunOptions::default(),
        )
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&finished.result.stdout);
    // curl reports the proxy's refusal of the CONNECT.
    assert!(stdout.contains("403"), "{stdout}");
    let egress = finished.egress.clone().unwrap();
    assert_eq!((egress.allowed, egress.denied), (0, 1));
    assert_eq!(egress.refused.len(), 1, "{egress:?}");
    assert_eq!(egress.refused[0].reason, "domain_not_allowed");
    assert_eq!(egress.refused[0].count, 1);
    let denied = world
        .audit
        .records()
        .into_iter()
        .find(|r| r.kind == Kind::EgressConnect)
        .unwrap();
    assert_eq!(
        (denied.decision, denied.reason.as_str()),
        (Decision::Deny, "domain_not_allowed")
    );
    assert!(
        world.upstream.seen().is_empty(),
        "nothing reached the upstream"
    );
}

#[tokio::test]
async fn a_network_none_command_runs_with_the_relay_for_its_receipt_and_no_proxy() {
    let world = World::start().await;
    let sandbox = world.sandbox("good.example.test").build().unwrap();
    assert_eq!(sandbox.network_of("offline"), Some(Network::None));
    let finished = sandbox
        .run(
            &sandbox.invoke("offline", &[]).unwrap(),
            &sandbox.identity(),
            RunOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(finished.egress, None);
    let calls = world.engine.calls().join("\n");
    // The relay takes the isolation receipt, then runs the command; nothing of a proxy.
    assert!(
        calls.contains("--entrypoint /run/agentguard/relay")
            && calls.contains("--receipt 65534:65534 -- "),
        "{calls}"
    );
    assert!(
        !calls.contains("PROXY") && !calls.contains("proxy.sock"),
        "{calls}"
    );
    // The run's folder (its copy of the relay) is gone once the run ended.
    let left: Vec<_> = std::fs::read_dir(world.runs.path().join("runs"))
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test]
async fn a_relay_that_is_not_static_refuses_the_run_before_the_engine() {
    let world = World::start().await;
    // This test program is dynamically linked.
    let me = std::env::current_exe().unwrap();
    let refused = RelayProgram::from_file(&me).unwrap_err();
    assert!(
        refused.to_string().contains("dynamically linked"),
        "{refused}"
    );
    let missing = RelayProgram::from_file(Path::new("/nonexistent/agentguard-relay")).unwrap_err();
    assert!(missing.to_string().contains("cannot be read"), "{missing}");
    assert_eq!(missing.reason(), "relay_unavailable");
    // The embedded relay is what a sandbox uses otherwise; the engine saw no run so far.
    assert!(world.engine.calls().iter().all(|c| !c.starts_with("run")));
}

#[tokio::test]
async fn a_runs_folder_others_can_enter_refuses_the_run_before_the_engine() {
    use std::os::unix::fs::PermissionsExt;
    let world = World::start().await;
    let open = world.runs.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let sandbox = world
        .sandbox("good.example.test")
        .runs_dir(&open)
        .build()
        .unwrap();
    let error = sandbox
        .run(
            &sandbox.invoke("fetch", &[]).unwrap(),
            &sandbox.identity(),
            RunOptions::default(),
        )
        .await
        .unwrap_err();
    assert!(matches!(error, Error::RunsDirUnsafe { .. }), "{error}");
    assert!(
        error.to_string().contains("the command was not started"),
        "{error}"
    );
    assert!(world.engine.calls().iter().all(|c| !c.starts_with("run")));
}

#[tokio::test]
async fn a_socket_that_cannot_be_created_refuses_the_run_before_the_engine() {
    let world = World::start().await;
    // A UNIX socket path is limited to 107 bytes.
    let deep = world.runs.path().join("d".repeat(100));
    let sandbox = world
        .sandbox("good.example.test")
        .runs_dir(&deep)
        .build()
        .unwrap();
    let error = sandbox
        .run(
            &sandbox.invoke("fetch", &[]).unwrap(),
            &sandbox.identity(),
            RunOptions::default(),
        )
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Proxy(_)), "{error}");
    assert_eq!(error.reason(), "proxy_failed");
    assert!(world.engine.calls().iter().all(|c| !c.starts_with("run")));
    assert!(
        std::fs::read_dir(&deep).unwrap().next().is_none(),
        "the run folder was removed"
    );
}

/// A policy allowing `host` on 443.
fn policy(host: &str) -> TargetPolicy {
    TargetPolicy::builder().allow(host).build().unwrap()
}

#[tokio::test]
async fn egress_settings_that_make_no_allowlist_are_refused() {
    let world = World::start().await;
    let spec = || {
        ContainerSpec::builder("localhost/tools:latest")
            .command("fetch", ["true"])
            .build()
            .unwrap()
    };
    let cases: Vec<(SandboxBuilder, &str)> = vec![
        (
            Sandbox::builder(spec()).network(Network::Egress),
            "no allowed host",
        ),
        (
            Sandbox::builder(spec()).command_egress_policy("fetch", Some(policy("a.example.test"))),
            "its network is \"none\"",
        ),
        (
            Sandbox::builder(spec()).command_network("other", Network::Egress),
            "not an allowlisted command",
        ),
        (
            Sandbox::builder(spec())
                .network(Network::Egress)
                .egress_policy(policy("a.example.test"))
                .proxy_port(80),
            "below 1024",
        ),
        (
            Sandbox::builder(spec())
                .network(Network::Egress)
                .command_egress_policy("fetch", None),
            "no allowed host",
        ),
    ];
    for (builder, want) in cases {
        let message = match builder.build() {
            Ok(_) => panic!("accepted; expected {want}"),
            Err(e) => {
                assert!(e.is_config(), "{e}");
                format!("{e}")
            }
        };
        assert!(message.contains(want), "{message} lacks {want}");
    }
    drop(world);
}

#[tokio::test]
async fn dry_run_argv_shows_the_relay_and_creates_nothing() {
    let world = World::start().await;
    let sandbox = world.sandbox("good.example.test").build().unwrap();
    let identity = sandbox.identity();
    let argv = sandbox
        .engine_command(&sandbox.invoke("fetch", &[]).unwrap(), &identity)
        .unwrap()
        .join("\n");
    let dir = sandbox.runs_dir().join(&identity.name);
    assert!(
        argv.contains(&format!(
            "type=bind,source={}/relay,target=/run/agentguard/relay,readonly",
            dir.display()
        )),
        "{argv}"
    );
    assert!(
        argv.contains("target=/run/agentguard/proxy.sock,readonly"),
        "{argv}"
    );
    assert!(!dir.exists());
    let _unused: SocketAddr = world.dns.addr();
}

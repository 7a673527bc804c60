//! The generated NetworkPolicies checked by what they mean, not only by schema: a policy
//! analyzer (`network-config-analyzer` from PyPI, `nca --connectivity`) computes the
//! connectivity map of the objects of THREE runs applied side by side in one namespace (a
//! `network = "none"` run and two egress runs, made by `agentguard k8s manifests` as a user
//! makes them), beside a bystander pod, a pod in another namespace, kube-dns and another
//! kube-system pod; then every edge that touches a run's pod is held to what we promise:
//!
//! - a sandbox reaches only its own proxy, on the proxy port, over TCP;
//! - nothing reaches a sandbox; a proxy accepts only its own sandbox;
//! - a proxy reaches kube-dns on 53 (UDP and TCP) and only public address ranges, on the
//!   allowed ports (each range's ends classified by agentguard-policy; well-known private
//!   addresses in none of them); no other pod;
//! - a `none` sandbox appears in no edge at all.
//!
//! The same objects with one sandbox policy opened must then fail the check, so a silent
//! analyzer or a parser that reads nothing cannot pass.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::cmd;
use crate::setup::Venv;

/// The analyzer, in its own venv (its pins are not checkov's).
pub(crate) const NCA_VENV: Venv = Venv {
    name: "venv-nca",
    python: None,
    packages: &["network-config-analyzer==2.1.0"],
    what: "network policy analyzer",
};

const NAMESPACE: &str = "agentguard";
const PROXY_PORT: &str = "{protocols:TCP,dst_ports:3128}";
const DNS: &str = "{protocols:TCP, UDP,dst_ports:53}";
const HTTPS: &str = "{protocols:TCP,dst_ports:443}";

/// Addresses no proxy may reach: loopback, private, link-local (cloud metadata), CGNAT,
/// unique-local and link-local IPv6.
const PRIVATE: &[&str] = &[
    "127.0.0.1",
    "10.0.0.1",
    "172.16.0.1",
    "192.168.1.1",
    "169.254.169.254",
    "100.64.0.1",
    "0.0.0.1",
    "::1",
    "fc00::1",
    "fe80::1",
];

const CONFIG: &str = r#"image = "localhost/tools@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
engine = "kubernetes"

[kubernetes]
namespace = "agentguard"
proxy_image = "localhost/agentguard@sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
accept_weakened = ["tmp_noexec", "pids"]

[egress]
allow = ["pkgs.example.com"]

[commands]
run_tests = ["python3", "-m", "pytest", "-q"]

[commands.install]
argv = ["pip", "install", "-r", "requirements.txt"]
network = "egress"
"#;

/// One run's pods: its name, and whether it has a proxy.
struct Run {
    name: String,
    egress: bool,
}

impl Run {
    fn sandbox(&self) -> String {
        format!("{NAMESPACE}/{}-sandbox[Pod]", self.name)
    }

    fn proxy(&self) -> String {
        format!("{NAMESPACE}/{}-proxy[Pod]", self.name)
    }
}

pub(crate) fn run() -> Result<()> {
    println!("== k8s: the NetworkPolicies' meaning through nca --connectivity");
    NCA_VENV.ensure()?;
    let binary = cmd::debug_binary()?;
    let dir = cmd::root().join("target/xtask/netpol");
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(dir.join("objects"))?;
    let config = dir.join("agentguard.toml");
    std::fs::write(&config, CONFIG)?;
    let mut runs = Vec::new();
    for (file, command) in [
        ("none", "run_tests"),
        ("egress-1", "install"),
        ("egress-2", "install"),
    ] {
        let out = cmd::output(
            &binary.to_string_lossy(),
            &[
                "k8s",
                "manifests",
                "--config",
                &config.to_string_lossy(),
                command,
            ],
        )?;
        if !out.status.success() {
            bail!(
                "agentguard k8s manifests {command}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let text = cmd::stdout_text(&out);
        let name =
            run_name(&text).with_context(|| format!("no run label in the {file} objects"))?;
        runs.push(Run {
            name,
            egress: text.contains("kind: \"Deployment\""),
        });
        std::fs::write(dir.join("objects").join(format!("{file}.yaml")), text)?;
    }
    if runs.iter().map(|r| &r.name).collect::<BTreeSet<_>>().len() != runs.len() {
        bail!("two runs got the same name: the side-by-side check would prove nothing");
    }
    std::fs::write(dir.join("pods.json"), pods(&runs).to_string())?;
    std::fs::write(dir.join("namespaces.json"), namespaces().to_string())?;
    let edges = connectivity(&dir)?;
    check(&runs, &edges)?;
    // The analyzer and this parser catch a broken policy: the same objects with one sandbox
    // policy opened to every ingress must fail the check.
    let tampered = dir.join("objects/egress-1.yaml");
    let text = std::fs::read_to_string(&tampered)?;
    let opened = text.replacen("  ingress: []\n", "  ingress:\n  - {}\n", 1);
    if opened == text {
        bail!("the egress-1 objects have no `ingress: []` to open: the check's self-test is stale");
    }
    std::fs::write(&tampered, opened)?;
    match check(&runs, &connectivity(&dir)?) {
        Err(e) if e.to_string().contains("something reaches a sandbox") => {}
        other => bail!("a sandbox policy opened to every ingress was not caught: {other:?}"),
    }
    std::fs::write(&tampered, text)?;
    println!(
        "   nca --connectivity: {} edges; each sandbox reaches only its own proxy, nothing reaches a sandbox, each proxy only kube-dns and public ranges on 443, the none run nothing",
        edges.len()
    );
    Ok(())
}

/// The `agentguard.dev/run` label of a run's objects.
fn run_name(objects: &str) -> Option<String> {
    let at = objects.find("agentguard.dev/run: \"")? + "agentguard.dev/run: \"".len();
    let end = objects[at..].find('"')?;
    Some(objects[at..at + end].to_owned())
}

fn pod(name: &str, namespace: &str, labels: Value, ip: usize) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Running", "podIP": format!("10.244.0.{ip}")},
    })
}

/// The pods the Job and the Deployment would make (their templates' labels), and others.
fn pods(runs: &[Run]) -> Value {
    let mut items = Vec::new();
    for run in runs {
        let sandbox = json!({"agentguard.dev/role": "sandbox", "agentguard.dev/run": run.name});
        items.push(pod(
            &format!("{}-sandbox", run.name),
            NAMESPACE,
            sandbox,
            items.len() + 2,
        ));
        if run.egress {
            let proxy = json!({"agentguard.dev/proxy": run.name,
                "agentguard.dev/role": "egress-proxy", "agentguard.dev/run": run.name});
            items.push(pod(
                &format!("{}-proxy", run.name),
                NAMESPACE,
                proxy,
                items.len() + 2,
            ));
        }
    }
    let others = [
        ("bystander", NAMESPACE, json!({"app": "bystander"})),
        ("elsewhere", "default", json!({"app": "elsewhere"})),
        ("coredns", "kube-system", json!({"k8s-app": "kube-dns"})),
        (
            "metrics",
            "kube-system",
            json!({"k8s-app": "metrics-server"}),
        ),
    ];
    for (name, namespace, labels) in others {
        items.push(pod(name, namespace, labels, items.len() + 2));
    }
    json!({"apiVersion": "v1", "kind": "PodList", "items": items})
}

fn namespaces() -> Value {
    let items: Vec<Value> = [NAMESPACE, "default", "kube-system"]
        .iter()
        .map(|n| {
            json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": n, "labels": {"kubernetes.io/metadata.name": n}}})
        })
        .collect();
    json!({"apiVersion": "v1", "kind": "NamespaceList", "items": items})
}

/// `(source, destination, connection)` for every edge nca reports.
fn connectivity(dir: &Path) -> Result<Vec<(String, String, String)>> {
    let nca = NCA_VENV.bin("nca");
    let out = cmd::output(
        &nca.to_string_lossy(),
        &[
            "--connectivity",
            &dir.join("objects").to_string_lossy(),
            "--pod_list",
            &dir.join("pods.json").to_string_lossy(),
            "--ns_list",
            &dir.join("namespaces.json").to_string_lossy(),
            "--output_format",
            "txt_no_fw_rules",
        ],
    )?;
    let text = cmd::stdout_text(&out);
    let edges: Vec<_> = text
        .lines()
        .filter_map(|line| {
            let (from, rest) = line.split_once(" => ")?;
            let (to, connection) = rest.split_once(" : ")?;
            Some((
                from.trim().to_owned(),
                to.trim().to_owned(),
                connection.trim().to_owned(),
            ))
        })
        .collect();
    if !out.status.success() || edges.is_empty() {
        bail!(
            "nca --connectivity ({}): {text}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(edges)
}

/// True when both ends of nca's range `a-b` are public addresses.
fn public_range(range: &str) -> Option<(IpAddr, IpAddr)> {
    let (a, b) = range.split_once('-')?;
    let (a, b): (IpAddr, IpAddr) = (a.parse().ok()?, b.parse().ok()?);
    let public = |ip| agentguard_policy::classify(ip).is_public();
    (public(a) && public(b)).then_some((a, b))
}

fn inside(ip: IpAddr, (a, b): (IpAddr, IpAddr)) -> bool {
    match (ip, a, b) {
        (IpAddr::V4(ip), IpAddr::V4(a), IpAddr::V4(b)) => a <= ip && ip <= b,
        (IpAddr::V6(ip), IpAddr::V6(a), IpAddr::V6(b)) => a <= ip && ip <= b,
        _ => false,
    }
}

fn check(runs: &[Run], edges: &[(String, String, String)]) -> Result<()> {
    let mut problems = Vec::new();
    let coredns = "kube-system/coredns[Pod]";
    for run in runs {
        let (sandbox, proxy) = (run.sandbox(), run.proxy());
        let mut ranges = Vec::new();
        let mut to_proxy = 0;
        for (from, to, conn) in edges {
            let what = format!("{from} => {to} : {conn}");
            if *to == sandbox {
                problems.push(format!("something reaches a sandbox: {what}"));
            }
            if *from == sandbox {
                if !run.egress {
                    problems.push(format!(
                        "a network = \"none\" sandbox reaches something: {what}"
                    ));
                } else if *to != proxy || conn != PROXY_PORT {
                    problems.push(format!(
                        "a sandbox reaches more than its own proxy's port: {what}"
                    ));
                } else {
                    to_proxy += 1;
                }
            }
            if *to == proxy && (*from != sandbox || conn != PROXY_PORT) {
                problems.push(format!("a proxy accepts more than its own sandbox: {what}"));
            }
            if *from == proxy {
                if *to == coredns && conn == DNS {
                    continue;
                }
                match public_range(to) {
                    Some(range) if conn == HTTPS => ranges.push(range),
                    _ => problems.push(format!(
                        "a proxy reaches more than kube-dns and public ranges on 443: {what}"
                    )),
                }
            }
        }
        if run.egress {
            if to_proxy != 1 {
                problems.push(format!(
                    "{sandbox} does not reach its proxy (the egress run is broken)"
                ));
            }
            if ranges.is_empty()
                || !edges
                    .iter()
                    .any(|(f, t, c)| *f == proxy && t == coredns && c == DNS)
            {
                problems.push(format!("{proxy} reaches no public range or not kube-dns"));
            }
            for ip in PRIVATE {
                let ip: IpAddr = ip.parse()?;
                if ranges.iter().any(|r| inside(ip, *r)) {
                    problems.push(format!("{proxy} may reach the non-public address {ip}"));
                }
            }
        }
    }
    if !problems.is_empty() {
        bail!(
            "the NetworkPolicies allow what they must not:\n  {}",
            problems.join("\n  ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests;

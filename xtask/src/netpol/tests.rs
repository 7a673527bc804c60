//! The connectivity check itself: the promised map passes, every broken promise fails.

use super::*;

fn runs() -> Vec<Run> {
    vec![
        Run {
            name: "a".into(),
            egress: true,
        },
        Run {
            name: "n".into(),
            egress: false,
        },
    ]
}

fn edge(from: &str, to: &str, conn: &str) -> (String, String, String) {
    (from.into(), to.into(), conn.into())
}

fn good() -> Vec<(String, String, String)> {
    vec![
        edge(
            "agentguard/a-sandbox[Pod]",
            "agentguard/a-proxy[Pod]",
            PROXY_PORT,
        ),
        edge("agentguard/a-proxy[Pod]", "kube-system/coredns[Pod]", DNS),
        edge("agentguard/a-proxy[Pod]", "1.0.0.0-9.255.255.255", HTTPS),
        edge(
            "agentguard/bystander[Pod]",
            "default/elsewhere[Pod]",
            "All connections",
        ),
    ]
}

#[test]
fn the_promised_map_passes() {
    check(&runs(), &good()).unwrap();
}

#[test]
fn every_broken_promise_is_refused() {
    let broken = [
        edge(
            "agentguard/bystander[Pod]",
            "agentguard/a-sandbox[Pod]",
            "All connections",
        ),
        edge("agentguard/n-sandbox[Pod]", "kube-system/coredns[Pod]", DNS),
        edge("agentguard/a-sandbox[Pod]", "kube-system/coredns[Pod]", DNS),
        edge(
            "agentguard/bystander[Pod]",
            "agentguard/a-proxy[Pod]",
            PROXY_PORT,
        ),
        edge("agentguard/a-proxy[Pod]", "10.0.0.0-10.255.255.255", HTTPS),
        edge(
            "agentguard/a-proxy[Pod]",
            "1.0.0.0-9.255.255.255",
            "All connections",
        ),
        edge("agentguard/a-proxy[Pod]", "kube-system/metrics[Pod]", DNS),
        edge("agentguard/a-proxy[Pod]", "0.0.0.0-255.255.255.255", HTTPS),
    ];
    for bad in broken {
        let mut edges = good();
        edges.push(bad.clone());
        assert!(check(&runs(), &edges).is_err(), "{bad:?} was accepted");
    }
    // A sandbox that cannot reach its proxy is broken too.
    let mut edges = good();
    edges.remove(0);
    assert!(check(&runs(), &edges).is_err());
}

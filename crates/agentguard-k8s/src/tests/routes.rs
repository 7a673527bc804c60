//! A credential route on the cluster: its Secret is referenced by the proxy Deployment alone
//! (a volume of its one key, read-only, the nobody group's), the sandbox gets the route's URL
//! and no way to the Secret, and the proxy may dial the upstream's port.

use serde_json::{Value, json};

use super::{compiled, egress_with};
use crate::RouteGrant;

const SECRET_NAME: &str = "api-token";

pub(super) fn grant() -> RouteGrant {
    RouteGrant {
        name: "api".into(),
        env: Some("API_URL".into()),
        secret_name: SECRET_NAME.into(),
        secret_key: "token".into(),
        upstream_port: 8443,
        cidrs: vec![],
        table: json!({"upstream": "https://api.example.com:8443/", "secret": "api", "header": "Authorization", "value": "Bearer {secret}", "methods": ["GET"], "paths": ["/v1"], "allow_cidrs": []}),
    }
}

/// Every key of `value`, at any depth.
fn keys(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                out.push(key.clone());
                keys(inner, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|item| keys(item, out)),
        _ => {}
    }
}

#[test]
fn a_routes_secret_is_mounted_into_the_proxy_pod_only() {
    let manifests = compiled(None, egress_with(vec![grant()]), false);
    let documents = manifests.documents();
    let mut deployments = 0;
    for document in &documents {
        let text = document.to_string();
        if document["kind"] == "Deployment" {
            deployments += 1;
            let pod = &document["spec"]["template"]["spec"];
            assert_eq!(pod["securityContext"]["fsGroup"], 65534);
            assert_eq!(
                pod["volumes"],
                json!([{"name": "route-secret-0", "secret": {"secretName": SECRET_NAME, "items": [{"key": "token", "path": "token"}], "defaultMode": 0o440}}])
            );
            let proxy = &pod["containers"][0];
            assert_eq!(
                proxy["volumeMounts"],
                json!([{"name": "route-secret-0", "mountPath": "/var/run/agentguard/routes/api", "readOnly": true}])
            );
            let route = proxy["command"]
                .as_array()
                .unwrap()
                .iter()
                .find_map(|a| a.as_str()?.strip_prefix("--route="))
                .expect("the proxy is given the route");
            let route: Value = serde_json::from_str(route).unwrap();
            assert_eq!(route["secret_file"], "/var/run/agentguard/routes/api/token");
            assert_eq!(route["route"]["upstream"], "https://api.example.com:8443/");
            continue;
        }
        // No other object names the Secret or has any way to one.
        assert!(!text.contains(SECRET_NAME), "{text}");
        let mut all = Vec::new();
        keys(document, &mut all);
        for banned in [
            "secret",
            "secretKeyRef",
            "secretRef",
            "envFrom",
            "projected",
            "valueFrom",
        ] {
            assert!(!all.iter().any(|k| k == banned), "{banned} in {text}");
        }
    }
    assert_eq!(deployments, 1);
    let job = documents.iter().find(|d| d["kind"] == "Job").unwrap();
    let env = &job["spec"]["template"]["spec"]["containers"][0]["env"];
    let value = |name: &str| {
        env.as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .map(|e| e["value"].clone())
    };
    assert_eq!(
        value("API_URL"),
        Some(json!("http://PROXY_CLUSTER_IP:3128/api"))
    );
    // The route is reached directly, never through the proxy variables.
    assert_eq!(value("NO_PROXY"), Some(json!("PROXY_CLUSTER_IP")));
    let policy = documents
        .iter()
        .find(|d| {
            d["kind"] == "NetworkPolicy"
                && d["metadata"]["name"].as_str().unwrap().ends_with("-proxy")
        })
        .unwrap();
    let ports = policy["spec"]["egress"][1]["ports"].to_string();
    assert!(ports.contains("8443") && ports.contains("443"), "{ports}");
}

#[test]
fn without_routes_nothing_of_a_secret_is_generated() {
    let manifests = compiled(None, egress_with(vec![]), false);
    let documents = manifests.documents();
    let proxy = documents
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .unwrap();
    let mut all = Vec::new();
    keys(proxy, &mut all);
    for absent in ["volumes", "volumeMounts", "fsGroup"] {
        assert!(!all.iter().any(|k| k == absent), "{absent} in {proxy}");
    }
}

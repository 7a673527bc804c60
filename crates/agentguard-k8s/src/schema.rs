//! Every generated object deserialized into the Kubernetes API types with every field
//! accounted for: a field the API does not know (a misspelling) is an error, not a field the
//! cluster would silently drop.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::model::Manifests;

/// The ignored (unknown) field paths of `value` read as `T`.
fn unknown<T: DeserializeOwned>(value: &Value) -> std::result::Result<Vec<String>, String> {
    let mut ignored = Vec::new();
    let text = value.to_string();
    let mut de = serde_json::Deserializer::from_str(&text);
    serde_ignored::deserialize::<_, _, T>(&mut de, |path| ignored.push(path.to_string()))
        .map_err(|e| e.to_string())?;
    Ok(ignored)
}

fn one<T: DeserializeOwned>(kind: &'static str, value: &Value) -> Result<()> {
    match unknown::<T>(value) {
        Ok(fields) if fields.is_empty() => Ok(()),
        Ok(fields) => Err(Error::Schema {
            kind,
            fields: fields.join(", "),
        }),
        Err(e) => Err(Error::Schema { kind, fields: e }),
    }
}

/// Checks every object of `manifests`.
pub(crate) fn check(manifests: &Manifests) -> Result<()> {
    one::<Job>("Job", &manifests.job)?;
    one::<NetworkPolicy>("NetworkPolicy", &manifests.network_policy)?;
    if let Some([policy, deployment, service]) = &manifests.proxy {
        one::<NetworkPolicy>("NetworkPolicy", policy)?;
        one::<Deployment>("Deployment", deployment)?;
        one::<Service>("Service", service)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn a_misspelled_field_is_caught() {
        let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "a"}, "spec": {"template": {"spec": {"containers": [{"name": "run", "securityContext": {"readOnlyRootFileSystem": true}}]}}}});
        let fields = super::unknown::<k8s_openapi::api::batch::v1::Job>(&job).unwrap();
        assert_eq!(fields.len(), 1, "{fields:?}");
        assert!(fields[0].contains("readOnlyRootFileSystem"), "{fields:?}");
    }
}

//! `from_json`: the Python package's way in, with the file's checks and key paths in errors.

use super::*;

fn error(json: &str) -> String {
    match from_json(json, "ContainerExecutor", Path::new("/")) {
        Ok(_) => panic!("{json} was accepted"),
        Err(e) => format!("{e:#}"),
    }
}

#[test]
fn json_errors_name_the_key_path_after_the_origin() {
    let unknown = error(r#"{"image": "localhost/tools:1", "engine": "docker", "memroy": "1g"}"#);
    assert!(unknown.starts_with("ContainerExecutor: "), "{unknown}");
    assert!(unknown.contains("unknown field `memroy`"), "{unknown}");
    let nested = error(
        r#"{"image": "i", "engine": "docker", "commands": {"t": {"argv": ["true"], "params": {"n": {"type": "integer", "maxx": 3}}}}}"#,
    );
    assert!(nested.contains("commands.t.params.n"), "{nested}");
    assert!(nested.contains("unknown field `maxx`"), "{nested}");
    assert!(!nested.contains("column"), "{nested}");
    let value = error(r#"{"image": "i", "engine": "docker", "memory": "lots"}"#);
    assert!(value.contains("lots"), "{value}");
}

#[test]
fn json_paths_are_relative_to_the_base() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("ws")).unwrap();
    let json =
        r#"{"image": "i", "engine": "docker", "workspace": "ws", "audit": {"path": "a.jsonl"}}"#;
    let config = from_json(json, "ContainerExecutor", dir.path()).unwrap();
    assert_eq!(config.audit.unwrap().path, dir.path().join("a.jsonl"));
    let missing = from_json(json, "ContainerExecutor", Path::new("/nonexistent"));
    assert!(format!("{:#}", missing.err().unwrap()).contains("/nonexistent/ws"));
}

/// Issue 34, item 16: an empty workspace and a proxy image that is no image reference are
/// refused at load, naming the key.
#[test]
fn r34_16_an_empty_workspace_and_a_bad_proxy_image_are_refused() {
    let empty = error(r#"{"image": "i", "engine": "docker", "workspace": ""}"#);
    assert!(empty.contains("workspace: \"\" names no folder"), "{empty}");
    let proxy = error(
        r#"{"image": "i", "engine": "kubernetes", "kubernetes": {"namespace": "ns", "proxy_image": "x y"}}"#,
    );
    assert!(proxy.contains("kubernetes.proxy_image"), "{proxy}");
    assert!(proxy.contains("' ' is not allowed"), "{proxy}");
}

/// Issue 35, item 5: a config error is a typed value naming the key, not only a string.
#[test]
fn config_errors_name_their_key_as_a_typed_value() {
    let base = Path::new(".");
    for (json, want) in [
        (
            r#"{"image": "i", "engine": "docker", "workspace": ""}"#,
            "workspace",
        ),
        (
            r#"{"image": "i", "engine": "docker", "egress": {"allow": ["a.example.test"], "allow_ports": []}}"#,
            "[egress] allow_ports",
        ),
        (
            r#"{"image": "i", "engine": "docker", "commands": {"t": {"argv": ["true"], "routes": ["gh"]}}}"#,
            "commands.t.routes",
        ),
        (
            r#"{"image": "i", "engine": "docker", "accept_weakened": ["pids"]}"#,
            "accept_weakened",
        ),
    ] {
        let err = from_json(json, "ContainerExecutor", base).err().unwrap();
        let typed = err.downcast_ref::<crate::ConfigError>().unwrap();
        let crate::ConfigError::Key { error, .. } = typed else {
            panic!("{json}: not a key error: {typed:?}");
        };
        assert_eq!(error.key, want, "{json}: {error}");
        assert!(!error.message.is_empty());
    }
}

/// Issue 37: `config_sha256` of keyword arguments is of their canonical JSON, so the order of
/// keys and the spacing do not change it and a changed value does.
#[test]
fn a_json_configs_digest_is_of_its_canonical_form() {
    let digest = |json: &str| {
        from_json(json, "ContainerExecutor", Path::new("/"))
            .unwrap()
            .commands
            .config_sha256()
            .to_owned()
    };
    let a = digest(
        r#"{"image": "localhost/tools:1", "engine": "docker", "commands": {"x": ["true"], "y": ["false"]}}"#,
    );
    let b = digest(
        r#"{"commands":{"y":["false"],"x":["true"]},"engine":"docker","image":"localhost/tools:1"}"#,
    );
    let c = digest(
        r#"{"image": "localhost/tools:2", "engine": "docker", "commands": {"x": ["true"], "y": ["false"]}}"#,
    );
    assert_eq!(a, b);
    assert_ne!(a, c);
    assert_eq!(a.len(), 64);
    let text = "image = \"localhost/tools:1\"\nengine = \"docker\"\n[commands]\nx = [\"true\"]\n";
    let from_text = from_text(text, Path::new("/agentguard.toml")).unwrap();
    assert_eq!(
        from_text.commands.config_sha256(),
        agentguard_audit::sha256_hex(text.as_bytes())
    );
}

/// The floor through the Python package's JSON: `egress.floor` refuses at load, naming what
/// is beyond it (issue 40).
#[test]
fn a_json_config_beyond_its_floor_is_refused_naming_the_entry() {
    let dir = tempfile::tempdir().unwrap();
    let floor = dir.path().join("floor.toml");
    std::fs::write(&floor, "allow = [\"*.example.com\"]\n").unwrap();
    let json = |allow: &str| {
        serde_json::json!({
            "image": "localhost/tools:1",
            "network": "egress",
            "commands": {"t": ["true"]},
            "egress": {"allow": [allow], "floor": floor.to_str().unwrap()},
        })
        .to_string()
    };
    let Err(error) = crate::from_json(&json("other.test"), "ContainerExecutor", dir.path()) else {
        panic!("a config beyond its floor loaded");
    };
    let error = error.to_string();
    assert!(
        error.contains("[egress] floor") && error.contains("allow \"other.test\""),
        "{error}"
    );
    assert!(crate::from_json(&json("api.example.com"), "ContainerExecutor", dir.path()).is_ok());
}

//! The host side of a `path` param: its value is walked on the workspace folder with lstat,
//! component by component, and refused if a component that exists is a symlink (one an
//! earlier `rw` run may have planted); with `must_exist` or `kind`, also if one is missing or
//! (the last) is not the param's kind. The lexical rules were the policy crate's; this is the
//! only part of a param check that does I/O.
//!
//! What the check cannot close: the path is resolved again inside the container when the
//! command opens it, so a symlink made after the check is followed there. It is followed in
//! the container's own mount namespace, which holds the image, the workspace and /tmp and
//! nothing of the host: such a link reaches only what the command could open anyway
//! (docs/params.md; test `a_link_made_after_the_check_reaches_only_the_containers_files`).

use std::path::Path;

use agentguard_policy::{Arg, ArgError, Denial, HostCheck, Invocation, PathKind, Rule};

use crate::spec::ContainerSpec;

impl ContainerSpec {
    /// The allowlisted command `name` with `args` checked: the lexical rules of its params,
    /// then each host-checked path on the workspace. A name off the allowlist is
    /// `command_not_allowed`, a refused value `invalid_arguments`; nothing is started.
    pub fn invoke(&self, name: &str, args: &[(String, Arg)]) -> Result<Invocation, Denial> {
        let invocation = self.commands.invoke(name, args)?;
        for check in invocation.host_checks() {
            let Some((root, _)) = self.workspace() else {
                if !check.must_exist {
                    // No workspace on this host (none, or a cluster's claim): lexical only.
                    continue;
                }
                return Err(refuse(
                    name,
                    check,
                    Rule::NotFound,
                    "no workspace is mounted",
                ));
            };
            on_host(root, check).map_err(|(rule, why)| refuse(name, check, rule, &why))?;
        }
        Ok(invocation)
    }
}

impl ContainerSpec {
    /// What a run of this (effective) spec needs before it starts: its writable paths checked
    /// again (a link planted since the spec was built would mount a host folder) and its
    /// hidden paths found now, into the masks of `identity` (whose `file` and `dir` the caller
    /// made).
    pub fn prepare_run(
        &self,
        identity: &crate::argv::RunIdentity,
    ) -> Result<crate::argv::RunIdentity, crate::masks::MaskError> {
        let mut identity = identity.clone();
        let Some(root) = &self.workspace else {
            identity.masks = None;
            return Ok(identity);
        };
        for entry in &self.writable {
            crate::masks::check_writable(root, entry)
                .map_err(|why| crate::masks::MaskError::Writable(entry.clone(), why))?;
        }
        if self.hidden.is_empty() {
            identity.masks = None;
            return Ok(identity);
        }
        let Some(masks) = identity.masks.as_mut() else {
            return Err(crate::masks::MaskError::NoSources);
        };
        masks.paths = crate::masks::hidden_paths(root, &self.hidden)?;
        let hidden: Vec<&str> = masks.paths.iter().map(|m| m.path.as_str()).collect();
        let shown = hidden.join(", ");
        tracing::info!(count = hidden.len(), paths = %agentguard_audit::Escaped(&shown), "hidden workspace paths masked");
        Ok(identity)
    }
}

impl ContainerSpec {
    /// For each `path` param of command `name` with a `glob`, the workspace paths it matches
    /// now (of the param's kind), for a tool's schema; empty without a workspace here.
    pub fn glob_matches(&self, name: &str) -> std::collections::BTreeMap<String, Vec<String>> {
        let mut out = std::collections::BTreeMap::new();
        let (Some((root, _)), Ok(command)) = (self.workspace(), self.commands.get(name)) else {
            return out;
        };
        for (param, spec) in command.params() {
            if let agentguard_policy::ParamType::Path(rule) = &spec.ty
                && let Some(glob) = &rule.glob
            {
                let kind = rule.kind.unwrap_or(PathKind::Any);
                let mut found = crate::masks::glob_matches(root, glob, kind);
                if let Some(under) = &rule.under {
                    found.retain(|p| {
                        p.strip_prefix(under.as_str())
                            .is_some_and(|r| r.starts_with('/'))
                    });
                }
                out.insert(param.clone(), found);
            }
        }
        out
    }
}

fn refuse(command: &str, check: &HostCheck, rule: Rule, why: &str) -> Denial {
    ArgError {
        command: command.to_owned(),
        param: check.param.clone(),
        rule,
        why: why.to_owned(),
        value: Some(check.path.clone()),
    }
    .into()
}

/// Walks `check.path` below `root` with lstat: no component may be a symlink, every one but
/// the last a directory, the last of the check's kind.
fn on_host(root: &Path, check: &HostCheck) -> Result<(), (Rule, String)> {
    let mut at = root.to_path_buf();
    let components: Vec<&str> = check.path.split('/').collect();
    for (i, component) in components.iter().enumerate() {
        at.push(component);
        let shown = components[..=i].join("/");
        let meta = match std::fs::symlink_metadata(&at) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !check.must_exist => {
                // Nothing below a missing component exists to follow.
                return Ok(());
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err((
                    Rule::NotFound,
                    format!("{shown} does not exist in the workspace"),
                ));
            }
            Err(e) => {
                return Err((Rule::NotFound, format!("{shown} cannot be read ({e})")));
            }
        };
        if meta.file_type().is_symlink() {
            return Err((
                Rule::Symlink,
                format!("{shown} is a symlink; a checked path follows none"),
            ));
        }
        let last = i + 1 == components.len();
        let fits = match (last, check.kind) {
            (false, _) | (true, PathKind::Dir) => meta.is_dir(),
            (true, PathKind::File) => meta.is_file(),
            (true, PathKind::Any) => true,
        };
        if !fits {
            let want = if last { check.kind.as_str() } else { "dir" };
            return Err((
                if last {
                    Rule::WrongKind
                } else {
                    Rule::NotFound
                },
                format!("{shown} is not a {want}"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::os::unix::fs::symlink;

    use agentguard_policy::{Arg, ParamSpec, Reason};

    use crate::{ContainerSpec, Engine};

    /// A workspace with real files and links, and `show` taking a checked path of `kind`
    /// (`lexical`: a path with only `under`, neither `kind` nor `must_exist`).
    fn spec(ws: &std::path::Path, kind: &str) -> ContainerSpec {
        let param = if kind == "lexical" {
            ParamSpec {
                kind: "path".into(),
                under: Some("tests".into()),
                ..ParamSpec::default()
            }
        } else {
            ParamSpec {
                kind: "path".into(),
                path_kind: Some(kind.into()),
                must_exist: Some(true),
                ..ParamSpec::default()
            }
        };
        ContainerSpec::builder("localhost/tools:latest")
            .engine(Engine::parse("docker").unwrap())
            .workspace(ws)
            .command_with_params(
                "show",
                vec!["cat".into(), "{path}".into()],
                BTreeMap::from([("path".to_owned(), param)]),
            )
            .build()
            .unwrap()
    }

    fn rule(spec: &ContainerSpec, path: &str) -> String {
        let arg = vec![("path".to_owned(), Arg::Word(path.to_owned()))];
        match spec.invoke("show", &arg) {
            Ok(_) => "accepted".to_owned(),
            Err(denial) => {
                assert_eq!(denial.reason, Reason::InvalidArguments, "{denial}");
                let rule = denial.message.split("(rule ").nth(1).unwrap_or_default();
                rule.split(';').next().unwrap_or_default().to_owned()
            }
        }
    }

    #[test]
    fn a_host_checked_path_follows_no_symlink_anywhere_along_it() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        std::fs::create_dir_all(ws.join("tests/unit")).unwrap();
        std::fs::write(ws.join("tests/unit/test_a.py"), "").unwrap();
        symlink(outside.path().join("secret"), ws.join("tests/file_link.py")).unwrap();
        symlink(outside.path(), ws.join("tests/dir_link")).unwrap();
        symlink(ws.join("tests/unit"), ws.join("middle")).unwrap();
        let files = spec(&ws, "file");
        for (path, want) in [
            ("tests/unit/test_a.py", "accepted"),
            ("tests/file_link.py", "symlink"),
            ("tests/dir_link/secret", "symlink"),
            ("middle/test_a.py", "symlink"),
            ("tests/unit/missing.py", "not_found"),
            ("tests/unit/test_a.py/x", "not_found"),
            ("tests/unit", "wrong_kind"),
        ] {
            assert_eq!(rule(&files, path), want, "{path}");
        }
        let dirs = spec(&ws, "dir");
        assert_eq!(rule(&dirs, "tests/unit"), "accepted");
        assert_eq!(rule(&dirs, "tests/dir_link"), "symlink");
        assert_eq!(rule(&dirs, "tests/unit/test_a.py"), "wrong_kind");
        let any = spec(&ws, "any");
        assert_eq!(rule(&any, "tests/unit/test_a.py"), "accepted");
        assert_eq!(rule(&any, "tests/file_link.py"), "symlink");
        // Issue 34, item 15: `under` alone is walked too: a link an earlier rw run planted is
        // refused; a path that does not exist yet is not (nothing along it to follow).
        let lexical = spec(&ws, "lexical");
        assert_eq!(rule(&lexical, "tests/dir_link/secret"), "symlink");
        assert_eq!(rule(&lexical, "tests/file_link.py"), "symlink");
        assert_eq!(rule(&lexical, "tests/unit/test_a.py"), "accepted");
        assert_eq!(rule(&lexical, "tests/new/out.txt"), "accepted");
    }
}

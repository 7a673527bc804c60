//! The default seccomp filter of an `engine = "oci"` run: containers-common's profile (the one
//! Podman applies, `seccomp.json` beside this file, Apache-2.0, from Debian's
//! golang-github-containers-common 0.50.1), reduced to what applies to a process with no
//! capabilities on this machine's architecture, as the OCI `linux.seccomp` value.
//!
//! The profile's rules may be conditional: `includes.caps` (only for a process holding the
//! capability: dropped, ours hold none), `excludes.caps` (unless it holds it: kept),
//! `includes.arches` / `excludes.arches` (by the machine's architecture), `minKernel`. What
//! remains is deserialized into `oci-spec`'s typed value, so a rule it does not understand
//! fails the run instead of being skipped. The filter names the native architecture only, so
//! 32-bit and x32 system calls are refused (stricter than the engines, which allow them).

use oci_spec::runtime::LinuxSeccomp;
use serde_json::{Map, Value};

/// The profile as shipped.
const PROFILE: &str = include_str!("seccomp.json");

/// The profile's name for this machine's architecture (`includes.arches`).
fn native_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "x86",
        "arm" => "arm",
        "powerpc64" => "ppc64le",
        "s390x" => "s390x",
        other => other,
    }
}

/// The libseccomp name of this machine's architecture (`archMap`).
fn scmp_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "SCMP_ARCH_X86_64",
        "aarch64" => "SCMP_ARCH_AARCH64",
        "x86" => "SCMP_ARCH_X86",
        "arm" => "SCMP_ARCH_ARM",
        "powerpc64" => "SCMP_ARCH_PPC64LE",
        "s390x" => "SCMP_ARCH_S390X",
        _ => "SCMP_ARCH_NATIVE",
    }
}

/// The filter for a process without capabilities on a kernel of `release` (such as
/// `6.1.0-18-amd64`), or why the profile could not be read.
pub(crate) fn default_filter(release: &str) -> Result<LinuxSeccomp, String> {
    let profile: Value =
        serde_json::from_str(PROFILE).map_err(|e| format!("the seccomp profile: {e}"))?;
    reduce(&profile, native_arch(), scmp_arch(), release)
}

/// [`default_filter`] of a given profile, architecture and kernel release.
pub(crate) fn reduce(
    profile: &Value,
    arch: &str,
    scmp: &str,
    release: &str,
) -> Result<LinuxSeccomp, String> {
    let kernel = version(release);
    // The native architecture alone, not its sub-architectures (x86 and x32 on x86_64): a
    // 32-bit or x32 system call is refused outright, the kernel's compat paths stay shut, and
    // a filter of one architecture compiles in a third of the time (runc: about 20 ms less per
    // run; docs/PERFORMANCE.md, `cargo xtask bench start`).
    let architectures: Vec<Value> = profile["archMap"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|entry| entry["architecture"] == scmp)
        .map(|entry| entry["architecture"].clone())
        .collect();
    if architectures.is_empty() {
        return Err(format!("the seccomp profile has no entry for {scmp}"));
    }
    let mut syscalls = Vec::new();
    for rule in profile["syscalls"].as_array().into_iter().flatten() {
        if !applies(rule, arch, kernel) {
            continue;
        }
        let mut kept = Map::new();
        for key in ["names", "action", "errnoRet", "args"] {
            if let Some(value) = rule.get(key).filter(|v| !v.is_null()) {
                kept.insert(key.to_owned(), value.clone());
            }
        }
        syscalls.push(Value::Object(kept));
    }
    let mut filter = Map::new();
    filter.insert("defaultAction".into(), profile["defaultAction"].clone());
    if let Some(errno) = profile.get("defaultErrnoRet").filter(|v| !v.is_null()) {
        filter.insert("defaultErrnoRet".into(), errno.clone());
    }
    filter.insert("architectures".into(), Value::Array(architectures));
    filter.insert("syscalls".into(), Value::Array(syscalls));
    serde_json::from_value(Value::Object(filter))
        .map_err(|e| format!("the seccomp profile has a rule the OCI format does not take: {e}"))
}

/// Whether a rule applies to a process without capabilities on `arch` and `kernel`.
fn applies(rule: &Value, arch: &str, kernel: (u32, u32)) -> bool {
    let list = |side: &str, key: &str| -> Vec<String> {
        rule[side][key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect()
    };
    if !list("includes", "caps").is_empty() {
        return false;
    }
    let included = list("includes", "arches");
    if !included.is_empty() && !included.iter().any(|a| a == arch) {
        return false;
    }
    if list("excludes", "arches").iter().any(|a| a == arch) {
        return false;
    }
    match rule["includes"]["minKernel"].as_str() {
        Some(min) => version(min) <= kernel,
        None => true,
    }
}

/// The major and minor number of a kernel release (`6.1.0-18-amd64` is (6, 1)); an
/// unreadable one is (0, 0), so a rule that needs a newer kernel is left out.
fn version(release: &str) -> (u32, u32) {
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor),
        _ => (0, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(filter: &LinuxSeccomp, action: &str) -> Vec<String> {
        let value = serde_json::to_value(filter).unwrap();
        value["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["action"] == action)
            .flat_map(|r| r["names"].as_array().unwrap().clone())
            .map(|n| n.as_str().unwrap().to_owned())
            .collect()
    }

    #[test]
    fn the_shipped_profile_denies_by_default_and_keeps_no_capability_rule() {
        let filter = default_filter("6.1.0").unwrap();
        let value = serde_json::to_value(&filter).unwrap();
        assert_eq!(value["defaultAction"], "SCMP_ACT_ERRNO");
        assert_eq!(value["defaultErrnoRet"], 38);
        let allowed = names(&filter, "SCMP_ACT_ALLOW");
        for call in ["read", "write", "execve", "clone", "wait4"] {
            assert!(allowed.iter().any(|n| n == call), "{call} allowed");
        }
        // Allowed only with a capability (CAP_SYS_ADMIN, CAP_SYS_MODULE, CAP_DAC_READ_SEARCH),
        // which no sandbox holds: denied instead.
        for call in ["bpf", "init_module", "open_by_handle_at", "kexec_load"] {
            assert!(
                !allowed.iter().any(|n| n == call),
                "{call} must not be allowed"
            );
        }
        let denied = names(&filter, "SCMP_ACT_ERRNO");
        for call in ["bpf", "init_module", "open_by_handle_at", "kexec_load"] {
            assert!(
                denied.iter().any(|n| n == call),
                "{call} denied: {denied:?}"
            );
        }
    }

    #[test]
    fn rules_for_other_architectures_and_newer_kernels_are_left_out() {
        let profile = serde_json::json!({
            "defaultAction": "SCMP_ACT_ERRNO",
            "archMap": [{"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86"]},
                        {"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": []}],
            "syscalls": [
                {"names": ["a"], "action": "SCMP_ACT_ALLOW", "includes": {"arches": ["arm64"]}},
                {"names": ["b"], "action": "SCMP_ACT_ALLOW", "includes": {"arches": ["amd64"]}},
                {"names": ["c"], "action": "SCMP_ACT_ALLOW", "excludes": {"arches": ["amd64"]}},
                {"names": ["d"], "action": "SCMP_ACT_ALLOW", "includes": {"minKernel": "6.9"}},
                {"names": ["e"], "action": "SCMP_ACT_ALLOW", "includes": {"minKernel": "5.10"}},
                {"names": ["f"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1, "excludes": {"caps": ["CAP_SYS_ADMIN"]}, "comment": "x"}
            ]
        });
        let filter = reduce(&profile, "amd64", "SCMP_ARCH_X86_64", "6.1.0-18-amd64").unwrap();
        assert_eq!(names(&filter, "SCMP_ACT_ALLOW"), ["b", "e"]);
        assert_eq!(names(&filter, "SCMP_ACT_ERRNO"), ["f"]);
        let value = serde_json::to_value(&filter).unwrap();
        assert_eq!(
            value["architectures"],
            serde_json::json!(["SCMP_ARCH_X86_64"]),
            "the native architecture only, no 32-bit sub-architecture"
        );
        assert!(reduce(&profile, "s390x", "SCMP_ARCH_S390X", "6.1").is_err());
        let unknown = serde_json::json!({"defaultAction": "SCMP_ACT_SOMETHING", "syscalls": []});
        assert!(reduce(&unknown, "amd64", "SCMP_ARCH_X86_64", "6.1").is_err());
    }
}

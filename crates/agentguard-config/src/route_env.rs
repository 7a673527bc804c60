//! A route's `env`: the variable that carries its URL into the container. It must be a
//! variable name of the operator's own: not one the loader, a shell or a language runtime
//! interprets (a URL there would change how the command runs), not a proxy variable, not one
//! `[environment]` sets.

use std::collections::BTreeMap;

use agentguard_container::PROXY_VARIABLES;

/// Variables the dynamic loader, a shell or a language runtime reads as paths, code or
/// options: a route's URL in one of them would change how the command itself runs.
const INTERPRETED: &[&str] = &[
    "PATH",
    "HOME",
    "SHELL",
    "ENV",
    "BASH_ENV",
    "IFS",
    "CDPATH",
    "PS4",
    "TMPDIR",
    "GCONV_PATH",
    "NODE_OPTIONS",
    "NODE_PATH",
    "RUBYOPT",
    "RUBYLIB",
    "PERL5OPT",
    "PERL5LIB",
    "PERLLIB",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "CLASSPATH",
    "GLIBC_TUNABLES",
];

/// Prefixes of such variables (`LD_PRELOAD`, `PYTHONPATH`, `DYLD_INSERT_LIBRARIES`, ...).
const INTERPRETED_PREFIXES: &[&str] = &["LD_", "PYTHON", "DYLD_", "MALLOC_", "BASH_FUNC_"];

/// A route's `env`: a variable name that neither `[environment]` nor the proxy uses, and that
/// nothing interprets as more than a URL.
pub(crate) fn check_variable(
    var: &str,
    environment: &BTreeMap<String, String>,
) -> Result<(), String> {
    let upper = var.to_ascii_uppercase();
    if INTERPRETED.contains(&upper.as_str())
        || INTERPRETED_PREFIXES.iter().any(|p| upper.starts_with(p))
    {
        return Err(format!(
            "{var} is read by the loader, a shell or a language runtime; name a variable of your own (for example GH_API_URL)"
        ));
    }
    let valid = var
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && var.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !valid {
        return Err(format!(
            "{var:?} is not a variable name (letters, digits and `_`, not first a digit)"
        ));
    }
    if PROXY_VARIABLES.iter().any(|p| p.eq_ignore_ascii_case(var)) {
        return Err(format!(
            "{var} is a proxy variable, which agentguard sets itself"
        ));
    }
    if environment.contains_key(var) {
        return Err(format!(
            "{var} is also set in [environment]; the route's URL would replace it"
        ));
    }
    Ok(())
}

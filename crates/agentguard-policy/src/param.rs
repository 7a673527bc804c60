//! Typed parameters: the four types a command's param can have (`enum`, `integer`, `path`,
//! `string`), built from the operator's keys and checked at load, so that a bad declaration
//! (a pattern that does not compile, a default its own rules refuse, a key of another type)
//! fails at start-up, naming the param and the key.
//!
//! The values an agent gives (and the enum values and default, at load) are checked in
//! `check.rs`; where a param goes in the argv is `template.rs`.

use std::fmt;

use crate::path::relative_path;
use crate::value::{Arg, Placement, Value};

/// Longest accepted param name.
pub const MAX_PARAM_NAME_LEN: usize = 48;
/// `max_length` of a `string` param unless set (characters).
pub const DEFAULT_MAX_LENGTH: usize = 256;
/// The largest `max_length` a `string` param may set (characters).
pub const MAX_STRING_LENGTH: usize = 65_536;
/// A compiled `pattern` may use at most this much memory (bytes), so no pattern can make a
/// check slow or large.
const PATTERN_SIZE_LIMIT: usize = 1 << 20;

/// A param as the operator wrote it: the keys of `[commands.NAME.params.P]`, not yet checked.
/// Every front end (the config file, the Python API) fills this one struct.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParamSpec {
    /// `type`: `enum`, `integer`, `path` or `string`.
    pub kind: String,
    /// `description`, shown to agents.
    pub description: Option<String>,
    /// `default`: makes the param optional; checked at load like any value.
    pub default: Option<Arg>,
    /// `enum`: the accepted values.
    pub values: Option<Vec<String>>,
    /// `integer`: the smallest accepted value.
    pub min: Option<i64>,
    /// `integer`: the largest accepted value.
    pub max: Option<i64>,
    /// `path`: the workspace folder the value must stay inside.
    pub under: Option<String>,
    /// `path`: `file`, `dir` or `any`; set, the path is checked on the host.
    pub path_kind: Option<String>,
    /// `path`: the path must exist on the host (checked without following any symlink).
    pub must_exist: Option<bool>,
    /// `path`: a glob the value must match; its matches are listed in the tool's schema.
    pub glob: Option<String>,
    /// `string`: the regular expression the whole value must match.
    pub pattern: Option<String>,
    /// `string`: the longest value in characters (default [`DEFAULT_MAX_LENGTH`]).
    pub max_length: Option<usize>,
}

/// What a `path` param's value must name on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// Anything that is not a symlink.
    Any,
}

impl PathKind {
    /// The config word.
    pub fn as_str(self) -> &'static str {
        match self {
            PathKind::File => "file",
            PathKind::Dir => "dir",
            PathKind::Any => "any",
        }
    }
}

/// The rules of a `path` param.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathRule {
    /// The normalized workspace folder the value must stay inside (`None`: the workspace).
    pub under: Option<String>,
    /// Checked on the host when set, or when `must_exist` is: every component with lstat.
    pub kind: Option<PathKind>,
    /// The path must exist on the host.
    pub must_exist: bool,
    /// The glob the value must match (rule `not_matched`).
    pub glob: Option<crate::glob::Glob>,
}

impl PathRule {
    /// True when a value is checked on the host (`must_exist` or `kind` set).
    pub fn host_checked(&self) -> bool {
        self.must_exist || self.kind.is_some()
    }
}

/// The rules of a `string` param.
#[derive(Debug, Clone)]
pub struct StringRule {
    /// The pattern as written.
    pub pattern: String,
    pub(crate) regex: regex::Regex,
    /// The longest value in characters.
    pub max_length: usize,
}

impl PartialEq for StringRule {
    fn eq(&self, other: &StringRule) -> bool {
        self.pattern == other.pattern && self.max_length == other.max_length
    }
}

/// A param's type with its rules.
#[derive(Debug, Clone, PartialEq)]
pub enum ParamType {
    /// Exactly one of these values (case-sensitive).
    Enum(Vec<String>),
    /// A decimal integer within `[min, max]`.
    Integer {
        /// The smallest accepted value.
        min: i64,
        /// The largest accepted value.
        max: i64,
    },
    /// A relative path inside the workspace.
    Path(PathRule),
    /// A string the whole of which matches a pattern.
    String(StringRule),
}

impl ParamType {
    /// The config word (`enum`, `integer`, `path`, `string`).
    pub fn as_str(&self) -> &'static str {
        match self {
            ParamType::Enum(_) => "enum",
            ParamType::Integer { .. } => "integer",
            ParamType::Path(_) => "path",
            ParamType::String(_) => "string",
        }
    }
}

/// A checked param declaration.
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    /// Its type and rules.
    pub ty: ParamType,
    /// The operator's description.
    pub description: Option<String>,
    /// The default value (already checked), which makes the param optional.
    pub default: Option<Value>,
}

impl fmt::Display for ParamType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Checks a param name: a lower-case letter, then lower-case letters, digits or `_` (a JSON
/// property every tool format accepts, and never an option).
pub(crate) fn validate_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let ok = chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && name.len() <= MAX_PARAM_NAME_LEN;
    if ok {
        Ok(())
    } else {
        Err(format!(
            "param name {name:?}: a param name is a lower-case letter, then up to {} lower-case letters, digits or `_`",
            MAX_PARAM_NAME_LEN - 1
        ))
    }
}

impl Param {
    /// Builds a param from its keys (its enum values and default are checked by `check.rs`);
    /// `placement` is where the template puts it (a whole argv element, or only after a
    /// prefix). Errors name the key and say what to write.
    pub(crate) fn from_spec(
        name: &str,
        spec: &ParamSpec,
        placement: Placement,
    ) -> Result<Param, String> {
        let key = |k: &str| format!("params.{name}.{k}");
        let allowed: &[&str] = match spec.kind.as_str() {
            "enum" => &["values"],
            "integer" => &["min", "max"],
            "path" => &["under", "kind", "must_exist", "glob"],
            "string" => &["pattern", "max_length"],
            other => {
                return Err(format!(
                    "{}: {other:?} is not a param type; use enum, integer, path or string",
                    key("type")
                ));
            }
        };
        for (k, set) in [
            ("values", spec.values.is_some()),
            ("min", spec.min.is_some()),
            ("max", spec.max.is_some()),
            ("under", spec.under.is_some()),
            ("kind", spec.path_kind.is_some()),
            ("must_exist", spec.must_exist.is_some()),
            ("glob", spec.glob.is_some()),
            ("pattern", spec.pattern.is_some()),
            ("max_length", spec.max_length.is_some()),
        ] {
            if set && !allowed.contains(&k) {
                return Err(format!(
                    "{}: a {} param has no `{k}`; its keys are {}",
                    key(k),
                    spec.kind,
                    allowed.join(", ")
                ));
            }
        }
        let ty = match spec.kind.as_str() {
            "enum" => enum_type(spec, &key)?,
            "integer" => integer_type(spec, placement, &key)?,
            "path" => path_type(spec, &key)?,
            _ => string_type(spec, &key)?,
        };
        Ok(Param {
            ty,
            description: spec.description.clone(),
            default: None,
        })
    }
}

fn enum_type(spec: &ParamSpec, key: &dyn Fn(&str) -> String) -> Result<ParamType, String> {
    let values = spec.values.clone().unwrap_or_default();
    if values.is_empty() {
        return Err(format!(
            "{}: an enum param needs at least one value, e.g. values = [\"error\", \"warning\"]",
            key("values")
        ));
    }
    for (i, value) in values.iter().enumerate() {
        if values[..i].contains(value) {
            return Err(format!("{}: {value:?} is listed twice", key("values")));
        }
    }
    Ok(ParamType::Enum(values))
}

fn integer_type(
    spec: &ParamSpec,
    placement: Placement,
    key: &dyn Fn(&str) -> String,
) -> Result<ParamType, String> {
    let (Some(min), Some(max)) = (spec.min, spec.max) else {
        return Err(format!(
            "{}: an integer param needs both `min` and `max`",
            key(if spec.min.is_none() { "min" } else { "max" })
        ));
    };
    if min > max {
        return Err(format!("{}: min {min} is above max {max}", key("min")));
    }
    if min < 0 && placement == Placement::Whole {
        return Err(format!(
            "{}: min {min} allows negative values, but the param is a whole argv element, where `-` would start an option; put it after a prefix (\"--offset={{NAME}}\") or set min = 0",
            key("min")
        ));
    }
    Ok(ParamType::Integer { min, max })
}

fn path_type(spec: &ParamSpec, key: &dyn Fn(&str) -> String) -> Result<ParamType, String> {
    let under = match &spec.under {
        None => None,
        Some(under) => Some(
            relative_path(under).map_err(|e| format!("{}: {under:?}: {}", key("under"), e.1))?,
        ),
    };
    let kind = match spec.path_kind.as_deref() {
        None => None,
        Some("file") => Some(PathKind::File),
        Some("dir") => Some(PathKind::Dir),
        Some("any") => Some(PathKind::Any),
        Some(other) => {
            return Err(format!(
                "{}: {other:?} is not a path kind; use file, dir or any",
                key("kind")
            ));
        }
    };
    let glob = match &spec.glob {
        None => None,
        Some(text) => Some(
            crate::glob::Glob::parse(text)
                .map_err(|why| format!("{}: {text:?}: {why}", key("glob")))?,
        ),
    };
    if let (Some(glob), Some(under)) = (&glob, &under)
        && !glob.may_match_below(under)
    {
        return Err(format!(
            "{}: {:?} matches nothing inside {under}/ (`under`); write it from the workspace's top, starting with {under}/",
            key("glob"),
            glob.as_str()
        ));
    }
    Ok(ParamType::Path(PathRule {
        under,
        kind,
        must_exist: spec.must_exist.unwrap_or(false),
        glob,
    }))
}

fn string_type(spec: &ParamSpec, key: &dyn Fn(&str) -> String) -> Result<ParamType, String> {
    let Some(pattern) = &spec.pattern else {
        return Err(format!(
            "{}: a string param needs a pattern the whole value must match, e.g. pattern = \"[A-Za-z0-9_]+\"",
            key("pattern")
        ));
    };
    let refused = |e: regex::Error| {
        let text = e.to_string();
        format!(
            "{}: {pattern:?} is not a regular expression the regex crate accepts: {}",
            key("pattern"),
            text.lines().last().unwrap_or(&text).trim()
        )
    };
    // The pattern alone first: anchoring its text could otherwise close a group it opened
    // (`a)|(.*` would become `^(?:a)|(.*)$`, which matches anything).
    let build = |text: &str| {
        regex::RegexBuilder::new(text)
            .size_limit(PATTERN_SIZE_LIMIT)
            .build()
    };
    build(pattern).map_err(refused)?;
    let regex = build(&format!("^(?:{pattern})$")).map_err(refused)?;
    let max_length = spec.max_length.unwrap_or(DEFAULT_MAX_LENGTH);
    if max_length == 0 || max_length > MAX_STRING_LENGTH {
        return Err(format!(
            "{}: {max_length} is not from 1 to {MAX_STRING_LENGTH}",
            key("max_length")
        ));
    }
    Ok(ParamType::String(StringRule {
        pattern: pattern.clone(),
        regex,
        max_length,
    }))
}

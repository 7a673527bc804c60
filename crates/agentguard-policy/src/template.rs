//! A command: an argv template and its params, and the one way values become an argv, the
//! checked [`Invocation`] every executor takes.
//!
//! A placeholder is `{P}`: a whole argv element, or the end of one after a literal prefix
//! (`"--level={level}"`); one per element; every placeholder names a declared param and every
//! param is used. A value becomes exactly one argv element, never split, never given to a
//! shell; a `path` value is placed as `/workspace/<path>`.

use std::collections::BTreeMap;
use std::fmt;

use crate::check;
use crate::decision::{Denial, Reason};
use crate::param::{Param, ParamSpec, ParamType, PathKind, validate_name};
use crate::rule::{Refused, Rule, refuse as refused};
use crate::value::{Arg, Placement, Value};

/// Where the workspace appears inside the container (and in a `path` value's argv element).
pub const WORKSPACE: &str = "/workspace";

/// One argv element of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Element {
    Literal(String),
    Slot { prefix: String, param: String },
}

/// A checked command: its argv template and params.
#[derive(Debug, Clone, PartialEq)]
pub struct Command {
    name: String,
    argv: Vec<String>,
    template: Vec<Element>,
    params: BTreeMap<String, Param>,
    /// Where each param is placed, decided once from the template.
    placements: BTreeMap<String, Placement>,
}

/// A path the container crate must check on the host before the run: every component with
/// lstat, no symlink anywhere along it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostCheck {
    /// The param.
    pub param: String,
    /// The path relative to the workspace, lexically normal.
    pub path: String,
    /// What it must be.
    pub kind: PathKind,
    /// Whether it must exist (`must_exist` or `kind` declared). Every path is walked when
    /// the workspace is on this host: the components that exist may not be symlinks.
    pub must_exist: bool,
}

/// A command with checked values: the argv to run, the values (for the audit log), and the
/// host checks still to do. Only [`Command::invoke`] makes one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    command: String,
    argv: Vec<String>,
    params: Vec<(String, Value)>,
    host_checks: Vec<HostCheck>,
}

impl Invocation {
    /// The command's name.
    pub fn command(&self) -> &str {
        &self.command
    }

    /// The argv, values placed.
    pub fn argv(&self) -> &[String] {
        &self.argv
    }

    /// Each param's checked value (defaults included), sorted by name.
    pub fn params(&self) -> &[(String, Value)] {
        &self.params
    }

    /// The `path` values to check on the host (`must_exist`, `kind`).
    pub fn host_checks(&self) -> &[HostCheck] {
        &self.host_checks
    }
}

/// A value refused for one param of one command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{command}: param {param}: {why} (rule {rule}; value {shown})", shown = shown(.value.as_deref()))]
pub struct ArgError {
    /// The command.
    pub command: String,
    /// The param as the caller named it.
    pub param: String,
    /// The rule that refused it.
    pub rule: Rule,
    /// Why, in words.
    pub why: String,
    /// The value as given (`None` when there was none).
    pub value: Option<String>,
}

impl From<ArgError> for Denial {
    fn from(error: ArgError) -> Denial {
        Denial::new(Reason::InvalidArguments, error.to_string())
    }
}

/// A value for a message: escaped, and at most 80 characters of it.
fn shown(value: Option<&str>) -> String {
    let Some(value) = value else {
        return "none".to_owned();
    };
    let head: String = value.chars().take(80).collect();
    if head.len() == value.len() {
        format!("{head:?}")
    } else {
        format!("{head:?}... ({} bytes)", value.len())
    }
}

/// The most params a command may declare (its audit event must stay within one log line).
pub const MAX_PARAMS: usize = 32;

/// The kernel's limit on one argument, its NUL included (`MAX_ARG_STRLEN`): a longer argv
/// element makes `execve` fail with `E2BIG`, so a value that would make one is refused first.
pub const MAX_ARG_BYTES: usize = 128 * 1024;

/// The most bytes a command's placed argv may hold in all (half the usual `ARG_MAX`, leaving
/// room for the engine's flags and the environment).
pub const MAX_ARGV_BYTES: usize = 1024 * 1024;

impl Command {
    /// Builds a command from its argv template and params; errors name the element or key.
    pub fn from_template(
        name: &str,
        argv: Vec<String>,
        params: &BTreeMap<String, ParamSpec>,
    ) -> Result<Command, String> {
        if params.len() > MAX_PARAMS {
            return Err(format!(
                "{} params are declared; a command takes at most {MAX_PARAMS}",
                params.len()
            ));
        }
        for param in params.keys() {
            validate_name(param)?;
        }
        let mut template = Vec::with_capacity(argv.len());
        let mut placement: BTreeMap<&str, Placement> = BTreeMap::new();
        for (i, element) in argv.iter().enumerate() {
            let parsed =
                parse_element(element).map_err(|why| format!("argv[{i}] {element:?}: {why}"))?;
            if let Element::Slot { prefix, param } = &parsed {
                if i == 0 {
                    return Err(format!(
                        "argv[0] {element:?}: the program is never a param; name it"
                    ));
                }
                let Some((key, _)) = params.get_key_value(param) else {
                    return Err(format!(
                        "argv[{i}] {element:?}: {{{param}}} names no declared param; add [commands.{name}.params.{param}]"
                    ));
                };
                let here = if prefix.is_empty() {
                    Placement::Whole
                } else {
                    Placement::Prefixed
                };
                let seen = placement.entry(key.as_str()).or_insert(here);
                if here == Placement::Whole {
                    *seen = Placement::Whole;
                }
            }
            template.push(parsed);
        }
        let mut checked = BTreeMap::new();
        let mut placements = BTreeMap::new();
        for (param, spec) in params {
            let Some(at) = placement.get(param.as_str()) else {
                return Err(format!(
                    "params.{param}: the param is declared but no argv element uses {{{param}}}"
                ));
            };
            checked.insert(param.clone(), check::declared(param, spec, *at)?);
            placements.insert(param.clone(), *at);
        }
        Ok(Command {
            name: name.to_owned(),
            argv,
            template,
            params: checked,
            placements,
        })
    }

    /// The command's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The argv template as written.
    pub fn argv(&self) -> &[String] {
        &self.argv
    }

    /// The params, by name.
    pub fn params(&self) -> &BTreeMap<String, Param> {
        &self.params
    }

    /// Checks `args` (name and value, in the order given) and places them: one argv element
    /// per value. Refuses a missing, unknown or repeated param and every value its type
    /// refuses; nothing is started on a refusal.
    pub fn invoke(&self, args: &[(String, Arg)]) -> Result<Invocation, ArgError> {
        let refuse = |param: &str, arg: Option<&Arg>, refused: Refused| ArgError {
            command: self.name.clone(),
            param: param.to_owned(),
            rule: refused.rule,
            why: refused.why,
            value: arg.and_then(arg_text),
        };
        let mut given: BTreeMap<&str, &Arg> = BTreeMap::new();
        for (param, arg) in args {
            if !self.params.contains_key(param) {
                let known: Vec<&str> = self.params.keys().map(String::as_str).collect();
                let why = if known.is_empty() {
                    "the command takes no params".to_owned()
                } else {
                    format!("the command's params are {}", known.join(", "))
                };
                return Err(refuse(param, Some(arg), refused(Rule::Unknown, why)));
            }
            if given.insert(param, arg).is_some() {
                let why = "the param is given twice";
                return Err(refuse(param, Some(arg), refused(Rule::Repeated, why)));
            }
        }
        let mut values = BTreeMap::new();
        for (name, param) in &self.params {
            let at = self.placements[name];
            let value = match (given.get(name.as_str()), &param.default) {
                (None | Some(Arg::Null), Some(default)) => default.clone(),
                (None, None) => {
                    let why = "a required param was not given".to_owned();
                    return Err(refuse(name, None, refused(Rule::Missing, why)));
                }
                (Some(arg), _) => {
                    check::value(param, at, arg).map_err(|r| refuse(name, Some(arg), r))?
                }
            };
            values.insert(name.as_str(), value);
        }
        let invocation = self.place(values);
        self.fits(&invocation.argv).map_err(|(param, why)| {
            refuse(
                param,
                given.get(param).copied(),
                refused(Rule::TooLong, why),
            )
        })?;
        Ok(invocation)
    }

    /// Checks that the placed `argv` can be executed: no element of [`MAX_ARG_BYTES`] or
    /// more, at most [`MAX_ARGV_BYTES`] in all. `Err((param, why))` names the param to blame.
    fn fits(&self, argv: &[String]) -> Result<(), (&str, String)> {
        let total: usize = argv.iter().map(|a| a.len() + 1).sum();
        let mut largest: Option<(&str, usize)> = None;
        for (element, placed) in self.template.iter().zip(argv) {
            let Element::Slot { param, .. } = element else {
                continue;
            };
            let len = placed.len();
            if len >= MAX_ARG_BYTES {
                let max = MAX_ARG_BYTES - 1;
                let why = format!(
                    "its argv element would be {len} bytes; the kernel takes at most {max} per argument"
                );
                return Err((param, why));
            }
            if largest.is_none_or(|(_, l)| len > l) {
                largest = Some((param, len));
            }
        }
        match largest {
            Some((param, _)) if total > MAX_ARGV_BYTES => Err((
                param,
                format!(
                    "the argv would be {total} bytes in all; at most {MAX_ARGV_BYTES} are allowed"
                ),
            )),
            _ => Ok(()),
        }
    }

    fn place(&self, values: BTreeMap<&str, Value>) -> Invocation {
        let mut host_checks = Vec::new();
        for (name, value) in &values {
            if let (ParamType::Path(rule), Value::Text(path)) = (&self.params[*name].ty, value) {
                host_checks.push(HostCheck {
                    param: (*name).to_owned(),
                    path: path.clone(),
                    kind: rule.kind.unwrap_or(PathKind::Any),
                    must_exist: rule.host_checked(),
                });
            }
        }
        let argv = self
            .template
            .iter()
            .map(|element| match element {
                Element::Literal(text) => text.clone(),
                Element::Slot { prefix, param } => {
                    let value = &values[param.as_str()];
                    match (&self.params[param].ty, value) {
                        (ParamType::Path(_), Value::Text(path)) => {
                            format!("{prefix}{WORKSPACE}/{path}")
                        }
                        _ => format!("{prefix}{value}"),
                    }
                }
            })
            .collect();
        Invocation {
            command: self.name.clone(),
            argv,
            params: values.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
            host_checks,
        }
    }
}

/// The text of a value for a message.
fn arg_text(arg: &Arg) -> Option<String> {
    match arg {
        Arg::Word(t) | Arg::Text(t) | Arg::NotUtf8(t) => Some(t.clone()),
        Arg::Integer(n) => Some(n.to_string()),
        Arg::Null => Some("null".to_owned()),
        Arg::Other(kind) => Some(format!("(a JSON {kind})")),
    }
}

/// Parses one element: literal, `{P}`, or `PREFIX{P}`; anything else with a placeholder is
/// refused.
fn parse_element(element: &str) -> Result<Element, String> {
    let slots = placeholders(element);
    match slots.as_slice() {
        [] => Ok(Element::Literal(element.to_owned())),
        [(start, end)] if *end == element.len() => Ok(Element::Slot {
            prefix: element[..*start].to_owned(),
            param: element[start + 1..end - 1].to_owned(),
        }),
        [_] => Err("a placeholder is a whole element or its end (\"--level={level}\"); nothing may follow it".into()),
        _ => Err("one placeholder per element".into()),
    }
}

/// The byte ranges of `{name}` placeholders in `element`, braces included: `{` then a
/// lower-case letter, then lower-case letters, digits or `_`, then `}`.
fn placeholders(element: &str) -> Vec<(usize, usize)> {
    let bytes = element.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'{' && bytes.get(i + 1).is_some_and(u8::is_ascii_lowercase) {
            let mut j = i + 2;
            while bytes
                .get(j)
                .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_')
            {
                j += 1;
            }
            if bytes.get(j) == Some(&b'}') {
                found.push((i, j + 1));
                i = j + 1;
                continue;
            }
        }
        i += 1;
    }
    found
}

impl fmt::Display for Invocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?}", self.command, self.argv)
    }
}

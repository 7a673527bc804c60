//! Pure policy for AgentGuard: every "may this happen" decision, and no I/O at all.
//!
//! This crate owns the command allowlist (argv templates and their typed params, with the one
//! validator of values), host patterns and the canonical host form, port sets, and the classifier that decides which IP addresses are public. It has no async
//! runtime, opens no sockets and reads no files, so a single table-driven test suite covers
//! every decision, and every other crate asks the same questions the same way.
//!
//! Denials are values ([`Denial`], with a stable [`Reason`] code); errors ([`Error`]) mean
//! the input could not be understood.

#![warn(missing_docs)]

mod addr;
mod authority;
mod bound;
mod check;
mod command;
mod decision;
mod error;
mod glob;
mod hidden;
mod host;
mod param;
mod path;
mod port;
mod registry;
mod rule;
mod target;
mod template;
mod value;

pub use addr::{
    AddrPermit, AddressPolicy, Class, Embedding, SpecialRange, classify, parse_cidr,
    special_networks,
};
pub use authority::{Authority, parse_port};
pub use bound::{Grant, Widening, covers};
pub use check::MAX_VALUE_BYTES;
pub use command::{CommandAllowlist, MAX_COMMAND_NAME_LEN};
pub use decision::{Denial, Reason};
pub use error::{Error, HostErrorKind, Result};
pub use glob::Glob;
pub use hidden::is_hidden;
pub use host::{DomainName, Host, HostAllowlist, HostPattern};
pub use ipnet::IpNet;
pub use param::{
    DEFAULT_MAX_LENGTH, MAX_PARAM_NAME_LEN, MAX_STRING_LENGTH, Param, ParamSpec, ParamType,
    PathKind, PathRule, StringRule,
};
pub use path::{MAX_COMPONENT_BYTES, MAX_PATH_BYTES, relative_path};
pub use port::{DEFAULT_PORT, PortSet};
pub use rule::Rule;
pub use target::{TargetPermit, TargetPolicy, TargetPolicyBuilder};
pub use template::{
    ArgError, Command, HostCheck, Invocation, MAX_ARG_BYTES, MAX_ARGV_BYTES, MAX_PARAMS, WORKSPACE,
};
pub use value::{Arg, Placement, Value};

#[cfg(test)]
mod tests;

//! The typed values of a container spec: sizes, CPUs, user ids, the runtime, the pull policy.
//!
//! Each is parsed once, where it enters (a builder setter), into a value that cannot be
//! wrong afterwards; the argv builder only formats them. Parse errors name the field, the
//! value and what to write instead.

use std::fmt;
use std::path::Path;

use crate::error::{Error, Result, invalid};

/// The smallest memory limit engines accept.
pub(crate) const MIN_MEMORY: u64 = 6 * 1024 * 1024;
/// The smallest tmpfs size accepted.
pub(crate) const MIN_TMPFS: u64 = 4096;

/// A size in bytes, written as `512m`, `1g`, `64k` or plain bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(u64);

impl ByteSize {
    /// Parses `512m`, `1g`, `65536`, `64k` (`b`, `kb`, `mb`, `gb` too, any case) for `field`,
    /// refusing values below `minimum` bytes.
    pub fn parse(field: &'static str, value: &str, minimum: u64) -> Result<ByteSize> {
        let Some(bytes) = parse_size(value) else {
            return Err(invalid(
                field,
                value,
                "expected a size such as 512m, 1g or 65536 (bytes)",
            ));
        };
        if bytes < minimum {
            return Err(invalid(
                field,
                value,
                format!("at least {minimum} bytes are needed; engines refuse smaller limits"),
            ));
        }
        Ok(ByteSize(bytes))
    }

    /// A size of exactly this many bytes.
    pub const fn from_bytes(bytes: u64) -> ByteSize {
        ByteSize(bytes)
    }

    /// The size in bytes.
    pub const fn bytes(self) -> u64 {
        self.0
    }
}

impl fmt::Display for ByteSize {
    /// The largest unit that divides the size exactly (`512m`, `64k`), as engines read it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (unit, shift) in [("g", 30), ("m", 20), ("k", 10)] {
            if self.0 != 0 && self.0.is_multiple_of(1 << shift) {
                return write!(f, "{}{unit}", self.0 >> shift);
            }
        }
        write!(f, "{}", self.0)
    }
}

fn parse_size(value: &str) -> Option<u64> {
    let (digits, unit) = match value.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => value.split_at(i),
        None => (value, ""),
    };
    let number: u64 = digits.parse().ok()?;
    let multiplier: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1 << 10,
        "m" | "mb" => 1 << 20,
        "g" | "gb" => 1 << 30,
        _ => return None,
    };
    number.checked_mul(multiplier)
}

/// A CPU limit in billionths of a CPU, as Docker and Podman keep it (`--cpus 1.5`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cpus(u64);

impl Cpus {
    const SCALE: u64 = 1_000_000_000;

    /// One CPU: the default.
    pub const ONE: Cpus = Cpus(Cpus::SCALE);

    /// Parses a positive decimal such as `1`, `0.5` or `1.25` (at most nine decimals).
    pub fn parse(value: &str) -> Result<Cpus> {
        let refuse = || invalid("cpus", value, "expected a positive number such as 1 or 0.5");
        let (whole, fraction) = value.split_once('.').unwrap_or((value, ""));
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty() && fraction.is_empty()
            || !digits(whole)
            || !digits(fraction)
            || fraction.len() > 9
        {
            return Err(refuse());
        }
        let whole: u64 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| refuse())?
        };
        let fraction: u64 = format!("{fraction:0<9}").parse().map_err(|_| refuse())?;
        let nanos = whole
            .checked_mul(Cpus::SCALE)
            .and_then(|w| w.checked_add(fraction))
            .ok_or_else(refuse)?;
        if nanos < Cpus::MIN.0 {
            return Err(invalid(
                "cpus",
                value,
                "at least 0.01 (the smallest share Docker and Podman accept)",
            ));
        }
        Ok(Cpus(nanos))
    }

    /// The smallest limit the engines accept: 0.01 CPU.
    pub const MIN: Cpus = Cpus(Cpus::SCALE / 100);

    /// Refuses a limit above the `available` CPUs of the machine that runs the container
    /// (Docker and Podman refuse it only when the container starts).
    pub fn check_available(self, available: usize) -> Result<()> {
        let most = (available as u64).saturating_mul(Cpus::SCALE);
        if self.0 > most {
            return Err(invalid(
                "cpus",
                self.to_string(),
                format!("this machine has {available} CPUs; the engine refuses a larger limit"),
            ));
        }
        Ok(())
    }
}

impl Cpus {
    /// The limit in thousandths of a CPU (Kubernetes' `m`), rounded up.
    pub const fn millicores(self) -> u64 {
        self.0.div_ceil(Cpus::SCALE / 1000)
    }
}

impl fmt::Display for Cpus {
    /// `1`, `0.5`, `1.25`: no trailing zeros.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (whole, fraction) = (self.0 / Cpus::SCALE, self.0 % Cpus::SCALE);
        if fraction == 0 {
            return write!(f, "{whole}");
        }
        let fraction = format!("{fraction:09}");
        write!(f, "{whole}.{}", fraction.trim_end_matches('0'))
    }
}

/// A numeric `uid:gid` that is never root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserIds {
    /// The user id (never 0).
    pub uid: u32,
    /// The group id (never 0).
    pub gid: u32,
}

impl UserIds {
    /// User nobody, `65534:65534`: the default.
    pub const NOBODY: UserIds = UserIds {
        uid: 65534,
        gid: 65534,
    };

    /// Parses a numeric `uid:gid`; root (uid 0 or gid 0) is refused.
    pub fn parse(value: &str) -> Result<UserIds> {
        let parsed = value
            .split_once(':')
            .and_then(|(u, g)| Some((u.parse::<u32>().ok()?, g.parse::<u32>().ok()?)));
        match parsed {
            None => Err(invalid(
                "user",
                value,
                "expected numeric `uid:gid`, for example 65534:65534",
            )),
            Some((uid, gid)) => UserIds::new(uid, gid).ok_or_else(|| {
                invalid(
                    "user",
                    value,
                    "the container never runs as root (uid 0 or gid 0); use 65534:65534 or your own uid:gid",
                )
            }),
        }
    }

    /// The ids, unless either is 0.
    pub fn new(uid: u32, gid: u32) -> Option<UserIds> {
        (uid != 0 && gid != 0).then_some(UserIds { uid, gid })
    }

    /// The user a read-write workspace is used as, so files written inside stay the host
    /// owner's: this process's uid:gid; when that is root, the workspace owner's, if that is
    /// not root; otherwise refused. Never root.
    pub fn for_rw_workspace(workspace: &Path) -> Result<UserIds> {
        use std::os::unix::fs::MetadataExt;
        let (uid, gid) = own_ids()?;
        if let Some(ids) = UserIds::new(uid, gid) {
            return Ok(ids);
        }
        let meta = std::fs::metadata(workspace).map_err(|source| Error::Io {
            action: "reading the owner of the workspace",
            path: workspace.to_owned(),
            source,
        })?;
        UserIds::new(meta.uid(), meta.gid()).ok_or_else(|| {
            invalid(
                "workspace_mode",
                "rw",
                format!(
                    "workspace_mode = \"rw\" would run the container as root: agentguard runs as root and {} is owned by root; chown the workspace to an unprivileged user, or use workspace_mode = \"ro\"",
                    workspace.display()
                ),
            )
        })
    }
}

impl fmt::Display for UserIds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.uid, self.gid)
    }
}

/// The OCI runtime the engine should use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Runtime(String);

impl Runtime {
    /// gVisor's runtime name.
    pub const GVISOR: &str = "runsc";

    /// Parses a runtime name (letters, digits, `_`, `-` and `.`, not starting with `-`), or
    /// an absolute path to an OCI runtime program (only `engine = "oci"` takes one; `build`
    /// refuses it for Docker and Podman).
    pub fn parse(value: &str) -> Result<Runtime> {
        if value.starts_with('/') {
            let plain = value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/'));
            if !plain || value.ends_with('/') || value.contains("/../") || value.contains("/./") {
                return Err(invalid(
                    "runtime",
                    value,
                    "a runtime path is absolute, names a file, and uses letters, digits, `_`, `-`, `.` and `/` only",
                ));
            }
        } else {
            validate_token("runtime", value)?;
        }
        Ok(Runtime(value.to_owned()))
    }

    /// True for gVisor (`runsc`, or a path to it), whose pids accounting and flags differ.
    pub fn is_gvisor(&self) -> bool {
        self.file_name() == Runtime::GVISOR
    }

    /// True when the runtime is given as a path rather than a name.
    pub fn is_path(&self) -> bool {
        self.0.starts_with('/')
    }

    /// The runtime's program name: the last part of a path, or the name.
    pub fn file_name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or(&self.0)
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// When the engine may pull an image: never. Images must already be present and pinned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pull {
    /// Only images already in the local store run (`--pull never`).
    #[default]
    Never,
}

impl Pull {
    /// Parses `never`; every other policy is refused, saying why.
    pub fn parse(value: &str) -> Result<Pull> {
        match value {
            "never" => Ok(Pull::Never),
            _ => Err(invalid(
                "pull",
                value,
                "only `never` is supported: load or build the image locally first, and pin it by digest or image ID",
            )),
        }
    }

    /// The engine's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Pull::Never => "never",
        }
    }
}

/// Letters, digits, `_`, `-` and `.`, not starting with `-` (so never read as a flag).
pub(crate) fn validate_token(field: &'static str, value: &str) -> Result<()> {
    let ok = !value.is_empty()
        && !value.starts_with('-')
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok {
        Ok(())
    } else {
        Err(invalid(
            field,
            value,
            "use letters, digits, `_`, `-` and `.`, not starting with `-`",
        ))
    }
}

/// The real uid and gid of this process, from `/proc/self/status` (no unsafe code).
pub(crate) fn own_ids() -> Result<(u32, u32)> {
    let path = Path::new("/proc/self/status");
    let status = std::fs::read_to_string(path).map_err(|source| Error::Io {
        action: "reading this process's uid and gid",
        path: path.to_owned(),
        source,
    })?;
    let field = |name: &str| -> Option<u32> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|v| v.parse().ok())
    };
    field("Uid:").zip(field("Gid:")).ok_or_else(|| Error::Io {
        action: "reading this process's uid and gid",
        path: path.to_owned(),
        source: std::io::Error::other("no Uid: or Gid: line"),
    })
}

/// How the workspace is mounted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WorkspaceMode {
    /// Read-only (the default).
    #[default]
    ReadOnly,
    /// Read-write.
    ReadWrite,
}

impl WorkspaceMode {
    /// Parses `ro` or `rw`.
    pub fn parse(value: &str) -> Result<WorkspaceMode> {
        match value {
            "ro" => Ok(WorkspaceMode::ReadOnly),
            "rw" => Ok(WorkspaceMode::ReadWrite),
            _ => Err(invalid("workspace_mode", value, "expected `ro` or `rw`")),
        }
    }
}

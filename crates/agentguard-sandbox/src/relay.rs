//! The relay program: built statically from `crates/agentguard-relay` by this crate's build
//! script and embedded, or read from a file (`AGENTGUARD_RELAY` in the CLI). Either way it is
//! checked before use: an ELF executable for this machine's architecture with no program
//! interpreter (static), since it runs inside images that may have no C library at all.

use std::borrow::Cow;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The relay this crate was built with.
const EMBEDDED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/agentguard-relay"));

/// A relay program, checked to be a static executable for this machine.
#[derive(Debug, Clone)]
pub struct RelayProgram {
    bytes: Cow<'static, [u8]>,
    origin: String,
}

impl RelayProgram {
    /// The relay built into this program.
    pub fn embedded() -> Result<RelayProgram> {
        RelayProgram::checked(Cow::Borrowed(EMBEDDED), "the built-in relay".into())
    }

    /// The relay at `path` (for a relay built separately).
    pub fn from_file(path: &Path) -> Result<RelayProgram> {
        let origin = format!("the relay {}", path.display());
        let bytes = std::fs::read(path).map_err(|e| Error::Relay {
            origin: origin.clone(),
            problem: format!("cannot be read: {e}"),
        })?;
        RelayProgram::checked(Cow::Owned(bytes), origin)
    }

    fn checked(bytes: Cow<'static, [u8]>, origin: String) -> Result<RelayProgram> {
        static_executable(&bytes).map_err(|problem| Error::Relay {
            origin: origin.clone(),
            problem,
        })?;
        Ok(RelayProgram { bytes, origin })
    }

    /// Where it came from, for messages (`the built-in relay`, `the relay PATH`).
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Always false: an empty file is not an executable.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Writes it to `path` (which must not exist), executable and read-only.
    pub fn install(&self, path: &Path) -> Result<PathBuf> {
        let io = |e: std::io::Error| Error::RunDir {
            path: path.to_owned(),
            action: "writing the relay",
            source: e,
        };
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o555)
            .open(path)
            .map_err(io)?;
        file.write_all(&self.bytes).map_err(io)?;
        Ok(path.to_owned())
    }
}

/// Checks that `bytes` are a 64-bit little-endian ELF executable for this machine with no
/// `PT_INTERP` program header (a static executable), or says what is wrong.
pub fn static_executable(bytes: &[u8]) -> std::result::Result<(), String> {
    crate::elf::static_executable_for(bytes, std::env::consts::ARCH)
}

#[cfg(test)]
mod tests {
    use super::static_executable;

    #[test]
    fn the_built_in_relay_is_static() {
        assert_eq!(static_executable(super::EMBEDDED), Ok(()));
        assert!(super::RelayProgram::embedded().unwrap().len() > 10_000);
    }

    #[test]
    fn dynamic_and_foreign_programs_are_refused() {
        // This test program itself is dynamically linked.
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let problem = static_executable(&me).unwrap_err();
        assert!(problem.contains("dynamically linked"), "{problem}");
        assert!(
            static_executable(b"#!/bin/sh\n")
                .unwrap_err()
                .contains("not an ELF")
        );
        assert!(
            static_executable(&me[..40])
                .unwrap_err()
                .contains("truncated")
        );
        let mut foreign = super::EMBEDDED.to_vec();
        foreign[0x12] = 0x28; // ARM
        assert!(
            static_executable(&foreign)
                .unwrap_err()
                .contains("machine 40")
        );
        foreign[4] = 1; // 32-bit
        assert!(static_executable(&foreign).unwrap_err().contains("64-bit"));
    }
}

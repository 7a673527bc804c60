//! Whether an ELF file is a static executable for a machine: read by the relay's check at
//! run time (`relay.rs`) and by `build.rs`, which includes this file, so a relay that is not
//! static fails the build. Pure, with no crate imports, so the build script can include it.

/// Checks that `bytes` are a 64-bit little-endian ELF executable for `arch` (as Rust names
/// it: `x86_64`, `aarch64`, `riscv64`) with no `PT_INTERP` program header (a static
/// executable), or says what is wrong.
pub(crate) fn static_executable_for(bytes: &[u8], arch: &str) -> Result<(), String> {
    const PT_INTERP: u32 = 3;
    if bytes.get(..4) != Some(b"\x7fELF") {
        return Err("is not an ELF executable".into());
    }
    if bytes.get(4..6) != Some(&[2, 1]) {
        return Err("is not a 64-bit little-endian ELF file".into());
    }
    let u16_at = |at: usize| {
        bytes
            .get(at..at + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u32_at = |at: usize| {
        bytes
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let u64_at = |at: usize| {
        bytes
            .get(at..at + 8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(u64::from_le_bytes)
    };
    let truncated = || "is a truncated ELF file".to_owned();
    let kind = u16_at(0x10).ok_or_else(truncated)?;
    if kind != 2 && kind != 3 {
        return Err(format!("is an ELF file of type {kind}, not an executable"));
    }
    let machine = u16_at(0x12).ok_or_else(truncated)?;
    let want = match arch {
        "x86_64" => 62,
        "aarch64" => 183,
        "riscv64" => 243,
        other => return Err(format!("cannot be checked on a {other} machine")),
    };
    if machine != want {
        return Err(format!(
            "is built for ELF machine {machine}, not for this {arch} machine"
        ));
    }
    let phoff = u64_at(0x20).ok_or_else(truncated)?;
    let phentsize = u16_at(0x36).ok_or_else(truncated)?;
    let phnum = u16_at(0x38).ok_or_else(truncated)?;
    let phoff = usize::try_from(phoff).map_err(|_| truncated())?;
    for i in 0..usize::from(phnum) {
        let at = phoff
            .checked_add(i * usize::from(phentsize))
            .ok_or_else(truncated)?;
        if u32_at(at).ok_or_else(truncated)? == PT_INTERP {
            return Err(
                "is dynamically linked (it names a program interpreter), so it cannot run in an image without the same C library; build it with `-C target-feature=+crt-static`".into(),
            );
        }
    }
    Ok(())
}

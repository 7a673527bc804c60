//! A one-package PEP 503 index for the package-install tests and the demo: the pages a
//! [`TlsUpstream`](crate::TlsUpstream) serves with `start_with_files`, and the Python script
//! that builds the wheel (`agprobe` 1.0, `VALUE = 42`) with the standard library's zipfile.
//! The caller runs the script (`python3 -c WHEEL_SCRIPT PATH`) and reads the file.

/// The wheel's file name.
pub const WHEEL_NAME: &str = "agprobe-1.0-py3-none-any.whl";

/// The package's name, as `pip install` takes it.
pub const PACKAGE: &str = "agprobe";

/// Builds the wheel at `sys.argv[1]`, with a RECORD of sha256 digests.
pub const WHEEL_SCRIPT: &str = r#"
import base64, hashlib, sys, zipfile
files = {
    "agprobe/__init__.py": b"VALUE = 42\n",
    "agprobe-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: agprobe\nVersion: 1.0\n",
    "agprobe-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: agentguard-test-support\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = ""
for name, data in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record += f"{name},sha256={digest},{len(data)}\n"
record += "agprobe-1.0.dist-info/RECORD,,\n"
files["agprobe-1.0.dist-info/RECORD"] = record.encode()
with zipfile.ZipFile(sys.argv[1], "w") as wheel:
    for name, data in files.items():
        wheel.writestr(name, data)
"#;

/// The index's files for `wheel` (the bytes `WHEEL_SCRIPT` wrote): `/simple/agprobe/` links
/// to `/files/agprobe-1.0-py3-none-any.whl` by a relative link, so the index also works
/// below a route's base URL. The paths pip asks for, in order.
pub fn index_files(wheel: Vec<u8>) -> Vec<(String, String, Vec<u8>)> {
    index_files_at(wheel, "../..")
}

/// [`index_files`] whose page links the file at `base` (`https://files.example.test:PORT`:
/// the files on a second host name, as many indexes serve them).
pub fn index_files_at(wheel: Vec<u8>, base: &str) -> Vec<(String, String, Vec<u8>)> {
    let page = format!(
        "<!DOCTYPE html><html><body><a href=\"{base}/files/{WHEEL_NAME}\">{WHEEL_NAME}</a></body></html>\n"
    );
    vec![
        (
            format!("/simple/{PACKAGE}/"),
            "text/html".to_owned(),
            page.into_bytes(),
        ),
        (
            format!("/files/{WHEEL_NAME}"),
            "application/octet-stream".to_owned(),
            wheel,
        ),
    ]
}

//! What a real client (curl, Python, pip) must not pick up from this machine's environment
//! when a test, benchmark or demo runs it against a loopback peer with a test CA.
//!
//! Our machines set CA bundles and proxy variables (ENGINES.md); a client that honours them
//! would trust another CA or dial another proxy, and a test would prove nothing.

/// Variables on our machines that would make a client trust another CA or use another proxy.
pub const CLIENT_ENV: &[&str] = &[
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "CURL_CA_BUNDLE",
    "REQUESTS_CA_BUNDLE",
    "PIP_CERT",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
];

/// Removes every variable of [`CLIENT_ENV`] from a command's environment.
pub fn clean_client_env(command: &mut std::process::Command) -> &mut std::process::Command {
    for var in CLIENT_ENV {
        command.env_remove(var);
    }
    command
}

//! `cargo xtask wheel` and `cargo xtask python`: the `agentguard` Python package.
//!
//! `wheel` builds ONE abi3 wheel for any glibc 2.17 or newer
//! (`agentguard-VERSION-cp39-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl`) with
//! maturin and zig's linker into `target/wheels/`, and `auditwheel show` must agree with its
//! tag. `python` installs that same wheel into a venv of the oldest
//! and of the newest CPython we support (3.9 and 3.13, from pyenv) and runs the package's
//! pytest suite in each against real Docker with runsc (the engine, the image and runsc are
//! required: nothing is skipped), each installed with `pip install --no-index`; then proves
//! the offline route from source: `pip install --no-index --no-build-isolation
//! ./crates/agentguard-python` with maturin installed first.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};

use crate::setup::Venv;
use crate::{cmd, image, setup};

/// The oldest CPython the wheel supports.
const PY39: Venv = Venv {
    name: "venv-py39",
    python: Some("3.9"),
    packages: &[
        "pytest==8.4.2",
        "pytest-timeout==2.4.0",
        "mypy==1.19.1",
        "prometheus-client==0.26.0",
    ],
    what: "CPython 3.9 test venv",
};

/// The newest, which also builds the wheel.
const PY313: Venv = Venv {
    name: "venv-py313",
    python: Some("3.13"),
    packages: &[
        "maturin==1.16.0",
        "ziglang==0.17.0",
        "auditwheel==6.8.2",
        "pytest==9.2.0",
        "pytest-timeout==2.4.0",
        "mypy==2.4.1",
        "prometheus-client==0.26.0",
    ],
    what: "CPython 3.13 test venv",
};

const CRATE: &str = "crates/agentguard-python";

/// Builds the wheel; returns its path.
pub(crate) fn wheel() -> Result<PathBuf> {
    PY313.ensure()?;
    let out = cmd::root().join("target/wheels");
    // One wheel, this version's: an old one must never be the one installed.
    if out.exists() {
        for entry in std::fs::read_dir(&out)? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "whl") {
                std::fs::remove_file(&path)?;
            }
        }
    }
    println!("== wheel: maturin build --release --zig --compatibility manylinux2014 ({CRATE})");
    let manifest = cmd::root().join(CRATE).join("Cargo.toml");
    // maturin finds zig as `python3 -m ziglang`: the venv's python first on PATH.
    let python = PY313.bin("python");
    let path = path_with(python.parent().context("the venv's bin folder")?);
    let target = cmd::ship_dir("wheel");
    cmd::run_with(
        &cmd::root(),
        &[
            ("PATH", &path),
            ("CARGO_TARGET_DIR", &target.to_string_lossy()),
        ],
        &PY313.bin("maturin").to_string_lossy(),
        &[
            "build",
            "--release",
            "--locked",
            "--zig",
            "--compatibility",
            "manylinux2014",
            "--manifest-path",
            &manifest.to_string_lossy(),
            "--out",
            &out.to_string_lossy(),
        ],
    )?;
    let wheels: Vec<PathBuf> = std::fs::read_dir(&out)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "whl"))
        .collect();
    let [wheel] = wheels.as_slice() else {
        bail!("expected one wheel in {}, found {wheels:?}", out.display());
    };
    let name = wheel.file_name().unwrap_or_default().to_string_lossy();
    let version = env!("CARGO_PKG_VERSION");
    let want =
        format!("agentguard-{version}-cp39-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl");
    if name != want {
        bail!("the wheel is {name}, not {want}: one abi3 wheel for CPython 3.9 and later");
    }
    let shown = cmd::output(
        &PY313.bin("auditwheel").to_string_lossy(),
        &["show", &wheel.to_string_lossy()],
    )?;
    let said = cmd::stdout_text(&shown)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    if !shown.status.success()
        || !said
            .contains("is consistent with the following platform tag: \"manylinux_2_17_x86_64\"")
    {
        bail!("auditwheel show does not agree with the wheel's tag: {said}");
    }
    println!("   auditwheel show: consistent with manylinux_2_17_x86_64");
    println!("   wrote {}", wheel.display());
    Ok(wheel.clone())
}

/// The package's tests on 3.9 and 3.13 with the one wheel, then the install from source.
pub(crate) fn run() -> Result<()> {
    tests()?;
    from_source()
}

/// The one wheel, built, and the package's tests on 3.9 and 3.13 with it.
pub(crate) fn tests() -> Result<()> {
    let engines = setup::run()?;
    if !engines.docker_runsc {
        bail!(
            "the Python package's tests need docker with runsc; `cargo xtask setup` reports why it is missing"
        );
    }
    image::ensure_pytest_image("docker")?;
    // The CLI reads what the package writes (the audit log's one format).
    let cli = cmd::debug_binary()?;
    let cli = cli.to_string_lossy();
    let wheel = wheel()?;
    for venv in [&PY39, &PY313] {
        venv.ensure()?;
        let python = venv.bin("python");
        let python = python.to_string_lossy();
        println!("== python: {} with {}", venv.name, wheel.display());
        pip_install(
            &python,
            &[
                "--no-index",
                "--force-reinstall",
                "--no-deps",
                &wheel.to_string_lossy(),
            ],
        )?;
        cmd::run_with(
            &cmd::root().join(CRATE),
            &[
                ("AGENTGUARD_PY_REQUIRE", "1"),
                ("AGENTGUARD_PY_ENGINE", "docker"),
                ("AGENTGUARD_PY_IMAGE", image::PYTEST_IMAGE),
                ("AGENTGUARD_PY_CLI", &cli),
            ],
            &python,
            // Every test is bounded: a hang fails it instead of the whole CI run.
            &[
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "--timeout=600",
                "tests",
            ],
        )?;
    }
    Ok(())
}

/// The offline route of docs/python.md: in a fresh venv, maturin installed first, then
/// `pip install --no-index --no-build-isolation ./crates/agentguard-python` (nothing fetched
/// while building), then an import and a refusal through it.
pub(crate) fn from_source() -> Result<()> {
    let dir = cmd::root().join("target/xtask/venv-from-source");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    println!("== python: pip install ./{CRATE} into a fresh venv");
    cmd::run("python3", &["-m", "venv", &dir.to_string_lossy()])?;
    let python = dir.join("bin/python");
    let python = python.to_string_lossy();
    pip_install(&python, &["maturin==1.16.0"])?;
    // From the repository's root, as a user types it in the activated venv (the backend runs
    // the venv's `maturin` from PATH).
    let path = path_with(&dir.join("bin"));
    let target = cmd::ship_dir("host");
    pip_install_with(
        &python,
        &[
            ("PATH", &path),
            ("CARGO_TARGET_DIR", &target.to_string_lossy()),
        ],
        &["--no-index", "--no-build-isolation", &format!("./{CRATE}")],
    )?;
    let check = "from agentguard import errors\n\
        from agentguard.execution import ContainerExecutor\n\
        try:\n    ContainerExecutor('i', {'t': ['true']}, engine='docker', memory='lots')\n\
        except errors.ConfigError as e:\n    assert 'lots' in str(e), e\n\
        else:\n    raise SystemExit('memory=lots was accepted')\n\
        print('   installed from source: agentguard', __import__('agentguard').__version__)";
    cmd::run(&python, &["-c", check])
}

/// `PATH` with a venv's `bin` first, as activating the venv makes it.
fn path_with(bin: &std::path::Path) -> String {
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// `python -m pip install --quiet ARGS`, run from the repository's root.
fn pip_install(python: &str, args: &[&str]) -> Result<()> {
    pip_install_with(python, &[], args)
}

/// [`pip_install`] with `envs` set besides.
fn pip_install_with(python: &str, envs: &[(&str, &str)], args: &[&str]) -> Result<()> {
    let mut all = vec![
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
    ];
    all.extend_from_slice(args);
    cmd::run_with(&cmd::root(), envs, python, &all)
}

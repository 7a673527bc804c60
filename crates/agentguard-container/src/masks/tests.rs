//! Hidden-pattern matching over a real tree (links, dot files, deep folders, a name that is
//! not UTF-8) and the writable checks.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;

use super::*;

fn tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for folder in ["a/b/c", "secrets/deep", "src", "build", ".git"] {
        std::fs::create_dir_all(root.join(folder)).unwrap();
    }
    for file in [
        ".env",
        "a/b/.env.local",
        "a/b/c/key.pem",
        "secrets/deep/token",
        "src/main.py",
        ".git/config",
        ".git/HEAD",
        "build/out.txt",
    ] {
        std::fs::write(root.join(file), "x").unwrap();
    }
    // A link named like a hidden file, pointing outside the patterns; a link to a folder.
    symlink("/etc/hostname", root.join("src/.env")).unwrap();
    symlink(root.join("secrets"), root.join("src/linked")).unwrap();
    dir
}

fn paths(masks: &[Mask]) -> Vec<(&str, bool)> {
    masks.iter().map(|m| (m.path.as_str(), m.dir)).collect()
}

#[test]
fn gitignore_patterns_match_without_following_links() {
    let dir = tree();
    let patterns: Vec<String> = [".env", "**/.env*", "**/*.pem", ".git/config", "secrets/"]
        .iter()
        .map(|p| (*p).to_owned())
        .collect();
    let masks = hidden_paths(dir.path(), &patterns).unwrap();
    assert_eq!(
        paths(&masks),
        vec![
            (".env", false),
            (".git/config", false),
            ("a/b/.env.local", false),
            ("a/b/c/key.pem", false),
            ("secrets", true),
            ("src/.env", false),
        ],
        "the link src/.env is masked as itself; src/linked is not entered; secrets/ whole"
    );
    // A pattern with a slash is anchored; a trailing slash matches folders only.
    let anchored = hidden_paths(dir.path(), &["b/.env.local".to_owned()]).unwrap();
    assert!(anchored.is_empty(), "{anchored:?}");
    let folders_only = hidden_paths(dir.path(), &["out.txt/".to_owned()]).unwrap();
    assert!(folders_only.is_empty());
    // A negation keeps a path out.
    let negated = hidden_paths(dir.path(), &["*.py".to_owned(), "!main.py".to_owned()]).unwrap();
    assert!(negated.is_empty(), "{negated:?}");
}

#[test]
fn more_than_the_limit_refuses_naming_the_pattern() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..=MAX_MASKS {
        std::fs::write(dir.path().join(format!("f{i}.log")), "").unwrap();
    }
    let error = hidden_paths(dir.path(), &["*.log".to_owned()]).unwrap_err();
    assert_eq!(error, MaskError::TooMany("*.log".into()));
    assert!(error.to_string().contains("at most 4096"), "{error}");
}

#[test]
fn a_name_a_mount_cannot_carry_is_refused_never_skipped() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(OsStr::from_bytes(b"bad\xff.env")), "").unwrap();
    let error = hidden_paths(dir.path(), &["*.env".to_owned()]).unwrap_err();
    assert!(matches!(error, MaskError::Unnamed(_)), "{error:?}");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a,b.env"), "").unwrap();
    assert!(matches!(
        hidden_paths(dir.path(), &["*.env".to_owned()]),
        Err(MaskError::Unnamed(_))
    ));
}

#[test]
fn writable_entries_are_real_folders_with_no_link_and_never_nested() {
    let dir = tree();
    let root = dir.path();
    assert_eq!(check_writable(root, "build"), Ok(()));
    assert_eq!(check_writable(root, "a/b/c"), Ok(()));
    for (entry, want) in [
        ("src/linked", "symlink"),
        ("src/main.py", "not a folder"),
        ("missing", "cannot be read"),
        ("../outside", "`..`"),
        ("/etc", "begins with `/`"),
        ("a//b", "empty component"),
    ] {
        let why = check_writable(root, entry).unwrap_err();
        assert!(why.contains(want), "{entry}: {why}");
    }
    assert_eq!(check_nesting(&["build", "a/b"]), Ok(()));
    assert_eq!(check_nesting(&["ab", "a"]), Ok(()));
    assert_eq!(
        check_nesting(&["a", "a/b"]),
        Err(("a/b".to_owned(), "a".to_owned()))
    );
}

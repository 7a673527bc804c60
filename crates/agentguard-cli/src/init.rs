//! `agentguard init [--template pytest|npm|cargo|generic] [--config FILE] [--force]`: a
//! starter config, every key it sets commented (why it is there, what to change). Each
//! template loads and `--dry-run`s as written (tests `init_writes_each_template_*`). A file
//! that exists is never replaced without `--force`, and the new file is created exclusively
//! (no race with another writer, no symlink followed).

use std::io::Write;

use anyhow::Context;

use crate::args::{InitArgs, Template};
use crate::exit::{self, Exit};

/// The text of `template`.
fn text(template: Template) -> &'static str {
    match template {
        Template::Pytest => include_str!("../templates/pytest.toml"),
        Template::Npm => include_str!("../templates/npm.toml"),
        Template::Cargo => include_str!("../templates/cargo.toml"),
        Template::Generic => include_str!("../templates/generic.toml"),
    }
}

pub(crate) fn run(args: &InitArgs) -> anyhow::Result<u8> {
    let path = &args.config;
    let exists = std::fs::symlink_metadata(path).is_ok();
    if exists && !args.force {
        return Err(Exit::usage(format!(
            "{} exists; agentguard init never replaces a config without --force",
            path.display()
        ))
        .into());
    }
    if exists {
        std::fs::remove_file(path).with_context(|| format!("replacing {}", path.display()))?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.write_all(text(args.template).as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("writing {}", path.display()))?;
    crate::output::note(&format!(
        "agentguard: wrote {0}; edit the image and the hosts, then `agentguard doctor --config {0}` checks what it needs and `agentguard run --dry-run NAME` shows each command's engine line (docs/config.md)",
        path.display()
    ));
    Ok(exit::SUCCESS)
}

//! `agentguard policy check [--floor FILE] [--against OLD] NEW`: whether the policy file NEW
//! stays within the operator's floor, and what it adds to and removes from OLD, decided on the
//! policies' own terms (`agentguard_policy::Grant::beyond`) without running anything. Exit 0
//! when it stays within both, 1 when it goes beyond the floor or adds to OLD (each entry
//! named), 2 when a file does not load or neither is given.

use agentguard_config::load_policy;
use agentguard_policy::{Widening, special_networks};

use crate::args::CheckArgs;
use crate::exit::{self, Exit};
use crate::output;

pub(crate) fn run(args: &CheckArgs) -> anyhow::Result<u8> {
    if args.floor.is_none() && args.against.is_none() {
        return Err(Exit::usage(
            "`agentguard policy check` compares NEW with a floor (--floor FILE or AGENTGUARD_FLOOR) or with the policy it replaces (--against OLD); give at least one",
        )
        .into());
    }
    let new = load_policy(&args.new)?;
    let special = special_networks();
    let mut lines = Vec::new();
    let mut refused = false;
    if let Some(path) = &args.floor {
        let floor = load_policy(path)?;
        let beyond = new.grant.beyond(&floor.grant, &special);
        refused |= !beyond.is_empty();
        lines.push(match beyond.is_empty() {
            true => format!("within the floor {}", path.display()),
            false => format!(
                "BEYOND the floor {}: {} entr{} it does not grant",
                path.display(),
                beyond.len(),
                if beyond.len() == 1 { "y" } else { "ies" }
            ),
        });
        lines.extend(named("  beyond: ", &beyond));
    }
    if let Some(path) = &args.against {
        let old = load_policy(path)?;
        let added = new.grant.beyond(&old.grant, &special);
        let removed = old.grant.beyond(&new.grant, &special);
        refused |= !added.is_empty();
        lines.push(format!(
            "against {}: {} added, {} removed",
            path.display(),
            added.len(),
            removed.len()
        ));
        lines.extend(named("  + ", &added));
        lines.extend(named("  - ", &removed));
    }
    output::write_lines(lines)?;
    Ok(if refused {
        exit::FAILURE
    } else {
        exit::SUCCESS
    })
}

fn named<'a>(prefix: &'a str, entries: &'a [Widening]) -> impl Iterator<Item = String> + 'a {
    entries.iter().map(move |w| format!("{prefix}{w}"))
}

//! `agentguard policy suggest LOG... [--config FILE] [--command NAME] [--format toml|json]
//! [--wildcards] [--write]`: the config lines that would allow what verified logs show was
//! refused or observed (`learn.rs` reads, `plan.rs` decides), printed as TOML a reviewer can
//! paste or as JSON, and with `--write` applied to the config in place by `toml_edit`
//! (comments and order kept), then loaded again before it replaces the file.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::Context;
use toml_edit::{Array, DocumentMut, Item, Table, value};

use crate::args::{SuggestArgs, SuggestFormat};
use crate::exit::{self, Exit};
use crate::learn::{self, Learned, Seen};
use crate::plan::{self, Change, Plan, Value};

pub(crate) fn run(args: &SuggestArgs) -> anyhow::Result<u8> {
    let key = agentguard_config::key_from_env("--key-env", args.key_env.as_deref())?;
    let mut learned = learn::read(&args.logs, key.as_ref())?;
    let against = args.config.as_deref().map(Against::read).transpose()?;
    let mut unknown = Vec::new();
    if let Some(against) = &against {
        let names: BTreeSet<&str> = against.loaded.spec.commands().names().collect();
        learned.items.retain(|(owner, _), _| match owner {
            Some(name) if !names.contains(name.as_str()) => {
                unknown.push(name.clone());
                false
            }
            _ => true,
        });
    }
    let mut plan = plan::plan(
        &learned,
        args.command.as_deref(),
        against.as_ref().map(|a| &a.loaded.commands),
        args.wildcards,
    );
    unknown.dedup();
    for name in unknown {
        plan.notes.push(format!(
            "command {name} is in the logs but not in the config; skipped"
        ));
    }
    let short = against
        .as_ref()
        .map(|a| short_form_commands(&a.doc))
        .unwrap_or_default();
    match args.format {
        SuggestFormat::Toml => crate::output::write_lines([toml_text(&plan, &learned, &short)])?,
        SuggestFormat::Json => crate::output::write_lines([json_text(&plan, &learned)])?,
    }
    if args.write
        && let Some(against) = against
    {
        write(against.path, against.doc, &plan)?;
    }
    Ok(exit::SUCCESS)
}

/// The `--config` file, read once: what it loads as, and its text as `toml_edit` keeps it
/// (comments and order) for `--write`.
struct Against<'a> {
    path: &'a Path,
    loaded: agentguard_config::RunConfig,
    doc: DocumentMut,
}

impl<'a> Against<'a> {
    fn read(path: &'a Path) -> anyhow::Result<Against<'a>> {
        let refused = || {
            format!(
                "{} does not load, so nothing is compared with it or written to it",
                path.display()
            )
        };
        let text = agentguard_config::read(path).with_context(refused)?;
        let loaded = agentguard_config::from_text(&text, path).with_context(refused)?;
        let doc = text
            .parse()
            .with_context(|| format!("{} is not TOML that can be edited", path.display()))?;
        Ok(Against { path, loaded, doc })
    }
}

/// The commands written in the short form (`NAME = [argv]`), which `--write` turns into
/// tables with `argv`.
fn short_form_commands(doc: &DocumentMut) -> BTreeSet<String> {
    doc.get("commands")
        .and_then(Item::as_table_like)
        .map(|t| {
            t.iter()
                .filter(|(_, item)| item.is_array())
                .map(|(name, _)| name.to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn seen_comment(seen: &Seen) -> String {
    let times = if seen.count == 1 { "time" } else { "times" };
    format!("# seen {} {times}, last {}", seen.count, seen.last)
}

/// A key's complete value as a multi-line array, an added entry under its `# seen` comment.
fn array(change: &Change) -> Array {
    let mut out = Array::new();
    for entry in &change.entries {
        let mut item: toml_edit::Value = match &entry.value {
            Value::Text(text) => text.as_str().into(),
            Value::Port(port) => i64::from(*port).into(),
        };
        let prefix = match &entry.seen {
            Some(seen) => format!("\n    {}\n    ", seen_comment(seen)),
            None => "\n    ".to_owned(),
        };
        item.decor_mut().set_prefix(prefix);
        out.push_formatted(item);
    }
    out.set_trailing_comma(true);
    out.set_trailing("\n");
    out
}

/// The table `path` of `doc`, made (and a short-form command turned into a table) as needed.
fn table_at<'a>(doc: &'a mut DocumentMut, path: &[String]) -> anyhow::Result<&'a mut Table> {
    let mut table = doc.as_table_mut();
    for (depth, name) in path.iter().enumerate() {
        if table.get(name).is_some_and(Item::is_array) {
            // `install = ["pip", ...]` becomes `[commands.install]` with `argv`.
            let argv = table.remove(name).unwrap_or_default();
            let mut own = Table::new();
            own.insert("argv", argv);
            table.insert(name, Item::Table(own));
        }
        let entry = table.entry(name).or_insert_with(|| {
            let mut new = Table::new();
            new.set_implicit(depth + 1 < path.len());
            Item::Table(new)
        });
        if let Some(inline) = entry.as_inline_table_mut() {
            let converted = std::mem::take(inline).into_table();
            *entry = Item::Table(converted);
        }
        table = entry
            .as_table_mut()
            .with_context(|| format!("{} is not a table", path[..=depth].join(".")))?;
    }
    Ok(table)
}

/// Sets one key to its complete new value, under its table.
fn set(doc: &mut DocumentMut, change: &Change) -> anyhow::Result<()> {
    table_at(doc, &change.table)?.insert(&change.key, value(array(change)));
    Ok(())
}

fn toml_text(plan: &Plan, learned: &Learned, short: &BTreeSet<String>) -> String {
    let mut out = format!(
        "# agentguard policy suggest: {} events verified\n",
        learned.events
    );
    for note in &plan.notes {
        out.push_str(&format!("# note: {note}\n"));
    }
    if plan.changes.is_empty() {
        out.push_str("# nothing to suggest: the logs show no refused or observed request the config does not already allow\n");
    }
    for change in &plan.changes {
        if change.table.first().is_some_and(|t| t == "commands")
            && change.table.get(1).is_some_and(|n| short.contains(n))
        {
            out.push_str(&format!(
                "# note: commands.{} is written as NAME = [argv]; move its argv into this table as `argv = [...]` (--write does)\n",
                change.table[1]
            ));
        }
        let mut doc = DocumentMut::new();
        if set(&mut doc, change).is_ok() {
            out.push('\n');
            out.push_str(doc.to_string().trim_end());
            out.push('\n');
        }
    }
    if !plan.never.is_empty() {
        out.push_str("\n# never suggested:\n");
        for (owner, target, reason, seen) in &plan.never {
            let owner = owner.as_deref().unwrap_or("[egress]");
            out.push_str(&format!(
                "#   {owner}: {target} ({reason}), {}\n",
                seen_comment(seen).trim_start_matches("# ")
            ));
        }
    }
    out.trim_end().to_owned()
}

fn json_text(plan: &Plan, learned: &Learned) -> String {
    let seen = |s: &Seen| serde_json::json!({"count": s.count, "last": s.last});
    let changes: Vec<serde_json::Value> = plan
        .changes
        .iter()
        .map(|c| {
            let as_json = |v: &Value| match v {
                Value::Text(t) => serde_json::json!(t),
                Value::Port(p) => serde_json::json!(p),
            };
            let added: Vec<serde_json::Value> = c
                .entries
                .iter()
                .filter_map(|e| e.seen.as_ref().map(|s| (e, s)))
                .map(|(e, s)| {
                    let mut v = seen(s);
                    v["value"] = as_json(&e.value);
                    v
                })
                .collect();
            serde_json::json!({
                "table": c.table.join("."),
                "key": c.key,
                "value": c.entries.iter().map(|e| as_json(&e.value)).collect::<Vec<_>>(),
                "added": added,
            })
        })
        .collect();
    let never: Vec<serde_json::Value> = plan
        .never
        .iter()
        .map(|(owner, target, reason, s)| {
            let mut v = seen(s);
            v["command"] = serde_json::json!(owner);
            v["target"] = serde_json::json!(target);
            v["reason"] = serde_json::json!(reason);
            v
        })
        .collect();
    serde_json::json!({
        "events": learned.events,
        "changes": changes,
        "never_suggested": never,
        "notes": plan.notes,
    })
    .to_string()
}

/// Applies the plan to `path`: the new text must load as a config before it replaces the
/// file (written beside it, then renamed over it, with its permissions).
fn write(path: &Path, mut doc: DocumentMut, plan: &Plan) -> anyhow::Result<()> {
    if plan.changes.is_empty() {
        crate::output::note(&format!(
            "agentguard: nothing to write to {}",
            path.display()
        ));
        return Ok(());
    }
    for change in &plan.changes {
        set(&mut doc, change)?;
    }
    let new = doc.to_string();
    agentguard_config::from_text(&new, path).map_err(|e| {
        Exit::failure(format!(
            "{}: the suggested change does not load ({e:#}); the file was not changed",
            path.display()
        ))
    })?;
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = path.with_file_name(format!(".{file_name}.suggest"));
    std::fs::write(&temp, new).with_context(|| format!("writing {}", temp.display()))?;
    if let Ok(meta) = std::fs::metadata(path) {
        std::fs::set_permissions(&temp, meta.permissions())?;
    }
    std::fs::rename(&temp, path).with_context(|| format!("replacing {}", path.display()))?;
    crate::output::note(&format!(
        "agentguard: wrote {} changed keys to {}",
        plan.changes.len(),
        path.display()
    ));
    Ok(())
}

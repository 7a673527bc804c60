//! The plan of `policy suggest`, without logs or a config file.

use super::*;

fn seen(count: u64) -> Seen {
    Seen {
        count,
        last: format!("2026-12-05T00:00:0{count}.000Z"),
    }
}

fn learned(items: &[(Option<&str>, Item, u64)]) -> Learned {
    let mut out = Learned::default();
    for (owner, item, count) in items {
        out.items
            .insert((owner.map(str::to_owned), item.clone()), seen(*count));
    }
    out
}

fn values(change: &Change) -> Vec<Value> {
    change.entries.iter().map(|e| e.value.clone()).collect()
}

fn text(s: &str) -> Value {
    Value::Text(s.to_owned())
}

#[test]
fn without_a_config_every_name_is_exact_and_ports_beyond_443_are_added() {
    let target = |h: &str, p| Item::Target(h.to_owned(), p);
    let plan = plan(
        &learned(&[
            (Some("install"), target("a.pkgs.example.test", 443), 2),
            (Some("install"), target("b.pkgs.example.test", 443), 5),
            (Some("install"), target("c.pkgs.example.test", 8443), 1),
            (Some("other"), target("x.example.test", 443), 1),
        ]),
        Some("install"),
        None,
        false,
    );
    assert_eq!(plan.changes.len(), 2, "{plan:?}");
    assert_eq!(plan.changes[0].table, ["commands", "install"]);
    // The most seen first; `other` was filtered out by --command.
    assert_eq!(
        values(&plan.changes[0]),
        [
            text("b.pkgs.example.test"),
            text("a.pkgs.example.test"),
            text("c.pkgs.example.test")
        ]
    );
    assert_eq!(plan.changes[1].key, "allow_ports");
    assert_eq!(
        values(&plan.changes[1]),
        [Value::Port(443), Value::Port(8443)]
    );
    assert_eq!(
        plan.changes[1].entries[0].seen, None,
        "443 is kept, not added"
    );
}

#[test]
fn wildcards_need_three_siblings_under_a_parent_of_two_labels() {
    let target = |h: &str| Item::Target(h.to_owned(), 443);
    let plan = plan(
        &learned(&[
            (None, target("a.pkgs.example.test"), 1),
            (None, target("b.pkgs.example.test"), 2),
            (None, target("c.pkgs.example.test"), 3),
            (None, target("one.example.test"), 1),
            (None, target("two.example.test"), 1),
            (None, target("a.test"), 1),
            (None, target("b.test"), 1),
            (None, target("c.test"), 1),
        ]),
        None,
        None,
        true,
    );
    let change = &plan.changes[0];
    assert_eq!(
        (change.table.as_slice(), change.key.as_str()),
        (&["egress".to_owned()][..], "allow")
    );
    let got = values(change);
    assert!(got.contains(&text("*.pkgs.example.test")), "{got:?}");
    assert_eq!(
        change
            .entries
            .iter()
            .find(|e| e.value == text("*.pkgs.example.test"))
            .unwrap()
            .seen
            .as_ref()
            .unwrap()
            .count,
        6
    );
    // Two siblings stay exact; `*.test` is never proposed.
    assert!(
        got.contains(&text("one.example.test")) && got.contains(&text("a.test")),
        "{got:?}"
    );
    assert!(
        !got.iter()
            .any(|v| *v == text("*.test") || *v == text("*.example.test")),
        "{got:?}"
    );
}

#[test]
fn a_name_seen_non_public_is_never_suggested_and_routes_add_what_they_lack() {
    let plan = plan(
        &learned(&[
            (
                Some("install"),
                Item::Target("private.example.test".into(), 443),
                1,
            ),
            (
                Some("other"),
                Item::Never(
                    "private.example.test:443".into(),
                    "non_public_address".into(),
                ),
                1,
            ),
            (Some("install"), Item::Method("gh".into(), "POST".into()), 2),
            (Some("install"), Item::Method("gh".into(), "GET".into()), 2),
            (
                Some("install"),
                Item::Path("gh".into(), "/repos/acme/".into()),
                1,
            ),
        ]),
        None,
        None,
        false,
    );
    assert!(
        !plan.changes.iter().any(|c| c.key == "egress_allow"),
        "{plan:?}"
    );
    assert_eq!(plan.never.len(), 1);
    let methods = plan.changes.iter().find(|c| c.key == "methods").unwrap();
    assert_eq!(methods.table, ["routes", "gh"]);
    // The defaults GET and HEAD are kept, POST added; GET was allowed already.
    assert_eq!(values(methods), [text("GET"), text("HEAD"), text("POST")]);
    let paths = plan.changes.iter().find(|c| c.key == "paths").unwrap();
    assert_eq!(values(paths), [text("/repos/acme/")]);
}

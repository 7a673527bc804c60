//! "Did you mean": an unknown key's closest known key, added to the parser's message when one
//! is close (at most a third of its letters differ, or two), so a typo says its fix.

/// `message` with `did you mean `KEY`?` on a line of its own when the message is serde's
/// `unknown field `X`, expected one of `a`, `b`, ...` (or `expected `a` or `b``) and a known
/// key is close to X; otherwise `message` unchanged.
pub(crate) fn with_hint(message: String) -> String {
    let Some(rest) = message.split("unknown field `").nth(1) else {
        return message;
    };
    let Some((unknown, known)) = rest.split_once('`') else {
        return message;
    };
    let candidates = known.split('`').skip(1).step_by(2);
    let best = candidates
        .map(|k| (distance(unknown, k), k))
        .filter(|(d, k)| *d <= (k.chars().count() / 3).max(2))
        .min_by_key(|(d, _)| *d);
    match best {
        Some((_, key)) => format!("{message}\ndid you mean `{key}`?"),
        None => message,
    }
}

/// The Levenshtein distance of `a` and `b`, by characters.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_close_key_is_named_and_a_far_one_is_not() {
        let serde = |x: &str| {
            format!("unknown field `{x}`, expected one of `image`, `timeout`, `workspace_mode`")
        };
        assert!(with_hint(serde("timout")).ends_with("\ndid you mean `timeout`?"));
        assert!(with_hint(serde("workspace_mod")).ends_with("did you mean `workspace_mode`?"));
        assert!(with_hint(serde("imgae")).ends_with("did you mean `image`?"));
        assert_eq!(with_hint(serde("zzzzzz")), serde("zzzzzz"));
        let two = "unknown field `argc`, expected `argv` or `params`".to_owned();
        assert!(with_hint(two).ends_with("did you mean `argv`?"));
        assert_eq!(with_hint("invalid type".into()), "invalid type");
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("", "ab"), 2);
    }
}

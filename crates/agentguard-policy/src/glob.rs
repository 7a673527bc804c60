//! A `path` param's `glob`: which workspace paths the value may name, and what a tool's
//! schema lists (pure: the walk that lists the matches is the container crate's).
//!
//! The syntax is the usual one, on `/`-separated relative paths: `*` matches within one
//! component (never a `/`), `?` one character of a component, `**` as a whole component zero
//! or more components; everything else is itself. Character classes and alternatives
//! (`[...]`, `{...}`) and a backslash are refused at load, so a glob means one thing.

/// One component of a glob.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    /// `**`: any number of components.
    Any,
    /// A component with `*` and `?`.
    Component(Vec<Token>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    Star,
    One,
    Char(char),
}

/// A checked glob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    text: String,
    parts: Vec<Part>,
}

impl Glob {
    /// Parses `text`: relative, no empty, `.` or `..` component, no `[`, `{` or `\`.
    pub fn parse(text: &str) -> Result<Glob, String> {
        if text.is_empty() || text.starts_with('/') {
            return Err(
                "a glob is relative to the workspace (no leading `/`), like \"tests/**/test_*.py\""
                    .into(),
            );
        }
        if let Some(c) = text
            .chars()
            .find(|c| matches!(c, '[' | ']' | '{' | '}' | '\\'))
        {
            return Err(format!(
                "{c:?} is not supported: use `*`, `?` and `**` only"
            ));
        }
        let mut parts = Vec::new();
        for component in text.split('/') {
            match component {
                "" | "." | ".." => {
                    return Err("a glob has no empty, `.` or `..` component".into());
                }
                "**" => parts.push(Part::Any),
                c if c.contains("**") => {
                    return Err(format!("{c:?}: `**` stands alone as a whole component"));
                }
                c => parts.push(Part::Component(
                    c.chars()
                        .map(|ch| match ch {
                            '*' => Token::Star,
                            '?' => Token::One,
                            other => Token::Char(other),
                        })
                        .collect(),
                )),
            }
        }
        Ok(Glob {
            text: text.to_owned(),
            parts,
        })
    }

    /// The glob as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// True when the whole relative `path` matches.
    pub fn matches(&self, path: &str) -> bool {
        let components: Vec<&str> = path.split('/').collect();
        parts_match(&self.parts, &components)
    }

    /// True when some path below the folder `prefix` could match (a walk may skip the rest).
    pub fn may_match_below(&self, prefix: &str) -> bool {
        let components: Vec<&str> = prefix.split('/').filter(|c| !c.is_empty()).collect();
        prefix_match(&self.parts, &components)
    }
}

fn parts_match(parts: &[Part], path: &[&str]) -> bool {
    match parts.split_first() {
        None => path.is_empty(),
        Some((Part::Any, rest)) => (0..=path.len()).any(|i| parts_match(rest, &path[i..])),
        Some((Part::Component(tokens), rest)) => match path.split_first() {
            Some((first, tail)) => component_match(tokens, first) && parts_match(rest, tail),
            None => false,
        },
    }
}

/// True when `path` (a folder) can be the start of a match.
fn prefix_match(parts: &[Part], path: &[&str]) -> bool {
    if path.is_empty() {
        return true;
    }
    match parts.split_first() {
        None => false,
        Some((Part::Any, _)) => true,
        Some((Part::Component(tokens), rest)) => {
            component_match(tokens, path[0]) && prefix_match(rest, &path[1..])
        }
    }
}

fn component_match(tokens: &[Token], text: &str) -> bool {
    let chars: Vec<char> = text.chars().collect();
    // Iterative `*` matching with one backtrack point: linear in practice, never exponential.
    let (mut t, mut c) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while c < chars.len() {
        match tokens.get(t) {
            Some(Token::Star) => {
                star = Some((t, c));
                t += 1;
            }
            Some(Token::One) => {
                t += 1;
                c += 1;
            }
            Some(Token::Char(ch)) if *ch == chars[c] => {
                t += 1;
                c += 1;
            }
            _ => match star {
                Some((st, sc)) => {
                    t = st + 1;
                    c = sc + 1;
                    star = Some((st, sc + 1));
                }
                None => return false,
            },
        }
    }
    tokens[t..].iter().all(|tok| *tok == Token::Star)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_whole_paths() {
        let g = Glob::parse("tests/**/test_*.py").unwrap();
        for yes in [
            "tests/test_a.py",
            "tests/unit/test_b.py",
            "tests/a/b/c/test_.py",
        ] {
            assert!(g.matches(yes), "{yes}");
        }
        for no in [
            "tests/test_a.pyc",
            "src/tests/test_a.py",
            "tests/unit/a_test.py",
            "tests",
            "tests/test_a.py/x",
        ] {
            assert!(!g.matches(no), "{no}");
        }
        let one = Glob::parse("src/?.rs").unwrap();
        assert!(one.matches("src/a.rs") && !one.matches("src/ab.rs"));
        let star = Glob::parse("*").unwrap();
        assert!(star.matches("a") && !star.matches("a/b"));
        assert!(Glob::parse("a*b*c").unwrap().matches("aXXbYYbZc"));
    }

    #[test]
    fn a_walk_is_pruned_where_nothing_can_match() {
        let g = Glob::parse("tests/**/test_*.py").unwrap();
        assert!(g.may_match_below("tests") && g.may_match_below("tests/a/b"));
        assert!(!g.may_match_below("src") && !g.may_match_below("node_modules/x"));
        let flat = Glob::parse("tests/test_*.py").unwrap();
        assert!(flat.may_match_below("tests") && !flat.may_match_below("tests/unit"));
    }

    #[test]
    fn ambiguous_globs_are_refused() {
        for bad in [
            "", "/abs", "a//b", "a/../b", "./a", "[ab]", "{a,b}", "a\\b", "a**b",
        ] {
            assert!(Glob::parse(bad).is_err(), "{bad:?}");
        }
    }
}

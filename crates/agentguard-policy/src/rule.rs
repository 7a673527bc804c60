//! The rules a param value can break: one stable code each, which every refusal names
//! (docs/params.md lists them; tidy checks the two agree).

use std::fmt;

macro_rules! rules {
    ($($variant:ident => $code:literal, $doc:literal;)*) => {
        /// The rule that refused a value; its code is stable (docs/params.md lists them).
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[non_exhaustive]
        pub enum Rule {
            $(#[doc = $doc] $variant,)*
        }

        impl Rule {
            /// Every rule, in the order docs/params.md lists them.
            pub const ALL: &[Rule] = &[$(Rule::$variant,)*];

            /// The stable code.
            pub const fn code(self) -> &'static str {
                match self {
                    $(Rule::$variant => $code,)*
                }
            }
        }
    };
}

rules! {
    Missing => "missing", "A required param was not given.";
    Unknown => "unknown", "A param the command does not declare.";
    Repeated => "repeated", "The same param given twice.";
    WrongType => "wrong_type", "A JSON value of another type than the schema's.";
    NotUtf8 => "not_utf8", "Bytes that are not UTF-8.";
    TooLong => "too_long", "Longer than the type allows.";
    Nul => "nul", "A NUL character.";
    Newline => "newline", "A line break.";
    Control => "control", "A control character (C0, DEL, C1).";
    Hidden => "hidden", "A character that hides or reorders text (bidi, zero-width, format).";
    Option => "option", "A whole argv element beginning with `-`.";
    LookAlike => "look_alike", "A character that looks like `-`, `/`, `.` or `\\`.";
    NotInEnum => "not_in_enum", "Not one of an enum's values.";
    NotDecimal => "not_decimal", "Not a plain decimal integer (a sign, a space, a fraction, an exponent, hex).";
    LeadingZero => "leading_zero", "An integer with a leading zero.";
    OutOfRange => "out_of_range", "An integer outside `[min, max]`.";
    Absolute => "absolute", "A path beginning with `/`.";
    EmptyComponent => "empty_component", "An empty path, or a path with an empty component (`a//b`, `a/`).";
    DotComponent => "dot_component", "A `.` component.";
    Traversal => "traversal", "A `..` component.";
    Encoded => "encoded", "Percent-encoding or a backslash in a path (never decoded).";
    Outside => "outside", "A path outside the param's `under` folder.";
    NotMatched => "not_matched", "A path its param's `glob` does not match.";
    NoMatch => "no_match", "A string its pattern does not match as a whole.";
    Symlink => "symlink", "A path with a symlink along it (checked on the host).";
    NotFound => "not_found", "A path that does not exist (checked on the host).";
    WrongKind => "wrong_kind", "A path that is not the param's kind (checked on the host).";
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// A value refused by a rule: what was wrong, in words, for the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refused {
    /// The rule.
    pub(crate) rule: Rule,
    /// Why, in words.
    pub(crate) why: String,
}

pub(crate) fn refuse(rule: Rule, why: impl Into<String>) -> Refused {
    Refused {
        rule,
        why: why.into(),
    }
}

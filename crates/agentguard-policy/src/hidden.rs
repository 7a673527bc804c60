//! The one table of characters that must never reach a person as they are: every character
//! that Unicode says hides, reorders or controls text. Decided by Unicode's own property data
//! (ICU's compiled tables), never by a hand-kept list of ranges:
//!
//! - General_Category Cc (C0, DEL, C1 controls) and Cf (format characters, U+FFF9-FFFB
//!   interlinear annotations among them), Zl and Zp (U+2028, U+2029, which some readers take
//!   as line breaks);
//! - Default_Ignorable_Code_Point (zero-width characters, the soft hyphen, U+180E, U+206A-206F,
//!   U+1D173-1D17A, variation selectors U+FE00-FE0F and U+E0100-E01EF, tag characters: each can
//!   smuggle text a reader does not see);
//! - Bidi_Control (U+061C, U+200E-200F, U+202A-202E, U+2066-2069).
//!
//! The audit log's `Escaped` escapes these characters; the MCP presenter removes them, and a
//! command param refuses them.

use icu_properties::props::{BidiControl, DefaultIgnorableCodePoint, GeneralCategory};
use icu_properties::{CodePointMapData, CodePointSetData};

/// True for a character that hides, reorders or controls text (see the module docs).
pub fn is_hidden(c: char) -> bool {
    // ASCII printable characters are by far the most common: answer them without a lookup.
    if matches!(c, ' '..='~') {
        return false;
    }
    matches!(
        CodePointMapData::<GeneralCategory>::new().get(c),
        GeneralCategory::Control
            | GeneralCategory::Format
            | GeneralCategory::LineSeparator
            | GeneralCategory::ParagraphSeparator
    ) || CodePointSetData::new::<DefaultIgnorableCodePoint>().contains(c)
        || CodePointSetData::new::<BidiControl>().contains(c)
}

#[cfg(test)]
mod tests {
    use super::is_hidden;
    use icu_properties::props::{BidiControl, DefaultIgnorableCodePoint, GeneralCategory};
    use icu_properties::{CodePointMapData, CodePointSetData};

    /// Every code point: hidden exactly when one of the properties says so.
    #[test]
    fn every_code_point_is_decided_by_the_properties() {
        let gc = CodePointMapData::<GeneralCategory>::new();
        let di = CodePointSetData::new::<DefaultIgnorableCodePoint>();
        let bidi = CodePointSetData::new::<BidiControl>();
        let mut hidden = 0;
        for c in (0..=0x10_ffff_u32).filter_map(char::from_u32) {
            let want = di.contains(c)
                || bidi.contains(c)
                || matches!(
                    gc.get(c),
                    GeneralCategory::Control
                        | GeneralCategory::Format
                        | GeneralCategory::LineSeparator
                        | GeneralCategory::ParagraphSeparator
                );
            assert_eq!(is_hidden(c), want, "U+{:04X}", u32::from(c));
            hidden += usize::from(want);
        }
        // The properties are not empty tables (DI alone covers U+E0000-E0FFF).
        assert!(hidden > 4096, "{hidden}");
    }

    /// The characters that survived the hand-written list, each named.
    #[test]
    fn the_characters_that_survived_before_are_hidden() {
        let ranges: &[(u32, u32)] = &[
            (0x061c, 0x061c),
            (0xfe00, 0xfe0f),
            (0xe0100, 0xe01ef),
            (0x00ad, 0x00ad),
            (0x180e, 0x180e),
            (0x206a, 0x206f),
            (0xfff9, 0xfffb),
            (0x1d173, 0x1d17a),
            (0x200b, 0x200f),
            (0x202a, 0x202e),
            (0x2066, 0x2069),
            (0xe0000, 0xe007f),
            (0x2028, 0x2029),
            (0x0000, 0x001f),
            (0x007f, 0x009f),
        ];
        for &(first, last) in ranges {
            for c in (first..=last).filter_map(char::from_u32) {
                assert!(is_hidden(c), "U+{:04X}", u32::from(c));
            }
        }
        for c in ['a', ' ', '~', 'é', 'ü', '✓', '中', 'ß', '\u{1f600}'] {
            assert!(!is_hidden(c), "{c:?}");
        }
    }
}

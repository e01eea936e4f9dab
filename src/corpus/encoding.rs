//! Turning a file's bytes into text the way ripgrep treats files: a NUL byte marks a binary file
//! (skipped, not parsed as a table of replacement characters), a byte-order mark names the
//! encoding (UTF-8, UTF-16LE/BE), and text that is not UTF-8 is legacy 8-bit text whose encoding
//! is guessed (chardetng, the detector Firefox uses) and transcoded (encoding_rs), so `café` in a
//! Latin-1 file stays `café`. What was transcoded, from what, goes into the load report.

use std::borrow::Cow;

use encoding_rs::{Encoding, UTF_16BE, UTF_16LE, UTF_8};

/// A file's bytes as text, or why they are not text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded<'a> {
    Text {
        text: Cow<'a, str>,
        /// The encoding the bytes were transcoded from; `None` for UTF-8 (BOM or not).
        transcoded_from: Option<&'static str>,
        /// Sequences the encoding could not map, replaced by U+FFFD.
        replaced: bool,
    },
    /// A NUL byte at this offset and no UTF-16 byte-order mark.
    Binary { nul_at: usize },
}

/// Decodes `bytes` (see the module notes). Never fails: every byte sequence is either text in
/// some encoding or binary.
pub fn decode(bytes: &[u8]) -> Decoded<'_> {
    if let Some((encoding, bom_length)) = Encoding::for_bom(bytes) {
        let body = &bytes[bom_length..];
        if encoding == UTF_8 {
            return utf8_or_legacy(body);
        }
        let (text, replaced) = encoding.decode_without_bom_handling(body);
        return Decoded::Text {
            text,
            transcoded_from: Some(encoding.name()),
            replaced,
        };
    }
    if let Some(nul_at) = memchr::memchr(0, bytes) {
        // UTF-16 without a BOM would also hold NULs (ASCII's high bytes); ripgrep, too, reads
        // such files as binary unless told otherwise.
        return Decoded::Binary { nul_at };
    }
    utf8_or_legacy(bytes)
}

fn utf8_or_legacy(bytes: &[u8]) -> Decoded<'_> {
    if let Ok(text) = std::str::from_utf8(bytes) {
        return Decoded::Text {
            text: Cow::Borrowed(text),
            transcoded_from: None,
            replaced: false,
        };
    }
    let mut detector = chardetng::EncodingDetector::new();
    detector.feed(bytes, true);
    // No top-level domain hint; UTF-8 is not allowed as a guess, since the bytes are not UTF-8.
    let encoding = detector.guess(None, false);
    let (text, replaced) = encoding.decode_without_bom_handling(bytes);
    Decoded::Text {
        text,
        transcoded_from: Some(encoding.name()),
        replaced,
    }
}

/// Whether a name returned in [`Decoded::Text::transcoded_from`] is a UTF-16 form.
pub fn is_utf16(name: &str) -> bool {
    name == UTF_16LE.name() || name == UTF_16BE.name()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(decoded: Decoded<'_>) -> (String, Option<&'static str>) {
        match decoded {
            Decoded::Text {
                text,
                transcoded_from,
                ..
            } => (text.into_owned(), transcoded_from),
            Decoded::Binary { nul_at } => panic!("binary at {nul_at}"),
        }
    }

    #[test]
    fn utf8_with_or_without_bom_is_borrowed_text() {
        assert_eq!(text(decode("a,b\ncafé,1\n".as_bytes())).0, "a,b\ncafé,1\n");
        let with_bom = [&[0xEF, 0xBB, 0xBF][..], "x,y\n".as_bytes()].concat();
        assert_eq!(text(decode(&with_bom)), ("x,y\n".to_string(), None));
    }

    #[test]
    fn utf16_with_a_bom_is_transcoded() {
        let mut le = vec![0xFF, 0xFE];
        le.extend(
            "name,city\nAnna,café\n"
                .encode_utf16()
                .flat_map(u16::to_le_bytes),
        );
        assert_eq!(
            text(decode(&le)),
            ("name,city\nAnna,café\n".to_string(), Some("UTF-16LE"))
        );
        let mut be = vec![0xFE, 0xFF];
        be.extend("é".encode_utf16().flat_map(u16::to_be_bytes));
        assert_eq!(text(decode(&be)), ("é".to_string(), Some("UTF-16BE")));
        assert!(is_utf16("UTF-16BE") && !is_utf16("windows-1252"));
    }

    #[test]
    fn latin1_text_is_detected_and_transcoded() {
        // "city,name\nParis,café crème\nLyon,hôtel\n" in ISO-8859-1 (which WHATWG reads as
        // windows-1252).
        let bytes = b"city,name\nParis,caf\xe9 cr\xe8me\nLyon,h\xf4tel de ville\n";
        let (decoded, from) = text(decode(bytes));
        assert_eq!(
            decoded,
            "city,name\nParis,café crème\nLyon,hôtel de ville\n"
        );
        assert_eq!(from, Some("windows-1252"));
    }

    #[test]
    fn a_nul_byte_makes_a_file_binary() {
        let bytes = [b'P', b'K', 3, 4, 0, 0, 20];
        assert_eq!(decode(&bytes), Decoded::Binary { nul_at: 4 });
    }
}

//! `-e`: escape sequences in prompts, as llama.cpp's command line
//! processes them.

/// `s` with `\n`, `\r`, `\t`, `\'`, `\"`, `\\` and `\xHH` (two hex
/// digits, one byte: a byte that does not make UTF-8 with its neighbours
/// becomes U+FFFD) replaced by what they stand for. Any other backslash,
/// and a trailing one, stays as it is.
pub fn unescape(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b != b'\\' || i + 1 == bytes.len() {
            out.push(b);
            i += 1;
            continue;
        }
        let replaced = match bytes[i + 1] {
            b'n' => Some(b'\n'),
            b'r' => Some(b'\r'),
            b't' => Some(b'\t'),
            b'\'' => Some(b'\''),
            b'"' => Some(b'"'),
            b'\\' => Some(b'\\'),
            _ => None,
        };
        if let Some(r) = replaced {
            out.push(r);
            i += 2;
            continue;
        }
        let hex = bytes
            .get(i + 2..i + 4)
            .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i + 1], hex) {
            (b'x', Some(v)) => {
                out.push(v);
                i += 4;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

#[cfg(test)]
mod tests {
    use super::unescape;

    #[test]
    fn sequences_become_characters() {
        assert_eq!(unescape(r#"a\nb\tc\\d\'e\"f\rg"#), "a\nb\tc\\d'e\"f\rg");
        assert_eq!(unescape(r"\x41\x7e"), "A~");
        assert_eq!(unescape(r"\xe2\x82\xac"), "€");
    }

    #[test]
    fn other_backslashes_stay() {
        assert_eq!(unescape(r"\q \x4 \xzz \x+f end\"), r"\q \x4 \xzz \x+f end\");
        assert_eq!(unescape("plain é"), "plain é");
        assert_eq!(unescape(r"\xff"), "\u{fffd}");
    }
}

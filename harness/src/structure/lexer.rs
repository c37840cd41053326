//! A Rust lexer just wide enough for the structure checks: it drops
//! comments, byte-string, raw-string and character literals and keeps
//! identifiers, punctuation and plain strings (as one token, quotes
//! included: `#[path = "x.rs"]` needs them), each with its line. Lifetimes
//! (`'a`) are dropped like literals. Nothing here needs the code to build.

/// One token: an identifier (keywords included) or one punctuation
/// character, `::` kept as one token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub text: String,
    /// 1-based line of the token's first character.
    pub line: usize,
}

impl Token {
    pub fn is(&self, text: &str) -> bool {
        self.text == text
    }

    pub fn is_ident(&self) -> bool {
        self.text
            .chars()
            .next()
            .is_some_and(|c| c.is_alphabetic() || c == '_')
    }
}

/// The tokens of `src`, comments and literals left out.
pub fn tokens(src: &str) -> Vec<Token> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i = skip_block_comment(&chars, i, &mut line);
        } else if c == '"' {
            let start_line = line;
            let end = skip_string(&chars, i + 1, &mut line);
            // A string that is a path from this crate (serde's `with =
            // "crate::a::f"`) names an item as code does.
            let text: String = chars[i + 1..end.saturating_sub(1).max(i + 1)]
                .iter()
                .collect();
            out.push(Token {
                text: format!("\"{text}\""),
                line: start_line,
            });
            out.extend(path_string(&text, start_line));
            i = end;
        } else if let Some(end) = raw_string_start(&chars, i) {
            i = skip_raw_string(&chars, end, &mut line);
        } else if c == 'b' && next == Some('"') {
            i = skip_string(&chars, i + 2, &mut line);
        } else if c == 'b' && next == Some('\'') {
            i = skip_char(&chars, i + 1);
        } else if c == '\'' {
            i = skip_char(&chars, i);
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Token {
                text: chars[start..i].iter().collect(),
                line,
            });
        } else if c == ':' && next == Some(':') {
            out.push(Token {
                text: "::".into(),
                line,
            });
            i += 2;
        } else {
            out.push(Token {
                text: c.to_string(),
                line,
            });
            i += 1;
        }
    }
    out
}

/// The tokens of a string literal's text when it is a path starting at
/// `crate`, `super` or `self` (`crate::compare::nan::f64`); none otherwise.
fn path_string(text: &str, line: usize) -> Vec<Token> {
    let segs: Vec<&str> = text.split("::").collect();
    let ident = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_');
    if segs.len() < 2
        || !matches!(segs[0], "crate" | "super" | "self")
        || !segs.iter().all(|s| ident(s))
    {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (k, s) in segs.iter().enumerate() {
        if k > 0 {
            out.push(Token {
                text: "::".into(),
                line,
            });
        }
        out.push(Token {
            text: s.to_string(),
            line,
        });
    }
    out
}

/// Past a `/* ... */` comment (nested, as Rust's are) starting at `i`.
fn skip_block_comment(chars: &[char], mut i: usize, line: &mut usize) -> usize {
    let mut depth = 0;
    while i < chars.len() {
        if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
            depth += 1;
            i += 2;
        } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            if chars[i] == '\n' {
                *line += 1;
            }
            i += 1;
        }
    }
    i
}

/// Past the closing quote of a string whose contents start at `i`.
fn skip_string(chars: &[char], mut i: usize, line: &mut usize) -> usize {
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            '\n' => {
                *line += 1;
                i += 1;
            }
            _ => i += 1,
        }
    }
    i
}

/// Where the opening `"` of a raw string (`r"`, `r#"`, `br##"`, ...) at `i`
/// ends, as (index after the quote, hashes); None if `i` starts none.
fn raw_string_start(chars: &[char], i: usize) -> Option<(usize, usize)> {
    if i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_') {
        return None;
    }
    let mut j = i;
    if chars.get(j) == Some(&'b') {
        j += 1;
    }
    if chars.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let mut hashes = 0;
    while chars.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    (chars.get(j) == Some(&'"')).then_some((j + 1, hashes))
}

fn skip_raw_string(chars: &[char], (mut i, hashes): (usize, usize), line: &mut usize) -> usize {
    while i < chars.len() {
        if chars[i] == '"' && (1..=hashes).all(|k| chars.get(i + k) == Some(&'#')) {
            return i + 1 + hashes;
        }
        if chars[i] == '\n' {
            *line += 1;
        }
        i += 1;
    }
    i
}

/// Past a character literal or a lifetime starting with the `'` at `i`.
fn skip_char(chars: &[char], i: usize) -> usize {
    // 'x', '\n', '\u{1F600}', '\'' are literals; 'a (no closing quote
    // right after one character) is a lifetime or a label.
    if chars.get(i + 1) == Some(&'\\') {
        let mut j = i + 2;
        if chars.get(j) == Some(&'\'') || chars.get(j) == Some(&'\\') {
            j += 1;
        }
        while j < chars.len() && chars[j] != '\'' {
            j += 1;
        }
        return j + 1;
    }
    if chars.get(i + 2) == Some(&'\'') {
        return i + 3;
    }
    let mut j = i + 1;
    while j < chars.len() && (chars[j].is_alphanumeric() || chars[j] == '_') {
        j += 1;
    }
    j
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(src: &str) -> Vec<String> {
        tokens(src).into_iter().map(|t| t.text).collect()
    }

    #[test]
    fn comments_and_literals_are_dropped() {
        let src = "use a::b; // use c::d;\n/* use /* e */ f; */ let s = \"use g;\"; \
                   let r = r#\"use \"h\";\"#; let q = '\"'; fn f<'a>(x: &'a u8) {}";
        let t = texts(src);
        assert!(t.contains(&"a".to_string()) && t.contains(&"::".to_string()));
        for gone in ["c", "d", "e", "g", "h"] {
            assert!(!t.contains(&gone.to_string()), "{gone} survived: {t:?}");
        }
        assert!(t.contains(&"x".to_string()) && t.contains(&"u8".to_string()));
    }

    #[test]
    fn a_path_in_a_string_is_a_path() {
        assert_eq!(
            texts(r#"#[serde(with = "crate::a::f")] x "a::b""#),
            [
                "#",
                "[",
                "serde",
                "(",
                "with",
                "=",
                "\"crate::a::f\"",
                "crate",
                "::",
                "a",
                "::",
                "f",
                ")",
                "]",
                "x",
                "\"a::b\""
            ]
        );
    }

    #[test]
    fn lines_are_counted_through_comments_and_strings() {
        let toks = tokens("a\n/* x\n y */ b \"s\nt\" c\n'\\n' d");
        let lines: Vec<(String, usize)> = toks
            .into_iter()
            .filter(|t| !t.text.starts_with('"'))
            .map(|t| (t.text, t.line))
            .collect();
        assert_eq!(
            lines,
            vec![
                ("a".into(), 1),
                ("b".into(), 3),
                ("c".into(), 4),
                ("d".into(), 5)
            ]
        );
    }
}

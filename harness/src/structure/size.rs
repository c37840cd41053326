//! Lines of code of a source file: lines with something other than
//! whitespace outside comments, the lines of `#[cfg(test)]` items left out.
//! Rust and GLSL share the comment syntax (`//`, `/* */`).

use super::lexer::tokens;

/// The lines of code of `src`; `rust` leaves `#[cfg(test)]` items out.
pub fn lines_of_code(src: &str, rust: bool) -> usize {
    let mut code = code_lines(src);
    if rust {
        for (first, last) in test_item_lines(src) {
            for line in first..=last {
                if let Some(c) = code.get_mut(line - 1) {
                    *c = false;
                }
            }
        }
    }
    code.iter().filter(|&&c| c).count()
}

/// For each line (0-based), whether it holds code.
fn code_lines(src: &str) -> Vec<bool> {
    let chars: Vec<char> = src.chars().collect();
    let mut lines = vec![false];
    let mut i = 0;
    let mut block = 0usize;
    let mut in_string = false;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '\n' {
            lines.push(false);
            i += 1;
            continue;
        }
        if block > 0 {
            if c == '*' && next == Some('/') {
                block -= 1;
                i += 2;
            } else if c == '/' && next == Some('*') {
                block += 1;
                i += 2;
            } else {
                i += 1;
            }
            continue;
        }
        if in_string {
            *lines.last_mut().expect("one line") |= !c.is_whitespace();
            if c == '\\' {
                i += 2;
                continue;
            }
            if c == '"' {
                in_string = false;
            }
            i += 1;
            continue;
        }
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            continue;
        }
        if c == '/' && next == Some('*') {
            block = 1;
            i += 2;
            continue;
        }
        if c == '"' {
            in_string = true;
        }
        if !c.is_whitespace() {
            *lines.last_mut().expect("one line") = true;
        }
        i += 1;
    }
    lines
}

/// The first and last lines (1-based) of every item under a
/// `#[cfg(test)]` (or `#[cfg(all(test, ..))]`) attribute.
fn test_item_lines(src: &str) -> Vec<(usize, usize)> {
    let toks = tokens(src);
    let mut out = Vec::new();
    let mut i = 0;
    while i + 2 < toks.len() {
        if toks[i].is("#") && toks[i + 1].is("[") && toks[i + 2].is("cfg") {
            let close = close_of(&toks, i + 1);
            let inner = &toks[i + 3..close];
            if inner.iter().any(|t| t.is("test")) && !inner.iter().any(|t| t.is("not")) {
                let mut k = close + 1;
                let mut end = toks.len().saturating_sub(1);
                while k < toks.len() {
                    if toks[k].is(";") {
                        end = k;
                        break;
                    }
                    if toks[k].is("{") {
                        end = close_of(&toks, k);
                        break;
                    }
                    k += 1;
                }
                out.push((toks[i].line, toks[end].line));
                i = end + 1;
                continue;
            }
        }
        i += 1;
    }
    out
}

fn close_of(toks: &[super::lexer::Token], open: usize) -> usize {
    let (o, c) = if toks[open].is("[") {
        ("[", "]")
    } else {
        ("{", "}")
    };
    let mut depth = 0;
    for (k, t) in toks.iter().enumerate().skip(open) {
        if t.is(o) {
            depth += 1;
        } else if t.is(c) {
            depth -= 1;
            if depth == 0 {
                return k;
            }
        }
    }
    toks.len() - 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_blank_lines_and_tests_are_not_code() {
        let src = "//! doc\n\nfn a() {\n    // note\n    let s = \"x\n\n y\"; /* c\n c */\n}\n\
                   #[cfg(test)]\nmod tests {\n    fn t() {}\n}\n";
        // fn a() {, let s = "x, y"; /* c, } ; the string's blank line is not code.
        assert_eq!(lines_of_code(src, true), 4);
        assert_eq!(lines_of_code(src, false), 8);
    }

    #[test]
    fn glsl_counts_the_same_way() {
        assert_eq!(
            lines_of_code("#version 450\n/* a\n b */\nvoid main() {}\n", false),
            2
        );
    }
}

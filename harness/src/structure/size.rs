//! Lines of code of a source file: lines with something other than
//! whitespace outside comments. A unit test module inside a file counts
//! with it (one kept in a file of its own, `#[path = "x_tests.rs"]`,
//! counts there). Rust and GLSL share the comment syntax (`//`, `/* */`).

/// The lines of code of `src`.
pub fn lines_of_code(src: &str) -> usize {
    code_lines(src).iter().filter(|&&c| c).count()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_and_blank_lines_are_not_code() {
        let src = "//! doc\n\nfn a() {\n    // note\n    let s = \"x\n\n y\"; /* c\n c */\n}\n\
                   #[cfg(test)]\nmod tests {\n    fn t() {}\n}\n";
        // fn a() {, let s = "x, y"; /* c, }, and the four lines of the test
        // module; the string's blank line is not code.
        assert_eq!(lines_of_code(src), 8);
    }

    #[test]
    fn glsl_counts_the_same_way() {
        assert_eq!(
            lines_of_code("#version 450\n/* a\n b */\nvoid main() {}\n"),
            2
        );
    }
}

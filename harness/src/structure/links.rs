//! Relative links of the Markdown docs: every `[text](path)` and
//! `[text](path#anchor)` that is not a URL must name an existing file or
//! folder, and an anchor into a Markdown file must name one of its
//! headings (GitHub's rule: lower case, punctuation other than `-` and `_`
//! dropped, spaces as `-`).

use std::path::Path;

/// The broken links of the Markdown file `file`, one message each.
pub fn broken_links(file: &Path, label: &str, text: &str) -> Vec<String> {
    let dir = file.parent().unwrap_or(Path::new("."));
    let mut out = Vec::new();
    let mut in_fence = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        for target in link_targets(line) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let resolved = if path.is_empty() {
                file.to_path_buf()
            } else {
                dir.join(path)
            };
            if !resolved.exists() {
                out.push(format!(
                    "{label}:{}: broken link {target} (no such file)",
                    n + 1
                ));
                continue;
            }
            if let (Some(anchor), true) = (anchor, resolved.extension().is_some_and(|e| e == "md"))
            {
                let Ok(doc) = std::fs::read_to_string(&resolved) else {
                    continue;
                };
                if !anchors(&doc).iter().any(|a| a == anchor) {
                    out.push(format!(
                        "{label}:{}: broken link {target} (no such heading)",
                        n + 1
                    ));
                }
            }
        }
    }
    out
}

/// The targets of the inline links of one line (code spans skipped).
fn link_targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_code = false;
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'`' => in_code = !in_code,
            b']' if !in_code && bytes.get(i + 1) == Some(&b'(') => {
                if let Some(len) = line[i + 2..].find(')') {
                    let target = line[i + 2..i + 2 + len].trim();
                    let target = target.split_whitespace().next().unwrap_or("");
                    if !target.is_empty() {
                        out.push(target.to_string());
                    }
                    i += 2 + len;
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The anchors of a Markdown document's headings, numbered `-1`, `-2` for
/// repeats as GitHub does.
fn anchors(doc: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut in_fence = false;
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
        }
        if in_fence || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim();
        let slug: String = title
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let repeats = out
            .iter()
            .filter(|a| a.as_str() == slug || a.starts_with(&format!("{slug}-")))
            .count();
        let seen = out.contains(&slug);
        out.push(if seen {
            format!("{slug}-{repeats}")
        } else {
            slug
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headings_become_github_anchors() {
        let a = anchors("# Where the time goes\n## `harness compare`: the table\n# Where the time goes\n```\n# not\n```\n");
        assert_eq!(
            a,
            vec![
                "where-the-time-goes",
                "harness-compare-the-table",
                "where-the-time-goes-1"
            ]
        );
    }

    #[test]
    fn a_missing_file_and_a_missing_heading_are_broken() {
        let dir = std::env::temp_dir().join(format!("structure-links-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("b.md"), "# Real heading\n").unwrap();
        let a = dir.join("a.md");
        let text = "[ok](b.md) [ok](b.md#real-heading) [bad](c.md) [bad](b.md#nope) [web](https://x/y) `[code](z.md)`\n";
        let broken = broken_links(&a, "a.md", text);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(broken.len(), 2, "{broken:?}");
        assert!(broken[0].contains("c.md") && broken[1].contains("b.md#nope"));
    }
}

//! The report as JUnit XML (`harness compare --junit FILE`), for CI
//! systems that show test results.
//!
//! One `<testsuite>` per model; one `<testcase>` per model × prompt × path
//! × check (classname: the model; name: "prompt/path/check"), a check
//! listed only where it was measured or failed; per model one for the
//! tokenizer corpus and one for the chat renders; a skipped model is one
//! `<skipped>` case. A failing check holds one `<failure>` whose message
//! is its detail (several failures of one check: joined by "; ").

use std::fmt::Write as _;

use crate::compare::checks::{registry, Level};

use super::{ModelReport, PromptReport};
use crate::compare::{Failure, Report};

/// The checks of one prompt on one path, in report order: each check's
/// failure names ([`registry::failure_names`]), then the validation count.
pub fn prompt_checks() -> Vec<&'static str> {
    registry::failure_names(Level::Prompt)
        .chain(["validation"])
        .collect()
}

/// One `<testcase>`.
#[derive(Debug, PartialEq)]
struct Case<'a> {
    name: String,
    /// Details of the failures (none: it passed).
    failures: Vec<&'a str>,
    skipped: Option<&'a str>,
}

/// Whether `p` measured `check` (a check that failed is listed either way).
fn measured(p: &PromptReport, check: &str) -> bool {
    match check {
        "validation" => p.validation_messages.is_some(),
        _ => p.checks.iter().any(|r| r.failure_names().contains(&check)),
    }
}

fn details<'a>(failures: &'a [Failure], check: &str) -> Vec<&'a str> {
    failures
        .iter()
        .filter(|f| f.check == check)
        .map(|f| f.detail.as_str())
        .collect()
}

/// The checks of `failures` outside `known`, in order, once each.
fn other_checks<'a>(failures: &'a [Failure], known: &[&str]) -> Vec<&'a str> {
    let mut out: Vec<&'a str> = Vec::new();
    for f in failures {
        let c = f.check.as_str();
        if !known.contains(&c) && !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

fn model_cases(m: &ModelReport) -> Vec<Case<'_>> {
    let mut cases = Vec::new();
    for p in &m.prompts {
        let at = format!("{}/{}", p.prompt, p.path);
        let known = prompt_checks();
        let checks = known
            .iter()
            .copied()
            .chain(other_checks(&p.failures, &known));
        for check in checks {
            let failures = details(&p.failures, check);
            if measured(p, check) || !failures.is_empty() {
                cases.push(Case {
                    name: format!("{at}/{check}"),
                    failures,
                    skipped: None,
                });
            }
        }
    }
    let model_checks: Vec<&str> = registry::failure_names(Level::Model).collect();
    for check in model_checks
        .iter()
        .copied()
        .chain(other_checks(&m.failures, &model_checks))
    {
        let failures = details(&m.failures, check);
        let ran = m.checks.iter().any(|r| r.failure_names().contains(&check));
        if ran || !failures.is_empty() {
            cases.push(Case {
                name: check.to_string(),
                failures,
                skipped: None,
            });
        }
    }
    if let Some(why) = &m.skipped {
        if !cases.iter().any(|c| c.name == "model") {
            cases.push(Case {
                name: "model".into(),
                failures: Vec::new(),
                skipped: Some(why),
            });
        }
    }
    cases
}

/// `s` escaped for XML text and attribute values: the five predefined
/// entities, line breaks and tabs as character references (kept in
/// attributes), and characters XML 1.0 does not allow as U+FFFD.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            '\t' => out.push_str("&#9;"),
            c if (c as u32) < 0x20 || matches!(c, '\u{FFFE}' | '\u{FFFF}') => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// The `<properties>` of every test suite: the report's provenance
/// (`sharpi_version`, `commit`, ..., `machine.1`) and, with a baseline,
/// its file, commit and how many figures got worse.
fn properties(report: &Report) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut machine = 0;
    for (name, value) in report.provenance.fields() {
        let name = if name == "machine" {
            machine += 1;
            format!("machine.{machine}")
        } else {
            name.to_string()
        };
        out.push((name, value));
    }
    if let Some(b) = &report.baseline {
        out.push(("baseline.file".into(), b.file.clone()));
        out.push(("baseline.commit".into(), b.commit.clone()));
        out.push((
            "baseline.regressions".into(),
            b.regressions.len().to_string(),
        ));
    }
    out
}

/// The report as a JUnit XML document.
pub fn to_junit(report: &Report) -> String {
    let suites: Vec<(&ModelReport, Vec<Case>)> =
        report.models.iter().map(|m| (m, model_cases(m))).collect();
    let count = |cases: &[Case], f: fn(&Case) -> bool| cases.iter().filter(|c| f(c)).count();
    let failed = |c: &Case| !c.failures.is_empty();
    let skipped = |c: &Case| c.skipped.is_some();
    let all: Vec<&Case> = suites.iter().flat_map(|(_, c)| c).collect();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"harness compare\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"{}\" time=\"{:.3}\">",
        all.len(),
        all.iter().filter(|c| failed(c)).count(),
        all.iter().filter(|c| skipped(c)).count(),
        report.seconds
    );
    for (m, cases) in &suites {
        let _ = writeln!(
            out,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"{}\" time=\"{:.3}\">",
            escape(&m.id),
            cases.len(),
            count(cases, failed),
            count(cases, skipped),
            m.seconds
        );
        out.push_str("    <properties>\n");
        for (name, value) in properties(report) {
            let _ = writeln!(
                out,
                "      <property name=\"{}\" value=\"{}\"/>",
                escape(&name),
                escape(&value)
            );
        }
        out.push_str("    </properties>\n");
        for c in cases {
            let head = format!(
                "    <testcase classname=\"{}\" name=\"{}\"",
                escape(&m.id),
                escape(&c.name)
            );
            if let Some(why) = c.skipped {
                let _ = writeln!(
                    out,
                    "{head}>\n      <skipped message=\"{}\"/>\n    </testcase>",
                    escape(why)
                );
            } else if c.failures.is_empty() {
                let _ = writeln!(out, "{head}/>");
            } else {
                let message = c.failures.join("; ");
                let body = c.failures.join("\n");
                let _ = writeln!(
                    out,
                    "{head}>\n      <failure message=\"{}\" type=\"{}\">{}</failure>\n    </testcase>",
                    escape(&message),
                    escape(c.name.rsplit('/').next().unwrap_or_default()),
                    escape(&body)
                );
            }
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::sample;

    #[test]
    fn escapes_markup_quotes_and_control_characters() {
        assert_eq!(
            escape("a<b>&\"c\" 'd'\n\t\u{1}é"),
            "a&lt;b&gt;&amp;&quot;c&quot; &apos;d&apos;&#10;&#9;\u{FFFD}é"
        );
        assert_eq!(escape("plain"), "plain");
    }

    #[test]
    fn one_case_per_measured_check_with_failures_and_skips() {
        let r = sample::report();
        let xml = to_junit(&r);
        // sample: smol on cpu (tokens, taps, 4 logits checks, greedy) and on
        // gpu (the same + vs + validation), the tokenizer and chat of smol
        // (chat failing), the skipped model.
        let cases = xml.matches("<testcase ").count();
        assert_eq!(cases, 7 + 9 + 2 + 1, "{xml}");
        assert!(xml.contains(&format!(
            "<testsuites name=\"harness compare\" tests=\"{cases}\" failures=\"3\" errors=\"0\" skipped=\"1\""
        )));
        assert_eq!(xml.matches("<failure ").count(), 3);
        assert_eq!(xml.matches("<skipped ").count(), 1);
        assert!(xml.contains("classname=\"smol\" name=\"capital/gpu/vs\""));
        assert!(xml.contains("name=\"capital/cpu/taps\"/>"));
        // The taps failure's detail, escaped, as message and body.
        assert!(
            xml.contains("message=\"first divergence: &lt;Qcur&gt; &amp; &quot;more&quot;\""),
            "{xml}"
        );
        // Two failures of one check: one <failure>, both details.
        assert!(xml.contains("message=\"3 positions; first at 2\""), "{xml}");
        assert!(
            xml.contains(">3 positions&#10;first at 2</failure>"),
            "{xml}"
        );
        assert!(
            xml.contains("<skipped message=\"architecture &apos;mamba&apos; not implemented\"/>")
        );
        assert_eq!(xml.matches("<testsuite ").count(), 2);
        // Each suite carries the provenance as properties.
        assert_eq!(xml.matches("<properties>").count(), 2);
        assert!(xml.contains("<property name=\"commit\" value=\"\"/>"));
        assert!(xml.contains("<property name=\"thresholds_file_sha256\""));
        assert_eq!(xml.matches("</testsuite>").count(), 2);
    }

    #[test]
    fn a_failure_of_another_check_gets_its_own_case() {
        let mut r = sample::report();
        let p = &mut r.models[0].prompts[0];
        p.failures.push(Failure::new("engine", "out of memory"));
        let xml = to_junit(&r);
        assert!(xml.contains("name=\"capital/cpu/engine\""));
        assert!(xml.contains("message=\"out of memory\""));
    }
}

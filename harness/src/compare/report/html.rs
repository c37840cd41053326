//! The report as one self-contained HTML page (`harness compare --html
//! FILE`; no script, no stylesheet, font or image from elsewhere: the
//! plots are inline SVG, [`super::plots`]). From the top:
//! - a banner with the verdict: the **first divergence**
//!   ([`super::headline`]: model, prompt, path, layer, tensor, its NMSE
//!   against its limit, and a link to its charts) when something failed,
//!   "all checks passed" when nothing did, and the figures worse than the
//!   baseline when there is one;
//! - where the report came from ([`super::provenance`]);
//! - the figures worse than the baseline, the failing checks, the
//!   terminal table's rows;
//! - per model its totals and, per prompt, a `<details>` (open when the
//!   prompt failed, and for the model's first prompt) with the small
//!   multiples of its taps against llama.cpp and against the first path
//!   (one chart per tap name, limits drawn) and its KLD and top-1 chart.

use crate::compare::checks::corpus::CorpusResult;
use crate::compare::checks::cross::CrossResult;
use crate::compare::checks::logits::LogitsResult;
use crate::compare::checks::taps::TapsResult;
use std::fmt::Write as _;

use super::headline::{self, Headline};
use super::junit::escape;
use super::plots::{self, KldSeries, TapSeries};
use super::regression::BaselineComparison;
use super::{model_totals, ModelReport, PromptReport};
use crate::compare::Report;

const STYLE: &str = "body{font-family:sans-serif;margin:24px;color:#222;max-width:1400px}\
table{border-collapse:collapse;font-family:monospace;font-size:12px}\
td,th{border:1px solid #ccc;padding:2px 6px;text-align:left;white-space:nowrap}\
th{background:#eee}td.PASS{background:#dcf5dc}td.FAIL{background:#f8d0d0}\
.pass{color:#1a7f37}.fail{color:#b71c1c}section{margin-top:32px}\
.banner{border:3px solid;border-radius:6px;padding:10px 16px;margin-bottom:16px}\
.banner h1{margin:0 0 6px 0;font-size:26px}.banner.pass{border-color:#1a7f37;background:#eef8ee}\
.banner.fail{border-color:#b71c1c;background:#fdeeee}.banner table.kv{font-size:15px}\
.banner table.kv th{width:9em}.banner .worse{color:#8a4b00;font-weight:bold}\
table.kv th{background:#f4f4f4}table.prov{font-size:11px}p.prov{font-size:13px;margin:4px 0}\
td.wrap{white-space:normal;min-width:12em}\
ul.totals,ul.failures{font-family:monospace;font-size:12px}\
details{margin:10px 0;border-top:1px solid #ddd;padding-top:6px}summary{cursor:pointer;font-size:15px}\
.grid{display:grid;grid-template-columns:repeat(4,max-content);gap:2px 4px;align-items:start}.grid svg{margin:0}svg{display:block;margin:6px 0}\
.legend{font-size:13px;margin:6px 0}.sw{display:inline-block;width:22px;height:4px;vertical-align:middle;margin:0 4px 0 12px}\
.sw.thin{height:1px;border-top:1px solid}";

/// The report as one self-contained HTML page.
pub fn to_html(report: &Report) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>harness compare: {}</title><style>{STYLE}</style></head><body>\n",
        if report.passed() { "pass" } else { "FAIL" }
    );
    banner(&mut out, report);
    provenance(&mut out, report);
    if let Some(b) = &report.baseline {
        regressions(&mut out, b);
    }
    let failures = report.failures();
    if !failures.is_empty() {
        out.push_str("<h2>Failing checks</h2>\n<ul class=\"failures\">\n");
        for (at, f) in &failures {
            let _ = writeln!(
                out,
                "<li>{}: {}: {}</li>",
                escape(at),
                escape(&f.check),
                escape(&f.detail)
            );
        }
        out.push_str("</ul>\n");
    }
    table(&mut out, report);
    for m in &report.models {
        model_section(&mut out, m);
    }
    out.push_str("</body></html>\n");
    out
}

/// `1 item`, `2 items`.
fn count(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// The id of a prompt's `<details>` (a link target).
fn anchor(model: &str, prompt: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect()
    };
    format!("p-{}-{}", clean(model), clean(prompt))
}

/// The verdict at the top: the first divergence, or all passed; the
/// baseline's count of worse figures.
fn banner(out: &mut String, report: &Report) {
    let failures = report.failures();
    let items = report.models.iter().map(|m| m.prompts.len()).sum::<usize>();
    let failed_items = report
        .models
        .iter()
        .flat_map(|m| &m.prompts)
        .filter(|p| !p.passed())
        .count();
    if failures.is_empty() {
        let _ = writeln!(
            out,
            "<div class=\"banner pass\"><h1>PASS: all checks passed</h1>\n<p>{} (model × prompt × path) of {}, every check within its limit; {:.1} s.</p>",
            count(items, "item"),
            count(report.models.len(), "model"),
            report.seconds
        );
    } else {
        let _ = writeln!(
            out,
            "<div class=\"banner fail\"><h1>FAIL: {} failing checks, {failed_items} of {items} items</h1>",
            failures.len()
        );
        match report.first_divergence() {
            Some(Headline::Tap {
                model,
                prompt,
                path,
                against,
                row,
            }) => {
                let rows = [
                    ("model", model.to_string()),
                    ("prompt", prompt.to_string()),
                    ("path", headline::source(path, against)),
                    (
                        "layer",
                        row.layer
                            .map_or("outside the layers".into(), |l| l.to_string()),
                    ),
                    ("tensor", headline::tensor(row)),
                    (
                        "NMSE",
                        format!("{:.3e} > limit {:.1e}", row.nmse, row.limit),
                    ),
                ];
                out.push_str("<p><b>First divergence</b> (the earliest tap over its limit):</p>\n<table class=\"kv\">");
                for (k, v) in rows {
                    let _ = write!(out, "<tr><th>{k}</th><td>{}</td></tr>", escape(&v));
                }
                let _ = writeln!(
                    out,
                    "</table>\n<p><a href=\"#{}\">its charts</a></p>",
                    anchor(model, prompt)
                );
            }
            Some(h @ Headline::Check { .. }) => {
                let _ = writeln!(
                    out,
                    "<p><b>First failing check</b> (no tap over its limit): {}</p>",
                    escape(&h.line())
                );
            }
            None => {}
        }
    }
    if let Some(b) = &report.baseline {
        let against = format!(
            "the baseline {} (commit {})",
            escape(&b.file),
            escape(&b.commit)
        );
        if b.regressions.is_empty() {
            let _ = writeln!(out, "<p>No figure worse than {against}.</p>");
        } else {
            let _ = writeln!(
                out,
                "<p class=\"worse\">{} worse than {against}{} (<a href=\"#regressions\">list</a>).</p>",
                super::regression::figures(b.regressions.len()),
                if b.fail {
                    ", each a failure (--fail-on-regression)"
                } else {
                    ""
                }
            );
        }
    }
    out.push_str("</div>\n");
}

/// Where the report came from, one row per field.
fn provenance(out: &mut String, report: &Report) {
    let p = &report.provenance;
    let mut line = format!(
        "sharpi {} at commit {}; llama.cpp {}; limits {}",
        p.sharpi_version, p.commit, p.llama_cpp, report.thresholds
    );
    for m in &p.machines {
        line += &format!("; {}", m.describe());
    }
    if !p.faults.is_empty() {
        line += &format!("; faults injected: {}", p.faults.join(", "));
    }
    let _ = write!(
        out,
        "<p class=\"prov\">{}</p>\n<details><summary>Provenance, every field</summary>",
        escape(&line)
    );
    out.push_str("<table class=\"prov kv\">");
    let _ = write!(
        out,
        "<tr><th>paths</th><td>{}</td></tr><tr><th>reference</th><td>{}</td></tr><tr><th>limits</th><td>{}</td></tr>",
        escape(&report.paths.to_string()),
        escape(&report.reference_dir),
        escape(&report.thresholds)
    );
    for (k, v) in report.provenance.fields() {
        let _ = write!(out, "<tr><th>{k}</th><td>{}</td></tr>", escape(&v));
    }
    out.push_str("</table></details>\n");
}

/// The figures worse than the baseline, and the items only one report has.
fn regressions(out: &mut String, b: &BaselineComparison) {
    let _ = writeln!(
        out,
        "<h2 id=\"regressions\">Against the baseline {} (commit {})</h2>",
        escape(&b.file),
        escape(&b.commit)
    );
    for w in &b.warnings {
        let _ = writeln!(out, "<p class=\"fail\">warning: {}</p>", escape(w));
    }
    if !b.regressions.is_empty() {
        out.push_str("<table><tr><th>item</th><th>figure</th><th>baseline</th><th>now</th><th>worse when</th><th>what</th></tr>\n");
        for r in &b.regressions {
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"wrap\">{}</td></tr>",
                escape(&r.item()),
                r.figure.name(),
                r.show(r.baseline),
                r.show(r.now),
                escape(&r.figure.rule()),
                escape(&r.detail)
            );
        }
        out.push_str("</table>\n");
    }
    for line in b.summary().iter().filter(|l| l.starts_with("  only in")) {
        let _ = writeln!(out, "<p>{}</p>", escape(line.trim()));
    }
}

/// The terminal table's rows.
fn table(out: &mut String, report: &Report) {
    out.push_str("<h2>All items</h2>\n<table>\n");
    for (i, row) in report.table_rows().iter().enumerate() {
        out.push_str("<tr>");
        let tag = if i == 0 { "th" } else { "td" };
        for (c, cell) in row.iter().enumerate() {
            let class = match cell.as_str() {
                "PASS" | "FAIL" if i > 0 => format!(" class=\"{cell}\""),
                _ if i > 0 && c > 0 && cell.starts_with("WORSE") => " class=\"FAIL wrap\"".into(),
                _ => String::new(),
            };
            let _ = write!(out, "<{tag}{class}>{}</{tag}>", escape(cell));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

fn model_section(out: &mut String, m: &ModelReport) {
    let _ = writeln!(
        out,
        "<section><h2>{} <span class=\"{}\">{}</span></h2>\n<p>{}, {}</p>",
        escape(&m.id),
        if m.passed() { "pass" } else { "fail" },
        if m.passed() { "PASS" } else { "FAIL" },
        escape(&m.architecture),
        escape(&m.file)
    );
    if let Some(why) = &m.skipped {
        let _ = writeln!(out, "<p>skipped: {}</p>", escape(why));
    }
    let totals = model_totals(m);
    if !totals.is_empty() {
        out.push_str("<ul class=\"totals\">\n");
        for t in totals {
            let _ = writeln!(out, "<li>{}</li>", escape(&t));
        }
        out.push_str("</ul>\n");
    }
    for (i, (prompt, reports)) in prompt_groups(m).into_iter().enumerate() {
        let open = i == 0 || reports.iter().any(|p| !p.passed());
        prompt_details(out, m, prompt, &reports, open);
    }
    out.push_str("</section>\n");
}

/// A corpus item's figures per path, each beside its limit.
fn corpus_table(out: &mut String, reports: &[&PromptReport]) {
    let rows: Vec<(&PromptReport, &crate::compare::checks::corpus::CorpusResult)> = reports
        .iter()
        .filter_map(|p| p.checks.get::<CorpusResult>().map(|c| (*p, c)))
        .collect();
    let Some((_, first)) = rows.first() else {
        return;
    };
    let _ = writeln!(
        out,
        "<p class=\"legend\">{} ({} chunk(s) of {} tokens, {} scored positions) against {}. KLD over the base's top-64 and a tail bucket, nats.</p>",
        escape(&first.text),
        first.chunks,
        first.n_ctx,
        first.positions,
        escape(&first.source)
    );
    out.push_str("<table>\n<tr><th>path</th><th>KLD mean</th><th>KLD p99</th><th>KLD max</th><th>top-1</th><th>PPL</th><th>PPL of the base</th><th>tokens</th></tr>\n");
    for (p, c) in rows {
        let cell = |v: f64, lim: Option<f64>, above_fails: bool| {
            let over = lim.is_some_and(|l| if above_fails { v > l } else { v < l });
            let lim = lim
                .map(|l| format!(" (limit {})", crate::compare::sci(l)))
                .unwrap_or_default();
            format!(
                "<td{}>{}{lim}</td>",
                if over { " class=\"FAIL\"" } else { "" },
                crate::compare::sci(v)
            )
        };
        let l = c.limits.as_ref();
        let _ = writeln!(
            out,
            "<tr><td>{}</td>{}{}<td>{}</td>{}<td>{:.3}</td><td>{:.3}</td><td>{}</td></tr>",
            escape(&p.path.to_string()),
            cell(c.kld_mean, l.map(|l| l.kld_mean), true),
            cell(c.kld_p99, l.map(|l| l.kld_p99), true),
            crate::compare::sci(c.kld_max),
            cell(c.top1, l.map(|l| l.top1_min), false),
            c.ppl,
            c.ppl_base,
            match c.tokens_match {
                Some(true) => "ours",
                Some(false) => "DIFFER",
                None => "not compared",
            }
        );
    }
    out.push_str("</table>\n");
}

/// The prompts of `m` in order, each with its reports (one per path).
fn prompt_groups(m: &ModelReport) -> Vec<(&str, Vec<&PromptReport>)> {
    let mut groups: Vec<(&str, Vec<&PromptReport>)> = Vec::new();
    for p in &m.prompts {
        match groups.iter_mut().find(|(id, _)| *id == p.prompt) {
            Some((_, v)) => v.push(p),
            None => groups.push((&p.prompt, vec![p])),
        }
    }
    groups
}

/// One prompt: a summary line and its charts.
fn prompt_details(
    out: &mut String,
    m: &ModelReport,
    prompt: &str,
    reports: &[&PromptReport],
    open: bool,
) {
    let color = |p: &PromptReport| {
        let i = m.paths.iter().position(|&x| x == p.path).unwrap_or(0);
        plots::path_color(i)
    };
    let verdicts: Vec<String> = reports
        .iter()
        .map(|p| {
            let first = p
                .checks
                .get::<TapsResult>()
                .and_then(|t| t.first_divergence.as_ref())
                .map(|d| {
                    format!(
                        " (first over: {}-{} {} &gt; {})",
                        escape(&d.name),
                        d.layer.map_or("-".into(), |l| l.to_string()),
                        crate::compare::sci(d.nmse),
                        crate::compare::sci(d.limit)
                    )
                })
                .unwrap_or_default();
            format!(
                "{} <span class=\"{}\">{}</span>{first}",
                escape(&p.path.to_string()),
                if p.passed() { "pass" } else { "fail" },
                if p.passed() { "PASS" } else { "FAIL" }
            )
        })
        .collect();
    let _ = writeln!(
        out,
        "<details id=\"{}\"{}><summary><b>{}</b> ({} tokens): {}</summary>",
        anchor(&m.id, prompt),
        if open { " open" } else { "" },
        escape(prompt),
        reports[0].n_tokens,
        verdicts.join(" · ")
    );
    corpus_table(out, reports);
    let against_llama: Vec<TapSeries> = reports
        .iter()
        .filter_map(|p| {
            p.checks.get::<TapsResult>().map(|t| TapSeries {
                label: p.path.to_string(),
                color: color(p),
                taps: t,
            })
        })
        .collect();
    let against_first: Vec<TapSeries> = reports
        .iter()
        .filter_map(|p| {
            let v = p.checks.get::<CrossResult>()?;
            v.taps.as_ref().map(|t| TapSeries {
                label: format!("{}~{}", p.path, v.against),
                color: color(p),
                taps: t,
            })
        })
        .collect();
    let first_path = m.paths.first().map(ToString::to_string).unwrap_or_default();
    for (series, title) in [
        (&against_llama, "Tap NMSE against llama.cpp".to_string()),
        (
            &against_first,
            format!("Tap NMSE against the first path ({first_path})"),
        ),
    ] {
        if series.is_empty() {
            continue;
        }
        let _ = writeln!(out, "<p class=\"legend\"><b>{title}</b>, one chart per tap, layer across (-1: before the first layer; last: after it), log NMSE up, every chart on the same axes:{}; thin line: that path's limit; ×: a tap over its limit; ring: the first divergence.</p>", legend(series.iter().map(|s| (s.label.as_str(), s.color, false))));
        match plots::tap_grid(series) {
            Ok(svgs) => {
                out.push_str("<div class=\"grid\">\n");
                for svg in svgs {
                    out.push_str(&svg);
                    out.push('\n');
                }
                out.push_str("</div>\n");
            }
            Err(e) => {
                let _ = writeln!(out, "<p class=\"fail\">plot failed: {}</p>", escape(&e));
            }
        }
    }
    let mut kld: Vec<KldSeries> = Vec::new();
    for p in reports {
        if let Some(l) = p.checks.get::<LogitsResult>() {
            kld.push(KldSeries {
                label: p.path.to_string(),
                color: color(p),
                thin: false,
                logits: l,
            });
        }
        if let Some(v) = p.checks.get::<CrossResult>() {
            kld.push(KldSeries {
                label: format!("{}~{}", p.path, v.against),
                color: color(p),
                thin: true,
                logits: &v.logits,
            });
        }
    }
    if !kld.is_empty() {
        let _ = writeln!(
            out,
            "<p class=\"legend\"><b>KLD and top-1 per position</b>:{}</p>",
            legend(kld.iter().map(|s| (s.label.as_str(), s.color, s.thin)))
        );
    }
    match plots::kld_chart(&kld) {
        Ok(Some(svg)) => {
            out.push_str(&svg);
            out.push('\n');
        }
        Ok(None) => {}
        Err(e) => {
            let _ = writeln!(out, "<p class=\"fail\">plot failed: {}</p>", escape(&e));
        }
    }
    out.push_str("</details>\n");
}

/// Colour swatches with labels (`thin`: a path against the first path).
fn legend<'a>(items: impl Iterator<Item = (&'a str, plotters::style::RGBColor, bool)>) -> String {
    items
        .map(|(label, c, thin)| {
            let hex = plots::hex(c);
            if thin {
                format!(
                    "<span class=\"sw thin\" style=\"border-color:{hex}\"></span>{} (thin)",
                    escape(label)
                )
            } else {
                format!(
                    "<span class=\"sw\" style=\"background:{hex}\"></span>{}",
                    escape(label)
                )
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::sample;

    #[test]
    fn the_page_is_self_contained_with_charts_for_every_prompt() {
        let mut r = sample::report();
        let mut other: Vec<PromptReport> = r.models[0].prompts.clone();
        for p in &mut other {
            p.prompt = "second".into();
            p.failures.clear();
        }
        r.models[0].prompts.extend(other);
        let html = to_html(&r);
        for bad in [
            "src=\"http",
            "href=\"http",
            "src='http",
            "href='http",
            "<script",
            "@import",
            "url(",
        ] {
            assert!(!html.contains(bad), "{bad}");
        }
        // Per prompt: 4 tap charts (attn_norm, Qcur, l_out, result_norm)
        // against llama.cpp, 4 against cpu, a KLD chart; mamba: none.
        assert_eq!(html.matches("<svg").count(), 2 * 9);
        assert_eq!(html.matches("<details id=").count(), 2);
        // The failing prompt and the first are open: here both are the same
        // prompt ("capital", which failed), "second" passed and is closed.
        assert!(html.contains("<details id=\"p-smol-capital\" open>"));
        assert!(html.contains("<details id=\"p-smol-second\"><summary>"));
        // Each source's first divergence is named on its chart.
        assert!(
            html.contains("l_out: first divergence (gpu, layer 1)"),
            "{html}"
        );
        // Markup in details is escaped.
        assert!(html.contains("first divergence: &lt;Qcur&gt; &amp; &quot;more&quot;"));
        assert!(!html.contains("<Qcur>"));
        // Every row of the terminal table.
        assert_eq!(
            html.matches("<tr>").count() - banner_and_provenance_rows(&html),
            r.table_rows().len()
        );
        assert!(html.contains("<td class=\"FAIL\">FAIL</td>"));
        assert!(html.contains("skipped: architecture &apos;mamba&apos; not implemented"));
    }

    /// `<tr>`s outside the table of items.
    fn banner_and_provenance_rows(html: &str) -> usize {
        let start = html.find("<h2>All items</h2>").unwrap();
        html[..start].matches("<tr>").count()
    }

    #[test]
    fn the_banner_names_the_first_divergence_or_says_all_passed() {
        let r = sample::report();
        let html = to_html(&r);
        let banner = &html[html.find("<div class=\"banner").unwrap()..html.find("</div>").unwrap()];
        assert!(
            banner.contains("FAIL: 4 failing checks, 1 of 2 items"),
            "{banner}"
        );
        for want in [
            "<th>model</th><td>smol</td>",
            "<th>prompt</th><td>capital</td>",
            "<th>path</th><td>gpu against llama.cpp</td>",
            "<th>layer</th><td>1</td>",
            "<th>tensor</th><td>l_out",
            "<th>NMSE</th><td>1.200e-3 &gt; limit 1.0e-3</td>",
            "href=\"#p-smol-capital\"",
        ] {
            assert!(banner.contains(want), "{want}: {banner}");
        }
        let mut ok = sample::report();
        ok.models[0].failures.clear();
        for p in &mut ok.models[0].prompts {
            p.failures.clear();
        }
        let html = to_html(&ok);
        assert!(html.contains("<div class=\"banner pass\"><h1>PASS: all checks passed</h1>"));
        assert!(!html.contains("First divergence"));
    }

    #[test]
    fn provenance_and_regressions_are_on_the_page() {
        let baseline = sample::report();
        let mut r = baseline.clone();
        r.provenance.commit = "abc123".into();
        r.models[0].prompts[1]
            .checks
            .get_mut::<LogitsResult>()
            .unwrap()
            .kld
            .max *= 2.0;
        super::super::baseline::apply(&mut r, &baseline, "old.json", false);
        let html = to_html(&r);
        assert!(html.contains("<tr><th>commit</th><td>abc123</td></tr>"));
        assert!(html.contains("<p class=\"prov\">sharpi  at commit abc123;"));
        assert!(html.contains("1 figure worse than the baseline old.json"));
        assert!(html.contains("<td>smol/capital/gpu</td><td>kld_max</td>"));
        assert!(html.contains("<td class=\"FAIL wrap\">WORSE: kld_max</td>"));
    }
}

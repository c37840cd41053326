//! The report as one self-contained HTML page (`harness compare --html
//! FILE`): the terminal table's rows, the failing checks, and per model
//! the plots of one representative prompt, inline SVG drawn with
//! `plotters` (no script, no stylesheet or font from elsewhere):
//! - tap NMSE (log scale) against layer, one series per tap name and
//!   source (each path against llama.cpp, and each path against the run's
//!   first path, "gpu~cpu"), the first divergence of each source marked;
//! - KLD (log scale) per prompt position, one series per source, and a
//!   strip per source of the positions whose most likely token agrees.
//!
//! The representative prompt of a model: the first that failed on some
//! path, else the first with taps, else the first.

use std::fmt::Write as _;

use plotters::prelude::*;

use super::junit::escape;
use super::logits::LogitsResult;
use super::report::{model_totals, ModelReport, PromptReport};
use super::taps::TapsResult;
use super::Report;

/// How a source's series are drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Stroke {
    /// The first path against llama.cpp.
    Solid,
    /// Another path against llama.cpp.
    Dashed,
    /// A path against the first path.
    Thin,
}

/// One set of measurements of a prompt: a path against llama.cpp, or a
/// path against the first path.
struct Source<'a> {
    label: String,
    stroke: Stroke,
    taps: Option<&'a TapsResult>,
    logits: Option<&'a LogitsResult>,
}

fn sources<'a>(reports: &[&'a PromptReport]) -> Vec<Source<'a>> {
    let mut out = Vec::new();
    for (i, p) in reports.iter().enumerate() {
        out.push(Source {
            label: p.path.to_string(),
            stroke: if i == 0 {
                Stroke::Solid
            } else {
                Stroke::Dashed
            },
            taps: p.taps.as_ref(),
            logits: p.logits.as_ref(),
        });
        if let Some(v) = &p.vs {
            out.push(Source {
                label: format!("{}~{}", p.path, v.against),
                stroke: Stroke::Thin,
                taps: v.taps.as_ref(),
                logits: Some(&v.logits),
            });
        }
    }
    out
}

/// The representative prompt of `m` and its reports (one per path).
fn representative(m: &ModelReport) -> Option<(&str, Vec<&PromptReport>)> {
    let mut ids: Vec<&str> = Vec::new();
    for p in &m.prompts {
        if !ids.contains(&p.prompt.as_str()) {
            ids.push(&p.prompt);
        }
    }
    let of =
        |id: &str| -> Vec<&PromptReport> { m.prompts.iter().filter(|p| p.prompt == id).collect() };
    let has_taps = |id: &str| of(id).iter().any(|p| p.taps.is_some());
    let failed = |id: &str| {
        of(id)
            .iter()
            .any(|p| !p.passed() && (p.taps.is_some() || p.logits.is_some()))
    };
    let id = *ids
        .iter()
        .find(|id| failed(id))
        .or_else(|| ids.iter().find(|id| has_taps(id)))
        .or(ids.first())?;
    Some((id, of(id)))
}

/// Series colours of the sources (KLD, top-1).
const SOURCE_COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
];

fn source_color(i: usize) -> RGBColor {
    SOURCE_COLORS[i % SOURCE_COLORS.len()]
}

/// A log-scale range holding the positive finite values of `v` (at least
/// one decade; `floor` when there are none).
fn log_range(v: impl Iterator<Item = f64>, floor: f64) -> (f64, f64) {
    let (lo, hi) = v
        .filter(|x| x.is_finite() && *x > 0.0)
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), x| {
            (lo.min(x), hi.max(x))
        });
    if hi == 0.0 {
        return (floor, floor * 10.0);
    }
    let lo = 10f64.powf(lo.log10().floor());
    let hi = 10f64.powf(hi.log10().ceil()).max(lo * 10.0);
    (lo, hi)
}

/// An axis label for whole numbers only (ticks fall between positions too).
fn integer(v: &f64) -> String {
    if (v - v.round()).abs() < 1e-6 {
        format!("{v:.0}")
    } else {
        String::new()
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// x of each tap row of `t`: its layer; a tap without a layer at -1 before
/// the first layer, at `after` past the last.
fn tap_xs(t: &TapsResult, after: f64) -> Vec<f64> {
    let mut seen_layer = false;
    t.rows
        .iter()
        .map(|r| match r.layer {
            Some(l) => {
                seen_layer = true;
                l as f64
            }
            None if seen_layer => after,
            None => -1.0,
        })
        .collect()
}

/// The tap NMSE chart of one prompt (None: no taps).
fn tap_chart(prompt: &str, sources: &[Source]) -> Result<Option<String>, String> {
    let with_taps: Vec<(&Source, &TapsResult)> = sources
        .iter()
        .filter_map(|s| s.taps.filter(|t| !t.rows.is_empty()).map(|t| (s, t)))
        .collect();
    if with_taps.is_empty() {
        return Ok(None);
    }
    let last_layer = with_taps
        .iter()
        .flat_map(|(_, t)| t.rows.iter().filter_map(|r| r.layer))
        .max()
        .unwrap_or(0) as f64;
    let after = last_layer + 1.0;
    let (lo, hi) = log_range(
        with_taps
            .iter()
            .flat_map(|(_, t)| t.rows.iter().map(|r| r.nmse)),
        1e-12,
    );
    let mut names: Vec<&str> = Vec::new();
    for (_, t) in &with_taps {
        for r in &t.rows {
            if !names.contains(&r.name.as_str()) {
                names.push(&r.name);
            }
        }
    }
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, 540)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!("tap NMSE by layer, prompt {prompt}"),
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(-1.5..after + 0.5, (lo..hi).log_scale())
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("layer (-1: before the first layer; last: after it)")
            .y_desc("NMSE")
            .y_label_formatter(&|v| format!("{v:.0e}"))
            .x_label_formatter(&integer)
            .draw()
            .map_err(err)?;
        // Legend entries of the sources' strokes, in black.
        for (s, _) in &with_taps {
            let label = match s.stroke {
                Stroke::Thin => format!("{} (thin, dots)", s.label),
                Stroke::Dashed => format!("{} vs llama.cpp (dashed)", s.label),
                Stroke::Solid => format!("{} vs llama.cpp (solid)", s.label),
            };
            let stroke = s.stroke;
            chart
                .draw_series(std::iter::empty::<PathElement<(f64, f64)>>())
                .map_err(err)?
                .label(label)
                .legend(move |(x, y)| {
                    // Two segments (a gap when dashed) and a dot when thin.
                    let (gap, width, dot) = match stroke {
                        Stroke::Solid => (0, 2, TRANSPARENT),
                        Stroke::Dashed => (5, 2, TRANSPARENT),
                        Stroke::Thin => (0, 1, BLACK.to_rgba()),
                    };
                    let line = BLACK.stroke_width(width);
                    EmptyElement::at((x, y))
                        + PathElement::new(vec![(0, 0), (9 - gap, 0)], line)
                        + PathElement::new(vec![(9, 0), (18, 0)], line)
                        + Circle::new((9, 0), 4, dot.filled())
                });
        }
        for (si, (s, t)) in with_taps.iter().enumerate() {
            let xs = tap_xs(t, after);
            for (ni, name) in names.iter().enumerate() {
                let color = Palette99::pick(ni).to_rgba();
                let pts: Vec<(f64, f64)> = t
                    .rows
                    .iter()
                    .zip(&xs)
                    .filter(|(r, _)| r.name == *name && !r.nmse.is_nan())
                    .map(|(r, &x)| (x, r.nmse.max(lo)))
                    .collect();
                if pts.is_empty() {
                    continue;
                }
                let drawn = match s.stroke {
                    Stroke::Solid => chart
                        .draw_series(LineSeries::new(pts, color.stroke_width(2)).point_size(2))
                        .map_err(err)?,
                    Stroke::Dashed => {
                        chart
                            .draw_series(pts.iter().map(|&p| Circle::new(p, 2, color.filled())))
                            .map_err(err)?;
                        chart
                            .draw_series(DashedLineSeries::new(pts, 6, 4, color.stroke_width(2)))
                            .map_err(err)?
                    }
                    Stroke::Thin => chart
                        .draw_series(
                            LineSeries::new(pts, color.mix(0.7).stroke_width(1)).point_size(4),
                        )
                        .map_err(err)?,
                };
                if si == 0
                    || !with_taps[..si]
                        .iter()
                        .any(|(_, t)| t.rows.iter().any(|r| r.name == *name))
                {
                    drawn.label(name.to_string()).legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(3))
                    });
                }
            }
            // The first divergence of this source: a red line and a label.
            if let Some(d) = &t.first_divergence {
                let i = t.rows.iter().position(|r| r == d).unwrap_or(0);
                let x = xs.get(i).copied().unwrap_or(0.0);
                chart
                    .draw_series(std::iter::once(PathElement::new(
                        vec![(x, lo), (x, hi)],
                        RED.stroke_width(2),
                    )))
                    .map_err(err)?;
                let label = format!("first divergence ({}): {} {}", s.label, d.name, sci(d.nmse));
                chart
                    .draw_series(std::iter::once(Text::new(
                        label,
                        (x, hi / 10f64.powf(0.3 * (si as f64 + 1.0))),
                        ("sans-serif", 13).into_font().color(&RED),
                    )))
                    .map_err(err)?;
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 12))
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(Some(svg))
}

/// The KLD and top-1 chart of one prompt (None: no logits).
fn logits_chart(prompt: &str, sources: &[Source]) -> Result<Option<String>, String> {
    let with: Vec<(usize, &Source, &LogitsResult)> = sources
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            s.logits
                .filter(|l| !l.per_position.is_empty())
                .map(|l| (i, s, l))
        })
        .collect();
    if with.is_empty() {
        return Ok(None);
    }
    let n = with
        .iter()
        .map(|(_, _, l)| l.per_position.len())
        .max()
        .unwrap_or(1);
    let (lo, hi) = log_range(
        with.iter()
            .flat_map(|(_, _, l)| l.per_position.iter().map(|p| p.kld)),
        1e-9,
    );
    let strip_h = 28 * with.len() as u32 + 70;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, 340 + strip_h)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (upper, lower) = root.split_vertically(340);
        let mut chart = ChartBuilder::on(&upper)
            .caption(
                format!("KLD per position, prompt {prompt} (top-64 + tail bucket, nats)"),
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(30)
            .y_label_area_size(70)
            .build_cartesian_2d(-0.5..n as f64 - 0.5, (lo..hi).log_scale())
            .map_err(err)?;
        chart
            .configure_mesh()
            .y_desc("KLD")
            .y_label_formatter(&|v| format!("{v:.0e}"))
            .x_label_formatter(&integer)
            .draw()
            .map_err(err)?;
        for (i, s, l) in &with {
            let color = source_color(*i);
            let pts: Vec<(f64, f64)> = l
                .per_position
                .iter()
                .enumerate()
                .filter(|(_, p)| !p.kld.is_nan())
                .map(|(x, p)| (x as f64, p.kld.max(lo)))
                .collect();
            let width = if s.stroke == Stroke::Thin { 1 } else { 2 };
            chart
                .draw_series(LineSeries::new(pts, color.stroke_width(width)).point_size(2))
                .map_err(err)?
                .label(format!("{} (mean {})", s.label, sci(l.kld.mean)))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(3))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 12))
            .draw()
            .map_err(err)?;

        // Top-1 agreement: one row per source, a cell per position.
        let labels: Vec<String> = with
            .iter()
            .map(|(_, s, l)| format!("{} {}/{}", s.label, l.top1_agree, l.positions))
            .collect();
        let mut strip = ChartBuilder::on(&lower)
            .caption(
                "top-1 agreement per position (green: same most likely token)",
                ("sans-serif", 14),
            )
            .margin(12)
            .x_label_area_size(30)
            .y_label_area_size(110)
            .build_cartesian_2d(
                -0.5..n as f64 - 0.5,
                (0..with.len() as i32).into_segmented(),
            )
            .map_err(err)?;
        strip
            .configure_mesh()
            .disable_mesh()
            .x_desc("prompt position")
            .y_label_style(("sans-serif", 13))
            .x_label_formatter(&integer)
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                    labels.get(*i as usize).cloned().unwrap_or_default()
                }
                SegmentValue::Last => String::new(),
            })
            .draw()
            .map_err(err)?;
        let agree = RGBColor(46, 160, 67);
        let differ = RGBColor(215, 58, 73);
        for (row, (_, _, l)) in with.iter().enumerate() {
            let row = row as i32;
            strip
                .draw_series(l.per_position.iter().enumerate().map(|(x, p)| {
                    let x = x as f64;
                    Rectangle::new(
                        [
                            (x - 0.45, SegmentValue::Exact(row)),
                            (x + 0.45, SegmentValue::Exact(row + 1)),
                        ],
                        if p.top1 { agree } else { differ }.filled(),
                    )
                }))
                .map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(Some(svg))
}

fn sci(x: f64) -> String {
    super::report::sci(x)
}

const STYLE: &str = "body{font-family:sans-serif;margin:24px;color:#222}\
table{border-collapse:collapse;font-family:monospace;font-size:12px}\
td,th{border:1px solid #ccc;padding:2px 6px;text-align:left;white-space:nowrap}\
th{background:#eee}td.PASS{background:#dcf5dc}td.FAIL{background:#f8d0d0}\
.pass{color:#1a7f37}.fail{color:#c62828}section{margin-top:32px}\
ul.totals,ul.failures{font-family:monospace;font-size:12px}svg{display:block;margin:8px 0}";

/// The report as one self-contained HTML page.
pub fn to_html(report: &Report) -> String {
    let mut out = String::new();
    let verdict = if report.passed() { "pass" } else { "fail" };
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>harness compare</title><style>{STYLE}</style></head><body>\n"
    );
    let failures = report.failures();
    let _ = writeln!(
        out,
        "<h1>harness compare: <span class=\"{verdict}\">{}</span></h1>\n<p>paths {}; reference {}; thresholds {}; {} models; {:.1} s</p>",
        if report.passed() { "all checks passed".to_string() } else { format!("{} failing checks", failures.len()) },
        escape(&report.paths.to_string()),
        escape(&report.reference_dir),
        escape(&report.thresholds),
        report.models.len(),
        report.seconds
    );

    out.push_str("<table>\n");
    for (i, row) in report.table_rows().iter().enumerate() {
        out.push_str("<tr>");
        let tag = if i == 0 { "th" } else { "td" };
        for (c, cell) in row.iter().enumerate() {
            let class = if i > 0 && c + 1 == row.len() && !cell.is_empty() {
                format!(" class=\"{}\"", escape(cell))
            } else {
                String::new()
            };
            let _ = write!(out, "<{tag}{class}>{}</{tag}>", escape(cell));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
    if !failures.is_empty() {
        out.push_str("<h2>Failing checks</h2>\n<ul class=\"failures\">\n");
        for (at, f) in &failures {
            let _ = writeln!(
                out,
                "<li>{}: {}: {}</li>",
                escape(at),
                f.check,
                escape(&f.detail)
            );
        }
        out.push_str("</ul>\n");
    }

    for m in &report.models {
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
        if let Some((prompt, reports)) = representative(m) {
            let srcs = sources(&reports);
            let _ = writeln!(
                out,
                "<p>Prompt <b>{}</b> ({} tokens). Tap lines: colour by tap; solid: {} against llama.cpp; dashed: other paths against llama.cpp; thin with dots: a path against the first path; an NMSE or KLD of 0 sits on the bottom axis.</p>",
                escape(prompt),
                reports[0].n_tokens,
                escape(&srcs.first().map(|s| s.label.clone()).unwrap_or_default())
            );
            for chart in [tap_chart(prompt, &srcs), logits_chart(prompt, &srcs)] {
                match chart {
                    Ok(Some(svg)) => {
                        out.push_str(&svg);
                        out.push('\n');
                    }
                    Ok(None) => {}
                    Err(e) => {
                        let _ = writeln!(out, "<p class=\"fail\">plot failed: {}</p>", escape(&e));
                    }
                }
            }
        }
        out.push_str("</section>\n");
    }
    out.push_str("</body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::sample;

    #[test]
    fn the_page_is_self_contained_with_a_plot_per_run_model() {
        let r = sample::report();
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
        // smol: a tap chart and a KLD chart; mamba (skipped): none.
        assert_eq!(html.matches("<svg").count(), 2);
        assert!(html.contains("tap NMSE by layer, prompt capital"));
        // The first divergence of gpu is marked.
        assert!(html.contains("first divergence (gpu): l_out"), "{html}");
        // Markup in details is escaped.
        assert!(html.contains("first divergence: &lt;Qcur&gt; &amp; &quot;more&quot;"));
        assert!(!html.contains("<Qcur>"));
        // Every row of the terminal table.
        assert_eq!(html.matches("<tr>").count(), r.table_rows().len());
        assert!(html.contains("<td class=\"FAIL\">FAIL</td>"));
        assert!(html.contains("skipped: architecture &apos;mamba&apos; not implemented"));
    }

    #[test]
    fn the_representative_prompt_is_the_first_failing_one() {
        let mut r = sample::report();
        let mut other = r.models[0].prompts[0].clone();
        other.prompt = "first".into();
        r.models[0].prompts.insert(0, other);
        let (id, reports) = representative(&r.models[0]).unwrap();
        assert_eq!((id, reports.len()), ("capital", 2));
        assert!(representative(&r.models[1]).is_none());
    }

    #[test]
    fn log_ranges_span_whole_decades() {
        assert_eq!(
            log_range([3e-5, 0.0, f64::NAN, 2e-3].into_iter(), 1e-9),
            (1e-5, 1e-2)
        );
        assert_eq!(log_range([0.0].into_iter(), 1e-9), (1e-9, 1e-8));
        let (lo, hi) = log_range([1e-3].into_iter(), 1e-9);
        assert!(lo <= 1e-3 && hi >= 1e-2 * 0.999);
    }
}

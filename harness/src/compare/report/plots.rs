//! The plots of the HTML report, inline SVG drawn with `plotters`:
//! - [`tap_grid`]: small multiples, one chart per tap family (`Qcur`,
//!   `ffn_out`, ...), tap NMSE (log) against layer, every chart on the same
//!   axes; a line per source (a path against llama.cpp, or against the
//!   run's first path) in its path's colour, that source's limit as a thin
//!   step line of the same colour, a cross on every tap over its limit and
//!   a ring with a label on each source's first divergence;
//! - [`kld_chart`]: KLD (log) per prompt position, a line per source, and
//!   under it a strip per source marking the positions whose most likely
//!   token differs.
//!
//! Colours: the Okabe–Ito palette (told apart with the common colour
//! vision deficiencies) without its yellow, too light on white: one colour
//! per path of the model, in the model's path order ([`path_color`]).

use plotters::prelude::*;

use crate::compare::checks::logits::LogitsResult;
use crate::compare::checks::taps::{TapRow, TapsResult};

/// Okabe–Ito: blue, vermillion, bluish green, reddish purple, orange, sky
/// blue, black.
pub const PALETTE: [RGBColor; 7] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 0, 0),
];

/// The colour of the `i`th path of a model.
pub fn path_color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// `#rrggbb` of a colour (for the HTML legend).
pub fn hex(c: RGBColor) -> String {
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

/// One source's taps, as drawn.
pub struct TapSeries<'a> {
    /// "cpu" or "gpu~cpu".
    pub label: String,
    pub color: RGBColor,
    pub taps: &'a TapsResult,
}

/// One source's logits, as drawn (`thin`: a path against the first path).
pub struct KldSeries<'a> {
    pub label: String,
    pub color: RGBColor,
    pub thin: bool,
    pub logits: &'a LogitsResult,
}

/// Small charts per row of a grid ([`tap_grid`]): only the first column
/// has y labels, only a chart with none below it x labels.
pub const GRID_COLUMNS: usize = 4;
/// Pixel size of a small chart without its label areas, and of those.
const SMALL: (u32, u32) = (262, 168);
const Y_LABELS: u32 = 44;
const X_LABELS: u32 = 18;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The smallest value a log axis shows: below it (a KLD of 1e-300, say)
/// a value sits on the bottom axis with the zeros.
pub const LOG_MIN: f64 = 1e-18;

/// A log-scale range holding the positive finite values of `v` (at least
/// one decade, from [`LOG_MIN`] at the lowest; `floor` when there are
/// none).
pub fn log_range(v: impl Iterator<Item = f64>, floor: f64) -> (f64, f64) {
    let (lo, hi) = v
        .filter(|x| x.is_finite() && *x > 0.0)
        .map(|x| x.max(LOG_MIN))
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

/// An axis label for whole numbers only (ticks fall between them too).
fn integer(v: &f64) -> String {
    if (v - v.round()).abs() < 1e-6 {
        format!("{v:.0}")
    } else {
        String::new()
    }
}

/// x of each tap row of `t`: its layer; a tap without a layer at -1 when
/// it comes before the first layer, at `after` when after the last.
pub fn tap_xs(t: &TapsResult, after: f64) -> Vec<f64> {
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

/// The tap names of `taps`, in graph order (first seen first).
pub fn families<'a>(taps: impl Iterator<Item = &'a TapsResult>) -> Vec<&'a str> {
    let mut names: Vec<&'a str> = Vec::new();
    for t in taps {
        for r in &t.rows {
            if !names.contains(&r.name.as_str()) {
                names.push(&r.name);
            }
        }
    }
    names
}

/// The points of a step line through `(x, limit)`: a vertical step half
/// way between two taps whose limits differ, no point inside a run of
/// equal limits.
pub fn limit_steps(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    fn push(out: &mut Vec<(f64, f64)>, p: (f64, f64)) {
        match out.as_slice() {
            [.., a, b] if a.1 == p.1 && b.1 == p.1 => out.last_mut().expect("two").0 = p.0,
            _ => out.push(p),
        }
    }
    let mut out = Vec::new();
    for (i, &(x, y)) in points.iter().enumerate() {
        if let Some(&(px, py)) = i.checked_sub(1).and_then(|j| points.get(j)) {
            if py != y {
                let mid = (px + x) / 2.0;
                push(&mut out, (mid, py));
                push(&mut out, (mid, y));
            }
        }
        push(&mut out, (x, y));
    }
    out
}

/// The small multiples of one prompt's taps: one SVG per tap family, each
/// with the same x (layer) and y (NMSE, log) ranges. Empty: no taps.
pub fn tap_grid(series: &[TapSeries]) -> Result<Vec<String>, String> {
    let series: Vec<&TapSeries> = series.iter().filter(|s| !s.taps.rows.is_empty()).collect();
    if series.is_empty() {
        return Ok(Vec::new());
    }
    let last_layer = series
        .iter()
        .flat_map(|s| s.taps.rows.iter().filter_map(|r| r.layer))
        .max()
        .unwrap_or(0) as f64;
    let after = last_layer + 1.0;
    let (lo, hi) = log_range(
        series
            .iter()
            .flat_map(|s| s.taps.rows.iter().flat_map(|r| [r.nmse, r.limit])),
        1e-12,
    );
    let names = families(series.iter().map(|s| s.taps));
    let n = names.len();
    names
        .into_iter()
        .enumerate()
        .map(|(i, name)| {
            let axes = Axes {
                x: (-1.5, after + 0.5),
                y: (lo, hi),
                after,
                y_labels: i % GRID_COLUMNS == 0,
                x_labels: i + GRID_COLUMNS >= n,
            };
            family_chart(name, &series, &axes)
        })
        .collect()
}

/// One small chart: tap family `name` of every source.
/// The shared axes of a grid, and which labels one chart of it draws.
struct Axes {
    x: (f64, f64),
    y: (f64, f64),
    /// The x of the taps after the last layer.
    after: f64,
    y_labels: bool,
    x_labels: bool,
}

fn family_chart(name: &str, series: &[&TapSeries], axes: &Axes) -> Result<String, String> {
    let (x_range, (lo, hi), after) = (axes.x, axes.y, axes.after);
    let y_area = if axes.y_labels { Y_LABELS } else { 0 };
    let x_area = if axes.x_labels { X_LABELS } else { 0 };
    let size = (SMALL.0 + y_area, SMALL.1 + x_area);
    // The first divergences in this family, to mark and name.
    let diverged: Vec<(&TapSeries, &TapRow)> = series
        .iter()
        .filter_map(|s| {
            s.taps
                .first_divergence
                .as_ref()
                .filter(|d| d.name == name)
                .map(|d| (*s, d))
        })
        .collect();
    let caption = match diverged.first() {
        Some((s, d)) => format!(
            "{name}: first divergence ({}, {})",
            s.label,
            d.layer.map_or("no layer".into(), |l| format!("layer {l}"))
        ),
        None => name.to_string(),
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        if !diverged.is_empty() {
            let (w, h) = size;
            root.draw(&Rectangle::new(
                [(1, 1), (w as i32 - 2, h as i32 - 2)],
                BLACK.stroke_width(3),
            ))
            .map_err(err)?;
        }
        let mut chart = ChartBuilder::on(&root)
            .caption(
                caption,
                ("sans-serif", 13).into_font().color(&BLACK.mix(0.95)),
            )
            .margin(6)
            .x_label_area_size(x_area)
            .y_label_area_size(y_area)
            .build_cartesian_2d(x_range.0..x_range.1, (lo..hi).log_scale())
            .map_err(err)?;
        chart
            .configure_mesh()
            .set_all_tick_mark_size(0)
            .disable_x_mesh()
            .light_line_style(TRANSPARENT)
            .bold_line_style(BLACK.mix(0.12))
            .x_labels(5)
            .y_labels(5)
            .label_style(("sans-serif", 10))
            .y_label_formatter(&|v| format!("{v:.0e}"))
            .x_label_formatter(&integer)
            .draw()
            .map_err(err)?;
        let at = |v: f64| if v.is_nan() { hi } else { v.clamp(lo, hi) };
        let mut limit_named = false;
        for s in series {
            let xs = tap_xs(s.taps, after);
            let rows: Vec<(f64, &TapRow)> = s
                .taps
                .rows
                .iter()
                .zip(&xs)
                .filter(|(r, _)| r.name == name)
                .map(|(r, &x)| (x, r))
                .collect();
            if rows.is_empty() {
                continue;
            }
            let limits: Vec<(f64, f64)> = rows.iter().map(|(x, r)| (*x, at(r.limit))).collect();
            let steps = limit_steps(&limits);
            let end = *steps.last().expect("a point per row");
            chart
                .draw_series(std::iter::once(PathElement::new(
                    steps,
                    s.color.mix(0.8).stroke_width(1),
                )))
                .map_err(err)?;
            if !limit_named {
                // The first source's limit line says what it is.
                limit_named = true;
                chart
                    .draw_series(std::iter::once(
                        EmptyElement::at(end)
                            + Text::new(
                                "limit",
                                (-24, -11),
                                ("sans-serif", 10).into_font().color(&BLACK.mix(0.7)),
                            ),
                    ))
                    .map_err(err)?;
            }
            let pts: Vec<(f64, f64)> = rows.iter().map(|(x, r)| (*x, at(r.nmse))).collect();
            if pts.len() == 1 {
                chart
                    .draw_series(std::iter::once(Circle::new(pts[0], 3, s.color.filled())))
                    .map_err(err)?;
            } else {
                chart
                    .draw_series(std::iter::once(PathElement::new(
                        pts,
                        s.color.stroke_width(2),
                    )))
                    .map_err(err)?;
            }
            // A cross on each tap over its limit.
            chart
                .draw_series(
                    rows.iter()
                        .filter(|(_, r)| !r.pass)
                        .map(|(x, r)| Cross::new((*x, at(r.nmse)), 3, BLACK.stroke_width(1))),
                )
                .map_err(err)?;
        }
        for (i, (s, d)) in diverged.iter().enumerate() {
            let xs = tap_xs(s.taps, after);
            let Some(x) = s.taps.rows.iter().position(|r| r == *d).map(|i| xs[i]) else {
                continue;
            };
            let p = (x, at(d.nmse));
            chart
                .draw_series(std::iter::once(Circle::new(p, 6, BLACK.stroke_width(2))))
                .map_err(err)?;
            let label = format!("{} {:.1e}", s.label, d.nmse);
            // Left of the ring on the right half; stacked per source.
            let shift = if x > (x_range.0 + x_range.1) / 2.0 {
                -8 - 6 * label.len() as i32
            } else {
                9
            };
            chart
                .draw_series(std::iter::once(
                    EmptyElement::at(p)
                        + Text::new(
                            label,
                            (shift, 4 + 12 * i as i32),
                            ("sans-serif", 11).into_font().color(&BLACK),
                        ),
                ))
                .map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// The KLD per position and top-1 strip chart of one prompt (None: no
/// logits per position).
pub fn kld_chart(series: &[KldSeries]) -> Result<Option<String>, String> {
    let with: Vec<&KldSeries> = series
        .iter()
        .filter(|s| !s.logits.per_position.is_empty())
        .collect();
    if with.is_empty() {
        return Ok(None);
    }
    let n = with
        .iter()
        .map(|s| s.logits.per_position.len())
        .max()
        .unwrap_or(1);
    let (lo, hi) = log_range(
        with.iter()
            .flat_map(|s| s.logits.per_position.iter().map(|p| p.kld)),
        1e-9,
    );
    let width = 900;
    let upper_h = 230;
    let strip_h = 18 * with.len() as u32 + 44;
    let mut svg = String::new();
    {
        let root =
            SVGBackend::with_string(&mut svg, (width, upper_h + strip_h)).into_drawing_area();
        let (upper, lower) = root.split_vertically(upper_h);
        let mut chart = ChartBuilder::on(&upper)
            .caption(
                "KLD per prompt position (top-64 + tail bucket, nats; 0 on the bottom axis)",
                ("sans-serif", 13),
            )
            .margin(8)
            .x_label_area_size(18)
            .y_label_area_size(110)
            .build_cartesian_2d(-0.5..n as f64 - 0.5, (lo..hi).log_scale())
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .light_line_style(TRANSPARENT)
            .bold_line_style(BLACK.mix(0.12))
            .y_labels(6)
            .label_style(("sans-serif", 10))
            .y_label_formatter(&|v| format!("{v:.0e}"))
            .x_label_formatter(&integer)
            .draw()
            .map_err(err)?;
        for s in &with {
            let pts: Vec<(f64, f64)> = s
                .logits
                .per_position
                .iter()
                .enumerate()
                .filter(|(_, p)| !p.kld.is_nan())
                .map(|(x, p)| (x as f64, p.kld.clamp(lo, hi)))
                .collect();
            let width = if s.thin { 1 } else { 2 };
            if pts.len() == 1 {
                chart
                    .draw_series(std::iter::once(Circle::new(pts[0], 3, s.color.filled())))
                    .map_err(err)?;
            } else {
                chart
                    .draw_series(std::iter::once(PathElement::new(
                        pts,
                        s.color.stroke_width(width),
                    )))
                    .map_err(err)?;
            }
        }

        // Top-1: a light bar per source, a dark mark where it differs.
        let labels: Vec<String> = with
            .iter()
            .map(|s| format!("{} {}/{}", s.label, s.logits.top1_agree, s.logits.positions))
            .collect();
        let mut strip = ChartBuilder::on(&lower)
            .caption(
                "top-1 per position: dark where our most likely token differs",
                ("sans-serif", 12),
            )
            .margin(8)
            .x_label_area_size(16)
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
            .label_style(("sans-serif", 10))
            .x_label_formatter(&integer)
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                    labels.get(*i as usize).cloned().unwrap_or_default()
                }
                SegmentValue::Last => String::new(),
            })
            .draw()
            .map_err(err)?;
        let agree = RGBColor(205, 220, 235);
        let differ = RGBColor(213, 94, 0);
        for (row, s) in with.iter().enumerate() {
            let row = row as i32;
            let len = s.logits.per_position.len() as f64;
            let cell = |x0: f64, x1: f64, c: RGBColor| {
                Rectangle::new(
                    [
                        (x0, SegmentValue::Exact(row)),
                        (x1, SegmentValue::Exact(row + 1)),
                    ],
                    c.filled(),
                )
            };
            strip
                .draw_series(std::iter::once(cell(-0.45, len - 0.55, agree)))
                .map_err(err)?;
            strip
                .draw_series(
                    s.logits
                        .per_position
                        .iter()
                        .enumerate()
                        .filter(|(_, p)| !p.top1)
                        .map(|(x, _)| cell(x as f64 - 0.45, x as f64 + 0.45, differ)),
                )
                .map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(Some(svg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_ranges_span_whole_decades() {
        assert_eq!(
            log_range([3e-5, 0.0, f64::NAN, 2e-3].into_iter(), 1e-9),
            (1e-5, 1e-2)
        );
        assert_eq!(log_range([0.0].into_iter(), 1e-9), (1e-9, 1e-8));
        let (lo, hi) = log_range([1e-3].into_iter(), 1e-9);
        assert!(lo <= 1e-3 && hi >= 1e-2 * 0.999);
        // A denormal KLD does not stretch the axis over 300 decades.
        assert_eq!(log_range([3.5e-323, 0.5].into_iter(), 1e-9), (1e-18, 1.0));
    }

    #[test]
    fn a_limit_is_a_step_line_with_a_point_per_change() {
        // Layer 0 at 1e-10, layers 1..3 at 1e-2: a step half way.
        let pts = [(0.0, 1e-10), (1.0, 1e-2), (2.0, 1e-2), (3.0, 1e-2)];
        assert_eq!(
            limit_steps(&pts),
            [(0.0, 1e-10), (0.5, 1e-10), (0.5, 1e-2), (3.0, 1e-2)]
        );
        assert_eq!(limit_steps(&[(1.0, 5.0)]), [(1.0, 5.0)]);
        assert_eq!(
            limit_steps(&[(1.0, 5.0), (2.0, 5.0), (3.0, 5.0)]),
            [(1.0, 5.0), (3.0, 5.0)]
        );
    }

    #[test]
    fn the_palette_is_distinct_and_dark_enough_on_white() {
        for (i, a) in PALETTE.iter().enumerate() {
            // Relative luminance (sRGB approximated by a 2.2 gamma) at most
            // 0.45: a contrast of 2:1 or more against white.
            let lum = |c: u8| (c as f64 / 255.0).powf(2.2);
            let l = 0.2126 * lum(a.0) + 0.7152 * lum(a.1) + 0.0722 * lum(a.2);
            assert!((1.05 / (l + 0.05)) >= 2.0, "{} too light", hex(*a));
            for b in &PALETTE[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_eq!(hex(PALETTE[0]), "#0072b2");
    }
}

//! Our intermediate tensors against llama.cpp's graph tensors.
//!
//! The engine emits each tensor once, under the name llama.cpp's graph
//! gives the same value (see `engine::trace`). llama.cpp reuses a name for
//! several nodes (`Qcur-3` names the Q projection, its reshape to heads and
//! the RoPE output, keys `Qcur-3#0`, `#1`, `#2`), so [`reference_sel`]
//! says which node holds our value. Measured on both captured models
//! (llama.cpp at llama-cpp-sys-2 0.1.161): with these selectors every
//! tensor we emit has a counterpart of the same size.
//!
//! llama.cpp tensors we do not emit, so do not compare: `norm` (the RMS
//! norm before its weight), `kq`, `kq_soft_max`, `kqv` (inside our fused
//! attention), `embd` (llama's raw embedding row).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::calibration::{
    ceil125, limit_text, measured_text, toml_key, with_headroom, worst_of, Drafted, Worst,
    NMSE_FLOOR,
};
use super::routing::{Routing, ROUTING_TIE};
use super::sink::OurTap;
use super::thresholds::Limits;
use super::tolerance::{Figure, Found, Reads, Rule, Tolerance};
use super::{Check, Level, LimitsEntry};
use crate::compare::within;
use crate::compare::{sci, Failure};
use crate::metrics;
use crate::reference::{PromptData, TapSel};

/// The llama.cpp node (among those named like our tap, in its layer) that
/// holds the value of our tap `name`:
/// - `Qcur`, `Kcur`: after RoPE (the `ROPE` node, `#2`), which is where
///   we tap them; a RoPE fault shows there first.
/// - `Vcur`, `ffn_out`: the projection (`MUL_MAT`); `Vcur`'s reshape holds
///   the same values, and older llama.cpp graphs named llama's residual sum
///   `ffn_out` too.
/// - any other name: its last node (for every name we emit, the only one).
pub fn reference_sel(name: &str) -> TapSel<'static> {
    match name {
        "Qcur" | "Kcur" => TapSel::Op("ROPE"),
        "Vcur" | "ffn_out" => TapSel::Op("MUL_MAT"),
        _ => TapSel::Last,
    }
}

/// One tap compared.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TapRow {
    /// Our name and layer.
    pub name: String,
    pub layer: Option<usize>,
    /// llama.cpp's key and op, e.g. "Qcur-0#2", "ROPE".
    pub reference: String,
    pub op: String,
    /// Positions compared (1, or every prompt position).
    pub positions: usize,
    #[serde(deserialize_with = "crate::nan::f64")]
    pub nmse: f64,
    #[serde(deserialize_with = "crate::nan::f64")]
    pub max_abs: f64,
    #[serde(deserialize_with = "crate::nan::f64")]
    pub cosine: f64,
    #[serde(deserialize_with = "crate::nan::f64")]
    pub limit: f64,
    pub pass: bool,
}

/// Every tap of one prompt compared.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TapsResult {
    /// In graph order (layer by layer, in the order each layer computes).
    pub rows: Vec<TapRow>,
    /// The first row over its limit.
    pub first_divergence: Option<TapRow>,
    /// Taps we emitted that could not be compared, and why.
    pub unmatched: Vec<String>,
    /// Routing differences: each near-tie and what it left out, or why a
    /// difference is not one ([`super::routing`]).
    pub routing_near_ties: Vec<String>,
    /// The largest gap of the accepted near-ties that chose other experts
    /// (what `routing_tie` is calibrated from).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing_set_gap: Option<f64>,
}

impl TapsResult {
    /// Measures our tap `ours` (values `got`) against `want` (the
    /// reference's key and op), appends the row, and makes it the first
    /// divergence when it is the first over `limit`.
    pub fn push_measured(
        &mut self,
        ours: &OurTap,
        (reference, op): (String, String),
        positions: usize,
        want: &[f32],
        got: &[f32],
        limit: f64,
    ) {
        let nmse = metrics::nmse(want, got);
        let row = TapRow {
            name: ours.name.clone(),
            layer: ours.layer,
            reference,
            op,
            positions,
            nmse,
            max_abs: metrics::max_abs_diff(want, got),
            cosine: metrics::cosine(want, got),
            limit,
            pass: within(nmse, limit),
        };
        if !row.pass && self.first_divergence.is_none() {
            self.first_divergence = Some(row.clone());
        }
        self.rows.push(row);
    }

    pub fn failed(&self) -> usize {
        self.rows.iter().filter(|r| !r.pass).count()
    }

    /// The largest NMSE (NaN if any is NaN).
    pub fn max_nmse(&self) -> f64 {
        self.rows.iter().map(|r| r.nmse).fold(0.0, |m, x| {
            if m.is_nan() || x.is_nan() {
                f64::NAN
            } else {
                m.max(x)
            }
        })
    }
}

/// The reference's values of tap `name` at the positions it kept (the last,
/// or all of them), with those positions.
fn reference_at(
    data: &PromptData,
    name: &str,
    layer: Option<usize>,
    n_tokens: usize,
) -> Result<(String, String, Vec<usize>, Vec<f32>), String> {
    let label = match layer {
        Some(l) => format!("{name}-{l}"),
        None => name.to_string(),
    };
    let Some((info, reference)) = data.tap(name, layer.map(|l| l as u32), reference_sel(name))
    else {
        return Err(format!("{label}: llama.cpp has no such tensor"));
    };
    let stored = info.token_dim.map_or(1, |d| reference.ne[d]);
    let positions: Vec<usize> = if stored == n_tokens {
        (0..n_tokens).collect()
    } else if stored == 1 {
        vec![n_tokens - 1]
    } else {
        return Err(format!(
            "{label}: {} holds {stored} positions of {n_tokens}",
            info.key
        ));
    };
    let mut want = Vec::new();
    for i in 0..positions.len() {
        match info.token_dim {
            Some(d) => want.extend(reference.slice(d, if stored == 1 { 0 } else { i }).data),
            None => want.extend_from_slice(&reference.data),
        }
    }
    Ok((info.key.clone(), info.op.clone(), positions, want))
}

/// A position, the counterpart's row there and ours (None: not held).
pub type RowPair<'a> = (usize, Option<&'a [f32]>, Option<&'a [f32]>);

/// One tap's counterpart, for [`align`].
pub struct Pairing<'a> {
    /// The counterpart's key and op in the result ("Qcur-0#2", "ROPE").
    pub reference: (String, String),
    /// Per position to compare, in order: the counterpart's row and ours
    /// (None: not held).
    pub rows: Vec<RowPair<'a>>,
    /// Why the tap cannot be compared when a row is not held by both or
    /// has another width.
    pub mismatch: String,
}

/// `name-layer`, or `name` for a tap outside the layers.
pub fn label(tap: &OurTap) -> String {
    match tap.layer {
        Some(l) => format!("{}-{l}", tap.name),
        None => tap.name.clone(),
    }
}

/// Tap alignment, the one loop every tap comparison runs (against
/// llama.cpp, another path, a split's reference): each of `ours`, in graph
/// order, paired with its counterpart by `pair` (given the tap, its label
/// and whether a layer's tap came before it; None: not compared, Err: not
/// comparable, and why), compared at the positions both hold (a routing
/// near-tie leaves some out), and held to `limit` (given whether no
/// layer's tap came before it or is it). A tap with a row missing or of
/// another width is not comparable; one whose every position the routing
/// left out is skipped, unless `none_is_unmatched`.
pub fn align<'a>(
    ours: &'a [OurTap],
    mut pair: impl FnMut(&'a OurTap, &str, bool) -> Option<Result<Pairing<'a>, String>>,
    routing: Option<Routing>,
    limit: impl Fn(&OurTap, bool) -> f64,
    none_is_unmatched: bool,
) -> TapsResult {
    let mut out = TapsResult::default();
    let mut seen_layer = false;
    for tap in ours {
        let seen_before = seen_layer;
        seen_layer |= tap.layer.is_some();
        let label = label(tap);
        let pairing = match pair(tap, &label, seen_before) {
            None => continue,
            Some(Err(why)) => {
                out.unmatched.push(why);
                continue;
            }
            Some(Ok(p)) => p,
        };
        let (mut want, mut got, mut compared) = (Vec::new(), Vec::new(), 0);
        let mut missing = false;
        for &(p, theirs, mine) in &pairing.rows {
            let (Some(t), Some(o)) = (theirs, mine) else {
                missing = true;
                break;
            };
            if t.len() != o.len() {
                missing = true;
                break;
            }
            let selected = match &routing {
                Some(r) => r.select(&tap.name, tap.layer, p, t, o),
                None => Some((t.into(), o.into())),
            };
            if let Some((t, o)) = selected {
                want.extend_from_slice(&t);
                got.extend_from_slice(&o);
                compared += 1;
            }
        }
        if missing || (compared == 0 && none_is_unmatched) {
            out.unmatched.push(pairing.mismatch);
            continue;
        }
        if compared == 0 {
            continue;
        }
        let limit = limit(tap, !seen_layer);
        out.push_measured(tap, pairing.reference, compared, &want, &got, limit);
    }
    if let Some(r) = routing {
        out.routing_set_gap = r.set_gap;
        out.routing_near_ties = r.notes;
    }
    out
}

/// Compares every tap we emitted with llama.cpp's, at the positions the
/// capture kept.
pub fn compare(data: &PromptData, ours: &[OurTap], limits: &Limits) -> TapsResult {
    let n_tokens = data.tokens().len();
    let routing = Routing::find(
        ours,
        |name, l| {
            let (_, _, positions, values) = reference_at(data, name, Some(l), n_tokens).ok()?;
            let w = values.len() / positions.len().max(1);
            Some(
                positions
                    .iter()
                    .enumerate()
                    .map(|(i, &p)| (p, values[i * w..(i + 1) * w].to_vec()))
                    .collect(),
            )
        },
        limits.routing_tie,
    );
    // Each tap's reference values, kept while the pairs borrow them.
    let references: Vec<_> = ours
        .iter()
        .map(|tap| reference_at(data, &tap.name, tap.layer, n_tokens))
        .collect();
    let mut next = references.iter();
    align(
        ours,
        |tap, label, _| {
            let (key, op, positions, reference) = match next.next().expect("one per tap") {
                Ok(r) => r,
                Err(why) => return Some(Err(why.clone())),
            };
            let w = reference.len() / positions.len().max(1);
            let rows = positions
                .iter()
                .enumerate()
                .map(|(i, &p)| {
                    let ours = tap.rows.get(&p).map(Vec::as_slice);
                    (p, Some(&reference[i * w..(i + 1) * w]), ours)
                })
                .collect();
            Some(Ok(Pairing {
                reference: (key.clone(), op.clone()),
                rows,
                mismatch: format!(
                    "{label}: our values at {} position(s) do not match llama.cpp's {key} ({} values)",
                    positions.len(),
                    reference.len()
                ),
            }))
        },
        Some(routing),
        |tap, first| limits.tap_nmse(&tap.name, tap.layer, first),
        false,
    )
}

/// Layer-0 taps held to `exact_layer0` on the cpu path by `harness
/// calibrate` (those no re-quantized differing value reaches: the
/// embedding, the attention norm, Q/K/V, QK-norms, RoPE, the attention
/// output).
pub const EXACT_LAYER0: &[&str] = &[
    "inp_scaled",
    "attn_norm",
    "Qcur",
    "Kcur",
    "Vcur",
    "Qcur_normed",
    "Kcur_normed",
    "kqv_out",
];

/// Each tap's NMSE: 2x, floor 1e-12 (layer 0 agrees to ~1e-13 or
/// exactly); one regression for all taps worse, the worst named.
pub const TAP_NMSE: Figure = Figure {
    name: "tap_nmse",
    reads: Reads::Sci,
    rule: Rule::EachGrows(
        "each tap",
        Tolerance {
            factor: 2.0,
            floor: 1e-12,
        },
    ),
};
/// The first tap over its limit: worse when earlier in graph order (or
/// new); its values are layers.
pub const FIRST_DIVERGENCE: Figure = Figure {
    name: "first_divergence",
    reads: Reads::Layer,
    rule: Rule::Words("earlier in graph order"),
};

/// Each tap name's worst NMSE and where.
type ByName<'t> = BTreeMap<&'t str, Worst>;

/// Per tap name, its worst NMSE over the entry and where: the later layers
/// (and the whole-model taps after the first layer), and layer 0 (with
/// those before it). Errors: a tap measured not finite.
fn worst_taps<'t>(
    entry: &LimitsEntry,
    ms: &[(&'t TapsResult, String)],
) -> Result<(ByName<'t>, ByName<'t>), String> {
    let mut rest: BTreeMap<&str, Worst> = BTreeMap::new();
    let mut first: BTreeMap<&str, Worst> = BTreeMap::new();
    for (t, at) in ms {
        let mut seen_layer = false;
        for row in &t.rows {
            seen_layer |= row.layer.is_some();
            let layer0 = row.layer == Some(0) || (row.layer.is_none() && !seen_layer);
            let table = if layer0 { &mut first } else { &mut rest };
            let at = match row.layer {
                Some(l) => format!("{at}, layer {l}"),
                None => at.clone(),
            };
            let w = Worst {
                value: row.nmse,
                at,
            };
            if !w.value.is_finite() {
                entry.finite(&format!("tap {}", row.name), &w)?;
            }
            match table.get(row.name.as_str()) {
                Some(old) if old.value >= w.value => {}
                _ => {
                    table.insert(row.name.as_str(), w);
                }
            }
        }
    }
    Ok((rest, first))
}

/// `Qcur-0`, or `result_norm` for a tap outside the layers.
fn tap_label(r: &TapRow) -> String {
    match r.layer {
        Some(l) => format!("{}-{l}", r.name),
        None => r.name.clone(),
    }
}

impl Check for TapsResult {
    const KEY: &'static str = "taps";
    const LEVEL: Level = Level::Prompt;
    const MEASURES: &'static str =
        "every intermediate tensor we emit against llama.cpp's of the same meaning (NMSE, max abs, cosine)";
    const LIMIT_KEYS: &'static [&'static str] = &["taps", "taps_layer0", "routing_tie"];
    const NULL_WHEN_ABSENT: bool = true;

    fn failures(&self, _limits: &Limits) -> Vec<Failure> {
        let mut out = Vec::new();
        if let Some(d) = &self.first_divergence {
            out.push(Failure::new(
                "taps",
                format!(
                    "first divergence: layer {} {} (llama.cpp {} {}): NMSE {:.3e} > {:.1e}; {} of {} taps over their limits",
                    d.layer.map_or("-".to_string(), |l| l.to_string()),
                    d.name,
                    d.reference,
                    d.op,
                    d.nmse,
                    d.limit,
                    self.failed(),
                    self.rows.len()
                ),
            ));
        }
        if !self.unmatched.is_empty() {
            out.push(Failure::new(
                "taps",
                format!("not comparable: {}", self.unmatched.join("; ")),
            ));
        }
        out
    }

    /// `routing_tie` (a mixture of experts): the widest near-tie at which
    /// a path chose other experts than the reference, times the headroom;
    /// 0 when none did. Taps: per name, the worst NMSE times the headroom,
    /// layer 0 (and the whole-model taps before the first layer) apart. On
    /// the `cpu` path layer 0 follows the rules of ci/thresholds.toml:
    /// [`EXACT_LAYER0`] held to `exact_layer0`, the rest to `rest_layer0`
    /// (sharpi's CPU kernels quantize activations as llama.cpp's do, so
    /// there only f32 summation order differs, measured <= 2e-13); a
    /// measurement above such a rule is not hidden: the limit is then
    /// measured x headroom and the comment says so. Other paths get
    /// measured x headroom in layer 0 too, floored at 1e-12.
    fn calibrate(entry: &LimitsEntry) -> Result<Vec<Drafted>, String> {
        let h = entry.rules.headroom;
        let ms: Vec<(&TapsResult, String)> = entry
            .results::<TapsResult>()
            .map(|(t, m)| (t, m.at()))
            .collect();
        let mut out = Vec::new();
        if ms
            .iter()
            .any(|(t, _)| t.rows.iter().any(|r| r.name == "ffn_moe_topk"))
        {
            let gaps = ms
                .iter()
                .filter_map(|(t, at)| Some((t.routing_set_gap?, at.clone())));
            let text = match worst_of(gaps, true) {
                Some(w) => format!(
                    "routing_tie = {}  # widest near-tie that chose other experts {} ({}), x{h}\n",
                    limit_text(ceil125(w.value * h)),
                    measured_text(w.value),
                    w.at
                ),
                None => format!(
                    "routing_tie = 0  # no near-tie chose other experts: {ROUTING_TIE:.0e} of the larger alone\n"
                ),
            };
            out.push(Drafted {
                key: "routing_tie",
                text,
            });
        }
        let (rest, first) = worst_taps(entry, &ms)?;
        let mut text = String::new();
        if rest.is_empty() && first.is_empty() {
            let _ = writeln!(
                text,
                "taps = {{ default = 1e-2 }}  # no taps measured: a placeholder bound for taps of later captures\n"
            );
            out.push(Drafted { key: "taps", text });
            return Ok(out);
        }
        let sect = entry.table();
        let limit = |w: &Worst| with_headroom(w.value, entry.rules, NMSE_FLOOR);
        let _ = writeln!(text, "\n[{sect}.taps]");
        let default = rest.values().map(limit).fold(NMSE_FLOOR, f64::max);
        let _ = writeln!(
            text,
            "default = {}  # the loosest below: a tap not measured here",
            limit_text(default)
        );
        for (name, w) in &rest {
            let _ = writeln!(
                text,
                "{} = {}  # measured {} ({}), x{h}",
                toml_key(name),
                limit_text(limit(w)),
                measured_text(w.value),
                w.at
            );
        }
        if !first.is_empty() {
            let _ = writeln!(text, "\n[{sect}.taps_layer0]");
            let cpu = entry.key == "cpu";
            let rules = entry.rules;
            let layer0 = |name: &str, w: &Worst| -> (f64, String) {
                let rule = if EXACT_LAYER0.contains(&name) {
                    rules.exact_layer0
                } else {
                    rules.rest_layer0
                };
                let measured = measured_text(w.value);
                if cpu && w.value * h <= rule {
                    (rule, format!("measured {measured} ({}), rule", w.at))
                } else if cpu {
                    (
                        limit(w),
                        format!(
                            "measured {measured} ({}) is above the rule {} / x{h}: measured x{h}",
                            w.at,
                            limit_text(rule)
                        ),
                    )
                } else {
                    (limit(w), format!("measured {measured} ({}), x{h}", w.at))
                }
            };
            let default = if cpu {
                rules.rest_layer0
            } else {
                first.values().map(limit).fold(NMSE_FLOOR, f64::max)
            };
            let _ = writeln!(text, "default = {}", limit_text(default));
            for (name, w) in &first {
                let (lim, why) = layer0(name, w);
                let _ = writeln!(text, "{} = {}  # {why}", toml_key(name), limit_text(lim));
            }
        }
        text.push('\n');
        out.push(Drafted { key: "taps", text });
        Ok(out)
    }

    const FIGURES: &'static [Figure] = &[TAP_NMSE, FIRST_DIVERGENCE];

    /// One regression for all taps worse (the worst named), and an earlier
    /// first divergence (or a new one).
    fn regressions(&self, baseline: &TapsResult) -> Vec<Found> {
        let now = self;
        let Rule::EachGrows(_, tol) = TAP_NMSE.rule else {
            unreachable!("TAP_NMSE has a tolerance")
        };
        let mut out = Vec::new();
        let old: HashMap<(&str, Option<usize>), &TapRow> = baseline
            .rows
            .iter()
            .map(|r| ((r.name.as_str(), r.layer), r))
            .collect();
        let worse: Vec<(&TapRow, &TapRow)> = now
            .rows
            .iter()
            .filter_map(|n| {
                let b = *old.get(&(n.name.as_str(), n.layer))?;
                tol.worse(b.nmse, n.nmse).then_some((b, n))
            })
            .collect();
        // The worst: the largest growth over the (floored) baseline.
        let growth = |(b, n): &(&TapRow, &TapRow)| {
            if n.nmse.is_nan() {
                f64::INFINITY
            } else {
                n.nmse / b.nmse.max(tol.floor)
            }
        };
        if let Some(w) = worse.iter().max_by(|x, y| growth(x).total_cmp(&growth(y))) {
            let (b, n) = *w;
            out.push(Found {
                figure: TAP_NMSE,
                baseline: b.nmse,
                now: n.nmse,
                detail: format!(
                    "{} of {} taps above {} their baseline NMSE; the worst {}: {} against {}",
                    worse.len(),
                    now.rows.len(),
                    tol.describe(),
                    tap_label(n),
                    sci(n.nmse),
                    sci(b.nmse)
                ),
            });
        }
        if let Some(n) = &now.first_divergence {
            let at = |t: &TapsResult, d: &TapRow| t.rows.iter().position(|r| r == d);
            let b = baseline.first_divergence.as_ref();
            let earlier = match (at(now, n), b.and_then(|d| at(baseline, d))) {
                (Some(i), Some(j)) => i < j,
                (_, None) => b.is_none(),
                (None, Some(_)) => false,
            };
            if earlier {
                let layer = |d: &TapRow| d.layer.map_or(f64::NAN, |l| l as f64);
                out.push(Found {
                    figure: FIRST_DIVERGENCE,
                    baseline: b.map_or(f64::NAN, layer),
                    now: layer(n),
                    detail: format!(
                        "first divergence at {} (NMSE {} > {}); the baseline's {}",
                        tap_label(n),
                        sci(n.nmse),
                        sci(n.limit),
                        b.map_or("none".to_string(), |d| format!("at {}", tap_label(d)))
                    ),
                });
            }
        }
        out
    }

    fn summary(&self) -> String {
        match &self.first_divergence {
            None => format!("{} ok, max {}", self.rows.len(), sci(self.max_nmse())),
            Some(d) => format!("first over: {} ({})", d.reference, sci(d.nmse)),
        }
    }
}

#[cfg(test)]
#[path = "taps_tests.rs"]
mod tests;

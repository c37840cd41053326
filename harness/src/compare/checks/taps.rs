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

use serde::{Deserialize, Serialize};

use super::routing::Routing;
use super::sink::OurTap;
use super::thresholds::Limits;
use super::{Check, Level};
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

impl Check for TapsResult {
    const KEY: &'static str = "taps";
    const LEVEL: Level = Level::Prompt;
    const MEASURES: &'static str =
        "every intermediate tensor we emit against llama.cpp's of the same meaning (NMSE, max abs, cosine)";
    const LIMIT_KEYS: &'static [&'static str] = &["taps", "taps_layer0", "routing_tie"];
    const CALIBRATION: &'static str =
        "per tap name, the worst NMSE over the run's prompts times the headroom; layer 0 apart";
    const BASELINE: &'static str =
        "tap_nmse: any tap above 2x its baseline NMSE; first_divergence: earlier in graph order";
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

    fn summary(&self) -> String {
        match &self.first_divergence {
            None => format!("{} ok, max {}", self.rows.len(), sci(self.max_nmse())),
            Some(d) => format!("first over: {} ({})", d.reference, sci(d.nmse)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_pick_the_node_holding_our_value() {
        assert_eq!(reference_sel("Qcur"), TapSel::Op("ROPE"));
        assert_eq!(reference_sel("Kcur"), TapSel::Op("ROPE"));
        assert_eq!(reference_sel("Vcur"), TapSel::Op("MUL_MAT"));
        assert_eq!(reference_sel("ffn_out"), TapSel::Op("MUL_MAT"));
        assert_eq!(reference_sel("l_out"), TapSel::Last);
    }
}

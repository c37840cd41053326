//! The hidden state at a hybrid split, against the `gpu` path.
//!
//! `hybrid:N` runs the embedding and layers `0..N` on the GPU, then hands
//! the hidden state to the CPU ([`engine::placement::Devices::handoff`])
//! for layer `N` on. Against llama.cpp, or against the CPU path, its taps
//! from layer `N` on carry the whole difference between the GPU's f32
//! activations and the CPU's quantized ones (tap NMSE ~1e-5..1e-3), so a
//! hand-off that loses a little of the state is lost in that noise. The
//! `gpu` path is the sharp reference: up to the split it runs the same
//! kernels on the same inputs (every GPU-segment tap bit-identical), and
//! its `attn_norm` of layer `N` is the same RMS norm of the same state as
//! the hybrid's first CPU tap, computed on another device: the CPU's and
//! the GPU's RMS norms round alike (measured bit-identical). So every tap
//! of the hybrid up to its layer `N`'s `attn_norm` is held to
//! [`SPLIT_NMSE`] against the `gpu` path's: any hand-off fault (rows
//! shifted, stale, partly copied, poisoned by a read of a fresh buffer:
//! [`engine::poison`]) shows at layer `N`'s `attn_norm`.
//!
//! Against the CPU path no tight limit holds: by layer `N` the GPU segment
//! has drifted from the CPU's quantized arithmetic by the GPU's own error
//! (measured at the split: see docs/harness.md, "The hand-off at a hybrid
//! split").
//!
//! Only `hybrid:N` is checked: `hybrid:N+cache:M` hands off through the same
//! function, and its reference would be `gpu+cache:M`, a costly item on
//! lavapipe that the representative selection does not hold.

use serde::{Deserialize, Serialize};

use super::cross;
use super::sink::OurTap;
use super::taps::{self, TapsResult};
use super::thresholds::Limits;
use super::{Check, Level};
use crate::compare::Path;
use crate::compare::{sci, Failure};

/// NMSE limit of every tap up to the first after the split (`attn_norm` of
/// layer `N`) against the `gpu` path: measured 0 (bit-identical) on every
/// model and prompt of `--paths all`; 1e-12 leaves room for rounding
/// (an RMS norm summed in another order differs by ~1e-15), and none for
/// a hand-off fault (one row of another token: ~1).
pub const SPLIT_NMSE: f64 = 1e-12;

/// The path whose taps a path's state at its split is compared with, and
/// the first layer after the split: `gpu` and `N` for `hybrid:N`.
pub fn reference(path: Path) -> Option<(Path, usize)> {
    match path {
        Path::Hybrid(n) => Some((Path::Gpu, n)),
        _ => None,
    }
}

/// A hybrid path's state at its split against the reference path.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SplitResult {
    /// The reference path (`gpu`).
    pub against: Path,
    /// The first layer after the split (on the CPU).
    pub layer: usize,
    pub taps: TapsResult,
}

/// Our taps up to and including `attn_norm` of layer `n` (in graph order:
/// the layer-less taps before the first layer, every tap of layers `0..n`)
/// against the same taps of `base`, at the positions both hold.
pub fn compare(base: &[OurTap], ours: &[OurTap], against: Path, n: usize) -> SplitResult {
    let taps = taps::align(
        ours,
        |tap, label, seen_layer| {
            let before_split = match tap.layer {
                None => !seen_layer,
                Some(l) => l < n || (l == n && tap.name == "attn_norm"),
            };
            before_split.then(|| cross::pair_with(base, tap, label, against))
        },
        None,
        |_, _| SPLIT_NMSE,
        true,
    );
    SplitResult {
        against,
        layer: n,
        taps,
    }
}

impl Check for SplitResult {
    const KEY: &'static str = "split";
    const LEVEL: Level = Level::Prompt;
    const MEASURES: &'static str =
        "a hybrid:N path's taps up to layer N's attn_norm against the gpu path's, at rounding";
    const LIMIT_KEYS: &'static [&'static str] = &[];
    const NULL_WHEN_ABSENT: bool = false;

    fn failures(&self, _limits: &Limits) -> Vec<Failure> {
        let mut out = Vec::new();
        if let Some(d) = &self.taps.first_divergence {
            out.push(Failure::new(
                "split",
                format!(
                    "against {} up to layer {}'s attn_norm (the first tap after the hand-off): first divergence: layer {} {}: NMSE {:.3e} > {:.1e}",
                    self.against,
                    self.layer,
                    d.layer.map_or("-".to_string(), |l| l.to_string()),
                    d.name,
                    d.nmse,
                    d.limit
                ),
            ));
        }
        if !self.taps.unmatched.is_empty() {
            out.push(Failure::new(
                "split",
                format!("not comparable: {}", self.taps.unmatched.join("; ")),
            ));
        }
        out
    }

    fn summary(&self) -> String {
        let t = &self.taps;
        match &t.first_divergence {
            None if t.unmatched.is_empty() => {
                format!("{} ok, max {}", t.rows.len(), sci(t.max_nmse()))
            }
            None => format!("{} not comparable", t.unmatched.len()),
            Some(d) => format!("first over: {} ({})", d.reference, sci(d.nmse)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn tap(name: &str, layer: Option<usize>, row: Vec<f32>) -> OurTap {
        OurTap {
            name: name.into(),
            layer,
            width: row.len(),
            rows: HashMap::from([(4, row)]),
        }
    }

    fn model(state: f32) -> Vec<OurTap> {
        vec![
            tap("inp_scaled", None, vec![1.0, 2.0]),
            tap("attn_norm", Some(0), vec![1.0, 2.0]),
            tap("l_out", Some(0), vec![3.0, 4.0]),
            tap("attn_norm", Some(1), vec![state, 1.0]),
            tap("Qcur", Some(1), vec![5.0, 6.0]),
            tap("result_norm", None, vec![7.0, 8.0]),
        ]
    }

    #[test]
    fn the_taps_up_to_the_first_after_the_split_are_held_to_rounding() {
        let gpu = model(1.0);
        // The same state: every tap to layer 1's attn_norm compared, none
        // after it (Qcur-1 and the head run on the CPU).
        let mut same = model(1.0);
        same[4].rows.insert(4, vec![5.5, 6.0]);
        same[5].rows.insert(4, vec![0.0, 0.0]);
        let s = compare(&gpu, &same, Path::Gpu, 1);
        let names: Vec<String> = s
            .taps
            .rows
            .iter()
            .map(|r| format!("{}-{:?}", r.name, r.layer))
            .collect();
        assert_eq!(
            names,
            [
                "inp_scaled-None",
                "attn_norm-Some(0)",
                "l_out-Some(0)",
                "attn_norm-Some(1)"
            ]
        );
        assert!(s.taps.first_divergence.is_none());
        // A hand-off that lost the state: the first tap after the split.
        let d = compare(&gpu, &model(f32::NAN), Path::Gpu, 1)
            .taps
            .first_divergence
            .expect("caught");
        assert_eq!((d.name.as_str(), d.layer), ("attn_norm", Some(1)));
        let d = compare(&gpu, &model(1.0 + 1e-5), Path::Gpu, 1)
            .taps
            .first_divergence
            .expect("a change of 1e-5 in one element");
        assert_eq!(d.layer, Some(1));
    }

    #[test]
    fn only_hybrid_splits_have_a_reference() {
        assert_eq!(reference(Path::Hybrid(2)), Some((Path::Gpu, 2)));
        assert_eq!(reference(Path::Gpu), None);
        assert_eq!(
            reference(Path::Cached {
                layers: Some(1),
                slots: 2
            }),
            None
        );
    }
}

//! One path of ours against another (the GPU against the CPU, say): the
//! same per-tap, logits and KLD measures as against llama.cpp, with the
//! first path of the run as the reference.
//!
//! The reference path's outputs are kept per prompt ([`PathOutputs`]): its
//! taps, the top-64 and log-sum-exp of its logits at every position (the
//! KLD then uses the same top-64 + tail-bucket estimate as against
//! llama.cpp) and its whole last-position logits.

use serde::{Deserialize, Serialize};

use super::logits::{self, LogitsResult};
use super::routing::Routing;
use super::sink::OurTap;
use super::taps::{self, Pairing, TapsResult};
use super::thresholds::Limits;
use super::tolerance::{self, Figure, Found};
use super::{Check, Level, Results};
use crate::compare::Path;
use crate::compare::{within, Failure};
use crate::reference::arrays::TopKTable;

/// Top ids kept per position of the reference path.
pub const TOP_K: usize = 64;

/// What one path produced on one prompt, kept to compare other paths with.
#[derive(Clone, Debug)]
pub struct PathOutputs {
    pub path: Path,
    /// Taps at the positions the capture keeps (empty when it keeps none).
    pub taps: Vec<OurTap>,
    /// Per prompt position: top-[`TOP_K`] and log-sum-exp of the logits.
    pub top: TopKTable,
    /// The last position's logits.
    pub last: Vec<f32>,
}

/// Another path against the reference path, on one prompt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CrossResult {
    /// The reference path.
    pub against: Path,
    /// None when the capture kept no taps for the prompt.
    pub taps: Option<TapsResult>,
    pub logits: LogitsResult,
}

/// Our taps `ours` against the reference path's `base`, matched by name
/// and layer, at the positions both hold.
pub fn compare_taps(
    base: &[OurTap],
    ours: &[OurTap],
    against: Path,
    limits: &Limits,
) -> TapsResult {
    let routing = Routing::find(
        ours,
        |name, l| {
            let b = base.iter().find(|b| b.name == name && b.layer == Some(l))?;
            Some(b.rows.clone())
        },
        limits.routing_tie,
    );
    taps::align(
        ours,
        |tap, label, _| Some(pair_with(base, tap, label, against)),
        Some(routing),
        |tap, first| limits.tap_nmse(&tap.name, tap.layer, first),
        false,
    )
}

/// Our tap `tap` (labelled `label`) and the same tap of `base` (the
/// `against` path's), at the positions we hold.
pub fn pair_with<'a>(
    base: &'a [OurTap],
    tap: &'a OurTap,
    label: &str,
    against: Path,
) -> Result<Pairing<'a>, String> {
    let Some(b) = base
        .iter()
        .find(|b| b.name == tap.name && b.layer == tap.layer)
    else {
        return Err(format!("{label}: the {against} path has no such tap"));
    };
    let mut positions: Vec<usize> = tap.rows.keys().copied().collect();
    positions.sort_unstable();
    Ok(Pairing {
        reference: (format!("{against}:{label}"), String::new()),
        rows: positions
            .into_iter()
            .map(|p| {
                let theirs = b.rows.get(&p).map(Vec::as_slice);
                (p, theirs, Some(tap.rows[&p].as_slice()))
            })
            .collect(),
        mismatch: format!("{label}: the {against} path holds other positions or widths"),
    })
}

impl Check for CrossResult {
    const KEY: &'static str = "vs";
    const LEVEL: Level = Level::Prompt;
    const MEASURES: &'static str = "this path's taps and logits against the run's first path's";
    const LIMIT_KEYS: &'static [&'static str] = &[
        "gpu-vs-cpu.taps",
        "gpu-vs-cpu.logits_nmse",
        "gpu-vs-cpu.kld_mean",
        "gpu-vs-cpu.kld_max",
        "gpu-vs-cpu.top1_min",
        "hybrid-vs-cpu.*",
    ];
    const NULL_WHEN_ABSENT: bool = true;

    /// Its taps and logits, by their rules, in the entry `gpu-vs-cpu`.
    fn calibrated_as(&self) -> Option<Results> {
        let mut r = Results::default();
        r.put(self.logits.clone());
        if let Some(t) = &self.taps {
            r.put(t.clone());
        }
        Some(r)
    }

    fn against(&self) -> Option<Path> {
        Some(self.against)
    }

    const FIGURES: &'static [Figure] = &[
        taps::TAP_NMSE,
        taps::FIRST_DIVERGENCE,
        logits::LOGITS_NMSE,
        tolerance::KLD_MEAN,
        logits::KLD_MAX,
        tolerance::TOP1,
    ];

    /// Its taps' and logits' regressions, by their rules.
    fn regressions(&self, baseline: &CrossResult) -> Vec<Found> {
        let mut out = Vec::new();
        if let (Some(b), Some(n)) = (&baseline.taps, &self.taps) {
            out.extend(n.regressions(b));
        }
        out.extend(self.logits.regressions(&baseline.logits));
        out
    }

    /// Under "vs", each detail starting "against PATH: ".
    fn failures(&self, limits: &Limits) -> Vec<Failure> {
        let against = self.against;
        let mut out = Vec::new();
        if let Some(d) = self.taps.as_ref().and_then(|t| t.first_divergence.as_ref()) {
            out.push(Failure::new(
                "vs",
                format!(
                    "against {against}: first divergence: layer {} {}: NMSE {:.3e} > {:.1e}",
                    d.layer.map_or("-".to_string(), |l| l.to_string()),
                    d.name,
                    d.nmse,
                    d.limit
                ),
            ));
        }
        let l = &self.logits;
        let mut fail =
            |what: String| out.push(Failure::new("vs", format!("against {against}: {what}")));
        if !within(l.nmse, limits.logits_nmse) {
            fail(format!(
                "last-position logits NMSE {:.3e} > {:.1e}",
                l.nmse, limits.logits_nmse
            ));
        }
        if !within(l.kld.mean, limits.kld_mean) {
            fail(format!(
                "mean KLD {:.3e} > {:.1e}",
                l.kld.mean, limits.kld_mean
            ));
        }
        if !within(l.kld.max, limits.kld_max) {
            fail(format!(
                "max KLD {:.3e} > {:.1e}",
                l.kld.max, limits.kld_max
            ));
        }
        if l.top1_rate() < limits.top1_min {
            fail(format!(
                "top-1 agreement {}/{} < {:.1}%",
                l.top1_agree,
                l.positions,
                100.0 * limits.top1_min
            ));
        }
        if l.top1_hard > 0 {
            fail(format!(
                "{} position(s) disagree on the most likely token beyond the near-tie margin",
                l.top1_hard
            ));
        }
        out
    }

    fn summary(&self) -> String {
        match &self.taps {
            None => "-".into(),
            Some(t) => t.summary(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, HashMap};

    fn tap(name: &str, layer: usize, rows: &[(usize, Vec<f32>)]) -> OurTap {
        OurTap {
            name: name.into(),
            layer: Some(layer),
            width: rows[0].1.len(),
            rows: rows.iter().cloned().collect::<HashMap<_, _>>(),
        }
    }

    fn limits(default: f64) -> Limits {
        Limits {
            logits_nmse: 1.0,
            kld_mean: 1.0,
            kld_max: 1.0,
            top1_min: 0.0,
            near_tie: 1.0,
            routing_tie: 0.0,
            taps: BTreeMap::from([("default".to_string(), default)]),
            taps_layer0: BTreeMap::new(),
            corpus: None,
            exact: false,
        }
    }

    #[test]
    fn the_first_tap_over_its_limit_is_the_divergence() {
        let base = vec![
            tap("attn_norm", 0, &[(3, vec![1.0, 2.0])]),
            tap("Qcur", 0, &[(3, vec![1.0, -1.0])]),
            tap("l_out", 0, &[(3, vec![0.5, 0.5])]),
        ];
        let mut ours = base.clone();
        ours[1].rows.insert(3, vec![-1.0, 1.0]);
        ours[2].rows.insert(3, vec![0.0, 0.0]);
        let r = compare_taps(&base, &ours, Path::Cpu, &limits(1e-6));
        assert_eq!(r.rows.len(), 3);
        assert!(r.rows[0].pass && r.rows[0].nmse == 0.0);
        let d = r.first_divergence.clone().expect("Qcur differs");
        assert_eq!((d.name.as_str(), d.layer), ("Qcur", Some(0)));
        assert_eq!(d.nmse, 4.0);
        assert_eq!(r.failed(), 2);
        // Within a loose limit nothing diverges.
        assert!(compare_taps(&base, &ours, Path::Cpu, &limits(10.0))
            .first_divergence
            .is_none());
    }

    #[test]
    fn taps_the_other_path_lacks_are_unmatched() {
        let base = vec![tap("attn_norm", 0, &[(0, vec![1.0])])];
        let ours = vec![
            tap("attn_norm", 0, &[(0, vec![1.0])]),
            tap("ffn_out", 0, &[(0, vec![1.0])]),
        ];
        let r = compare_taps(&base, &ours, Path::Cpu, &limits(1e-6));
        assert_eq!(r.rows.len(), 1);
        assert_eq!(r.unmatched.len(), 1);
    }
}

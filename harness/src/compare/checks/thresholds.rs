//! The limits a comparison is held to, per model and path, read from
//! `ci/thresholds.toml`:
//!
//! ```toml
//! [smollm2-135m-instruct-q4_1.cpu]
//! logits_nmse = 3e-2
//! kld_mean = 1e-2
//! kld_max = 0.1
//! top1_min = 0.9
//! near_tie = 0.5
//! routing_tie = 5e-3  # a mixture of experts: see compare::checks::routing
//!
//! [smollm2-135m-instruct-q4_1.cpu.taps]
//! default = 1e-2      # any tap not named here
//! Qcur = 1e-3         # our tap name, every layer
//!
//! [smollm2-135m-instruct-q4_1.cpu.taps_layer0]
//! default = 1e-12     # layer 0 (and the whole-model taps before it)
//!
//! [smollm2-135m-instruct-q4_1.cpu.corpus]   # where a corpus base exists
//! kld_mean = 1e-2
//! kld_p99 = 5e-2
//! top1_min = 0.9
//! ```
//!
//! A model and path without an entry fails its comparison: an uncalibrated
//! model never passes by default.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::corpus::CorpusLimits;
use crate::compare::Path;

/// The keys of a [`Limits`] entry, its fields in order: the order `harness
/// calibrate` writes the checks' limits in.
pub const KEYS: &[&str] = &[
    "logits_nmse",
    "kld_mean",
    "kld_max",
    "top1_min",
    "near_tie",
    "routing_tie",
    "taps",
    "taps_layer0",
    "corpus",
    "exact",
];

/// The limits of one model on one path. Every one is an upper bound
/// except `top1_min`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// NMSE of the last prompt position's logits (the whole vocabulary).
    pub logits_nmse: f64,
    /// Per prompt: the mean and the largest KL divergence (top-64 + tail
    /// bucket, see [`crate::metrics::kld_top_k`]) over its positions.
    pub kld_mean: f64,
    pub kld_max: f64,
    /// Per prompt: the least fraction of positions whose most likely token
    /// is llama.cpp's.
    pub top1_min: f64,
    /// Where our token differs from llama.cpp's (at a prompt position, or
    /// in the greedy continuation, where the comparison then stops): a
    /// near-tie when llama.cpp's logit of its token exceeds its logit of
    /// ours by less than this (reported, not a failure); by more, or when
    /// ours is not in its top-64, a failure.
    pub near_tie: f64,
    /// A mixture of experts: where we choose other experts than the
    /// reference, the largest gap in the reference's router probabilities
    /// between an expert it chose and one it did not that is a near-tie
    /// (absolute; a gap within [`super::routing::ROUTING_TIE`] of the larger
    /// is one in any case). Absent: 0, that relative bound alone.
    #[serde(default)]
    pub routing_tie: f64,
    /// NMSE limit of each tap, by our tap name ("Qcur", "ffn_out", ...);
    /// `default` for the names not listed.
    pub taps: BTreeMap<String, f64>,
    /// Limits that replace `taps` in layer 0 and for the whole-model taps
    /// before it (`inp_scaled`), where no rounding has compounded yet.
    #[serde(default)]
    pub taps_layer0: BTreeMap<String, f64>,
    /// The corpus item's limits (`[model.path.corpus]`): required where the
    /// reference data has a corpus base for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corpus: Option<CorpusLimits>,
    /// The CPU path computes llama.cpp's bits on this model (`[model.cpu]`
    /// only): where the capture's configuration allows it, the exact
    /// profile holds every tap, the logits and the greedy steps to zero
    /// ([`super::profile`]); these limits are the fallback.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exact: bool,
}

impl Limits {
    /// The NMSE limit of our tap `name` in `layer` (None: a whole-model
    /// tap; `before_layers`: one that comes before layer 0).
    pub fn tap_nmse(&self, name: &str, layer: Option<usize>, before_layers: bool) -> f64 {
        let first = layer == Some(0) || (layer.is_none() && before_layers);
        let pick = |m: &BTreeMap<String, f64>| m.get(name).or_else(|| m.get("default")).copied();
        first
            .then(|| pick(&self.taps_layer0))
            .flatten()
            .or_else(|| pick(&self.taps))
            .expect("checked when loaded: taps has a default")
    }

    fn check(&self, at: &str) -> Result<(), String> {
        let bad = |what: &str, v: f64| -> Result<(), String> {
            if v.is_finite() && v >= 0.0 {
                Ok(())
            } else {
                Err(format!("{at}: {what} = {v} (must be finite and >= 0)"))
            }
        };
        bad("logits_nmse", self.logits_nmse)?;
        bad("kld_mean", self.kld_mean)?;
        bad("kld_max", self.kld_max)?;
        bad("near_tie", self.near_tie)?;
        bad("routing_tie", self.routing_tie)?;
        if !(0.0..=1.0).contains(&self.top1_min) {
            return Err(format!(
                "{at}: top1_min = {} (a fraction, 0..=1)",
                self.top1_min
            ));
        }
        if !self.taps.contains_key("default") {
            return Err(format!("{at}.taps: no `default` limit"));
        }
        for (k, &v) in self.taps.iter().chain(&self.taps_layer0) {
            bad(&format!("taps {k}"), v)?;
        }
        if let Some(c) = &self.corpus {
            c.check(&format!("{at}.corpus"))?;
        }
        Ok(())
    }
}

/// Every model's limits, by model id and path key (see
/// [`Path::threshold_keys`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Thresholds {
    /// Where they were read from (for messages).
    pub source: String,
    pub models: BTreeMap<String, BTreeMap<String, Limits>>,
}

impl Thresholds {
    /// Reads and checks a thresholds file.
    pub fn load(path: &std::path::Path) -> Result<Thresholds, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Thresholds::parse(&text, &path.display().to_string())
    }

    /// Parses and checks thresholds from TOML text.
    pub fn parse(text: &str, source: &str) -> Result<Thresholds, String> {
        let models: BTreeMap<String, BTreeMap<String, Limits>> =
            toml::from_str(text).map_err(|e| format!("{source}: {}", one_line(&e.to_string())))?;
        for (model, paths) in &models {
            for (path, limits) in paths {
                // A path, "hybrid" (any hybrid:N), or "A-vs-B": path A
                // against path B.
                let parts: Vec<&str> = match path.split_once("-vs-") {
                    Some((a, b)) => vec![a, b],
                    None => vec![path.as_str()],
                };
                for part in parts {
                    if part != "hybrid" {
                        part.parse::<Path>()
                            .map_err(|e| format!("{source}: [{model}.{path}]: {e}"))?;
                    }
                }
                limits.check(&format!("{source}: [{model}.{path}]"))?;
            }
        }
        Ok(Thresholds {
            source: source.to_string(),
            models,
        })
    }

    /// The limits of `model` on `path`.
    pub fn limits(&self, model: &str, path: Path) -> Option<&Limits> {
        let paths = self.models.get(model)?;
        path.threshold_keys().iter().find_map(|k| paths.get(k))
    }

    /// The limits of `model` on `path` against the run's first path
    /// `against`: `[model."A-vs-B"]` for the first of `path`'s keys A and
    /// `against`'s keys B that has an entry ("hybrid:3-vs-cpu", then
    /// "hybrid-vs-cpu").
    pub fn cross_limits(&self, model: &str, path: Path, against: Path) -> Option<&Limits> {
        let paths = self.models.get(model)?;
        path.threshold_keys().iter().find_map(|a| {
            against
                .threshold_keys()
                .iter()
                .find_map(|b| paths.get(&format!("{a}-vs-{b}")))
        })
    }

    /// The limits under another key of a model ("gpu-vs-cpu": one path
    /// against another).
    pub fn limits_key(&self, model: &str, key: &str) -> Option<&Limits> {
        self.models.get(model)?.get(key)
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"
[m.cpu]
logits_nmse = 1e-2
kld_mean = 1e-3
kld_max = 0.05
top1_min = 0.9
near_tie = 0.5
[m.cpu.taps]
default = 1e-2
Qcur = 1e-3
[m.cpu.taps_layer0]
default = 1e-9
[m."gpu-vs-cpu"]
logits_nmse = 2e-2
kld_mean = 1e-3
kld_max = 0.05
top1_min = 0.9
near_tie = 0.5
taps = { default = 0.1 }
[m.hybrid]
logits_nmse = 2e-2
kld_mean = 1e-3
kld_max = 0.05
top1_min = 0.9
near_tie = 0.5
taps = { default = 0.1 }
"#;

    #[test]
    fn limits_by_model_path_and_tap_class() {
        let t = Thresholds::parse(TEXT, "t.toml").unwrap();
        let l = t.limits("m", Path::Cpu).unwrap();
        assert_eq!(l.logits_nmse, 1e-2);
        assert_eq!(l.tap_nmse("Qcur", Some(3), false), 1e-3);
        assert_eq!(l.tap_nmse("Kcur", Some(3), false), 1e-2);
        assert_eq!(l.tap_nmse("Qcur", Some(0), false), 1e-9);
        assert_eq!(l.tap_nmse("inp_scaled", None, true), 1e-9);
        assert_eq!(l.tap_nmse("result_norm", None, false), 1e-2);
        // hybrid:N falls back to [m.hybrid]; no layer-0 table: taps
        assert_eq!(t.limits_key("m", "gpu-vs-cpu").unwrap().logits_nmse, 2e-2);
        assert!(t.limits_key("m", "hybrid:1-vs-cpu").is_none());
        assert_eq!(
            t.cross_limits("m", Path::Gpu, Path::Cpu)
                .unwrap()
                .logits_nmse,
            2e-2
        );
        assert!(t.cross_limits("m", Path::Hybrid(3), Path::Cpu).is_none());
        let both = format!(
            "{TEXT}{}{}",
            TEXT.split("[m.hybrid]")
                .nth(1)
                .map(|l| format!("[m.\"hybrid-vs-cpu\"]{}", l.replace("2e-2", "3e-2")))
                .unwrap(),
            TEXT.split("[m.hybrid]")
                .nth(1)
                .map(|l| format!("[m.\"hybrid:3-vs-cpu\"]{}", l.replace("2e-2", "4e-2")))
                .unwrap(),
        );
        let t = Thresholds::parse(&both, "t").unwrap();
        let x = |n| {
            t.cross_limits("m", Path::Hybrid(n), Path::Cpu)
                .unwrap()
                .logits_nmse
        };
        // hybrid:N-vs-cpu first, hybrid-vs-cpu for any other N.
        assert_eq!((x(3), x(7)), (4e-2, 3e-2));
        assert!(t.cross_limits("m", Path::Hybrid(3), Path::Gpu).is_none());
        let h = t.limits("m", Path::Hybrid(7)).unwrap();
        assert_eq!(h.tap_nmse("Qcur", Some(0), false), 0.1);
        assert!(t.limits("m", Path::Gpu).is_none());
        assert!(t.limits("other", Path::Cpu).is_none());
    }

    #[test]
    fn bad_files_are_refused_with_the_place() {
        let e = Thresholds::parse(&TEXT.replace("Qcur = 1e-3", "Qcur = -1"), "t.toml").unwrap_err();
        assert!(e.contains("[m.cpu]") && e.contains("Qcur"), "{e}");
        let e =
            Thresholds::parse(&TEXT.replace("default = 1e-2", "Kcur = 1"), "t.toml").unwrap_err();
        assert!(e.contains("default"), "{e}");
        let e =
            Thresholds::parse(&TEXT.replace("top1_min = 0.9", "top1_min = 90"), "t").unwrap_err();
        assert!(e.contains("top1_min"), "{e}");
        let e = Thresholds::parse(&TEXT.replace("[m.hybrid]", "[m.vulkan]"), "t").unwrap_err();
        assert!(e.contains("vulkan"), "{e}");
        let e = Thresholds::parse(&TEXT.replace("gpu-vs-cpu", "gpu-vs-tpu"), "t").unwrap_err();
        assert!(e.contains("gpu-vs-tpu"), "{e}");
        let e = Thresholds::parse(
            &TEXT.replace(
                "near_tie = 0.5\n[m.cpu.taps]",
                "near_tie = 0.5\nnear_ties = 1\n[m.cpu.taps]",
            ),
            "t",
        )
        .unwrap_err();
        assert!(e.contains("near_ties"), "{e}");
    }

    #[test]
    fn keys_are_the_fields_of_limits_in_order() {
        let t = Thresholds::parse(TEXT, "t").unwrap();
        let mut limits = t.limits("m", Path::Cpu).unwrap().clone();
        limits.corpus = Some(CorpusLimits {
            kld_mean: 1.0,
            kld_p99: 1.0,
            top1_min: 0.5,
        });
        limits.exact = true;
        let json = serde_json::to_string(&limits).unwrap();
        let fields = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&json)
            .unwrap()
            .len();
        assert_eq!(fields, KEYS.len(), "{json}");
        let at: Vec<usize> = KEYS
            .iter()
            .map(|k| {
                json.find(&format!("\"{k}\":"))
                    .unwrap_or_else(|| panic!("{k}"))
            })
            .collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{json}");
    }
}

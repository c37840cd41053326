//! `harness compare`: runs sharpi on every captured model and prompt and
//! holds the result against llama.cpp's capture (reference-data/) and the
//! limits of `ci/thresholds.toml`.
//!
//! Per model, prompt and path ([`Path`]):
//! - [`checks::tokens`]: the prompt tokenized by our tokenizer (chat prompts through
//!   our chat template) must equal the captured ids; the engine then runs
//!   on the *captured* ids either way, so that a tokenizer fault does not
//!   hide everything else. Per model: the tokenizer corpus (every line,
//!   `parse_special` off and on) and the chat-template renders, exact.
//! - [`checks::taps`]: every intermediate tensor we emit against llama.cpp's graph
//!   tensor of the same meaning (NMSE, max abs, cosine); the first one in
//!   graph order over its limit is the first divergence ([`checks::sink`] keeps
//!   what the engine emits; [`checks::routing`] judges experts routed differently
//!   and says what a near-tie leaves out).
//! - [`checks::logits`]: NMSE of the last position's logits; KL divergence and
//!   top-1 agreement at every prompt position.
//! - [`checks::greedy`]: our own greedy continuation against the captured one,
//!   near-ties told apart from failures.
//! - [`checks::cross`]: every path after the first against the first (the GPU
//!   against the CPU), taps and logits, with limits of their own
//!   (`[model."gpu-vs-cpu"]`, `[model."hybrid-vs-cpu"]` for any
//!   `hybrid:N` against the CPU); on a GPU path, the validation layer's
//!   message count (any message fails).
//! - [`checks::split`]: a `hybrid:N` path's taps up to the first after its
//!   hand-off against the `gpu` path's, at rounding.
//!
//! Each is a [`checks::Check`], listed once in [`checks::registry`]; the
//! items and their shards are [`plan`]'s. [`run`] does it all in-process
//! and returns a [`Report`]; [`report`] prints it and writes it as JSON,
//! [`report::junit`] as JUnit XML, [`report::html`] as one self-contained
//! HTML page with plots.

pub mod calibrate;
pub mod checks;
pub mod plan;
pub mod report;
pub mod run;
#[cfg(test)]
mod sample;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use engine::expert_cache::CacheSize;
use engine::model::Model;
use engine::session::{Session, SessionConfig};
use engine::setup::{GpuLayers, GpuRequest};
use engine::vulkan::VulkanOptions;
use serde::{Deserialize, Serialize};

pub use checks::thresholds::{Limits, Thresholds};
pub use plan::Options;
pub use report::Report;
pub use run::run;

/// A way of running the engine: which devices run which layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Path {
    /// Every stage on the CPU backend.
    Cpu,
    /// Every stage on the GPU (Vulkan).
    Gpu,
    /// The embedding and layers `0..n` on the GPU, the rest and the head on
    /// the CPU (`hybrid:N`).
    Hybrid(usize),
    /// The GPU layers of an expert model with their experts on the host and
    /// `slots` expert slots each on the GPU (`--moe-cache`): every layer
    /// (`gpu+cache:M`) or the first `n` (`hybrid:N+cache:M`).
    Cached { layers: Option<usize>, slots: usize },
}

impl Path {
    /// A session of `model` on this path's devices (the GPU: the Vulkan
    /// device `vk` selects, validation as `vk` says).
    pub fn session(
        &self,
        model: Arc<Model>,
        cfg: &SessionConfig,
        vk: &VulkanOptions,
    ) -> Result<Session, String> {
        let req = GpuRequest {
            gpu_layers: self.gpu_layers(),
            fixed_on: None,
            threads: cfg.threads,
            vk: vk.clone(),
            memory_limit: None,
            moe_cache: match self {
                Path::Cached { slots, .. } => Some(CacheSize::Slots(*slots)),
                _ => None,
            },
        };
        Session::on_devices(model, &req, cfg)
            .map(|(s, _)| s)
            .map_err(|e| e.to_string())
    }

    /// The layers this path puts on the GPU (`-g`): none for `cpu`, all
    /// for `gpu` and `gpu+cache:M`, the first `N` for `hybrid:N` and
    /// `hybrid:N+cache:M`.
    pub fn gpu_layers(&self) -> GpuLayers {
        match self {
            Path::Cpu => GpuLayers::None,
            Path::Gpu | Path::Cached { layers: None, .. } => GpuLayers::All,
            Path::Hybrid(n)
            | Path::Cached {
                layers: Some(n), ..
            } => GpuLayers::First(*n),
        }
    }

    /// Whether this path runs anything on the GPU.
    pub fn uses_gpu(&self) -> bool {
        !matches!(self, Path::Cpu)
    }

    /// The key of this path's limits in the thresholds file: `cpu`, `gpu`,
    /// `hybrid:N` (with `hybrid` as the fallback for any N, and for a
    /// cached path, whose experts run on both devices).
    pub fn threshold_keys(&self) -> Vec<String> {
        match self {
            Path::Hybrid(_) | Path::Cached { .. } => vec![self.to_string(), "hybrid".into()],
            _ => vec![self.to_string()],
        }
    }
}

/// `--paths`: a list of paths, or `all`: per model `cpu, gpu, hybrid:1,
/// hybrid:2` (a GPU segment of one layer and one of several, each handing
/// off to the CPU; deeper splits ran the same hand-off and the same GPU
/// layers at up to half the GPU path's cost on lavapipe), and for a model
/// of E experts `gpu+cache:0, gpu+cache:E/2, hybrid:1+cache:E/2` (every
/// expert on the host; slots that hit, miss, fill and evict; the cache on
/// a hybrid split; a cache of all E slots ran the fills of E/2 without the
/// evictions) ([`Paths::for_model`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Paths {
    List(Vec<Path>),
    All,
}

impl Paths {
    /// The paths of a model with `n_layer` layers and `n_expert` experts
    /// (0: none), the first being the one every other is compared with.
    /// `all` drops repeats (a model of one or two layers has fewer distinct
    /// hybrid splits).
    pub fn for_model(&self, n_layer: usize, n_expert: usize) -> Vec<Path> {
        match self {
            Paths::List(v) => v.clone(),
            Paths::All => {
                let last = n_layer.saturating_sub(1);
                let mut v = vec![Path::Cpu, Path::Gpu];
                for n in [1.min(last), 2.min(last)] {
                    if !v.contains(&Path::Hybrid(n)) {
                        v.push(Path::Hybrid(n));
                    }
                }
                if n_expert > 0 {
                    // The expert slot cache: none and half of the experts
                    // resident, and half on a hybrid split.
                    let half = n_expert / 2;
                    for p in [
                        Path::Cached {
                            layers: None,
                            slots: 0,
                        },
                        Path::Cached {
                            layers: None,
                            slots: half,
                        },
                        Path::Cached {
                            layers: Some(1.min(last)),
                            slots: half,
                        },
                    ] {
                        if !v.contains(&p) {
                            v.push(p);
                        }
                    }
                }
                v
            }
        }
    }

    /// Whether a model runs on more than one path (the first is then
    /// every other's reference).
    pub fn several(&self) -> bool {
        match self {
            Paths::List(v) => v.len() > 1,
            Paths::All => true,
        }
    }

    /// Parses `--paths` values: `all` alone, or paths.
    pub fn parse(values: &[String]) -> Result<Paths, String> {
        if values.iter().any(|v| v == "all") {
            return match values.len() {
                1 => Ok(Paths::All),
                _ => Err("--paths all stands alone".into()),
            };
        }
        values
            .iter()
            .map(|v| v.parse())
            .collect::<Result<_, _>>()
            .map(Paths::List)
    }
}

impl fmt::Display for Paths {
    /// `cpu,gpu` for a list, `all` for all.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Paths::List(v) => {
                let names: Vec<String> = v.iter().map(ToString::to_string).collect();
                f.write_str(&names.join(","))
            }
            Paths::All => f.write_str("all"),
        }
    }
}

impl Serialize for Paths {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Paths::List(v) => v.serialize(s),
            Paths::All => s.serialize_str("all"),
        }
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Cpu => f.write_str("cpu"),
            Path::Gpu => f.write_str("gpu"),
            Path::Hybrid(n) => write!(f, "hybrid:{n}"),
            Path::Cached {
                layers: None,
                slots,
            } => write!(f, "gpu+cache:{slots}"),
            Path::Cached {
                layers: Some(n),
                slots,
            } => write!(f, "hybrid:{n}+cache:{slots}"),
        }
    }
}

impl FromStr for Path {
    type Err = String;

    fn from_str(s: &str) -> Result<Path, String> {
        let bad = || {
            format!(
                "unknown path {s:?}: expected cpu, gpu, hybrid:N (N = layers on the GPU), gpu+cache:M or hybrid:N+cache:M (M = expert slots a GPU layer)"
            )
        };
        let (base, slots) = match s.split_once("+cache:") {
            Some((b, m)) => (b, Some(m.parse::<usize>().map_err(|_| bad())?)),
            None => (s, None),
        };
        let layers = match base {
            "cpu" => return slots.map_or(Ok(Path::Cpu), |_| Err(bad())),
            "gpu" => None,
            _ => match base.strip_prefix("hybrid:").map(str::parse::<usize>) {
                Some(Ok(n)) => Some(n),
                _ => return Err(bad()),
            },
        };
        Ok(match (layers, slots) {
            (None, None) => Path::Gpu,
            (Some(n), None) => Path::Hybrid(n),
            (layers, Some(slots)) => Path::Cached { layers, slots },
        })
    }
}

impl Serialize for Path {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Path {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Path, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

impl<'de> Deserialize<'de> for Paths {
    /// `"all"` or a list of paths (as [`Paths`] serializes).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Paths, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Name(String),
            List(Vec<Path>),
        }
        match Form::deserialize(d)? {
            Form::Name(s) if s == "all" => Ok(Paths::All),
            Form::Name(s) => Err(serde::de::Error::custom(format!("paths {s:?}"))),
            Form::List(v) => Ok(Paths::List(v)),
        }
    }
}

/// One check that did not hold: which, and why, in one line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    /// "tokens", "taps", "logits_nmse", "kld_mean", "kld_max", "top1",
    /// "greedy", "vs" (this path against the run's first path), "split"
    /// (a hybrid path's state at its split against the gpu path's),
    /// "validation" (Vulkan validation messages), "tokenizer", "chat",
    /// "eog" (the end-of-generation token set), "sampling" (the sampler
    /// against llama.cpp's chain), "corpus" (the corpus item's
    /// KLD, top-1 agreement or tokens against llama.cpp's base),
    /// "model", "engine" (the engine could
    /// not run: a path not implemented, a backend error), "thresholds" (no
    /// limits for the model and path).
    pub check: String,
    pub detail: String,
}

impl Failure {
    pub fn new(check: &str, detail: impl Into<String>) -> Failure {
        Failure {
            check: check.to_string(),
            detail: detail.into(),
        }
    }
}

/// A figure in the tables: `1.2e-3`, `0`, `NaN`.
pub(crate) fn sci(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x == 0.0 {
        "0".into()
    } else {
        format!("{x:.1e}")
    }
}

/// `value <= limit`, where NaN never passes.
pub(crate) fn within(value: f64, limit: f64) -> bool {
    value <= limit
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_parse_and_print() {
        for s in ["cpu", "gpu", "hybrid:0", "hybrid:12"] {
            assert_eq!(s.parse::<Path>().unwrap().to_string(), s);
        }
        assert_eq!("hybrid:3".parse::<Path>(), Ok(Path::Hybrid(3)));
        for bad in ["", "CPU", "hybrid", "hybrid:", "hybrid:x", "vulkan"] {
            assert!(bad.parse::<Path>().is_err(), "{bad}");
        }
        assert_eq!(Path::Hybrid(4).threshold_keys(), vec!["hybrid:4", "hybrid"]);
        let g = |s: &str| s.parse::<Path>().unwrap().gpu_layers();
        assert_eq!(g("cpu"), GpuLayers::None);
        assert_eq!(g("gpu"), GpuLayers::All);
        assert_eq!(g("gpu+cache:8"), GpuLayers::All);
        assert_eq!(g("hybrid:0"), GpuLayers::First(0));
        assert_eq!(g("hybrid:3"), GpuLayers::First(3));
        assert_eq!(g("hybrid:2+cache:16"), GpuLayers::First(2));
        for s in ["gpu+cache:0", "hybrid:2+cache:16"] {
            assert_eq!(s.parse::<Path>().unwrap().to_string(), s);
        }
        assert_eq!(
            "hybrid:2+cache:16".parse::<Path>(),
            Ok(Path::Cached {
                layers: Some(2),
                slots: 16
            })
        );
        for bad in [
            "cpu+cache:1",
            "gpu+cache:",
            "gpu+cache:x",
            "hybrid:+cache:1",
        ] {
            assert!(bad.parse::<Path>().is_err(), "{bad}");
        }
        assert_eq!(
            "gpu+cache:8".parse::<Path>().unwrap().threshold_keys(),
            vec!["gpu+cache:8", "hybrid"]
        );
        let all = Paths::parse(&["all".to_string()]).unwrap();
        let h = Path::Hybrid;
        assert_eq!(all.for_model(30, 0), [Path::Cpu, Path::Gpu, h(1), h(2)]);
        assert_eq!(all.for_model(3, 0), [Path::Cpu, Path::Gpu, h(1), h(2)]);
        assert_eq!(all.for_model(2, 0), [Path::Cpu, Path::Gpu, h(1)]);
        assert_eq!(all.for_model(1, 0), [Path::Cpu, Path::Gpu, h(0)]);
        let c = |layers, slots| Path::Cached { layers, slots };
        assert_eq!(
            all.for_model(24, 32),
            [
                Path::Cpu,
                Path::Gpu,
                h(1),
                h(2),
                c(None, 0),
                c(None, 16),
                c(Some(1), 16)
            ]
        );
        assert!(Paths::parse(&["all".into(), "cpu".into()]).is_err());
        let list = Paths::parse(&["cpu".into(), "hybrid:2".into()]).unwrap();
        assert_eq!(list.for_model(30, 8), [Path::Cpu, h(2)]);
        assert!(Paths::parse(&["gpu:2".into()]).is_err());
        assert!(!within(f64::NAN, 1.0));
        assert!(within(1.0, 1.0));
    }
}

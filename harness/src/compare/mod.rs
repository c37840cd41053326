//! `harness compare`: runs sharpi on every captured model and prompt and
//! holds the result against llama.cpp's capture (reference-data/) and the
//! limits of `ci/thresholds.toml`.
//!
//! Per model, prompt and path ([`Path`]):
//! - [`tokens`]: the prompt tokenized by our tokenizer (chat prompts through
//!   our chat template) must equal the captured ids; the engine then runs
//!   on the *captured* ids either way, so that a tokenizer fault does not
//!   hide everything else. Per model: the tokenizer corpus (every line,
//!   `parse_special` off and on) and the chat-template renders, exact.
//! - [`taps`]: every intermediate tensor we emit against llama.cpp's graph
//!   tensor of the same meaning (NMSE, max abs, cosine); the first one in
//!   graph order over its limit is the first divergence.
//! - [`logits`]: NMSE of the last position's logits; KL divergence and
//!   top-1 agreement at every prompt position.
//! - [`greedy`]: our own greedy continuation against the captured one,
//!   near-ties told apart from failures.
//! - [`cross`]: every path after the first against the first (the GPU
//!   against the CPU), taps and logits, with limits of their own
//!   (`[model."gpu-vs-cpu"]`); on a GPU path, the validation layer's
//!   message count (any message fails).
//!
//! [`run`] does it all in-process and returns a [`Report`]; [`report`]
//! prints it and writes it as JSON.

pub mod cross;
pub mod greedy;
pub mod logits;
pub mod report;
pub mod run;
pub mod taps;
pub mod thresholds;
pub mod tokens;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use engine::model::Model;
use engine::placement::Devices;
use engine::session::{Session, SessionConfig};
use engine::vulkan::VulkanOptions;
use serde::Serialize;

pub use report::Report;
pub use run::{run, Options};
pub use thresholds::{Limits, Thresholds};

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
        let gpu_layers = match self {
            Path::Cpu => 0,
            Path::Gpu => -1,
            Path::Hybrid(n) => *n as i64,
        };
        let devices = Devices::with_gpu(model.hparams().n_layer, gpu_layers, cfg.threads, vk)
            .map_err(|e| e.to_string())?;
        Session::with_devices(model, devices, cfg).map_err(|e| e.to_string())
    }

    /// Whether this path runs anything on the GPU.
    pub fn uses_gpu(&self) -> bool {
        !matches!(self, Path::Cpu)
    }

    /// The key of this path's limits in the thresholds file: `cpu`, `gpu`,
    /// `hybrid:N` (with `hybrid` as the fallback for any N).
    pub fn threshold_keys(&self) -> Vec<String> {
        match self {
            Path::Hybrid(_) => vec![self.to_string(), "hybrid".into()],
            _ => vec![self.to_string()],
        }
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Cpu => f.write_str("cpu"),
            Path::Gpu => f.write_str("gpu"),
            Path::Hybrid(n) => write!(f, "hybrid:{n}"),
        }
    }
}

impl FromStr for Path {
    type Err = String;

    fn from_str(s: &str) -> Result<Path, String> {
        match s {
            "cpu" => Ok(Path::Cpu),
            "gpu" => Ok(Path::Gpu),
            _ => match s.strip_prefix("hybrid:").map(str::parse::<usize>) {
                Some(Ok(n)) => Ok(Path::Hybrid(n)),
                _ => Err(format!(
                    "unknown path {s:?}: expected cpu, gpu or hybrid:N (N = layers on the GPU)"
                )),
            },
        }
    }
}

impl Serialize for Path {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// One check that did not hold: which, and why, in one line.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Failure {
    /// "tokens", "taps", "logits_nmse", "kld_mean", "kld_max", "top1",
    /// "greedy", "vs" (this path against the run's first path),
    /// "validation" (Vulkan validation messages), "tokenizer", "chat",
    /// "eog" (the end-of-generation token set),
    /// "model", "engine" (the engine could
    /// not run: a path not implemented, a backend error), "thresholds" (no
    /// limits for the model and path).
    pub check: &'static str,
    pub detail: String,
}

impl Failure {
    pub fn new(check: &'static str, detail: impl Into<String>) -> Failure {
        Failure {
            check,
            detail: detail.into(),
        }
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
        assert!(!within(f64::NAN, 1.0));
        assert!(within(1.0, 1.0));
    }
}

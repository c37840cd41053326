//! llama.cpp's sampler chain on captured logits (`<model>/sampling.json`):
//! for a grid of parameter sets, seeds and prompts, the candidates each
//! stage kept (the first draw) and the tokens drawn (several draws from
//! the same logits, each accepted into the penalties before the next).
//! Written by `harness capture-sampling` (feature `llama-cpp`, which runs
//! llama.cpp's own samplers: `llama_sampler_init_penalties`, `_top_k`,
//! `_typical`, `_top_p`, `_min_p`, `_temp_ext`, `_dist`, one
//! `llama_sampler_apply` each, in the order of `common/sampling.cpp`);
//! compared by `harness compare` (the model's text item,
//! [`crate::compare::checks::sampling`]).
//!
//! The logits are each prompt's last-position logits of the capture
//! (`logits/last`), so the check needs no forward pass: it judges the
//! sampler alone.

use serde::{Deserialize, Serialize};

use engine::sampler::SamplerConfig;

/// The file of a model's sampling capture, in its directory.
pub const SAMPLING_FILE: &str = "sampling.json";
pub const SAMPLING_FORMAT: &str = "sharpi-sampling/1";
/// Draws per case.
pub const DRAWS: usize = 8;
/// A stage's kept ids are listed up to this many; beyond, their count and
/// [`ids_hash`].
pub const LIST_MAX: usize = 256;
/// The prompts whose logits the grid runs on (where captured).
pub const PROMPTS: [&str; 3] = ["capital-france", "numbers-math", "multilingual"];
/// The seeds of the grid.
pub const SEEDS: [u32; 3] = [0, 42, 3_141_592_653];

/// One parameter set (llama.cpp's names; every stage of the chain).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SamplingSet {
    pub id: String,
    pub temp: f32,
    pub top_k: usize,
    pub typical_p: f32,
    pub top_p: f32,
    pub min_p: f32,
    pub repeat_penalty: f32,
    pub frequency_penalty: f32,
    pub presence_penalty: f32,
    pub repeat_last_n: usize,
}

impl SamplingSet {
    /// sharpi's settings for this set and `seed`.
    pub fn config(&self, seed: u32) -> SamplerConfig {
        SamplerConfig {
            temp: self.temp,
            top_k: self.top_k,
            typical_p: self.typical_p,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            repeat_last_n: self.repeat_last_n,
            seed,
        }
    }
}

/// The grid's parameter sets: llama.cpp's defaults, then each stage on its
/// own (so an unsorted array reaches it: top-p's bucket sort of a whole
/// vocabulary, min-p's unsorted pass, typical-p), the penalties together,
/// and temperatures from sharp to flat.
pub fn grid() -> Vec<SamplingSet> {
    let set = |id: &str,
               temp: f32,
               top_k: usize,
               typical_p: f32,
               top_p: f32,
               min_p: f32,
               pen: (f32, f32, f32)| SamplingSet {
        id: id.to_string(),
        temp,
        top_k,
        typical_p,
        top_p,
        min_p,
        repeat_penalty: pen.0,
        frequency_penalty: pen.1,
        presence_penalty: pen.2,
        repeat_last_n: 64,
    };
    let none = (1.0, 0.0, 0.0);
    vec![
        set("defaults", 0.8, 40, 1.0, 0.95, 0.05, none),
        set("top-p-only", 1.0, 0, 1.0, 0.9, 0.0, none),
        set("min-p-only", 0.7, 0, 1.0, 1.0, 0.1, none),
        set("typical", 1.0, 0, 0.9, 1.0, 0.0, none),
        set("penalties", 1.2, 50, 1.0, 0.9, 0.0, (1.3, 0.5, 0.4)),
        set("hot", 1.5, 100, 1.0, 1.0, 0.02, none),
        set("cold-top-p", 0.3, 0, 1.0, 0.5, 0.0, none),
        set("all-stages", 0.9, 60, 0.95, 0.9, 0.03, (1.1, 0.1, 0.2)),
    ]
}

/// What one stage kept (of the first draw), in the candidates' order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageKept {
    /// llama.cpp's sampler name (`top-k`, `typical`, `top-p`, `min-p`).
    pub stage: String,
    pub n: usize,
    /// The ids, where `n <= LIST_MAX`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ids: Option<Vec<u32>>,
    /// [`ids_hash`] of the ids, always.
    pub hash: String,
}

impl StageKept {
    pub fn new(stage: &str, ids: &[u32]) -> StageKept {
        StageKept {
            stage: stage.to_string(),
            n: ids.len(),
            ids: (ids.len() <= LIST_MAX).then(|| ids.to_vec()),
            hash: ids_hash(ids),
        }
    }
}

/// FNV-1a (64-bit) of the ids' little-endian bytes, in order, as hex.
pub fn ids_hash(ids: &[u32]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in ids.iter().flat_map(|i| i.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// One prompt × set × seed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SamplingCase {
    pub prompt: String,
    pub set: String,
    pub seed: u32,
    /// The stages that select (top-k, typical, top-p, min-p) of the first
    /// draw, in chain order, each where it ran.
    pub stages: Vec<StageKept>,
    /// The tokens of the draws, in order.
    pub tokens: Vec<u32>,
}

/// A model's sampling capture.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SamplingCapture {
    pub format: String,
    /// llama.cpp's version (the crate's, and llama.cpp's own).
    pub llama_cpp: String,
    pub draws: usize,
    pub sets: Vec<SamplingSet>,
    pub cases: Vec<SamplingCase>,
}

impl SamplingCapture {
    /// Checks that every case names a set of the file and holds its draws.
    pub fn check(&self) -> Result<(), String> {
        if self.format != SAMPLING_FORMAT {
            return Err(format!(
                "format {:?}, expected {SAMPLING_FORMAT:?}",
                self.format
            ));
        }
        for c in &self.cases {
            if !self.sets.iter().any(|s| s.id == c.set) {
                return Err(format!("case {}/{}: no set {:?}", c.prompt, c.seed, c.set));
            }
            if c.tokens.len() != self.draws {
                return Err(format!(
                    "case {}/{}/{}: {} tokens, {} draws",
                    c.prompt,
                    c.set,
                    c.seed,
                    c.tokens.len(),
                    self.draws
                ));
            }
        }
        for s in &self.sets {
            s.config(0)
                .validate()
                .map_err(|e| format!("set {}: {e}", s.id))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grid_is_valid_and_reaches_every_stage() {
        let g = grid();
        for s in &g {
            s.config(1).validate().unwrap();
        }
        assert!(g.iter().any(|s| s.typical_p < 1.0));
        assert!(g.iter().any(|s| s.top_k == 0 && s.top_p < 1.0));
        assert!(g
            .iter()
            .any(|s| s.top_k == 0 && s.min_p > 0.0 && s.top_p >= 1.0));
        assert!(g
            .iter()
            .any(|s| s.frequency_penalty != 0.0 && s.presence_penalty != 0.0));
    }

    #[test]
    fn kept_ids_are_listed_up_to_the_limit_and_always_hashed() {
        let few = StageKept::new("top-k", &[3, 1, 2]);
        assert_eq!(few.ids.as_deref(), Some(&[3, 1, 2][..]));
        let many: Vec<u32> = (0..300).collect();
        let k = StageKept::new("top-p", &many);
        assert_eq!((k.n, k.ids.is_none()), (300, true));
        assert_ne!(ids_hash(&[1, 2]), ids_hash(&[2, 1]));
        // FNV-1a of nothing is its offset basis.
        assert_eq!(ids_hash(&[]), "cbf29ce484222325");
    }
}

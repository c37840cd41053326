//! llama.cpp's sampler chain run on the captured last-position logits
//! ([`crate::reference::sampling`]): per prompt, parameter set and seed,
//! each of llama.cpp's samplers applied in turn to a fresh candidate array
//! of the whole vocabulary (id order, unsorted, as `common_sampler`
//! builds it), what each selecting stage kept recorded on the first draw,
//! and the drawn token accepted into the penalties before the next draw.

use std::path::Path;

use llama_cpp_sys_2 as sys;

use super::CaptureError;
use crate::reference::format::LlamaCppInfo;
use crate::reference::sampling::{
    grid, SamplingCapture, SamplingCase, SamplingSet, StageKept, DRAWS, PROMPTS, SAMPLING_FILE,
    SAMPLING_FORMAT, SEEDS,
};
use crate::reference::{writer, PromptArrays, ReferenceError};

/// The llama.cpp samplers of one case, freed on drop.
struct Chain {
    /// (name, sampler, records what it keeps) in chain order; the dist
    /// sampler last.
    stages: Vec<(&'static str, *mut sys::llama_sampler, bool)>,
    penalties: *mut sys::llama_sampler,
    dist: *mut sys::llama_sampler,
}

impl Chain {
    fn new(set: &SamplingSet, seed: u32, n_vocab: usize) -> Chain {
        // SAFETY: each init function only allocates and returns a new
        // sampler (never null for these arguments); Drop frees each once.
        unsafe {
            let penalties = sys::llama_sampler_init_penalties(
                n_vocab as i32,
                set.repeat_last_n as i32,
                set.repeat_penalty,
                set.frequency_penalty,
                set.presence_penalty,
            );
            Chain {
                stages: vec![
                    ("penalties", penalties, false),
                    (
                        "top-k",
                        sys::llama_sampler_init_top_k(set.top_k as i32),
                        set.top_k > 0,
                    ),
                    (
                        "typical",
                        sys::llama_sampler_init_typical(set.typical_p, 0),
                        set.typical_p < 1.0,
                    ),
                    (
                        "top-p",
                        sys::llama_sampler_init_top_p(set.top_p, 0),
                        set.top_p < 1.0,
                    ),
                    (
                        "min-p",
                        sys::llama_sampler_init_min_p(set.min_p, 0),
                        set.min_p > 0.0,
                    ),
                    (
                        "temp-ext",
                        sys::llama_sampler_init_temp_ext(set.temp, 0.0, 1.0),
                        false,
                    ),
                ],
                penalties,
                dist: sys::llama_sampler_init_dist(seed),
            }
        }
    }
}

impl Drop for Chain {
    fn drop(&mut self) {
        for &(_, s, _) in &self.stages {
            // SAFETY: created by an init function in Chain::new, freed once.
            unsafe { sys::llama_sampler_free(s) };
        }
        // SAFETY: as above.
        unsafe { sys::llama_sampler_free(self.dist) };
    }
}

/// One case: `DRAWS` draws from `logits` after accepting `prompt`.
fn run_case(
    logits: &[f32],
    prompt: &[i32],
    set: &SamplingSet,
    seed: u32,
    name: &str,
) -> SamplingCase {
    let chain = Chain::new(set, seed, logits.len());
    for &t in prompt {
        // SAFETY: a live sampler; accept only records the token.
        unsafe { sys::llama_sampler_accept(chain.penalties, t) };
    }
    let mut stages = Vec::new();
    let mut tokens = Vec::with_capacity(DRAWS);
    // [n_vocab] candidates, rebuilt for every draw.
    let mut data: Vec<sys::llama_token_data> = Vec::with_capacity(logits.len());
    for draw in 0..DRAWS {
        data.clear();
        data.extend(
            logits
                .iter()
                .enumerate()
                .map(|(i, &logit)| sys::llama_token_data {
                    id: i as i32,
                    logit,
                    p: 0.0,
                }),
        );
        let mut arr = sys::llama_token_data_array {
            data: data.as_mut_ptr(),
            size: data.len(),
            selected: -1,
            sorted: false,
        };
        for &(stage, s, record) in &chain.stages {
            // SAFETY: `arr` points into `data`, which outlives the call;
            // samplers only reorder and shrink the array in place.
            unsafe { sys::llama_sampler_apply(s, &mut arr) };
            if draw == 0 && record {
                let ids: Vec<u32> = data[..arr.size].iter().map(|d| d.id as u32).collect();
                stages.push(StageKept::new(stage, &ids));
            }
        }
        // SAFETY: as above; dist sets `selected` within `size`.
        unsafe { sys::llama_sampler_apply(chain.dist, &mut arr) };
        let token = data[arr.selected as usize].id;
        tokens.push(token as u32);
        // SAFETY: a live sampler.
        unsafe { sys::llama_sampler_accept(chain.penalties, token) };
    }
    SamplingCase {
        prompt: name.to_string(),
        set: set.id.clone(),
        seed,
        stages,
        tokens,
    }
}

/// Writes `dir/<id>/sampling.json` for each model of `ids` whose directory
/// holds the grid's prompts; returns the cases written.
pub fn capture_models(
    dir: &Path,
    ids: &[String],
    info: &LlamaCppInfo,
) -> Result<usize, CaptureError> {
    let sets = grid();
    let mut total = 0;
    for id in ids {
        let mut cases = Vec::new();
        for prompt in PROMPTS {
            let file = dir.join(id).join(format!("{prompt}.safetensors"));
            if !file.is_file() {
                continue;
            }
            let bytes = std::fs::read(&file).map_err(|e| ReferenceError::io(&file, e))?;
            let arrays = PromptArrays::from_safetensors(&bytes)?;
            for set in &sets {
                for seed in SEEDS {
                    cases.push(run_case(
                        &arrays.last_logits,
                        &arrays.tokens,
                        set,
                        seed,
                        prompt,
                    ));
                }
            }
        }
        if cases.is_empty() {
            continue;
        }
        total += cases.len();
        let capture = SamplingCapture {
            format: SAMPLING_FORMAT.to_string(),
            llama_cpp: format!("{} (llama {})", info.crate_version, info.llama_version),
            draws: DRAWS,
            sets: sets.clone(),
            cases,
        };
        writer::write_file(
            &dir.join(id).join(SAMPLING_FILE),
            &writer::json_bytes(&capture),
        )?;
    }
    Ok(total)
}

//! `harness mutants` (feature `fault-injection`): runs `harness compare`
//! once clean and once per engine fault ([`engine::fault::FAULTS`]), each
//! on a small selection, and checks that every fault is detected, by the
//! check and at the place this table expects.
//!
//! | fault | selection | expected detection |
//! |---|---|---|
//! | rope-style | SmolLM2, cpu + gpu | taps, layer 0 Qcur/Kcur, both paths |
//! | attn-scale | SmolLM2, cpu | taps, layer 0 kqv_out |
//! | kv-offset | SmolLM2, cpu + gpu (5 tokens) | taps, layer 0 kqv_out, both paths |
//! | descriptor-reuse | SmolLM2, gpu | validation (a bound set updated) or taps |
//! | missing-barrier | SmolLM2, gpu | validation (synchronization: read after write, in a decode step) |
//! | gpu-embed-row | SmolLM2, gpu | taps, layer 0 attn_norm |
//! | gpu-post-norm-add | Gemma-3-270M, gpu | greedy (the tapped pass reads the post-norm's output, which keeps it apart from the add: only the untapped steps fuse them) |
//! | gpu-qkv-merge | SmolLM2, gpu on the GPU kernel layout | greedy (the tapped pass reads Q, K and V back one by one, which keeps them apart: only the untapped steps merge them) |
//! | gpu-ffn-bind | SmolLM2, gpu on the GPU kernel layout | greedy (the tapped pass reads the feed-forward block's tensors, which keeps its dispatches apart: only the untapped steps make it one) |
//! | gpu-oproj-residual | SmolLM2, gpu on the GPU kernel layout | greedy (the tapped pass reads the attention's output, which keeps the projection apart: only the untapped steps fuse it) |
//! | gpu-act-f16-truncate | SmolLM2, gpu | taps, layer 0 Qcur (the first product of quantized activations; NMSE ~3e-7, under the 5e-5 the GPU had before its activations were quantized as the CPU's) |
//! | gpu-softmax-unshifted | synthetic Qwen3 with scores of ~181 (synth-qwen3-bigscores), gpu | taps, layer 0 kqv_out (NaN: exp(s) overflows) |
//! | hybrid-handoff | SmolLM2, hybrid:2 | taps, layer 2 attn_norm |
//! | handoff-stale | SmolLM2, gpu + hybrid:2 | split (hybrid:2 against gpu), layer 2 attn_norm: the poisoned destination |
//! | stop-token | SmolLM2 | eog (our stop set against llama.cpp's) |
//! | pre-tokenizer | SmolLM2, corpus | tokenizer corpus and prompt tokens |
//! | chat-no-generation-prompt | SmolLM2, chat prompt | prompt tokens (and the renders) |
//! | kv-f16-truncate | SmolLM2 with an F16 KV cache, cpu | taps, layer 0 kqv_out |
//! | last-layer-scale | SmolLM2, cpu, exact profile | taps, layer 29 kqv_out (and the same run passes with --profile calibrated) |
//! | q8k-fused-round | Gemma-3-270M, counting, cpu, exact profile | taps, layer 7 kqv_out (passes with --profile calibrated) |
//! | query-scale-late | Gemma-3-270M with an F16 KV cache, long-context, cpu, exact profile | taps, layer 8 kqv_out (passes with --profile calibrated) |
//! | sampler-top-p | SmolLM2, text checks | sampling (the candidates top-p keeps against llama.cpp's chain) |
//! | moe-renorm | synthetic Qwen3-MoE, cpu + gpu | taps, layer 0 ffn_moe_weights_norm |
//! | moe-tie-order | synthetic Qwen3-MoE with tied routers, cpu | taps, layer 0 ffn_moe_topk |
//! | expert-cache-stale | synthetic Qwen3-MoE, gpu+cache:16, one token a pass | taps, layer 0 ffn_moe_* |

use std::path::Path as FsPath;
use std::time::Instant;

use serde::Serialize;

use crate::compare::checks::profile::Profile;
use crate::compare::checks::split::SplitResult;
use crate::compare::checks::taps::TapsResult;
use crate::compare::{self, Options, Path, Report, Thresholds};

const SMOLLM2: &str = "smollm2-135m-instruct-q4_1";
/// SmolLM2 captured and compared with an F16 KV cache.
const SMOLLM2_KV_F16: &str = "smollm2-135m-instruct-q4_1-kv-f16";
/// Gemma-3-270M (Q4_K_M: K-quant weights on Q8_K activations).
const GEMMA: &str = "gemma-3-270m-q4_k_m";
/// The same captured and compared with an F16 KV cache.
const GEMMA_KV_F16: &str = "gemma-3-270m-q4_k_m-kv-f16";
/// The synthetic Qwen3-MoE: 32 experts, 8 used, weights renormalised.
const QWEN3MOE: &str = "synth-qwen3moe";
/// The same with 12 pairs of experts whose router rows are equal: exact
/// ties in every routing decision.
const QWEN3MOE_TIES: &str = "synth-qwen3moe-ties";
/// The synthetic Qwen3 whose every query meets its own key with a score of
/// ~181 (tied query/key heads, QK-norm weights x4): exp of it overflows
/// f32 unless the softmax subtracts the row's max (SmolLM2's scores stay
/// far below 88, so a GPU softmax without the shift passes its captures).
const BIGSCORES: &str = "synth-qwen3-bigscores";
/// A 5-token prompt: RoPE, attention scale and KV positions all matter.
const SHORT: &str = "capital-france";
/// A chat prompt (system + user), rendered with a generation prompt.
const CHAT: &str = "chat-system-user";
/// SmolLM2's last layer.
const LAST_LAYER: usize = 29;
/// Layers on the GPU of the hybrid path.
const HYBRID_N: usize = 2;
/// Every layer on the GPU with half of the synthetic Qwen3-MoE's 32
/// experts in slots.
const CACHED: Path = Path::Cached {
    layers: None,
    slots: 16,
};

/// Where a fault is expected to show.
#[derive(Clone, Debug)]
pub struct Expected {
    /// Any of these checks ([`compare::Failure::check`]) counts.
    pub checks: &'static [&'static str],
    /// For tap faults: on each of these paths the first divergence must be
    /// at `layer`, at one of `taps` (our names).
    pub tap: Option<(usize, &'static [&'static str])>,
    /// For hand-off faults: on each hybrid path the first divergence of its
    /// state at the split against the gpu path's must be at `layer`, at
    /// one of `taps`.
    pub split: Option<(usize, &'static [&'static str])>,
}

/// One fault and the run that must catch it.
#[derive(Clone, Debug)]
pub struct Mutant {
    pub fault: &'static str,
    pub models: &'static [&'static str],
    pub prompts: &'static [&'static str],
    pub paths: Vec<Path>,
    /// Compare the tokenizer corpus, chat renders and sampler chain.
    pub corpus: bool,
    /// Prompt rows per forward pass, when not the default.
    pub chunk: Option<usize>,
    pub expected: Expected,
    /// A fault only the exact profile can see: run again with the
    /// calibrated limits (`--profile calibrated`), it must pass there.
    pub exact_only: bool,
    /// The GPU paths' kernel layout, when not the device's own.
    pub layout: Option<engine::vulkan::KernelLayout>,
}

impl Expected {
    fn describe(&self) -> String {
        match self.tap.or(self.split) {
            Some((layer, taps)) => {
                format!("{} layer {layer} {}", self.checks.join("|"), taps.join("|"))
            }
            None => self.checks.join("|"),
        }
    }
}

/// The table: every fault of the engine, with its selection and expected
/// detection.
pub fn table() -> Vec<Mutant> {
    let m = |fault, prompts, paths: &[Path], corpus, checks, tap| Mutant {
        fault,
        models: &[SMOLLM2],
        prompts,
        paths: paths.to_vec(),
        corpus,
        chunk: None,
        expected: Expected {
            checks,
            tap,
            split: None,
        },
        exact_only: false,
        layout: None,
    };
    let (cpu, gpu, hybrid) = (Path::Cpu, Path::Gpu, Path::Hybrid(HYBRID_N));
    vec![
        m(
            "rope-style",
            &[SHORT],
            &[cpu, gpu],
            false,
            &["taps"],
            Some((0, &["Qcur", "Kcur"][..])),
        ),
        m(
            "attn-scale",
            &[SHORT],
            &[cpu],
            false,
            &["taps"],
            Some((0, &["kqv_out"][..])),
        ),
        m(
            "kv-offset",
            &[SHORT],
            &[cpu, gpu],
            false,
            &["taps"],
            Some((0, &["kqv_out"][..])),
        ),
        m(
            "descriptor-reuse",
            &[SHORT],
            &[gpu],
            false,
            &["validation", "taps"],
            None,
        ),
        m(
            "missing-barrier",
            &[SHORT],
            &[gpu],
            false,
            &["validation"],
            None,
        ),
        m(
            "gpu-embed-row",
            &[SHORT],
            &[gpu],
            false,
            &["taps"],
            Some((0, &["attn_norm"][..])),
        ),
        // Only Gemma-3 has post-norms. The tapped pass reads attn_post_norm
        // between the norm and the add, which keeps them two dispatches:
        // the untapped greedy steps run the fused kernel.
        Mutant {
            models: &[GEMMA],
            ..m(
                "gpu-post-norm-add",
                &[SHORT],
                &[gpu],
                false,
                &["greedy"],
                None,
            )
        },
        // A GPU-only error of ~2^-11 in each activation block's scale: the
        // GPU's layer-0 limits since its products quantize as the CPU's.
        m(
            "gpu-act-f16-truncate",
            &[SHORT],
            &[gpu],
            false,
            &["taps"],
            Some((0, &["Qcur", "Kcur", "Vcur"][..])),
        ),
        // The GPU kernel layout's decode step (lavapipe runs the CPU one
        // by default): Q, K and V merged into one dispatch. The tapped
        // prompt pass reads each product back on its own, so only the
        // untapped greedy steps merge them.
        Mutant {
            layout: Some(engine::vulkan::KernelLayout::Gpu),
            ..m("gpu-qkv-merge", &[SHORT], &[gpu], false, &["greedy"], None)
        },
        // The same layout's one-dispatch feed-forward block, likewise
        // made only in the untapped steps.
        Mutant {
            layout: Some(engine::vulkan::KernelLayout::Gpu),
            ..m("gpu-ffn-bind", &[SHORT], &[gpu], false, &["greedy"], None)
        },
        // And the attention's output projection in its epilogue.
        Mutant {
            layout: Some(engine::vulkan::KernelLayout::Gpu),
            ..m(
                "gpu-oproj-residual",
                &[SHORT],
                &[gpu],
                false,
                &["greedy"],
                None,
            )
        },
        // Harmless while scores are small: only the model with large
        // attention scores shows it (NaN from inf / inf).
        Mutant {
            models: &[BIGSCORES],
            ..m(
                "gpu-softmax-unshifted",
                &[SHORT],
                &[gpu],
                false,
                &["taps"],
                Some((0, &["kqv_out"][..])),
            )
        },
        m(
            "hybrid-handoff",
            &[SHORT],
            &[hybrid],
            false,
            &["taps"],
            Some((HYBRID_N, &["attn_norm"][..])),
        ),
        // The destination keeps what it held: in a fresh session the
        // poison of test builds (engine::poison), which the state at the
        // split shows against the gpu path's.
        Mutant {
            expected: Expected {
                checks: &["split"],
                tap: None,
                split: Some((HYBRID_N, &["attn_norm"][..])),
            },
            ..m(
                "handoff-stale",
                &[SHORT],
                &[cpu, gpu, hybrid],
                false,
                &[],
                None,
            )
        },
        m("stop-token", &[SHORT], &[cpu], false, &["eog"], None),
        m(
            "pre-tokenizer",
            &[SHORT],
            &[cpu],
            true,
            &["tokenizer", "tokens"],
            None,
        ),
        // Only an F16 cache holds converted values: the F16 capture.
        Mutant {
            models: &[SMOLLM2_KV_F16],
            ..m(
                "kv-f16-truncate",
                &[SHORT],
                &[cpu],
                false,
                &["taps"],
                Some((0, &["kqv_out"][..])),
            )
        },
        Mutant {
            exact_only: true,
            ..m(
                "last-layer-scale",
                &[SHORT],
                &[cpu],
                false,
                &["taps"],
                Some((LAST_LAYER, &["kqv_out"][..])),
            )
        },
        // About one Q8_K block in a hundred gets a byte off by one: only the
        // exact profile sees it, on a K-quant model (Gemma's counting).
        Mutant {
            models: &[GEMMA],
            exact_only: true,
            ..m(
                "q8k-fused-round",
                &["counting"],
                &[cpu],
                false,
                &["taps"],
                Some((7, &["kqv_out"][..])),
            )
        },
        // Differs only where a scaled query element falls into f16's
        // subnormal range: Gemma with an F16 cache on its longest prompt.
        Mutant {
            models: &[GEMMA_KV_F16],
            exact_only: true,
            ..m(
                "query-scale-late",
                &["long-context"],
                &[cpu],
                false,
                &["taps"],
                Some((8, &["kqv_out"][..])),
            )
        },
        m("sampler-top-p", &[SHORT], &[cpu], true, &["sampling"], None),
        m(
            "chat-no-generation-prompt",
            &[CHAT],
            &[cpu],
            false,
            &["tokens"],
            None,
        ),
        Mutant {
            models: &[QWEN3MOE],
            ..m(
                "moe-renorm",
                &[SHORT],
                &[cpu, gpu],
                false,
                &["taps"],
                Some((0, &["ffn_moe_weights_norm"][..])),
            )
        },
        // Exact ties broken the other way: llama.cpp's argsort of our own
        // probabilities says otherwise, so it is no near-tie.
        Mutant {
            models: &[QWEN3MOE_TIES],
            ..m(
                "moe-tie-order",
                &[SHORT],
                &[cpu],
                false,
                &["taps"],
                Some((0, &["ffn_moe_topk"][..])),
            )
        },
        // A slot refilled after a pass is read by the next: one token a pass.
        Mutant {
            models: &[QWEN3MOE],
            chunk: Some(1),
            ..m(
                "expert-cache-stale",
                &[SHORT],
                &[CACHED],
                false,
                &["taps"],
                Some((
                    0,
                    &[
                        "ffn_moe_up",
                        "ffn_moe_gate",
                        "ffn_moe_swiglu",
                        "ffn_moe_down",
                    ][..],
                )),
            )
        },
    ]
}

/// What one run found.
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    /// The fault ("none" for the clean run).
    pub fault: String,
    pub detected: bool,
    /// The checks that failed, in report order, deduplicated.
    pub checks: Vec<String>,
    /// Where: the first tap divergence of each prompt and path that has
    /// one ("model/prompt/path layer N tap"), else where each failed check
    /// failed first.
    pub taps: Vec<String>,
    pub expected: String,
    /// Detected by an expected check, and (tap faults) localised at the
    /// expected layer and tap on every path of the run.
    pub matched: bool,
    /// The first failure in full.
    pub first: Option<String>,
    pub seconds: f64,
}

/// The run of `harness mutants`.
#[derive(Clone, Debug, Serialize)]
pub struct MutantsReport {
    /// The clean run: every check passes.
    pub clean: Outcome,
    pub faults: Vec<Outcome>,
}

impl MutantsReport {
    /// The clean run passed and every fault was detected where expected.
    pub fn passed(&self) -> bool {
        !self.clean.detected && self.faults.iter().all(|o| o.detected && o.matched)
    }

    pub fn table(&self) -> String {
        let mut s = format!(
            "{:<26} {:<8} {:<22} {:<52} {:<28} {:<5} {:>6}\n",
            "fault", "detected", "by", "where", "expected", "match", "s"
        );
        for o in std::iter::once(&self.clean).chain(&self.faults) {
            s += &format!(
                "{:<26} {:<8} {:<22} {:<52} {:<28} {:<5} {:>6.1}\n",
                o.fault,
                if o.detected { "yes" } else { "no" },
                if o.checks.is_empty() {
                    "-".into()
                } else {
                    o.checks.join(",")
                },
                if o.taps.is_empty() {
                    "-".into()
                } else {
                    o.taps.join("; ")
                },
                o.expected,
                if o.matched { "yes" } else { "no" },
                o.seconds
            );
        }
        for o in std::iter::once(&self.clean).chain(&self.faults) {
            if let Some(f) = o.first.as_ref().filter(|_| !o.matched || o.fault == "none") {
                s += &format!("{}: {f}\n", o.fault);
            }
        }
        s
    }
}

/// What every run shares.
#[derive(Clone, Debug)]
pub struct Setup {
    pub repo: std::path::PathBuf,
    pub thresholds: Thresholds,
    /// Greedy steps compared per prompt.
    pub greedy_steps: usize,
    pub threads: usize,
    pub device: engine::vulkan::DeviceSelector,
    pub validation: bool,
    /// Only these faults (empty: all).
    pub only: Vec<String>,
    /// Fresh buffers poisoned with NaN ([`engine::poison`]); false:
    /// zeroed, to show what the poison catches.
    pub poison: bool,
    /// A line on stderr per run.
    pub progress: bool,
}

impl Setup {
    pub fn new(repo: &FsPath, thresholds: Thresholds) -> Setup {
        Setup {
            repo: repo.to_path_buf(),
            thresholds: with_hybrid_limits(thresholds),
            greedy_steps: 2,
            threads: 0,
            device: engine::vulkan::DeviceSelector::Auto,
            validation: engine::vulkan::validation_layer_present(),
            only: Vec::new(),
            poison: true,
            progress: false,
        }
    }

    fn options(&self, m: &Mutant) -> Options {
        let mut o = Options::new(&self.repo, self.thresholds.clone());
        o.models = m.models.iter().map(|s| s.to_string()).collect();
        o.prompts = m.prompts.iter().map(|p| p.to_string()).collect();
        o.paths = crate::compare::Paths::List(m.paths.clone());
        o.corpus = m.corpus;
        if let Some(c) = m.chunk {
            o.chunk = c;
        }
        o.verify_files = false;
        // At least one decode step: the prompt pass reads every tapped sum
        // back (a submission each), so only decoding records a residual add
        // and the norm after it in one command buffer (missing-barrier).
        o.greedy_steps = self.greedy_steps.max(2);
        o.threads = self.threads;
        o.device = self.device.clone();
        o.validation = self.validation;
        o.kernel_layout = m.layout;
        o
    }
}

/// The thresholds file has limits for the cpu and gpu paths; a hybrid path
/// (GPU layers first) and the cached path (experts on both devices) are
/// held to the GPU's where they have none of their own, against llama.cpp
/// and against the CPU path.
fn with_hybrid_limits(mut t: Thresholds) -> Thresholds {
    let path = format!("hybrid:{HYBRID_N}");
    for keys in t.models.values_mut() {
        if !keys.contains_key("hybrid") {
            if let Some(gpu) = keys.get("gpu").cloned() {
                keys.insert("hybrid".into(), gpu);
            }
        }
        for vs in [format!("{path}-vs-cpu"), "hybrid-vs-cpu".to_string()] {
            if !keys.contains_key(&vs) {
                if let Some(gpu_vs_cpu) = keys.get("gpu-vs-cpu").cloned() {
                    keys.insert(vs, gpu_vs_cpu);
                }
            }
        }
    }
    t
}

/// Runs the clean selection and every fault in turn. Errors are about the
/// setup (unknown fault, unreadable reference data).
pub fn run(setup: &Setup) -> Result<MutantsReport, String> {
    let table = table();
    if let Some(bad) = setup
        .only
        .iter()
        .find(|f| !table.iter().any(|m| m.fault == f.as_str()))
    {
        return Err(format!("no fault {bad:?} in the mutants table"));
    }
    let selected: Vec<&Mutant> = table
        .iter()
        .filter(|m| setup.only.is_empty() || setup.only.iter().any(|f| f == m.fault))
        .collect();
    // The clean run: the union of the selections, no fault.
    let clean_mutant = Mutant {
        fault: "none",
        models: &[SMOLLM2, SMOLLM2_KV_F16, QWEN3MOE, QWEN3MOE_TIES, BIGSCORES],
        prompts: &[SHORT, CHAT],
        paths: vec![Path::Cpu, Path::Gpu, Path::Hybrid(HYBRID_N), CACHED],
        corpus: true,
        chunk: None,
        expected: Expected {
            checks: &[],
            tap: None,
            split: None,
        },
        exact_only: false,
        layout: None,
    };
    let clean = run_one(setup, &clean_mutant, None)?;
    let mut faults = Vec::new();
    for m in selected {
        faults.push(run_one(setup, m, Some(m.fault))?);
    }
    Ok(MutantsReport { clean, faults })
}

/// `compare` with `fault` injected (none: clean).
pub fn compare_with(opts: &Options, fault: Option<&str>) -> Result<Report, String> {
    let names: Vec<&str> = fault.into_iter().collect();
    let _injected = engine::fault::Injected::new(&names)?;
    compare::run(opts)
}

fn run_one(setup: &Setup, m: &Mutant, fault: Option<&str>) -> Result<Outcome, String> {
    let start = Instant::now();
    let _zeroed = (!setup.poison).then(engine::poison::Unpoisoned::new);
    let report = compare_with(&setup.options(m), fault)?;
    let mut o = judge(m, &report, start.elapsed().as_secs_f64());
    if m.exact_only {
        let mut calibrated = setup.options(m);
        calibrated.profile = Profile::Calibrated;
        let report = compare_with(&calibrated, fault)?;
        let escaped = report.passed();
        o.matched &= escaped;
        o.expected.push_str(", passes --profile calibrated");
        if !escaped {
            o.taps.push("also caught with --profile calibrated".into());
        }
        o.seconds = start.elapsed().as_secs_f64();
    }
    if m.layout.is_some() && fault.is_some() {
        // The clean run is on the device's own layout: this selection
        // must pass without the fault on its own.
        let clean = compare_with(&setup.options(m), None)?.passed();
        o.matched &= clean;
        o.expected.push_str(", passes without it");
        if !clean {
            o.taps.push("also fails without the fault".into());
        }
        o.seconds = start.elapsed().as_secs_f64();
    }
    if setup.progress {
        eprintln!(
            "[mutants] {}: {} by {} in {:.1} s",
            o.fault,
            if o.detected {
                "detected"
            } else {
                "not detected"
            },
            if o.checks.is_empty() {
                "-".into()
            } else {
                o.checks.join(",")
            },
            o.seconds
        );
    }
    Ok(o)
}

/// What `report` says about mutant `m`.
pub fn judge(m: &Mutant, report: &Report, seconds: f64) -> Outcome {
    let failures = report.failures();
    let mut checks: Vec<String> = Vec::new();
    for (_, f) in &failures {
        if !checks.contains(&f.check) {
            checks.push(f.check.to_string());
        }
    }
    let mut taps = Vec::new();
    let mut localised = true;
    let prompts = report.models.iter().flat_map(|r| &r.prompts);
    for p in prompts {
        let first = p
            .checks
            .get::<TapsResult>()
            .and_then(|t| t.first_divergence.as_ref());
        let split = p
            .checks
            .get::<SplitResult>()
            .and_then(|s| s.taps.first_divergence.as_ref());
        for (d, what) in [(first, ""), (split, " split")] {
            if let Some(d) = d {
                taps.push(format!(
                    "{}/{}/{}{what} layer {} {}",
                    short(&p.model),
                    p.prompt,
                    p.path,
                    d.layer.map_or("-".into(), |l| l.to_string()),
                    d.name
                ));
            }
        }
        let at = |d: Option<&crate::compare::checks::taps::TapRow>,
                  (layer, names): (usize, &[&str])| {
            d.is_some_and(|d| d.layer == Some(layer) && names.contains(&d.name.as_str()))
        };
        if let Some(want) = m.expected.tap {
            localised &= at(first, want);
        }
        if let (Some(want), Some(_)) = (m.expected.split, p.checks.get::<SplitResult>()) {
            localised &= at(split, want);
        }
    }
    if taps.is_empty() {
        // Not a tap: where the first failure of each check was.
        for c in &checks {
            if let Some((at, _)) = failures.iter().find(|(_, f)| f.check == *c) {
                taps.push(format!("{c} at {}", short(at)));
            }
        }
    }
    let detected = !failures.is_empty();
    let matched = if m.fault == "none" {
        !detected
    } else {
        detected
            && checks
                .iter()
                .any(|c| m.expected.checks.contains(&c.as_str()))
            && localised
    };
    Outcome {
        fault: m.fault.to_string(),
        detected,
        checks,
        taps,
        expected: if m.fault == "none" {
            "pass".into()
        } else {
            m.expected.describe()
        },
        matched,
        first: failures
            .first()
            .map(|(at, f)| format!("{at}: {}: {}", f.check, f.detail)),
        seconds,
    }
}

/// A model id without its quantization ("smollm2-135m-instruct").
fn short(id: &str) -> String {
    id.replace("-q4_1", "").replace("-instruct", "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_every_engine_fault_once() {
        let t = table();
        for (name, _) in engine::fault::FAULTS {
            assert_eq!(t.iter().filter(|m| m.fault == *name).count(), 1, "{name}");
        }
        assert_eq!(t.len(), engine::fault::FAULTS.len());
    }
}

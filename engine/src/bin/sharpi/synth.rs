//! `sharpi synth --arch ARCH --seed N (--tokenizer-from MODEL | --from
//! MODEL) OUT`: a synthetic model, the same bytes for the same arguments on
//! every machine. qwen3 and qwen3moe are drawn from scratch with MODEL's
//! tokenizer; llama-moe makes the dense llama MODEL's FFNs into experts.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use super::CliError;
use engine::gguf::GgufWriter;
use engine::quantize::FileType;
use engine::synth::llama_moe::{self, MoeConfig};
use engine::synth::{self, Arch, Config, Kind};

#[derive(Args, Clone, Debug)]
pub struct SynthArgs {
    /// What to make: qwen3 or qwen3moe (drawn from scratch), or llama-moe
    /// (the experts made from a dense llama model's FFNs).
    #[arg(long)]
    pub arch: Kind,
    /// Seed of the drawn weights.
    #[arg(long)]
    pub seed: u64,
    /// qwen3, qwen3moe: a GGUF model whose tokenizer (tokenizer.* keys) is copied.
    #[arg(long, value_name = "MODEL", conflicts_with = "from")]
    pub tokenizer_from: Option<PathBuf>,
    /// llama-moe: the dense llama model; everything but its FFNs is copied.
    #[arg(long, value_name = "MODEL")]
    pub from: Option<PathBuf>,
    /// Where to write the model.
    pub output: PathBuf,
    /// qwen3, qwen3moe: file type (the quantization recipe applied to the
    /// weights; default q4_k_m). llama-moe keeps the source's.
    #[arg(long = "type", value_name = "TYPE")]
    pub ftype: Option<FileType>,
    /// qwen3, qwen3moe: output head scale (logits have about this standard deviation).
    #[arg(long)]
    pub head_scale: Option<f32>,
    /// qwen3, qwen3moe: token embedding standard deviation.
    #[arg(long)]
    pub embed_scale: Option<f32>,
    /// qwen3, qwen3moe: gain of the QK-norm weights (default 1). Attention
    /// scores then have a standard deviation of about its square (with
    /// --tie-qk, a query's score with itself is about its square times
    /// sqrt(head_dim): reference-data's synth-qwen3-bigscores, 4).
    #[arg(long)]
    pub qk_norm_scale: Option<f32>,
    /// qwen3, qwen3moe: each query head's projection is its KV head's key
    /// projection: every query attends to itself with a score of about
    /// qk-norm-scale² · sqrt(head_dim), far above the rest (a one-hot
    /// softmax however large the scores).
    #[arg(long)]
    pub tie_qk: bool,
    /// qwen3moe, llama-moe: router (ffn_gate_inp) scale (default 1 for
    /// qwen3moe, 16 for llama-moe).
    #[arg(long)]
    pub router_scale: Option<f32>,
    /// qwen3moe: the last N experts route exactly as the first N (their
    /// router rows are copies): exact ties in the router's probabilities.
    /// At most half the experts; default 0.
    #[arg(long, value_name = "N")]
    pub router_twins: Option<u32>,
    /// llama-moe: standard deviation of the relative noise on each expert
    /// weight (default 0.02).
    #[arg(long)]
    pub expert_noise: Option<f32>,
    /// Worker threads (default: all cores). The output does not depend on it.
    #[arg(long)]
    pub threads: Option<usize>,
}

impl SynthArgs {
    /// A usage error when a flag that `self.arch` does not read is given.
    fn refuse(&self, flags: &[(&str, bool)]) -> Result<(), CliError> {
        match flags.iter().find(|(_, given)| *given) {
            Some((flag, _)) => Err(CliError::Usage(format!(
                "{flag} does not apply to --arch {}",
                self.arch
            ))),
            None => Ok(()),
        }
    }

    fn source(&self, path: &Option<PathBuf>, flag: &str) -> Result<PathBuf, CliError> {
        path.clone()
            .ok_or_else(|| CliError::Usage(format!("--arch {} needs {flag} MODEL", self.arch)))
    }
}

/// Makes the model `args` describe, writes it (atomically) and a one-line
/// summary to `out`.
pub fn run(args: &SynthArgs, out: &mut dyn Write) -> Result<(), CliError> {
    match args.arch {
        Kind::Scratch(arch) => scratch(args, arch, out),
        Kind::LlamaMoe => upcycled(args, out),
    }
}

fn scratch(args: &SynthArgs, arch: Arch, out: &mut dyn Write) -> Result<(), CliError> {
    args.refuse(&[
        ("--from", args.from.is_some()),
        ("--expert-noise", args.expert_noise.is_some()),
        (
            "--router-scale",
            arch == Arch::Qwen3 && args.router_scale.is_some(),
        ),
        (
            "--router-twins",
            arch == Arch::Qwen3 && args.router_twins.is_some(),
        ),
    ])?;
    let tokenizer_from = args.source(&args.tokenizer_from, "--tokenizer-from")?;
    let mut cfg = Config::new(arch, args.seed);
    cfg.ftype = args.ftype.unwrap_or(cfg.ftype);
    cfg.tie_qk = args.tie_qk;
    let s = &mut cfg.scales;
    s.head = args.head_scale.unwrap_or(s.head);
    s.embed = args.embed_scale.unwrap_or(s.embed);
    s.router = args.router_scale.unwrap_or(s.router);
    s.qk_norm = args.qk_norm_scale.unwrap_or(s.qk_norm);
    if !(s.qk_norm.is_finite() && s.qk_norm > 0.0) {
        return Err(CliError::Usage(format!(
            "--qk-norm-scale {}: a positive number",
            s.qk_norm
        )));
    }
    cfg.router_twins = args.router_twins.unwrap_or(cfg.router_twins);

    let tok = super::open_model(&tokenizer_from)?;
    let pool = super::thread_pool(args.threads)?;
    let w = pool.install(|| synth::synthesize(&cfg, &tok))?;
    let file_size = w.write_file(&args.output)?.file_size;
    let twins = match cfg.router_twins {
        0 => String::new(),
        t => format!(", router twins {t}"),
    };
    writeln!(
        out,
        "{}: synthetic {} (seed {}, {} layers{twins}, {} tensors, {}), {file_size} bytes",
        args.output.display(),
        cfg.arch,
        cfg.seed,
        cfg.n_layer,
        w.tensors().len(),
        cfg.ftype,
    )?;
    Ok(())
}

fn upcycled(args: &SynthArgs, out: &mut dyn Write) -> Result<(), CliError> {
    args.refuse(&[
        ("--tokenizer-from", args.tokenizer_from.is_some()),
        ("--type", args.ftype.is_some()),
        ("--head-scale", args.head_scale.is_some()),
        ("--embed-scale", args.embed_scale.is_some()),
        ("--qk-norm-scale", args.qk_norm_scale.is_some()),
        ("--tie-qk", args.tie_qk),
        ("--router-twins", args.router_twins.is_some()),
    ])?;
    let from = args.source(&args.from, "--from")?;
    let mut cfg = MoeConfig::new(args.seed);
    cfg.noise = args.expert_noise.unwrap_or(cfg.noise);
    cfg.router = args.router_scale.unwrap_or(cfg.router);

    let src = super::open_model(&from)?;
    let pool = super::thread_pool(args.threads)?;
    let w = pool.install(|| llama_moe::upcycle(&src, &cfg))?;
    let file_size = w.write_file(&args.output)?.file_size;
    writeln!(
        out,
        "{}: llama MoE from {} (seed {}, {} experts, {} used, noise {}, router scale {}, {} tensors, experts {}), {file_size} bytes",
        args.output.display(),
        from.display(),
        cfg.seed,
        cfg.n_expert,
        cfg.n_expert_used,
        cfg.noise,
        cfg.router,
        w.tensors().len(),
        expert_types(&w),
    )?;
    Ok(())
}

/// The types of the expert tensors, e.g. "Q4_1" or "Q4_K, Q6_K".
fn expert_types(w: &GgufWriter) -> String {
    let mut types: Vec<String> = w
        .tensors()
        .iter()
        .filter(|t| t.name.ends_with("_exps.weight"))
        .map(|t| t.ty.to_string())
        .collect();
    types.sort();
    types.dedup();
    types.join(", ")
}

//! Small synthetic models, deterministic from a seed, for architectures
//! whose real weights are out of reach (Qwen3, Qwen3-MoE), and a llama
//! Mixture-of-Experts model made from a dense one ([`llama_moe`]).
//!
//! A model is: the architecture's metadata keys (those llama.cpp's loader
//! reads for it), a real tokenizer's `tokenizer.*` keys copied from another
//! GGUF file (so real text tokenizes and chat templates render), and
//! weights drawn from the pinned generator in [`rng`], one stream per
//! tensor (seeded from the model seed and the tensor name), scaled as
//! [`Scales`] says. Each tensor gets the type llama.cpp's recipe gives it
//! for the file type (Q4_K_M by default) and is quantized row by row with
//! the reference quantizers; tensors are written in llama.cpp's order. The
//! result is the file `llama-quantize` would make from the same weights
//! stored as F32, and the same bytes for the same seed on every machine.

pub mod llama_moe;
pub mod qwen3;
pub mod qwen3moe;
pub mod rng;

use std::fmt;
use std::str::FromStr;

use crate::ggml_type::GgmlType;
use crate::gguf::{GgufFile, GgufWriter, Value, WriteError};
use crate::quant::QuantError;
use crate::quantize::recipe::{self, FileType, ModelInfo, RecipeError, TensorDesc};
use crate::quantize::{quantize_rows, QUANTIZATION_VERSION};
use rng::Xoshiro256StarStar;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Qwen3,
    Qwen3Moe,
}

impl Arch {
    /// The `general.architecture` string.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Qwen3 => "qwen3",
            Arch::Qwen3Moe => "qwen3moe",
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Arch {
    type Err = String;
    fn from_str(s: &str) -> Result<Arch, String> {
        match s {
            "qwen3" => Ok(Arch::Qwen3),
            "qwen3moe" => Ok(Arch::Qwen3Moe),
            _ => Err(format!(
                "unknown architecture {s:?} (one of: qwen3, qwen3moe)"
            )),
        }
    }
}

/// What `sharpi synth --arch` makes: a model drawn from scratch, or a
/// dense llama model's FFNs made into experts ([`llama_moe`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Scratch(Arch),
    LlamaMoe,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Kind::Scratch(a) => a.fmt(f),
            Kind::LlamaMoe => f.write_str("llama-moe"),
        }
    }
}

impl FromStr for Kind {
    type Err = String;
    fn from_str(s: &str) -> Result<Kind, String> {
        match s {
            "llama-moe" => Ok(Kind::LlamaMoe),
            _ => s.parse().map(Kind::Scratch).map_err(|_| {
                format!("unknown architecture {s:?} (one of: qwen3, qwen3moe, llama-moe)")
            }),
        }
    }
}

/// How large the random weights are. Every matrix is drawn as
/// `normal * scale / sqrt(fan_in)` (fan_in: its row length), except the
/// token embedding (`normal * embed`); norm weights are `1 + norm_noise *
/// normal`, the QK-norm weights `qk_norm` times that.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scales {
    /// Token embedding standard deviation.
    pub embed: f32,
    /// Output head: a row of norm-multiplier 1 gives logits of about this
    /// standard deviation (the final norm makes the hidden state's RMS about
    /// 1); rows are spread by [`Init::HeavyRows`]. Large by default so that
    /// the next-token distribution is sharp (a clear top token).
    pub head: f32,
    /// Attention and FFN projections (1: variance-preserving).
    pub proj: f32,
    /// MoE router (`ffn_gate_inp`).
    pub router: f32,
    /// Noise around 1 in RMSNorm weights.
    pub norm_noise: f32,
    /// Gain of the QK-norm weights (`attn_q_norm`, `attn_k_norm`). The
    /// normalised query and key heads have RMS 1, so an attention score
    /// `q · k / sqrt(head_dim)` has a standard deviation of about
    /// `qk_norm²` (1 by default), and with [`Config::tie_qk`] a query's
    /// score with its own key is about `qk_norm² · sqrt(head_dim)`: 181 for
    /// 4 and 128, whose exp overflows f32 unless the softmax subtracts the
    /// row's max first.
    pub qk_norm: f32,
}

impl Default for Scales {
    fn default() -> Scales {
        Scales {
            embed: 1.0,
            head: 48.0,
            proj: 1.0,
            router: 1.0,
            norm_noise: 0.1,
            qk_norm: 1.0,
        }
    }
}

/// Shape and hyperparameters of a synthetic model.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub arch: Arch,
    pub seed: u64,
    pub n_layer: u32,
    pub n_embd: u32,
    pub n_head: u32,
    pub n_head_kv: u32,
    pub head_dim: u32,
    /// Dense FFN width (Qwen3-MoE: written as `feed_forward_length`, which
    /// llama.cpp uses only when `expert_feed_forward_length` is absent).
    pub n_ff: u32,
    pub n_expert: u32,
    pub n_expert_used: u32,
    pub n_ff_exp: u32,
    pub context_length: u32,
    pub rope_freq_base: f32,
    pub rms_eps: f32,
    pub scales: Scales,
    pub ftype: FileType,
    /// Each query head's projection is its KV head's key projection
    /// (`attn_q` rows copied from `attn_k`): a query meets its own key
    /// with a score of about `qk_norm² · sqrt(head_dim)` (the normalised
    /// head's squared norm), far above its scores with other positions, so
    /// each row's softmax is all but one-hot on itself however large the
    /// scores are (with random heads, large scores make near-ties that
    /// noise decides).
    pub tie_qk: bool,
    /// Qwen3-MoE: the last `router_twins` experts route exactly as the
    /// first `router_twins` do (their `ffn_gate_inp` rows are copies, see
    /// [`Init::TwinRows`]); at most half the experts. 0: none.
    pub router_twins: u32,
}

impl Config {
    /// The defaults for `arch` (see [`qwen3::config`], [`qwen3moe::config`]).
    pub fn new(arch: Arch, seed: u64) -> Config {
        match arch {
            Arch::Qwen3 => qwen3::config(seed),
            Arch::Qwen3Moe => qwen3moe::config(seed),
        }
    }
}

/// How a tensor's values are drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// `normal * std`.
    Normal { std: f32 },
    /// `gain * (1 + noise * normal)` (RMSNorm weights; the product is
    /// skipped for a gain of 1, so those are `1 + noise * normal` exactly).
    Norm { noise: f32, gain: f32 },
    /// `normal * std * r`, with one `r = (1 - u)^(-1/4)` per row (`u`
    /// uniform, drawn before the row; two square roots, so exact): row
    /// norms with a Pareto tail of index 4, in [1, 64], much as token
    /// frequencies spread the rows of a trained output head. The top logit
    /// is then usually an outlier with a clear margin over the second;
    /// with Gaussian rows, near-ties among 49152 logits come up on a fair
    /// share of prompts (measured with llama.cpp on 60 prompts: minimum
    /// top-1/top-2 margins of 0.000-0.03 at a logit s.d. of 32, against
    /// 1.2-2.0 at s.d. 45 with this tail, with ~30 distinct top tokens).
    HeavyRows { std: f32 },
    /// `normal * std` as [`Init::Normal`] draws it, then the last `twins`
    /// rows overwritten with copies of the first `twins` (row `n - twins +
    /// i` = row `i`; rows are `dims[0]` long). A router drawn so gives each
    /// such pair of experts the same logit, bit for bit, whatever the
    /// input: their probabilities tie exactly.
    TwinRows { std: f32, twins: u32 },
}

/// One tensor of a synthetic model, before it is drawn.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorSpec {
    pub name: String,
    /// ggml `ne` order.
    pub dims: Vec<u64>,
    pub init: Init,
    /// Rows copied from another tensor's draw instead of a stream of its
    /// own (tied query and key heads).
    pub rows_of: Option<RowsOf>,
}

/// Rows of a tensor taken from another one's draw (the same `init`, that
/// tensor's stream): blocks of `block` rows, each repeated `repeat` times
/// (row `r` is source row `(r / (block · repeat)) · block + r % block`), as
/// the query heads of a KV head's group repeat its key head.
#[derive(Clone, Debug, PartialEq)]
pub struct RowsOf {
    pub tensor: String,
    pub block: usize,
    pub repeat: usize,
}

impl TensorSpec {
    fn new(name: impl Into<String>, dims: &[u64], init: Init) -> TensorSpec {
        TensorSpec {
            name: name.into(),
            dims: dims.to_vec(),
            init,
            rows_of: None,
        }
    }

    /// A matrix of `dims` scaled for its fan-in (`dims[0]`).
    fn matrix(name: impl Into<String>, dims: &[u64], scale: f32) -> TensorSpec {
        let std = scale / (dims[0] as f32).sqrt();
        TensorSpec::new(name, dims, Init::Normal { std })
    }

    fn norm(name: impl Into<String>, len: u64, s: &Scales) -> TensorSpec {
        TensorSpec::norm_gain(name, len, s, 1.0)
    }

    /// A norm weight times `gain`.
    fn norm_gain(name: impl Into<String>, len: u64, s: &Scales, gain: f32) -> TensorSpec {
        TensorSpec::new(
            name,
            &[len],
            Init::Norm {
                noise: s.norm_noise,
                gain,
            },
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    #[error("tokenizer source: {0}")]
    Tokenizer(String),
    #[error("source model: {0}")]
    Source(String),
    #[error("synth settings: {0}")]
    Config(String),
    #[error("{0}")]
    Recipe(#[from] RecipeError),
    #[error("tensor {name:?}: {source}")]
    Quant { name: String, source: QuantError },
    #[error("{0}")]
    Write(#[from] WriteError),
}

/// The `tokenizer.*` keys of `src`, in its order, and the vocabulary size
/// (the length of `tokenizer.ggml.tokens`).
pub fn tokenizer_metadata(src: &GgufFile) -> Result<(Vec<(String, Value)>, u64), SynthError> {
    let n_vocab = src
        .get_array("tokenizer.ggml.tokens")
        .map_err(|e| SynthError::Tokenizer(e.to_string()))?
        .len() as u64;
    if n_vocab == 0 {
        return Err(SynthError::Tokenizer(
            "tokenizer.ggml.tokens is empty".into(),
        ));
    }
    let kvs = src
        .metadata()
        .iter()
        .filter(|(k, _)| k.starts_with("tokenizer."))
        .cloned()
        .collect();
    Ok((kvs, n_vocab))
}

/// The architecture's metadata (without tokenizer, file type and
/// quantization version).
fn arch_metadata(cfg: &Config) -> Vec<(String, Value)> {
    match cfg.arch {
        Arch::Qwen3 => qwen3::metadata(cfg),
        Arch::Qwen3Moe => qwen3moe::metadata(cfg),
    }
}

fn tensor_specs(cfg: &Config, n_vocab: u64) -> Vec<TensorSpec> {
    match cfg.arch {
        Arch::Qwen3 => qwen3::tensors(cfg, n_vocab),
        Arch::Qwen3Moe => qwen3moe::tensors(cfg, n_vocab),
    }
}

/// Draws a tensor's values from its own stream (or copies another's rows:
/// [`TensorSpec::rows_of`]).
pub fn draw(seed: u64, spec: &TensorSpec) -> Vec<f32> {
    if let Some(of) = &spec.rows_of {
        let row = spec.dims[0] as usize;
        let rows = spec.dims[1..].iter().product::<u64>() as usize;
        let source = TensorSpec::new(
            of.tensor.clone(),
            &[spec.dims[0], (rows / of.repeat) as u64],
            spec.init,
        );
        let v = draw(seed, &source);
        return (0..rows)
            .flat_map(|r| {
                let s = (r / (of.block * of.repeat)) * of.block + r % of.block;
                v[s * row..(s + 1) * row].iter().copied()
            })
            .collect();
    }
    let n: u64 = spec.dims.iter().product();
    let mut r = Xoshiro256StarStar::for_tensor(seed, &spec.name);
    match spec.init {
        Init::Normal { std } => (0..n).map(|_| r.normal() * std).collect(),
        Init::Norm { noise, gain: 1.0 } => (0..n).map(|_| 1.0 + noise * r.normal()).collect(),
        Init::Norm { noise, gain } => (0..n).map(|_| gain * (1.0 + noise * r.normal())).collect(),
        Init::TwinRows { std, twins } => {
            let mut out: Vec<f32> = (0..n).map(|_| r.normal() * std).collect();
            let (row, twins) = (spec.dims[0] as usize, twins as usize);
            let rows = out.len() / row;
            assert!(
                2 * twins <= rows,
                "{}: {twins} twins of {rows} rows",
                spec.name
            );
            out.copy_within(..twins * row, (rows - twins) * row);
            out
        }
        Init::HeavyRows { std } => {
            let row_len = spec.dims[0];
            let mut out = Vec::with_capacity(n as usize);
            for _ in 0..n / row_len {
                // 1 - u is in (0, 1]: the multiplier is in [1, 64].
                let row_std = std / (1.0 - r.uniform()).sqrt().sqrt();
                out.extend((0..row_len).map(|_| r.normal() * row_std));
            }
            out
        }
    }
}

/// Builds the model `cfg` describes, with the tokenizer of `tokenizer`.
/// Runs on the current rayon pool; the bytes do not depend on it.
pub fn synthesize(cfg: &Config, tokenizer: &GgufFile) -> Result<GgufWriter<'static>, SynthError> {
    if 2 * cfg.router_twins > cfg.n_expert {
        return Err(SynthError::Config(format!(
            "{} router twins of {} experts (at most half)",
            cfg.router_twins, cfg.n_expert
        )));
    }
    let (tok_kvs, n_vocab) = tokenizer_metadata(tokenizer)?;
    let specs = tensor_specs(cfg, n_vocab);

    let model = ModelInfo {
        arch: cfg.arch.name().to_string(),
        n_layer: cfg.n_layer,
        n_head: cfg.n_head,
        n_head_kv: cfg.n_head_kv,
        n_expert: cfg.n_expert,
    };
    let descs: Vec<TensorDesc> = specs
        .iter()
        .map(|s| TensorDesc {
            name: &s.name,
            ty: GgmlType::F32,
            dims: &s.dims,
        })
        .collect();
    let choices = recipe::plan(&model, &descs, cfg.ftype)?;

    let mut w = GgufWriter::new();
    for (k, v) in arch_metadata(cfg).into_iter().chain(tok_kvs) {
        w.set(k, v)?;
    }
    w.set(
        "general.quantization_version",
        Value::U32(QUANTIZATION_VERSION),
    )?;
    w.set("general.file_type", Value::U32(cfg.ftype.id()))?;

    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    for i in recipe::llama_order(&names) {
        let spec = &specs[i];
        let ty = choices[i].ty;
        let values = draw(cfg.seed, spec);
        let data = quantize_rows(&values, ty, spec.dims[0] as usize).map_err(|source| {
            SynthError::Quant {
                name: spec.name.clone(),
                source,
            }
        })?;
        w.add_tensor(spec.name.clone(), ty, &spec.dims, data)?;
    }
    Ok(w)
}

/// Keys every synthetic model starts with.
fn general_metadata(cfg: &Config) -> Vec<(String, Value)> {
    vec![
        (
            "general.architecture".into(),
            Value::String(cfg.arch.name().into()),
        ),
        ("general.type".into(), Value::String("model".into())),
        (
            "general.name".into(),
            Value::String(match cfg.router_twins {
                0 => format!("synthetic {} seed {}", cfg.arch, cfg.seed),
                t => format!("synthetic {} seed {} router twins {t}", cfg.arch, cfg.seed),
            }),
        ),
    ]
}

/// `{arch}.{suffix}` as a u32 value.
fn arch_u32(cfg: &Config, suffix: &str, v: u32) -> (String, Value) {
    (format!("{}.{suffix}", cfg.arch), Value::U32(v))
}

fn arch_f32(cfg: &Config, suffix: &str, v: f32) -> (String, Value) {
    (format!("{}.{suffix}", cfg.arch), Value::F32(v))
}

/// Keys shared by Qwen3 and Qwen3-MoE, in the order llama.cpp's converter
/// writes them.
fn transformer_metadata(cfg: &Config) -> Vec<(String, Value)> {
    let mut m = general_metadata(cfg);
    m.extend([
        arch_u32(cfg, "block_count", cfg.n_layer),
        arch_u32(cfg, "context_length", cfg.context_length),
        arch_u32(cfg, "embedding_length", cfg.n_embd),
        arch_u32(cfg, "feed_forward_length", cfg.n_ff),
        arch_u32(cfg, "attention.head_count", cfg.n_head),
        arch_u32(cfg, "attention.head_count_kv", cfg.n_head_kv),
        arch_f32(cfg, "rope.freq_base", cfg.rope_freq_base),
        arch_f32(cfg, "attention.layer_norm_rms_epsilon", cfg.rms_eps),
        arch_u32(cfg, "attention.key_length", cfg.head_dim),
        arch_u32(cfg, "attention.value_length", cfg.head_dim),
    ]);
    m
}

/// Embedding, attention block (with QK-norm) and head tensors shared by
/// Qwen3 and Qwen3-MoE; `ffn` adds each layer's FFN tensors.
fn transformer_tensors(
    cfg: &Config,
    n_vocab: u64,
    mut ffn: impl FnMut(u32, &mut Vec<TensorSpec>),
) -> Vec<TensorSpec> {
    let s = &cfg.scales;
    let d = u64::from(cfg.n_embd);
    let hd = u64::from(cfg.head_dim);
    let q = hd * u64::from(cfg.n_head);
    let kv = hd * u64::from(cfg.n_head_kv);
    let mut t = vec![TensorSpec::new(
        "token_embd.weight",
        &[d, n_vocab],
        Init::Normal { std: s.embed },
    )];
    for i in 0..cfg.n_layer {
        let b = |n: &str| format!("blk.{i}.{n}.weight");
        t.push(TensorSpec::norm(b("attn_norm"), d, s));
        let mut attn_q = TensorSpec::matrix(b("attn_q"), &[d, q], s.proj);
        if cfg.tie_qk {
            attn_q.rows_of = Some(RowsOf {
                tensor: b("attn_k"),
                block: hd as usize,
                repeat: (cfg.n_head / cfg.n_head_kv) as usize,
            });
        }
        t.push(attn_q);
        t.push(TensorSpec::matrix(b("attn_k"), &[d, kv], s.proj));
        t.push(TensorSpec::matrix(b("attn_v"), &[d, kv], s.proj));
        t.push(TensorSpec::matrix(b("attn_output"), &[q, d], s.proj));
        t.push(TensorSpec::norm_gain(b("attn_q_norm"), hd, s, s.qk_norm));
        t.push(TensorSpec::norm_gain(b("attn_k_norm"), hd, s, s.qk_norm));
        t.push(TensorSpec::norm(b("ffn_norm"), d, s));
        ffn(i, &mut t);
    }
    t.push(TensorSpec::norm("output_norm.weight", d, s));
    t.push(TensorSpec::new(
        "output.weight",
        &[d, n_vocab],
        Init::HeavyRows {
            std: s.head / (d as f32).sqrt(),
        },
    ));
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arch_names_parse() {
        assert_eq!("qwen3".parse::<Arch>(), Ok(Arch::Qwen3));
        assert_eq!("qwen3moe".parse::<Arch>(), Ok(Arch::Qwen3Moe));
        assert!("llama".parse::<Arch>().unwrap_err().contains("one of"));
        assert_eq!("qwen3".parse::<Kind>(), Ok(Kind::Scratch(Arch::Qwen3)));
        assert_eq!("llama-moe".parse::<Kind>(), Ok(Kind::LlamaMoe));
        assert_eq!(Kind::LlamaMoe.to_string(), "llama-moe");
        let e = "llama".parse::<Kind>().unwrap_err();
        assert!(e.contains("one of: qwen3, qwen3moe, llama-moe"), "{e}");
    }

    #[test]
    fn draws_depend_on_seed_and_name_only() {
        let a = TensorSpec::new("a", &[4, 2], Init::Normal { std: 2.0 });
        let b = TensorSpec::new("b", &[4, 2], Init::Normal { std: 2.0 });
        assert_eq!(draw(1, &a), draw(1, &a));
        assert_ne!(draw(1, &a), draw(2, &a));
        assert_ne!(draw(1, &a), draw(1, &b));
        let n = TensorSpec::new(
            "n",
            &[1000],
            Init::Norm {
                noise: 0.1,
                gain: 1.0,
            },
        );
        assert!(draw(3, &n).iter().all(|&x| (0.6..1.4).contains(&x)));
        // A gain multiplies the same draws.
        let g = TensorSpec::new(
            "n",
            &[1000],
            Init::Norm {
                noise: 0.1,
                gain: 8.0,
            },
        );
        let (a, b) = (draw(3, &n), draw(3, &g));
        assert!(a.iter().zip(&b).all(|(a, b)| *b == 8.0 * a));
    }

    #[test]
    fn tied_query_heads_repeat_their_key_head() {
        let mut cfg = Config::new(Arch::Qwen3, 5);
        cfg.tie_qk = true;
        let specs = tensor_specs(&cfg, 10);
        let spec = |n: &str| specs.iter().find(|s| s.name == n).unwrap();
        let q = draw(5, spec("blk.1.attn_q.weight"));
        let k = draw(5, spec("blk.1.attn_k.weight"));
        let (d, hd) = (cfg.n_embd as usize, cfg.head_dim as usize);
        let group = (cfg.n_head / cfg.n_head_kv) as usize;
        assert_eq!(q.len(), group * k.len());
        for r in 0..q.len() / d {
            let kr = (r / hd / group) * hd + r % hd;
            assert_eq!(&q[r * d..(r + 1) * d], &k[kr * d..(kr + 1) * d], "row {r}");
        }
        // Untied: a stream of its own.
        cfg.tie_qk = false;
        let specs = tensor_specs(&cfg, 10);
        let q = draw(
            5,
            specs
                .iter()
                .find(|s| s.name == "blk.1.attn_q.weight")
                .unwrap(),
        );
        assert_ne!(&q[..d], &k[..d]);
    }

    #[test]
    fn twin_rows_copy_the_first_rows_over_the_last() {
        let plain = TensorSpec::new("r", &[4, 6], Init::Normal { std: 1.0 });
        let twins = TensorSpec::new("r", &[4, 6], Init::TwinRows { std: 1.0, twins: 2 });
        let (a, b) = (draw(5, &plain), draw(5, &twins));
        // Rows 0..4 as drawn, rows 4 and 5 copies of rows 0 and 1.
        assert_eq!(a[..16], b[..16]);
        assert_eq!(b[16..24], b[..8]);
        assert_ne!(a[16..24], b[16..24]);
    }

    #[test]
    fn matrices_are_scaled_by_fan_in() {
        let m = TensorSpec::matrix("m", &[256, 3], 2.0);
        assert_eq!(m.init, Init::Normal { std: 0.125 });
    }
}

//! What each supported GGUF architecture is, as data: the metadata keys it
//! reads, the tensors it needs (names, shapes), and the choices that differ
//! between architectures (RoPE pairing, activation, norms, scales, sliding
//! window). Loading ([`super::Model::load`]) checks a file against its
//! table; the forward pass ([`super::forward`]) relies on what it checked.
//!
//! The rules are llama.cpp's (src/llama-model.cpp, src/models/*.cpp,
//! src/llama-graph.cpp), stated where they are used.

use std::fmt;

use crate::ops::{GluKind, RopeStyle};

/// A supported architecture (`general.architecture`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    Llama,
    Gemma3,
    Qwen3,
    Qwen3Moe,
}

/// Whether a metadata key must be present.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    Required,
    /// Absent means the documented default.
    Optional,
}

/// A metadata key, named by its suffix after `"{arch}."`.
#[derive(Clone, Copy, Debug)]
pub struct Key {
    pub suffix: &'static str,
    pub need: Need,
}

/// What a tensor is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    TokEmbd,
    OutputNorm,
    Output,
    AttnNorm,
    AttnQ,
    AttnK,
    AttnV,
    AttnOut,
    AttnQNorm,
    AttnKNorm,
    AttnPostNorm,
    /// Projection biases `[width of the product]` (optional: llama.cpp's
    /// `bq`, `bk`, `bv`, `bo`).
    AttnQBias,
    AttnKBias,
    AttnVBias,
    AttnOutBias,
    FfnNorm,
    FfnGate,
    FfnUp,
    FfnDown,
    FfnPostNorm,
    /// MoE router `[n_embd, n_expert]`.
    FfnGateInp,
    /// Stacked expert matrices `[n_embd, n_ff_exp, n_expert]`.
    FfnGateExps,
    FfnUpExps,
    /// `[n_ff_exp, n_embd, n_expert]`.
    FfnDownExps,
}

impl Role {
    /// The stacked expert matrices (gate, up, down), which an expert slot
    /// cache keeps on the host ([`crate::expert_cache`]).
    pub fn is_expert_matrix(self) -> bool {
        matches!(
            self,
            Role::FfnGateExps | Role::FfnUpExps | Role::FfnDownExps
        )
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A symbolic tensor dimension, resolved from the hyperparameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dim {
    /// `n_embd`.
    Embd,
    /// Rows of `token_embd` (the vocabulary).
    Vocab,
    /// `feed_forward_length`.
    Ff,
    /// `n_head · head_dim_k` (Q projection output).
    Q,
    /// `n_kv_head · head_dim_k`.
    K,
    /// `n_kv_head · head_dim_v`.
    V,
    /// `n_head · head_dim_v` (attention output projection input).
    AttnOutIn,
    /// `head_dim_k` (per-head QK-norm weights).
    HeadDimK,
    /// `expert_count`.
    Expert,
    /// An expert's FFN width (see [`MoeRule`]).
    FfExp,
}

/// How a tensor may be absent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presence {
    Required,
    /// Absent: the output head reuses `token_embd.weight` (tied embeddings),
    /// as llama.cpp does when `output.weight` is missing.
    OrTokenEmbedding,
    /// Required when the feed-forward is dense (no experts), else refused.
    Dense,
    /// Required when the feed-forward is a mixture of experts, else refused.
    Moe,
    /// Read when the file has it (per layer), absent otherwise: llama.cpp's
    /// `TENSOR_NOT_REQUIRED` (a projection's bias).
    Optional,
}

/// A tensor the architecture reads. `name` holds `{layer}` for per-layer
/// tensors; `shape` is in ggml order (`[row length, rows]`).
#[derive(Clone, Copy, Debug)]
pub struct TensorSpec {
    pub role: Role,
    pub name: &'static str,
    pub shape: &'static [Dim],
    pub presence: Presence,
}

impl TensorSpec {
    pub fn per_layer(&self) -> bool {
        self.name.contains("{layer}")
    }

    /// The tensor's name in layer `l` (or its only name).
    pub fn name_for(&self, l: usize) -> String {
        self.name.replace("{layer}", &l.to_string())
    }
}

/// Scaling of the token embeddings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmbedScale {
    None,
    /// `x · sqrtf(n_embd)` (Gemma; llama.cpp `build_inp_embd(tok_embd,
    /// sqrtf(n_embd))`, in f32).
    SqrtEmbd,
}

/// How the attention logits are scaled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttnScale {
    /// `1 / sqrt(head_dim)` (llama.cpp llama: `1/sqrtf(n_embd_head)` as
    /// `f_attention_scale` is never set for it).
    InvSqrtHeadDim,
    /// Gemma 3, as llama.cpp (which ignores `query_pre_attn_scalar`, absent
    /// from GGUF): `1 / sqrt(n_embd / n_head)` (integer division) for the
    /// 27B model (62 layers), `1 / sqrt(head_dim_k)` for every other size.
    /// For the 270M: head_dim 256, so 1/16. Applied to Q before attention
    /// (after the `Qcur` tap), as llama.cpp's `ggml_scale(Qcur)` with a
    /// softmax scale of 1: against an F16 cache the scaled query is what is
    /// rounded to f16 (a query element that the scale takes into f16's
    /// subnormal range rounds differently from the unscaled one).
    Gemma3,
}

impl AttnScale {
    /// Whether the scale multiplies the query before `q · k` (rather than
    /// the scores).
    pub fn on_query(self) -> bool {
        matches!(self, AttnScale::Gemma3)
    }
}

/// Which layers use sliding-window attention.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwaRule {
    /// Every layer attends to the whole context.
    None,
    /// llama.cpp's `load_swa_pattern(ml, default_period)` without
    /// `dense_first`, used only when `attention.sliding_window` is present
    /// and nonzero: `attention.sliding_window_pattern` is either an array
    /// of per-layer bools (true: sliding) or a period `n`, default
    /// `default_period`; with a period, layer `il` slides iff `n == 0 ||
    /// il % n < n - 1`, so the last layer of each period is global (Gemma 3
    /// 270M, period 6: layers 5, 11, 17 are global). Sliding layers use
    /// RoPE base `rope.freq_base_swa` (default 10000) and no RoPE scaling;
    /// global layers use `rope.freq_base` and the file's scaling.
    Pattern { default_period: u32 },
}

/// Whether and how an architecture's feed-forward is a mixture of experts
/// (llama.cpp `build_moe_ffn` with softmax gating: router logits, softmax,
/// top `expert_used_count` by probability, the chosen probabilities as
/// weights, renormalised to sum 1 when `norm_weights`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MoeRule {
    /// Always dense.
    None,
    /// Experts when `expert_count` > 0 (Mixtral-style llama): each expert
    /// is `feed_forward_length` wide.
    WhenExpertCount { norm_weights: bool },
    /// Always experts (`expert_count` and `expert_used_count` required):
    /// each is `expert_feed_forward_length` wide, default
    /// `feed_forward_length / expert_used_count` (qwen3moe).
    Always { norm_weights: bool },
}

/// llama.cpp's names for the block's values that its graphs name
/// differently per architecture, or not at all. A step only some
/// architectures take has its one llama.cpp name in the block itself
/// (`inp_scaled`, `Qcur_normed`, `attn_post_norm`, `ffn_post_norm`), and
/// the gated activation is named by its kind (`ffn_swiglu`, `ffn_geglu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Taps {
    /// The attention's output projection, before any post-norm: llama's
    /// `attn_out`; `None` where the graph names none (qwen3, gemma3).
    pub attn_out: Option<&'static str>,
    /// The residual stream after attention, the FFN's input: `ffn_inp`
    /// (gemma3: `sa_out`).
    pub ffn_inp: &'static str,
}

/// One architecture's table (copied into each [`super::Model`], where
/// [`super::ModelOptions::spec_edit`] may change the copy).
#[derive(Clone, Debug)]
pub struct ArchSpec {
    pub arch: Arch,
    /// `general.architecture`.
    pub name: &'static str,
    pub keys: &'static [Key],
    pub tensors: &'static [TensorSpec],
    /// RoPE pairing (llama.cpp `llama_model_rope_type`).
    pub rope: RopeStyle,
    /// Feed-forward: `down(act(gate(x)) · up(x))`.
    pub ffn: GluKind,
    pub embed_scale: EmbedScale,
    pub attn_scale: AttnScale,
    /// RMS-norm of each Q and K head (weights `[head_dim_k]`) before RoPE.
    pub qk_norm: bool,
    /// RMS-norm of the attention and FFN outputs before their residual adds.
    pub post_norms: bool,
    pub swa: SwaRule,
    pub moe: MoeRule,
    pub taps: Taps,
}

const fn req(suffix: &'static str) -> Key {
    Key {
        suffix,
        need: Need::Required,
    }
}

const fn opt(suffix: &'static str) -> Key {
    Key {
        suffix,
        need: Need::Optional,
    }
}

const fn t(role: Role, name: &'static str, shape: &'static [Dim]) -> TensorSpec {
    TensorSpec {
        role,
        name,
        shape,
        presence: Presence::Required,
    }
}

/// Keys every supported architecture reads. Defaults (llama.cpp's):
/// `head_count_kv` = `head_count`; `key_length`/`value_length` = `n_embd /
/// head_count`; `rope.dimension_count` = `key_length`; `rope.freq_base` =
/// 10000; no RoPE scaling; `vocab_size`, when present, must equal the rows
/// of `token_embd`.
const COMMON_KEYS: [Key; 14] = [
    req("context_length"),
    req("embedding_length"),
    req("block_count"),
    req("feed_forward_length"),
    req("attention.head_count"),
    opt("attention.head_count_kv"),
    req("attention.layer_norm_rms_epsilon"),
    opt("attention.key_length"),
    opt("attention.value_length"),
    opt("rope.dimension_count"),
    opt("rope.freq_base"),
    opt("rope.scaling.type"),
    opt("rope.scaling.factor"),
    opt("vocab_size"),
];

const GLOBAL_TENSORS: [TensorSpec; 3] = [
    t(Role::TokEmbd, "token_embd.weight", &[Dim::Embd, Dim::Vocab]),
    t(Role::OutputNorm, "output_norm.weight", &[Dim::Embd]),
    TensorSpec {
        role: Role::Output,
        name: "output.weight",
        shape: &[Dim::Embd, Dim::Vocab],
        presence: Presence::OrTokenEmbedding,
    },
];

const fn dense(role: Role, name: &'static str, shape: &'static [Dim]) -> TensorSpec {
    TensorSpec {
        role,
        name,
        shape,
        presence: Presence::Dense,
    }
}

const fn moe(role: Role, name: &'static str, shape: &'static [Dim]) -> TensorSpec {
    TensorSpec {
        role,
        name,
        shape,
        presence: Presence::Moe,
    }
}

/// The pre-norm block every architecture shares.
const BLOCK_TENSORS: [TensorSpec; 9] = [
    t(Role::AttnNorm, "blk.{layer}.attn_norm.weight", &[Dim::Embd]),
    t(
        Role::AttnQ,
        "blk.{layer}.attn_q.weight",
        &[Dim::Embd, Dim::Q],
    ),
    t(
        Role::AttnK,
        "blk.{layer}.attn_k.weight",
        &[Dim::Embd, Dim::K],
    ),
    t(
        Role::AttnV,
        "blk.{layer}.attn_v.weight",
        &[Dim::Embd, Dim::V],
    ),
    t(
        Role::AttnOut,
        "blk.{layer}.attn_output.weight",
        &[Dim::AttnOutIn, Dim::Embd],
    ),
    t(Role::FfnNorm, "blk.{layer}.ffn_norm.weight", &[Dim::Embd]),
    dense(
        Role::FfnGate,
        "blk.{layer}.ffn_gate.weight",
        &[Dim::Embd, Dim::Ff],
    ),
    dense(
        Role::FfnUp,
        "blk.{layer}.ffn_up.weight",
        &[Dim::Embd, Dim::Ff],
    ),
    dense(
        Role::FfnDown,
        "blk.{layer}.ffn_down.weight",
        &[Dim::Ff, Dim::Embd],
    ),
];

/// The Q, K and V projections' biases, each added to its product's rows
/// right after the product (before QK-norm and RoPE), as llama.cpp's
/// graphs add `bq`, `bk`, `bv` ([`crate::ops::Ops::add_bias`]);
/// `presence`: [`Presence::Optional`] where llama.cpp loads them as
/// `TENSOR_NOT_REQUIRED` (llama), [`Presence::Required`] where it needs
/// them (qwen2).
const fn qkv_bias_tensors(presence: Presence) -> [TensorSpec; 3] {
    const fn bias(role: Role, name: &'static str, dim: &'static [Dim], p: Presence) -> TensorSpec {
        TensorSpec {
            role,
            name,
            shape: dim,
            presence: p,
        }
    }
    [
        bias(
            Role::AttnQBias,
            "blk.{layer}.attn_q.bias",
            &[Dim::Q],
            presence,
        ),
        bias(
            Role::AttnKBias,
            "blk.{layer}.attn_k.bias",
            &[Dim::K],
            presence,
        ),
        bias(
            Role::AttnVBias,
            "blk.{layer}.attn_v.bias",
            &[Dim::V],
            presence,
        ),
    ]
}

/// The output projection's bias, added before the attention output tap
/// (llama.cpp `build_attn`'s `wo_b`), where the file has it.
const ATTN_OUT_BIAS: TensorSpec = TensorSpec {
    role: Role::AttnOutBias,
    name: "blk.{layer}.attn_output.bias",
    shape: &[Dim::Embd],
    presence: Presence::Optional,
};

const fn concat<const A: usize, const B: usize, const N: usize>(
    a: [TensorSpec; A],
    b: [TensorSpec; B],
) -> [TensorSpec; N] {
    assert!(A + B == N);
    let mut out = [a[0]; N];
    let mut i = 0;
    while i < A {
        out[i] = a[i];
        i += 1;
    }
    while i < N {
        out[i] = b[i - A];
        i += 1;
    }
    out
}

/// The experts of a mixture-of-experts feed-forward (llama.cpp names;
/// the router is `ffn_gate_inp`).
const MOE_TENSORS: [TensorSpec; 4] = [
    moe(
        Role::FfnGateInp,
        "blk.{layer}.ffn_gate_inp.weight",
        &[Dim::Embd, Dim::Expert],
    ),
    moe(
        Role::FfnGateExps,
        "blk.{layer}.ffn_gate_exps.weight",
        &[Dim::Embd, Dim::FfExp, Dim::Expert],
    ),
    moe(
        Role::FfnUpExps,
        "blk.{layer}.ffn_up_exps.weight",
        &[Dim::Embd, Dim::FfExp, Dim::Expert],
    ),
    moe(
        Role::FfnDownExps,
        "blk.{layer}.ffn_down_exps.weight",
        &[Dim::FfExp, Dim::Embd, Dim::Expert],
    ),
];

const fn concat_keys<const A: usize, const B: usize, const N: usize>(
    a: [Key; A],
    b: [Key; B],
) -> [Key; N] {
    assert!(A + B == N);
    let mut out = [req(""); N];
    let mut i = 0;
    while i < A {
        out[i] = a[i];
        i += 1;
    }
    while i < N {
        out[i] = b[i - A];
        i += 1;
    }
    out
}

const DENSE_TENSORS: [TensorSpec; 12] = concat(GLOBAL_TENSORS, BLOCK_TENSORS);
const LLAMA_TENSORS: [TensorSpec; 20] = concat(
    concat::<12, 4, 16>(DENSE_TENSORS, MOE_TENSORS),
    concat::<3, 1, 4>(qkv_bias_tensors(Presence::Optional), [ATTN_OUT_BIAS]),
);
const LLAMA_KEYS: [Key; 16] =
    concat_keys(COMMON_KEYS, [opt("expert_count"), opt("expert_used_count")]);

/// Llama (and SmolLM2): pre-norm blocks, SwiGLU, NORM RoPE.
///
/// RoPE style NORM (adjacent pairs): HF Llama rotates halves, but
/// llama.cpp's converter permutes the rows of `attn_q` / `attn_k` (per head:
/// `reshape(n_head, 2, head_dim/2, n_in).swapaxes(1, 2)`) so that adjacent
/// pairs on the stored weights give the same result. llama.cpp also
/// requires `rope.dimension_count == head_dim` for llama.
///
/// With `expert_count` > 0 the feed-forward is Mixtral's mixture of
/// experts (llama.cpp's llama graph: softmax gating, renormalised top-k
/// weights, experts `feed_forward_length` wide).
///
/// The attention projections' biases are optional, as llama.cpp loads
/// them for llama. Other optional llama.cpp extras (`rope_freqs.weight` for
/// Llama 3.1 scaling, the FFN's biases, shared experts) are not in this
/// table: a file holding them is refused by name instead of being run
/// wrongly.
pub static LLAMA: ArchSpec = ArchSpec {
    arch: Arch::Llama,
    name: "llama",
    keys: &LLAMA_KEYS,
    tensors: &LLAMA_TENSORS,
    rope: RopeStyle::Norm,
    ffn: GluKind::SwiGlu,
    embed_scale: EmbedScale::None,
    attn_scale: AttnScale::InvSqrtHeadDim,
    qk_norm: false,
    post_norms: false,
    swa: SwaRule::None,
    moe: MoeRule::WhenExpertCount { norm_weights: true },
    taps: Taps {
        attn_out: Some("attn_out"),
        ffn_inp: "ffn_inp",
    },
};

/// Per-head RMS norms of Q and K before RoPE.
const QK_NORM_TENSORS: [TensorSpec; 2] = [
    t(
        Role::AttnQNorm,
        "blk.{layer}.attn_q_norm.weight",
        &[Dim::HeadDimK],
    ),
    t(
        Role::AttnKNorm,
        "blk.{layer}.attn_k_norm.weight",
        &[Dim::HeadDimK],
    ),
];

const GEMMA3_POST_NORM_TENSORS: [TensorSpec; 2] = [
    t(
        Role::AttnPostNorm,
        "blk.{layer}.post_attention_norm.weight",
        &[Dim::Embd],
    ),
    t(
        Role::FfnPostNorm,
        "blk.{layer}.post_ffw_norm.weight",
        &[Dim::Embd],
    ),
];

const QK_NORMED_TENSORS: [TensorSpec; 14] = concat(DENSE_TENSORS, QK_NORM_TENSORS);
const GEMMA3_TENSORS: [TensorSpec; 16] = concat(QK_NORMED_TENSORS, GEMMA3_POST_NORM_TENSORS);

const GEMMA3_KEYS: [Key; 18] = {
    let extra = [
        opt("attention.sliding_window"),
        opt("attention.sliding_window_pattern"),
        opt("rope.freq_base_swa"),
        opt("final_logit_softcapping"),
    ];
    let mut out = [req(""); 18];
    let mut i = 0;
    while i < 14 {
        out[i] = COMMON_KEYS[i];
        i += 1;
    }
    while i < 18 {
        out[i] = extra[i - 14];
        i += 1;
    }
    out
};

/// Gemma 3 (text): embeddings scaled by `sqrt(n_embd)`, per-head RMS
/// QK-norm before NEOX RoPE, RMS post-norms on the attention and FFN outputs
/// (llama.cpp `attn_post_norm` / `ffn_post_norm`), GeGLU (tanh GELU),
/// interleaved sliding-window and global layers with their own RoPE bases,
/// optional final-logit soft-capping (`final_logit_softcapping`; absent in
/// Gemma 3 GGUFs, so none).
///
/// Norm weights: HF Gemma computes `x̂ · (1 + w)`; llama.cpp's graph
/// multiplies by the stored weight alone (`build_norm` → `ggml_mul`), so
/// the converter stores `1 + w` and we use the stored weight as it is (the
/// 270M file's norm weights are indeed centred well above 0, see the
/// real-model tests).
pub static GEMMA3: ArchSpec = ArchSpec {
    arch: Arch::Gemma3,
    name: "gemma3",
    keys: &GEMMA3_KEYS,
    tensors: &GEMMA3_TENSORS,
    rope: RopeStyle::Neox,
    ffn: GluKind::GeGluTanh,
    embed_scale: EmbedScale::SqrtEmbd,
    attn_scale: AttnScale::Gemma3,
    qk_norm: true,
    post_norms: true,
    swa: SwaRule::Pattern { default_period: 6 },
    moe: MoeRule::None,
    taps: Taps {
        attn_out: None,
        ffn_inp: "sa_out",
    },
};

/// llama.cpp's qwen3 and qwen3moe graphs name no `attn_out`.
const QWEN3_TAPS: Taps = Taps {
    attn_out: None,
    ffn_inp: "ffn_inp",
};

/// Qwen 3 (dense): llama's block with per-head RMS QK-norm before NEOX
/// RoPE (llama.cpp src/models/qwen3.cpp: `Qcur_normed`, `Kcur_normed`),
/// attention scale `1 / sqrt(head_dim)`, SwiGLU, a separate head when the
/// file has `output.weight`.
pub static QWEN3: ArchSpec = ArchSpec {
    arch: Arch::Qwen3,
    name: "qwen3",
    keys: &COMMON_KEYS,
    tensors: &QK_NORMED_TENSORS,
    rope: RopeStyle::Neox,
    ffn: GluKind::SwiGlu,
    embed_scale: EmbedScale::None,
    attn_scale: AttnScale::InvSqrtHeadDim,
    qk_norm: true,
    post_norms: false,
    swa: SwaRule::None,
    moe: MoeRule::None,
    taps: QWEN3_TAPS,
};

const QWEN3MOE_TENSORS: [TensorSpec; 18] = concat(QK_NORMED_TENSORS, MOE_TENSORS);
const QWEN3MOE_KEYS: [Key; 17] = concat_keys(
    COMMON_KEYS,
    [
        req("expert_count"),
        req("expert_used_count"),
        opt("expert_feed_forward_length"),
    ],
);

/// Qwen 3 MoE: Qwen 3's attention, and a mixture of experts in place of the
/// dense feed-forward (llama.cpp src/models/qwen3moe.cpp: softmax gating,
/// top `expert_used_count`, weights always renormalised).
pub static QWEN3MOE: ArchSpec = ArchSpec {
    arch: Arch::Qwen3Moe,
    name: "qwen3moe",
    keys: &QWEN3MOE_KEYS,
    tensors: &QWEN3MOE_TENSORS,
    rope: RopeStyle::Neox,
    ffn: GluKind::SwiGlu,
    embed_scale: EmbedScale::None,
    attn_scale: AttnScale::InvSqrtHeadDim,
    qk_norm: true,
    post_norms: false,
    swa: SwaRule::None,
    moe: MoeRule::Always { norm_weights: true },
    taps: QWEN3_TAPS,
};

/// Every supported architecture.
pub static ARCHS: [&ArchSpec; 4] = [&LLAMA, &GEMMA3, &QWEN3, &QWEN3MOE];

/// The table for `general.architecture` = `name`.
pub fn lookup(name: &str) -> Option<&'static ArchSpec> {
    ARCHS.iter().copied().find(|s| s.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_consistent() {
        for spec in ARCHS {
            let mut names: Vec<&str> = spec.tensors.iter().map(|t| t.name).collect();
            names.sort_unstable();
            names.dedup();
            assert_eq!(
                names.len(),
                spec.tensors.len(),
                "{}: duplicate tensor names",
                spec.name
            );
            let mut keys: Vec<&str> = spec.keys.iter().map(|k| k.suffix).collect();
            keys.sort_unstable();
            keys.dedup();
            assert_eq!(keys.len(), spec.keys.len(), "{}: duplicate keys", spec.name);
            assert!(keys.iter().all(|k| !k.is_empty()));
            assert_eq!(
                spec.qk_norm,
                spec.tensors.iter().any(|t| t.role == Role::AttnQNorm)
            );
            assert_eq!(
                spec.post_norms,
                spec.tensors.iter().any(|t| t.role == Role::FfnPostNorm)
            );
            assert_eq!(lookup(spec.name).map(|s| s.arch), Some(spec.arch));
        }
        assert_eq!(LLAMA.rope, RopeStyle::Norm);
        assert_eq!(GEMMA3.rope, RopeStyle::Neox);
        assert_eq!(QWEN3.rope, RopeStyle::Neox);
        assert_eq!(QWEN3MOE.rope, RopeStyle::Neox);
        for spec in ARCHS {
            let has_moe = spec.tensors.iter().any(|t| t.presence == Presence::Moe);
            assert_eq!(has_moe, spec.moe != MoeRule::None, "{}", spec.name);
        }
        // Biases: per-layer vectors of their product's width, read where
        // present (llama) or required; never refused as dense / MoE.
        for t in ARCHS.iter().flat_map(|s| s.tensors) {
            let bias = matches!(
                t.role,
                Role::AttnQBias | Role::AttnKBias | Role::AttnVBias | Role::AttnOutBias
            );
            assert_eq!(bias, t.name.ends_with(".bias"), "{}", t.name);
            if bias {
                assert!(t.per_layer() && t.shape.len() == 1, "{}", t.name);
                assert!(matches!(
                    t.presence,
                    Presence::Optional | Presence::Required
                ));
            }
            assert!(t.presence != Presence::Optional || bias, "{}", t.name);
        }
        let biases = |s: &ArchSpec| {
            s.tensors
                .iter()
                .filter(|t| t.name.ends_with(".bias"))
                .count()
        };
        assert_eq!(biases(&LLAMA), 4);
        assert_eq!(
            (biases(&GEMMA3), biases(&QWEN3), biases(&QWEN3MOE)),
            (0, 0, 0)
        );
        assert!(lookup("qwen2").is_none());
    }

    /// The names llama.cpp's graphs give the attention output and the
    /// residual after it (src/models/llama.cpp, qwen3.cpp, qwen3moe.cpp,
    /// gemma3.cpp); the reference captures are keyed by them.
    #[test]
    fn tap_names_are_llama_cpps() {
        let taps = |s: &ArchSpec| (s.taps.attn_out, s.taps.ffn_inp);
        assert_eq!(taps(&LLAMA), (Some("attn_out"), "ffn_inp"));
        assert_eq!(taps(&QWEN3), (None, "ffn_inp"));
        assert_eq!(taps(&QWEN3MOE), (None, "ffn_inp"));
        assert_eq!(taps(&GEMMA3), (None, "sa_out"));
    }
}

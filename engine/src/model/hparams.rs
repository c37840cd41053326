//! Hyperparameters read from GGUF metadata, checked, and the per-layer
//! table derived from them (attention kind, RoPE base and scale).

use super::error::ModelError;
use super::spec::{ArchSpec, AttnScale, EmbedScale, MoeRule, Need, SwaRule};
use crate::fault;
use crate::gguf::{GgufFile, MetadataError, Value};

/// The numbers a forward pass needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Hparams {
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_ff: usize,
    pub n_head: usize,
    pub n_kv_head: usize,
    pub head_dim_k: usize,
    pub head_dim_v: usize,
    /// Rotated elements per head.
    pub n_rot: usize,
    /// Rows of `token_embd` (filled in from the tensor).
    pub n_vocab: usize,
    pub n_ctx_train: usize,
    pub rms_eps: f32,
    /// `rope.freq_base` (global layers).
    pub rope_base: f32,
    /// `1 / rope.scaling.factor` for linear scaling, else 1 (global layers).
    pub rope_freq_scale: f32,
    /// Multiplies `q · k`.
    pub attn_scale: f32,
    /// Multiplies the token embeddings.
    pub embed_scale: Option<f32>,
    /// `final_logit_softcapping`.
    pub final_softcap: Option<f32>,
    /// The mixture of experts, when the feed-forward is one.
    pub moe: Option<MoeParams>,
}

/// A mixture-of-experts feed-forward's shape and routing rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoeParams {
    /// `expert_count`.
    pub n_expert: usize,
    /// `expert_used_count`: experts each token is routed to (top-k).
    pub n_used: usize,
    /// Width of one expert's feed-forward.
    pub n_ff_exp: usize,
    /// Renormalise the chosen experts' probabilities to sum 1.
    pub norm_weights: bool,
}

/// llama.cpp's `LLAMA_MAX_EXPERTS`.
pub const MAX_EXPERTS: usize = 512;

impl Hparams {
    pub fn q_width(&self) -> usize {
        self.n_head * self.head_dim_k
    }

    pub fn k_width(&self) -> usize {
        self.n_kv_head * self.head_dim_k
    }

    pub fn v_width(&self) -> usize {
        self.n_kv_head * self.head_dim_v
    }

    pub fn attn_out_width(&self) -> usize {
        self.n_head * self.head_dim_v
    }

    /// Width of the feed-forward's gate and up activations: `n_ff`, or with
    /// experts `n_used · n_ff_exp` (every chosen expert's, side by side).
    pub fn ffn_width(&self) -> usize {
        self.moe.map_or(self.n_ff, |m| m.n_used * m.n_ff_exp)
    }
}

/// Which attention a layer runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttnKind {
    Global,
    /// Sliding window of this many positions (the current one included).
    Local {
        window: usize,
    },
}

/// One layer's entry of the per-layer table.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerDesc {
    pub attn: AttnKind,
    pub rope_base: f32,
    pub rope_freq_scale: f32,
}

impl LayerDesc {
    pub fn window(&self) -> Option<usize> {
        match self.attn {
            AttnKind::Global => None,
            AttnKind::Local { window } => Some(window),
        }
    }
}

/// Reads metadata for one architecture, mapping lookup failures to
/// [`ModelError`]s that name the architecture.
struct Meta<'a> {
    gguf: &'a GgufFile,
    spec: &'a ArchSpec,
}

impl Meta<'_> {
    fn key(&self, suffix: &str) -> String {
        format!("{}.{suffix}", self.spec.name)
    }

    fn err(&self, source: MetadataError) -> ModelError {
        match source {
            MetadataError::Missing { key } => ModelError::MissingKey {
                arch: self.spec.name,
                key,
            },
            source => ModelError::Metadata {
                arch: self.spec.name,
                source,
            },
        }
    }

    fn bad(&self, suffix: &str, value: impl ToString, why: impl Into<String>) -> ModelError {
        ModelError::BadValue {
            arch: self.spec.name,
            key: self.key(suffix),
            value: value.to_string(),
            why: why.into(),
        }
    }

    /// A required count: present, an integer, at least 1.
    fn count(&self, suffix: &str) -> Result<usize, ModelError> {
        let v = self
            .gguf
            .get_u32(&self.key(suffix))
            .map_err(|e| self.err(e))?;
        if v == 0 {
            return Err(self.bad(suffix, v, "must be at least 1"));
        }
        Ok(v as usize)
    }

    fn count_or(&self, suffix: &str, default: usize) -> Result<usize, ModelError> {
        match self
            .gguf
            .get_u32_opt(&self.key(suffix))
            .map_err(|e| self.err(e))?
        {
            None => Ok(default),
            Some(0) => Err(self.bad(suffix, 0, "must be at least 1")),
            Some(v) => Ok(v as usize),
        }
    }

    fn f32_opt(&self, suffix: &str) -> Result<Option<f32>, ModelError> {
        self.gguf
            .get_f32_opt(&self.key(suffix))
            .map_err(|e| self.err(e))
    }

    fn positive_or(&self, suffix: &str, default: f32) -> Result<f32, ModelError> {
        match self.f32_opt(suffix)? {
            None => Ok(default),
            Some(v) if v.is_finite() && v > 0.0 => Ok(v),
            Some(v) => Err(self.bad(suffix, v, "must be finite and positive")),
        }
    }
}

/// Reads and checks the hyperparameters of `spec`'s architecture. The
/// vocabulary size is left 0: it comes from `token_embd`'s shape.
pub fn read(gguf: &GgufFile, spec: &ArchSpec) -> Result<(Hparams, Vec<LayerDesc>), ModelError> {
    let m = Meta { gguf, spec };
    for k in spec.keys.iter().filter(|k| k.need == Need::Required) {
        if gguf.get(&m.key(k.suffix)).is_none() {
            return Err(ModelError::MissingKey {
                arch: spec.name,
                key: m.key(k.suffix),
            });
        }
    }

    let n_layer = m.count("block_count")?;
    let n_embd = m.count("embedding_length")?;
    let n_ff = m.count("feed_forward_length")?;
    let n_head = m.count("attention.head_count")?;
    let n_kv_head = m.count_or("attention.head_count_kv", n_head)?;
    if n_head % n_kv_head != 0 {
        return Err(m.bad(
            "attention.head_count_kv",
            n_kv_head,
            format!("must divide attention.head_count ({n_head})"),
        ));
    }
    let n_ctx_train = m.count("context_length")?;
    // llama.cpp: n_embd_head_k = n_embd / n_head unless key_length says otherwise.
    let head_dim_k = m.count_or("attention.key_length", n_embd / n_head)?;
    let head_dim_v = m.count_or("attention.value_length", n_embd / n_head)?;
    let n_rot = m.count_or("rope.dimension_count", head_dim_k)?;
    if n_rot % 2 != 0 || n_rot > head_dim_k {
        return Err(m.bad(
            "rope.dimension_count",
            n_rot,
            format!("must be even and at most the head size {head_dim_k}"),
        ));
    }
    if spec.arch == super::spec::Arch::Llama && (n_rot != head_dim_k || head_dim_k != head_dim_v) {
        // llama.cpp: "invalid n_rot" for llama, and its graph asserts equal K/V head sizes.
        return Err(m.bad(
            "rope.dimension_count",
            n_rot,
            format!("llama needs n_rot = key_length = value_length ({head_dim_k}, {head_dim_v})"),
        ));
    }

    let rms_eps = match m.f32_opt("attention.layer_norm_rms_epsilon")? {
        Some(e) if e.is_finite() && e >= 0.0 => e,
        Some(e) => {
            return Err(m.bad(
                "attention.layer_norm_rms_epsilon",
                e,
                "must be finite and >= 0",
            ))
        }
        None => unreachable!("required keys were checked"),
    };
    let rope_base = m.positive_or("rope.freq_base", 10_000.0)?;
    let rope_freq_scale = rope_scaling(&m)?;

    let attn_scale = match spec.attn_scale {
        AttnScale::InvSqrtHeadDim if fault::active("attn-scale") => 1.0 / head_dim_k as f32,
        AttnScale::InvSqrtHeadDim => 1.0 / (head_dim_k as f32).sqrt(),
        AttnScale::Gemma3 if n_layer == 62 => 1.0 / ((n_embd / n_head) as f32).sqrt(),
        AttnScale::Gemma3 => 1.0 / (head_dim_k as f32).sqrt(),
    };
    let embed_scale = match spec.embed_scale {
        EmbedScale::None => None,
        EmbedScale::SqrtEmbd => Some((n_embd as f32).sqrt()),
    };
    let final_softcap = match spec
        .keys
        .iter()
        .any(|k| k.suffix == "final_logit_softcapping")
    {
        true => match m.f32_opt("final_logit_softcapping")? {
            // llama.cpp: a cap of 0 means none.
            None => None,
            Some(0.0) => None,
            Some(c) if c.is_finite() && c > 0.0 => Some(c),
            Some(c) => return Err(m.bad("final_logit_softcapping", c, "must be finite and >= 0")),
        },
        false => None,
    };

    let moe = moe_params(&m, n_ff)?;

    let hp = Hparams {
        n_layer,
        n_embd,
        n_ff,
        n_head,
        n_kv_head,
        head_dim_k,
        head_dim_v,
        n_rot,
        n_vocab: 0,
        n_ctx_train,
        rms_eps,
        rope_base,
        rope_freq_scale,
        attn_scale,
        embed_scale,
        final_softcap,
        moe,
    };
    let layers = layer_table(&m, &hp)?;
    Ok((hp, layers))
}

/// The experts, as the architecture's [`MoeRule`] and the file say.
fn moe_params(m: &Meta<'_>, n_ff: usize) -> Result<Option<MoeParams>, ModelError> {
    let (norm_weights, always) = match m.spec.moe {
        MoeRule::None => return Ok(None),
        MoeRule::WhenExpertCount { norm_weights } => (norm_weights, false),
        MoeRule::Always { norm_weights } => (norm_weights, true),
    };
    let n_expert = match always {
        true => m.count("expert_count")?,
        false => match m
            .gguf
            .get_u32_opt(&m.key("expert_count"))
            .map_err(|e| m.err(e))?
        {
            None | Some(0) => {
                // Experts to use with none to choose from: a file that lies.
                let used = m
                    .gguf
                    .get_u32_opt(&m.key("expert_used_count"))
                    .map_err(|e| m.err(e))?;
                if let Some(u) = used.filter(|&u| u > 0) {
                    return Err(m.bad(
                        "expert_used_count",
                        u,
                        "with no experts (expert_count absent or 0)",
                    ));
                }
                return Ok(None);
            }
            Some(n) => n as usize,
        },
    };
    if n_expert > MAX_EXPERTS {
        return Err(m.bad(
            "expert_count",
            n_expert,
            format!("at most {MAX_EXPERTS} experts"),
        ));
    }
    let n_used = m.count("expert_used_count")?;
    if n_used > n_expert {
        return Err(m.bad(
            "expert_used_count",
            n_used,
            format!("more than expert_count ({n_expert})"),
        ));
    }
    let n_ff_exp = match always {
        // llama.cpp qwen3moe: expert_feed_forward_length, else n_ff / n_used.
        true => match m.count_or("expert_feed_forward_length", 0)? {
            0 => n_ff / n_used,
            n => n,
        },
        false => n_ff,
    };
    if n_ff_exp == 0 {
        return Err(m.bad(
            "feed_forward_length",
            n_ff,
            format!("gives experts of width 0 with {n_used} used"),
        ));
    }
    Ok(Some(MoeParams {
        n_expert,
        n_used,
        n_ff_exp,
        norm_weights,
    }))
}

/// RoPE scaling: none, or linear (`freq_scale = 1 / factor`, llama.cpp's
/// `rope.scaling.factor`, 0 meaning none). YaRN, LongRoPE and the rest are
/// refused.
fn rope_scaling(m: &Meta<'_>) -> Result<f32, ModelError> {
    let ty = m
        .gguf
        .get_str_opt(&m.key("rope.scaling.type"))
        .map_err(|e| m.err(e))?
        .unwrap_or("linear");
    if ty != "linear" && ty != "none" {
        return Err(ModelError::Unsupported {
            arch: m.spec.name,
            what: format!("RoPE scaling type {ty:?} (only none and linear)"),
        });
    }
    let factor = m.f32_opt("rope.scaling.factor")?.unwrap_or(0.0);
    if ty == "none" || factor == 0.0 {
        return Ok(1.0);
    }
    if !(factor.is_finite() && factor > 0.0) {
        return Err(m.bad("rope.scaling.factor", factor, "must be finite and positive"));
    }
    Ok(1.0 / factor)
}

/// The per-layer table: which layers slide, and each layer's RoPE base.
fn layer_table(m: &Meta<'_>, hp: &Hparams) -> Result<Vec<LayerDesc>, ModelError> {
    let global = LayerDesc {
        attn: AttnKind::Global,
        rope_base: hp.rope_base,
        rope_freq_scale: hp.rope_freq_scale,
    };
    let SwaRule::Pattern { default_period } = m.spec.swa else {
        return Ok(vec![global; hp.n_layer]);
    };
    let window = m
        .gguf
        .get_u32_opt(&m.key("attention.sliding_window"))
        .map_err(|e| m.err(e))?
        .unwrap_or(0) as usize;
    if window == 0 {
        // llama.cpp: no window, no SWA layers at all (LLAMA_SWA_TYPE_NONE).
        return Ok(vec![global; hp.n_layer]);
    }
    let local = LayerDesc {
        attn: AttnKind::Local { window },
        rope_base: m.positive_or("rope.freq_base_swa", 10_000.0)?,
        // llama.cpp: rope_freq_scale_train_swa stays 1 (no key is read for it).
        rope_freq_scale: 1.0,
    };
    let suffix = "attention.sliding_window_pattern";
    let sliding: Vec<bool> = match m.gguf.get(&m.key(suffix)) {
        Some(Value::Array(items)) => {
            if items.len() != hp.n_layer {
                return Err(m.bad(
                    suffix,
                    format!("[{} values]", items.len()),
                    format!("needs one bool per layer ({})", hp.n_layer),
                ));
            }
            items
                .iter()
                .map(|v| {
                    v.as_bool()
                        .ok_or_else(|| m.bad(suffix, format!("{v:?}"), "array items must be bools"))
                })
                .collect::<Result<_, _>>()?
        }
        _ => {
            let n = m
                .gguf
                .get_u32_opt(&m.key(suffix))
                .map_err(|e| m.err(e))?
                .unwrap_or(default_period) as usize;
            (0..hp.n_layer).map(|il| n == 0 || il % n < n - 1).collect()
        }
    };
    Ok(sliding
        .into_iter()
        .map(|s| if s { local } else { global })
        .collect())
}

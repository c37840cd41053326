//! A llama Mixture-of-Experts model made from a dense llama model
//! (upcycling): each layer's FFN becomes `n_expert` slightly different
//! copies of itself, and a random router picks `n_expert_used` of them per
//! token.
//!
//! llama.cpp runs such a file with its llama graph (src/models/llama.cpp,
//! Mixtral style `build_moe_ffn`): softmax over the router's logits, the
//! top `expert_used_count`, their weights renormalised to sum to 1, SiLU
//! gated experts. It reads `llama.expert_count` and
//! `llama.expert_used_count`, and sizes the experts by
//! `llama.feed_forward_length` (the llama loader has no
//! `expert_feed_forward_length`). The dense FFN's three matrices are
//! replaced by, in ggml `ne` order:
//!
//! ```text
//! blk.N.ffn_gate_inp.weight   [n_embd, n_expert]        (router, F32)
//! blk.N.ffn_gate_exps.weight  [n_embd, n_ff, n_expert]
//! blk.N.ffn_up_exps.weight    [n_embd, n_ff, n_expert]
//! blk.N.ffn_down_exps.weight  [n_ff, n_embd, n_expert]
//! ```
//!
//! - Expert `e` of `blk.N.ffn_X_exps` is the source's `blk.N.ffn_X`,
//!   dequantized to f32, times `1 + noise * z` element by element, `z`
//!   drawn from that tensor's own stream ([`Xoshiro256StarStar::for_tensor`];
//!   expert 0's elements first, in memory order). The router is `normal *
//!   router / sqrt(n_embd)` from its own stream (see [`MoeConfig::new`]
//!   for the scale).
//! - The expert matrices get the type llama.cpp's quantization recipe gives
//!   them for the source's `general.file_type` (SmolLM2 Q4_1: Q4_1, the
//!   type its dense FFN had), quantized with the reference quantizers: what
//!   `llama-quantize` makes of these tensors from F32. The router stays F32,
//!   as llama.cpp keeps routers.
//! - Everything else (embedding, attention, norms, tokenizer, chat
//!   template, all metadata) is the source's, the tensor bytes borrowed as
//!   they are; `expert_count` and `expert_used_count` are added after the
//!   source's last `llama.*` key. Tensors are written in llama.cpp's order.
//!
//! Each tensor depends only on the seed, its name and the source, so the
//! file is the same for every thread count and machine.

use std::borrow::Cow;

use rayon::prelude::*;

use super::rng::Xoshiro256StarStar;
use super::{draw, SynthError, TensorSpec};
use crate::ggml_type::GgmlType;
use crate::gguf::{GgufFile, GgufWriter, TensorInfo, Value};
use crate::quant::{self, QuantError};
use crate::quantize::quantize_rows;
use crate::quantize::recipe::{self, FileType, ModelInfo, TensorDesc};

/// The architecture this works on (and keeps).
const ARCH: &str = "llama";

/// The dense FFN matrices of a layer and the expert tensors they become.
const DENSE_TO_EXPERTS: [(&str, &str); 3] = [
    ("ffn_gate", "ffn_gate_exps"),
    ("ffn_up", "ffn_up_exps"),
    ("ffn_down", "ffn_down_exps"),
];

/// How the experts and the router are made.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MoeConfig {
    pub seed: u64,
    pub n_expert: u32,
    pub n_expert_used: u32,
    /// Standard deviation of the relative noise on each expert weight.
    pub noise: f32,
    /// Router scale: the router is `normal * router / sqrt(n_embd)`.
    pub router: f32,
}

impl MoeConfig {
    /// 4 experts, 2 used, 2 % noise, router scale 16.
    ///
    /// The router's input is the FFN norm's output, whose size the source's
    /// `ffn_norm` weights set: SmolLM2's are small (RMS 0.11 to 0.35), and
    /// with scale 1 llama.cpp's router logits (`ffn_moe_logits`) had an RMS
    /// of only 0.05 to 0.3 (0.12 typical): near-uniform routing whose top-2
    /// choice turns on differences in the third decimal. Scale 16 makes
    /// them about 2: clear choices, the second expert still weighing in.
    pub fn new(seed: u64) -> MoeConfig {
        MoeConfig {
            seed,
            n_expert: 4,
            n_expert_used: 2,
            noise: 0.02,
            router: 16.0,
        }
    }

    fn check(&self) -> Result<(), SynthError> {
        let bad = |what: String| Err(SynthError::Config(what));
        if self.n_expert < 2 {
            return bad(format!("{} experts (at least 2)", self.n_expert));
        }
        if self.n_expert_used == 0 || self.n_expert_used > self.n_expert {
            return bad(format!(
                "{} experts used of {} (1 to {})",
                self.n_expert_used, self.n_expert, self.n_expert
            ));
        }
        if !(self.noise.is_finite() && (0.0..1.0).contains(&self.noise)) {
            return bad(format!("expert noise {} (0 to below 1)", self.noise));
        }
        if !(self.router.is_finite() && self.router > 0.0) {
            return bad(format!("router scale {} (positive)", self.router));
        }
        Ok(())
    }
}

/// Where an output tensor's bytes come from.
#[derive(Clone, Copy, Debug)]
enum Origin<'a> {
    /// The source tensor, unchanged.
    Copy(&'a TensorInfo),
    /// Drawn: the layer's router.
    Router,
    /// Made from this dense FFN matrix.
    Experts(&'a TensorInfo),
}

#[derive(Clone, Debug)]
struct Planned<'a> {
    name: String,
    /// ggml `ne` order.
    dims: Vec<u64>,
    origin: Origin<'a>,
}

fn source_err(what: impl std::fmt::Display) -> SynthError {
    SynthError::Source(what.to_string())
}

/// `blk.N.REST` as (N, REST).
fn split_layer(name: &str) -> Option<(u32, &str)> {
    let (layer, rest) = name.strip_prefix("blk.")?.split_once('.')?;
    Some((layer.parse().ok()?, rest))
}

/// The output tensors, in the source's order: each dense FFN matrix is
/// replaced by its expert tensor, the router placed before the gate's.
fn plan_tensors<'a>(
    src: &'a GgufFile,
    cfg: &MoeConfig,
    n_layer: u32,
    n_embd: u64,
    n_ff: u64,
) -> Result<Vec<Planned<'a>>, SynthError> {
    let n_expert = u64::from(cfg.n_expert);
    let mut found = vec![[false; 3]; n_layer as usize];
    let mut out = Vec::with_capacity(src.tensors().len() + n_layer as usize);
    for t in src.tensors() {
        let Some((layer, rest)) = split_layer(&t.name) else {
            out.push(Planned {
                name: t.name.clone(),
                dims: t.dims.clone(),
                origin: Origin::Copy(t),
            });
            continue;
        };
        let dense = DENSE_TO_EXPERTS
            .iter()
            .position(|(d, _)| rest.strip_suffix(".weight") == Some(d));
        let Some(k) = dense else {
            if rest.starts_with("ffn_") && !rest.starts_with("ffn_norm.") {
                return Err(source_err(format!(
                    "tensor {:?}: only ffn_gate, ffn_up and ffn_down weights can become experts",
                    t.name
                )));
            }
            out.push(Planned {
                name: t.name.clone(),
                dims: t.dims.clone(),
                origin: Origin::Copy(t),
            });
            continue;
        };
        let want = if k == 2 {
            [n_ff, n_embd]
        } else {
            [n_embd, n_ff]
        };
        if t.dims != want || layer >= n_layer {
            return Err(source_err(format!(
                "tensor {:?} has shape {:?}, expected {want:?} in a layer below {n_layer}",
                t.name, t.dims
            )));
        }
        found[layer as usize][k] = true;
        if k == 0 {
            out.push(Planned {
                name: format!("blk.{layer}.ffn_gate_inp.weight"),
                dims: vec![n_embd, n_expert],
                origin: Origin::Router,
            });
        }
        out.push(Planned {
            name: format!("blk.{layer}.{}.weight", DENSE_TO_EXPERTS[k].1),
            dims: vec![want[0], want[1], n_expert],
            origin: Origin::Experts(t),
        });
    }
    if let Some(layer) = found.iter().position(|f| f != &[true; 3]) {
        return Err(source_err(format!(
            "layer {layer} lacks one of ffn_gate, ffn_up, ffn_down"
        )));
    }
    Ok(out)
}

/// The experts of one dense matrix, as f32: `n_expert` copies, each
/// element times `1 + noise * z`.
fn expert_values(
    src: &GgufFile,
    dense: &TensorInfo,
    name: &str,
    cfg: &MoeConfig,
) -> Result<Vec<f32>, QuantError> {
    // [n_rows, row_len] of the dense matrix
    let mut w = vec![0f32; dense.n_elements() as usize];
    quant::dequantize_row(dense.ty, src.tensor_data(dense), &mut w)?;
    let mut z = Xoshiro256StarStar::for_tensor(cfg.seed, name);
    // [n_expert, n_rows, row_len]
    let mut out = Vec::with_capacity(w.len() * cfg.n_expert as usize);
    for _ in 0..cfg.n_expert {
        out.extend(w.iter().map(|&x| x * (1.0 + cfg.noise * z.normal())));
    }
    Ok(out)
}

/// The source's metadata with the expert keys added after its last
/// `llama.*` key.
fn metadata(src: &GgufFile, cfg: &MoeConfig) -> Vec<(String, Value)> {
    let prefix = format!("{ARCH}.");
    let kvs = src.metadata();
    let at = kvs
        .iter()
        .rposition(|(k, _)| k.starts_with(&prefix))
        .map_or(kvs.len(), |i| i + 1);
    let mut m = kvs[..at].to_vec();
    m.push((format!("{ARCH}.expert_count"), Value::U32(cfg.n_expert)));
    m.push((
        format!("{ARCH}.expert_used_count"),
        Value::U32(cfg.n_expert_used),
    ));
    m.extend_from_slice(&kvs[at..]);
    m
}

/// Makes the MoE model `cfg` describes from the dense llama model `src`.
/// Runs on the current rayon pool; the bytes do not depend on it.
pub fn upcycle<'a>(src: &'a GgufFile, cfg: &MoeConfig) -> Result<GgufWriter<'a>, SynthError> {
    cfg.check()?;
    let arch = src.architecture().map_err(source_err)?;
    if arch != ARCH {
        return Err(source_err(format!(
            "general.architecture is {arch:?}, not {ARCH:?}"
        )));
    }
    let u32_key = |suffix: &str| src.arch_u32(suffix).map_err(source_err);
    if let Some(n) = src.arch_u32_opt("expert_count").map_err(source_err)? {
        if n > 0 {
            return Err(source_err(format!("it already has {n} experts")));
        }
    }
    let n_layer = u32_key("block_count")?;
    let n_embd = u64::from(u32_key("embedding_length")?);
    let n_ff = u64::from(u32_key("feed_forward_length")?);
    let ftype_id = src.get_u32("general.file_type").map_err(source_err)?;
    let ftype = FileType::from_id(ftype_id).ok_or_else(|| {
        source_err(format!(
            "general.file_type {ftype_id} is not a file type sharpi writes ({})",
            FileType::names()
        ))
    })?;

    let planned = plan_tensors(src, cfg, n_layer, n_embd, n_ff)?;
    let model = ModelInfo {
        n_expert: cfg.n_expert,
        ..ModelInfo::from_gguf(src).map_err(source_err)?
    };
    let descs: Vec<TensorDesc> = planned
        .iter()
        .map(|p| TensorDesc {
            name: &p.name,
            ty: match p.origin {
                Origin::Copy(t) => t.ty,
                Origin::Router | Origin::Experts(_) => GgmlType::F32,
            },
            dims: &p.dims,
        })
        .collect();
    let choices = recipe::plan(&model, &descs, ftype)?;

    let mut w = GgufWriter::new();
    for (k, v) in metadata(src, cfg) {
        w.set(k, v)?;
    }

    let names: Vec<&str> = planned.iter().map(|p| p.name.as_str()).collect();
    let order = recipe::llama_order(&names);
    // Drawn tensors in parallel, one whole tensor per task.
    let data: Vec<(GgmlType, Cow<'a, [u8]>)> = order
        .par_iter()
        .map(|&i| {
            let p = &planned[i];
            let ty = choices[i].ty;
            let values = match p.origin {
                Origin::Copy(t) => return Ok((t.ty, Cow::Borrowed(src.tensor_data(t)))),
                Origin::Router => Ok(draw(
                    cfg.seed,
                    &TensorSpec::matrix(&p.name, &p.dims, cfg.router),
                )),
                Origin::Experts(dense) => expert_values(src, dense, &p.name, cfg),
            };
            values
                .and_then(|v| quantize_rows(&v, ty, p.dims[0] as usize))
                .map(|bytes| (ty, Cow::Owned(bytes)))
                .map_err(|source| SynthError::Quant {
                    name: p.name.clone(),
                    source,
                })
        })
        .collect::<Result<_, SynthError>>()?;
    for (&i, (ty, bytes)) in order.iter().zip(data) {
        let p = &planned[i];
        w.add_tensor(&*p.name, ty, &p.dims, bytes)?;
    }
    Ok(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-layer F32 llama (width 32, FFN 64, 8 tokens, tied embeddings)
    /// whose element k of each tensor is k / 1000 plus a per-tensor offset.
    fn tiny_llama(extra: &[(&str, &[u64])]) -> GgufFile {
        let mut w = GgufWriter::new();
        let kvs = [
            ("general.architecture", Value::String("llama".into())),
            ("llama.block_count", Value::U32(1)),
            ("llama.embedding_length", Value::U32(32)),
            ("llama.feed_forward_length", Value::U32(64)),
            ("llama.attention.head_count", Value::U32(2)),
            ("general.file_type", Value::U32(0)),
            ("tokenizer.ggml.model", Value::String("gpt2".into())),
        ];
        for (k, v) in kvs {
            w.set(k, v).unwrap();
        }
        let tensors: [(&str, &[u64]); 9] = [
            ("token_embd.weight", &[32, 8]),
            ("blk.0.attn_norm.weight", &[32]),
            ("blk.0.attn_q.weight", &[32, 32]),
            ("blk.0.attn_k.weight", &[32, 32]),
            ("blk.0.attn_v.weight", &[32, 32]),
            ("blk.0.ffn_gate.weight", &[32, 64]),
            ("blk.0.ffn_up.weight", &[32, 64]),
            ("blk.0.ffn_down.weight", &[64, 32]),
            ("output_norm.weight", &[32]),
        ];
        for (j, (name, dims)) in tensors.iter().chain(extra).enumerate() {
            let n: u64 = dims.iter().product();
            let bytes: Vec<u8> = (0..n)
                .flat_map(|k| (j as f32 + k as f32 / 1000.0).to_le_bytes())
                .collect();
            w.add_tensor(*name, GgmlType::F32, dims, bytes).unwrap();
        }
        let mut out = Vec::new();
        w.write_to(&mut out).unwrap();
        GgufFile::from_bytes(out).unwrap()
    }

    fn f32s(bytes: &[u8]) -> Vec<f32> {
        bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect()
    }

    #[test]
    fn experts_are_the_dense_ffn_times_one_plus_noise() {
        let src = tiny_llama(&[]);
        let cfg = MoeConfig::new(7);
        let w = upcycle(&src, &cfg).unwrap();
        let keys: Vec<&str> = w.metadata().iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys[4..],
            [
                "llama.attention.head_count",
                "llama.expert_count",
                "llama.expert_used_count",
                "general.file_type",
                "tokenizer.ggml.model"
            ]
        );
        let names: Vec<&str> = w.tensors().iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "output_norm.weight",
                "token_embd.weight",
                "blk.0.attn_k.weight",
                "blk.0.attn_norm.weight",
                "blk.0.attn_q.weight",
                "blk.0.attn_v.weight",
                "blk.0.ffn_down_exps.weight",
                "blk.0.ffn_gate_exps.weight",
                "blk.0.ffn_gate_inp.weight",
                "blk.0.ffn_up_exps.weight",
            ]
        );
        let get = |n: &str| w.tensors().iter().find(|t| t.name == n).unwrap();
        // Copied tensors: the source's bytes.
        let q = get("blk.0.attn_q.weight");
        assert_eq!(
            *q.data,
            *src.tensor_data(src.tensor("blk.0.attn_q.weight").unwrap())
        );
        // F32 file type: the experts are stored exactly.
        let down = get("blk.0.ffn_down_exps.weight");
        assert_eq!((down.ty, &down.dims[..]), (GgmlType::F32, &[64, 32, 4][..]));
        let dense = f32s(src.tensor_data(src.tensor("blk.0.ffn_down.weight").unwrap()));
        let mut z = Xoshiro256StarStar::for_tensor(7, "blk.0.ffn_down_exps.weight");
        let want: Vec<f32> = (0..4)
            .flat_map(|_| {
                dense
                    .iter()
                    .map(|&x| x * (1.0 + 0.02 * z.normal()))
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(f32s(&down.data), want);
        let experts = f32s(&down.data);
        assert_ne!(
            experts[..dense.len()],
            experts[dense.len()..2 * dense.len()]
        );
        // The router: its own stream, normal * 16 / sqrt(n_embd).
        let r = get("blk.0.ffn_gate_inp.weight");
        assert_eq!((r.ty, &r.dims[..]), (GgmlType::F32, &[32, 4][..]));
        let spec = TensorSpec::matrix("blk.0.ffn_gate_inp.weight", &[32, 4], 16.0);
        assert_eq!(f32s(&r.data), draw(7, &spec));
        // Another seed, other experts.
        let w2 = upcycle(&src, &MoeConfig::new(8)).unwrap();
        assert_ne!(w2.tensors()[6].data, w.tensors()[6].data);
        assert_eq!(w2.tensors()[2].data, w.tensors()[2].data);
    }

    #[test]
    fn sources_that_do_not_fit_are_refused() {
        let err = |src: &GgufFile| upcycle(src, &MoeConfig::new(1)).unwrap_err().to_string();
        let e = err(&tiny_llama(&[("blk.0.ffn_up.bias", &[64])]));
        assert!(
            e.contains("only ffn_gate, ffn_up and ffn_down weights"),
            "{e}"
        );
        let e = err(&tiny_llama(&[("blk.1.ffn_up.weight", &[32, 64])]));
        assert!(e.contains("expected [32, 64] in a layer below 1"), "{e}");

        let src = tiny_llama(&[]);
        let remade = |edit: &dyn Fn(&mut GgufWriter)| {
            let mut w = GgufWriter::new();
            for (k, v) in src.metadata() {
                w.set(k.clone(), v.clone()).unwrap();
            }
            for t in src.tensors() {
                w.add_tensor(&*t.name, t.ty, &t.dims, src.tensor_data(t))
                    .unwrap();
            }
            edit(&mut w);
            let mut out = Vec::new();
            w.write_to(&mut out).unwrap();
            GgufFile::from_bytes(out).unwrap()
        };
        let e = err(&remade(&|w| {
            w.set("general.architecture", Value::String("qwen3".into()))
                .unwrap();
        }));
        assert!(
            e.contains("general.architecture is \"qwen3\", not \"llama\""),
            "{e}"
        );
        let e = err(&remade(&|w| {
            w.set("llama.expert_count", Value::U32(8)).unwrap()
        }));
        assert!(e.contains("already has 8 experts"), "{e}");
        let e = err(&remade(&|w| {
            w.set("general.file_type", Value::U32(4)).unwrap()
        }));
        assert!(e.contains("general.file_type 4 is not a file type"), "{e}");
    }

    #[test]
    fn layer_names_split() {
        assert_eq!(
            split_layer("blk.12.ffn_up.weight"),
            Some((12, "ffn_up.weight"))
        );
        assert_eq!(split_layer("output_norm.weight"), None);
        assert_eq!(split_layer("blk.x.ffn_up.weight"), None);
    }

    #[test]
    fn config_is_checked() {
        assert!(MoeConfig::new(1).check().is_ok());
        let mut c = MoeConfig::new(1);
        c.n_expert_used = 5;
        let e = c.check().unwrap_err().to_string();
        assert!(e.contains("5 experts used of 4"), "{e}");
        c = MoeConfig::new(1);
        c.noise = f32::NAN;
        assert!(c.check().is_err());
        c = MoeConfig::new(1);
        c.router = 0.0;
        assert!(c.check().is_err());
    }
}

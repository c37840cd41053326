//! Which type each tensor gets: llama.cpp's `llama_model_quantize` recipe
//! (src/llama-quant.cpp: `tensor_allows_quantization`,
//! `llama_tensor_get_type_impl`, `tensor_type_fallback`), for the file types
//! whose block formats we can write.
//!
//! The recipe depends on the order tensors are visited (attn_v and dense
//! ffn_down tensors are counted as they are met), so it runs in llama.cpp's
//! order: [`llama_order`], by layer number, then by name. llama.cpp writes
//! its output in that order too.
//!
//! Left out, because they only matter for file types we cannot write: the
//! IQ*/TQ*/MXFP4 branches, imatrix-dependent choices, and the
//! `--tensor-type`, `--output-tensor-type`, `--token-embedding-type` and
//! `--pure` overrides.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use crate::ggml_type::GgmlType;
use crate::gguf::{GgufFile, MetadataError};

/// A llama.cpp file type (`llama_ftype`): the mixture a quantization aims
/// for. Stored in `general.file_type`.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileType {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q2_K,
    Q3_K_S,
    Q3_K_M,
    Q3_K_L,
    Q4_K_S,
    Q4_K_M,
    Q5_K_S,
    Q5_K_M,
    Q6_K,
}

/// (file type, llama_ftype id, name, default tensor type)
const FILE_TYPES: &[(FileType, u32, &str, GgmlType)] = &[
    (FileType::F32, 0, "F32", GgmlType::F32),
    (FileType::F16, 1, "F16", GgmlType::F16),
    (FileType::BF16, 32, "BF16", GgmlType::BF16),
    (FileType::Q4_0, 2, "Q4_0", GgmlType::Q4_0),
    (FileType::Q4_1, 3, "Q4_1", GgmlType::Q4_1),
    (FileType::Q5_0, 8, "Q5_0", GgmlType::Q5_0),
    (FileType::Q5_1, 9, "Q5_1", GgmlType::Q5_1),
    (FileType::Q8_0, 7, "Q8_0", GgmlType::Q8_0),
    (FileType::Q2_K, 10, "Q2_K", GgmlType::Q2_K),
    (FileType::Q3_K_S, 11, "Q3_K_S", GgmlType::Q3_K),
    (FileType::Q3_K_M, 12, "Q3_K_M", GgmlType::Q3_K),
    (FileType::Q3_K_L, 13, "Q3_K_L", GgmlType::Q3_K),
    (FileType::Q4_K_S, 14, "Q4_K_S", GgmlType::Q4_K),
    (FileType::Q4_K_M, 15, "Q4_K_M", GgmlType::Q4_K),
    (FileType::Q5_K_S, 16, "Q5_K_S", GgmlType::Q5_K),
    (FileType::Q5_K_M, 17, "Q5_K_M", GgmlType::Q5_K),
    (FileType::Q6_K, 18, "Q6_K", GgmlType::Q6_K),
];

/// Names llama-quantize also accepts: the medium mixture of a K family.
const ALIASES: &[(&str, FileType)] = &[
    ("Q3_K", FileType::Q3_K_M),
    ("Q4_K", FileType::Q4_K_M),
    ("Q5_K", FileType::Q5_K_M),
];

impl FileType {
    pub fn all() -> impl Iterator<Item = FileType> {
        FILE_TYPES.iter().map(|e| e.0)
    }

    fn entry(self) -> &'static (FileType, u32, &'static str, GgmlType) {
        FILE_TYPES
            .iter()
            .find(|e| e.0 == self)
            .expect("every FileType has a table row")
    }

    /// The `llama_ftype` number written to `general.file_type`.
    pub fn id(self) -> u32 {
        self.entry().1
    }

    pub fn name(self) -> &'static str {
        self.entry().2
    }

    /// The file type stored as `general.file_type` = `id`, if it is one
    /// of ours.
    pub fn from_id(id: u32) -> Option<FileType> {
        FILE_TYPES.iter().find(|e| e.1 == id).map(|e| e.0)
    }

    /// The type most weight matrices get (`llama_ftype_get_default_type`).
    pub fn default_type(self) -> GgmlType {
        self.entry().3
    }

    /// Looks a file type up by name, case-insensitively ("q4_k_m", "Q8_0",
    /// and "Q4_K" for Q4_K_M as llama-quantize allows).
    pub fn from_name(name: &str) -> Option<FileType> {
        FILE_TYPES
            .iter()
            .find(|e| e.2.eq_ignore_ascii_case(name))
            .map(|e| e.0)
            .or_else(|| {
                ALIASES
                    .iter()
                    .find(|a| a.0.eq_ignore_ascii_case(name))
                    .map(|a| a.1)
            })
    }

    /// Every accepted name, comma-separated (for messages).
    pub fn names() -> String {
        FILE_TYPES
            .iter()
            .map(|e| e.2.to_ascii_lowercase())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl fmt::Display for FileType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FileType {
    type Err = String;

    fn from_str(s: &str) -> Result<FileType, String> {
        FileType::from_name(s)
            .ok_or_else(|| format!("unknown type {s:?} (one of: {})", FileType::names()))
    }
}

/// The model facts the recipe looks at (llama.cpp's hparams and arch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelInfo {
    pub arch: String,
    /// `{arch}.block_count`.
    pub n_layer: u32,
    /// `{arch}.attention.head_count` (0 when absent).
    pub n_head: u32,
    /// `{arch}.attention.head_count_kv` (n_head when absent, as llama.cpp).
    pub n_head_kv: u32,
    /// `{arch}.expert_count` (0 for a dense model).
    pub n_expert: u32,
}

impl ModelInfo {
    pub fn from_gguf(f: &GgufFile) -> Result<ModelInfo, MetadataError> {
        let n_head = f.arch_u32_opt("attention.head_count")?.unwrap_or(0);
        Ok(ModelInfo {
            arch: f.architecture()?.to_string(),
            n_layer: f.arch_u32("block_count")?,
            n_head,
            n_head_kv: f.arch_u32_opt("attention.head_count_kv")?.unwrap_or(n_head),
            n_expert: f.arch_u32_opt("expert_count")?.unwrap_or(0),
        })
    }

    /// Query heads per KV head (0 without KV heads), as `hparams.n_gqa()`.
    fn n_gqa(&self) -> u32 {
        self.n_head.checked_div(self.n_head_kv).unwrap_or(0)
    }

    fn is_falcon(&self) -> bool {
        self.arch == "falcon"
    }

    /// llama.cpp's LLM_TYPE_70B (the only model size the recipe looks at).
    fn is_70b(&self) -> bool {
        self.arch == "llama" && self.n_layer == 80 && self.n_head != self.n_head_kv
    }
}

/// A tensor as the recipe sees it.
#[derive(Clone, Copy, Debug)]
pub struct TensorDesc<'a> {
    pub name: &'a str,
    pub ty: GgmlType,
    /// ggml `ne` order.
    pub dims: &'a [u64],
}

/// What the recipe decided for one tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    pub ty: GgmlType,
    /// The recipe's type did not fit the row length and a fallback was used
    /// (llama.cpp warns about these).
    pub fallback: Option<GgmlType>,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecipeError {
    #[error(
        "tensor {name:?}: cannot tell its layer (a MoE model's FFN tensors must be named blk.N.*)"
    )]
    NoLayer { name: String },
    #[error("tensor {name:?}: layer {layer} is not below the block count {n_layer}")]
    BadLayer {
        name: String,
        layer: i64,
        n_layer: u32,
    },
}

/// `sscanf(name, "blk.%d.", &layer) == 1`: the number after "blk.", if
/// there is one.
fn parse_layer(name: &str) -> Option<i64> {
    let rest = name.strip_prefix("blk.")?;
    let (sign, digits) = match rest.as_bytes().first() {
        Some(b'-') => (-1, &rest[1..]),
        Some(b'+') => (1, &rest[1..]),
        _ => (1, rest),
    };
    let end = digits
        .bytes()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(digits.len());
    digits[..end].parse::<i64>().ok().map(|n| sign * n)
}

/// The layer number for ordering: -1 for tensors outside `blk.N`.
fn layer_of(name: &str) -> i64 {
    parse_layer(name).unwrap_or(-1)
}

/// llama.cpp's tensor order (`weight_name_comparer`): by layer number
/// (tensors outside `blk.N` first), then by name.
pub fn llama_cmp(a: &str, b: &str) -> Ordering {
    layer_of(a).cmp(&layer_of(b)).then_with(|| a.cmp(b))
}

/// The indices of `names` in llama.cpp's order.
pub fn llama_order<S: AsRef<str>>(names: &[S]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..names.len()).collect();
    order.sort_by(|&i, &j| llama_cmp(names[i].as_ref(), names[j].as_ref()));
    order
}

/// llama.cpp's broad tensor categories (`tensor_get_category`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Category {
    TokenEmbd,
    AttnQ,
    AttnV,
    AttnK,
    AttnQkv,
    AttnKvB,
    AttnOutput,
    FfnUp,
    FfnGate,
    FfnDown,
    Output,
    Other,
}

fn category(name: &str) -> Category {
    use Category::*;
    if name == "output.weight" {
        return Output;
    }
    if name == "token_embd.weight" || name == "per_layer_token_embd.weight" {
        return TokenEmbd;
    }
    const BY_SUBSTRING: &[(&str, Category)] = &[
        ("attn_qkv.weight", AttnQkv),
        ("attn_kv_b.weight", AttnKvB),
        ("attn_v.weight", AttnV),
        ("attn_k.weight", AttnK),
        ("attn_q.weight", AttnQ),
        ("attn_output.weight", AttnOutput),
        ("ffn_up", FfnUp),
        ("ffn_gate", FfnGate),
        ("ffn_down", FfnDown),
    ];
    BY_SUBSTRING
        .iter()
        .find(|(s, _)| name.contains(s))
        .map_or(Other, |&(_, c)| c)
}

fn is_attn_v_like(c: Category) -> bool {
    matches!(c, Category::AttnV | Category::AttnQkv | Category::AttnKvB)
}

/// `ggml_n_dims`: dimensions after dropping trailing ones (at least 1).
fn n_dims(dims: &[u64]) -> usize {
    dims.iter().rposition(|&d| d != 1).map_or(1, |i| i + 1)
}

/// Name fragments that `tensor_allows_quantization` keeps unquantized.
const KEEP_SUBSTRINGS: &[&str] = &[
    "_norm.weight",
    "ffn_gate_inp.weight",
    "ffn_gate_tid2eid.weight",
    "altup",
    "laurel",
    "per_layer_model_proj",
    "ssm_conv1d",
    "shortconv.conv.weight",
    "indexer.k_proj.weight",
    "indexer.q_proj.weight",
    "time_mix_first.weight",
    "time_mix_w0.weight",
    "time_mix_w1.weight",
    "time_mix_w2.weight",
    "time_mix_v0.weight",
    "time_mix_v1.weight",
    "time_mix_v2.weight",
    "time_mix_a0.weight",
    "time_mix_a1.weight",
    "time_mix_a2.weight",
    "time_mix_g1.weight",
    "time_mix_g2.weight",
    "time_mix_decay_w1.weight",
    "time_mix_decay_w2.weight",
    "time_mix_lerp_fused.weight",
    "attn_rel_b.weight",
    ".position_embd",
    "sam.pos_embd",
    "sam.neck.",
    "sam.net_",
    ".rel_pos",
    ".patch_embd",
    ".patch_merger",
    "a.rvq.codebook",
    "mm.a.code_embd",
];

/// Whether llama.cpp would quantize this tensor at all: 2-D and 3-D weights
/// whose names end in "weight", except norms, MoE routers and a list of
/// small or special tensors.
pub fn allows_quantization(name: &str, dims: &[u64]) -> bool {
    n_dims(dims) >= 2
        && name.ends_with("weight")
        && name != "position_embd.weight"
        && name != "token_types.weight"
        && !KEEP_SUBSTRINGS.iter().any(|s| name.contains(s))
}

/// `use_more_bits`: the first and last eighth of the layers, and every third
/// layer between them.
fn use_more_bits(i_layer: i64, n_layers: i64) -> bool {
    i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2
}

/// `tensor_type_fallback`: a type whose blocks fit a row of `ncols`.
fn fallback(ty: GgmlType, ncols: u64) -> GgmlType {
    use GgmlType::*;
    let block = ty.block_elems() as u64;
    if ncols.is_multiple_of(block) {
        return ty;
    }
    let to = match ty {
        IQ1_S | IQ1_M | IQ2_XXS | IQ2_XS | IQ2_S | IQ3_XXS | IQ3_S | IQ4_XS => IQ4_NL,
        Q2_K | Q3_K | TQ1_0 | TQ2_0 => Q4_0,
        Q4_K => Q5_0,
        Q5_K => Q5_1,
        Q6_K => Q8_0,
        // A 32-element type with no smaller block to demote to: F16 below.
        other => other,
    };
    if !ncols.is_multiple_of(to.block_elems() as u64) {
        F16
    } else {
        to
    }
}

/// Counters the recipe keeps while it walks the tensors.
struct State<'m> {
    model: &'m ModelInfo,
    ftype: FileType,
    tied_embeddings: bool,
    n_attention_wv: i64,
    i_attention_wv: i64,
    n_ffn: i64,
    i_ffn_down: i64,
    i_ffn_gate: i64,
    i_ffn_up: i64,
}

impl State<'_> {
    /// `layer_info`: a dense model's FFN tensors are counted; a MoE model's
    /// layer is read from the name.
    fn layer_info(&self, counter: i64, name: &str) -> Result<(i64, i64), RecipeError> {
        let n_layer = self.n_ffn;
        if self.model.n_expert > 1 {
            let layer = parse_layer(name).ok_or_else(|| RecipeError::NoLayer {
                name: name.to_string(),
            })?;
            if layer < 0 || layer >= n_layer {
                return Err(RecipeError::BadLayer {
                    name: name.to_string(),
                    layer,
                    n_layer: self.model.n_layer,
                });
            }
            return Ok((layer, n_layer));
        }
        Ok((counter, n_layer))
    }

    /// `llama_tensor_get_type_impl` for the file types we support.
    fn choose(&mut self, t: &TensorDesc, cat: Category) -> Result<GgmlType, RecipeError> {
        use FileType as F;
        use GgmlType::*;
        let ftype = self.ftype;
        let m = self.model;
        let mut new = ftype.default_type();

        if cat == Category::Output || (self.tied_embeddings && cat == Category::TokenEmbd) {
            let nx = t.dims[0];
            if m.is_falcon() || !nx.is_multiple_of(new.block_elems() as u64) {
                new = Q8_0;
            } else if new != Q8_0 {
                new = Q6_K;
            }
        } else if cat == Category::TokenEmbd {
            // Only the IQ/TQ mixtures change an untied token embedding.
        } else if is_attn_v_like(cat) {
            let wv = self.i_attention_wv;
            match ftype {
                F::Q2_K => new = if m.n_gqa() >= 4 { Q4_K } else { Q3_K },
                F::Q3_K_M => new = if wv < 2 { Q5_K } else { Q4_K },
                F::Q3_K_L => new = Q5_K,
                F::Q4_K_M | F::Q5_K_M if use_more_bits(wv, self.n_attention_wv) => new = Q6_K,
                F::Q4_K_S if wv < 4 => new = Q5_K,
                _ => {}
            }
            if m.is_70b() && matches!(new, Q3_K | Q4_K) {
                new = Q5_K;
            }
            if m.n_expert == 8 {
                new = Q8_0;
            }
            self.i_attention_wv += 1;
        } else if cat == Category::AttnK {
            if m.n_expert == 8 {
                new = Q8_0;
            }
        } else if cat == Category::AttnQ {
            // Only the IQ mixtures change attn_q.
        } else if cat == Category::FfnDown {
            let (i_layer, n_layer) = self.layer_info(self.i_ffn_down, t.name)?;
            let more = use_more_bits(i_layer, n_layer);
            match ftype {
                F::Q2_K => new = Q3_K,
                F::Q3_K_M => {
                    new = if i_layer < n_layer / 16 {
                        Q5_K
                    } else if !m.is_falcon() || more {
                        Q4_K
                    } else {
                        Q3_K
                    }
                }
                F::Q3_K_L => new = if m.is_falcon() { Q4_K } else { Q5_K },
                F::Q4_K_M => {
                    if m.is_falcon() {
                        new = if i_layer < n_layer / 16 {
                            Q6_K
                        } else if more {
                            Q5_K
                        } else {
                            Q4_K
                        };
                    } else if more {
                        new = Q6_K;
                    }
                }
                F::Q5_K_M if more => new = Q6_K,
                F::Q4_K_S if !m.is_falcon() && i_layer < n_layer / 8 => new = Q5_K,
                _ => {}
            }
            self.i_ffn_down += 1;
        } else if cat == Category::AttnOutput {
            if !m.is_falcon() {
                if m.n_expert == 8 {
                    if matches!(
                        ftype,
                        F::Q2_K | F::Q3_K_S | F::Q3_K_M | F::Q4_K_S | F::Q4_K_M
                    ) {
                        new = Q5_K;
                    }
                } else {
                    match ftype {
                        F::Q2_K => new = Q3_K,
                        F::Q3_K_M => new = Q4_K,
                        F::Q3_K_L => new = Q5_K,
                        _ => {}
                    }
                }
            } else if ftype == F::Q3_K_L {
                new = Q4_K;
            }
        } else if cat == Category::AttnQkv {
            match ftype {
                F::Q3_K_M | F::Q3_K_L => new = Q4_K,
                F::Q4_K_M => new = Q5_K,
                F::Q5_K_M => new = Q6_K,
                _ => {}
            }
        } else if cat == Category::FfnGate {
            // Checked for its error only: the layer matters to IQ3_XS alone.
            self.layer_info(self.i_ffn_gate, t.name)?;
            self.i_ffn_gate += 1;
        } else if cat == Category::FfnUp {
            self.layer_info(self.i_ffn_up, t.name)?;
            self.i_ffn_up += 1;
        }
        Ok(new)
    }
}

/// Runs the recipe over `tensors` (any order) and returns, in the same
/// order, the type each gets: its own type when it is not quantized, the
/// file type's plain type for F32/F16/BF16 mixtures, otherwise the
/// mixture's choice after the row-length fallback.
pub fn plan(
    model: &ModelInfo,
    tensors: &[TensorDesc],
    ftype: FileType,
) -> Result<Vec<Choice>, RecipeError> {
    let names: Vec<&str> = tensors.iter().map(|t| t.name).collect();
    let cats: Vec<Category> = names.iter().map(|n| category(n)).collect();
    let mut state = State {
        model,
        ftype,
        tied_embeddings: !cats.contains(&Category::Output),
        n_attention_wv: cats.iter().filter(|&&c| is_attn_v_like(c)).count() as i64,
        i_attention_wv: 0,
        n_ffn: i64::from(model.n_layer),
        i_ffn_down: 0,
        i_ffn_gate: 0,
        i_ffn_up: 0,
    };
    let default = ftype.default_type();
    let quantized_default = default.block_elems() > 1;
    let mut out = vec![
        Choice {
            ty: GgmlType::F32,
            fallback: None
        };
        tensors.len()
    ];
    for i in llama_order(&names) {
        let t = &tensors[i];
        out[i] = if !allows_quantization(t.name, t.dims) {
            Choice {
                ty: t.ty,
                fallback: None,
            }
        } else if !quantized_default {
            Choice {
                ty: default,
                fallback: None,
            }
        } else {
            let want = state.choose(t, cats[i])?;
            let ty = fallback(want, t.dims[0]);
            Choice {
                ty,
                fallback: (ty != want).then_some(want),
            }
        };
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_type_names_ids_and_aliases() {
        for ft in FileType::all() {
            assert_eq!(FileType::from_name(ft.name()), Some(ft));
            assert_eq!(
                FileType::from_name(&ft.name().to_ascii_lowercase()),
                Some(ft)
            );
            assert_eq!(FileType::from_id(ft.id()), Some(ft));
        }
        assert_eq!(FileType::from_id(4), None);
        assert_eq!(FileType::Q4_K_M.id(), 15);
        assert_eq!(FileType::Q8_0.id(), 7);
        assert_eq!(FileType::BF16.id(), 32);
        assert_eq!(FileType::from_name("q4_k"), Some(FileType::Q4_K_M));
        assert_eq!(FileType::from_name("q4_k_x"), None);
        let e = "iq2_xxs".parse::<FileType>().unwrap_err();
        assert!(
            e.starts_with("unknown type \"iq2_xxs\" (one of: f32, f16, bf16, q4_0"),
            "{e}"
        );
    }

    #[test]
    fn order_is_by_layer_number_then_name() {
        let names = [
            "blk.10.attn_q.weight",
            "token_embd.weight",
            "blk.2.ffn_up.weight",
            "blk.2.attn_q.weight",
            "output_norm.weight",
        ];
        let sorted: Vec<&str> = llama_order(&names).iter().map(|&i| names[i]).collect();
        assert_eq!(
            sorted,
            [
                "output_norm.weight",
                "token_embd.weight",
                "blk.2.attn_q.weight",
                "blk.2.ffn_up.weight",
                "blk.10.attn_q.weight",
            ]
        );
        assert_eq!(layer_of("blk.7x"), 7);
        assert_eq!(layer_of("blk.x"), -1);
        assert_eq!(layer_of("blkk.1."), -1);
    }

    #[test]
    fn which_tensors_are_quantized() {
        assert!(allows_quantization("blk.0.attn_q.weight", &[64, 64]));
        assert!(allows_quantization(
            "blk.0.ffn_up_exps.weight",
            &[64, 32, 8]
        ));
        assert!(!allows_quantization("blk.0.attn_norm.weight", &[64]));
        assert!(!allows_quantization("blk.0.attn_q.weight", &[64, 1, 1]));
        assert!(!allows_quantization("blk.0.attn_q_norm.weight", &[64, 2]));
        assert!(!allows_quantization("blk.0.ffn_gate_inp.weight", &[64, 8]));
        assert!(!allows_quantization("blk.0.attn_q.bias", &[64, 2]));
        assert!(!allows_quantization("position_embd.weight", &[64, 2]));
    }

    #[test]
    fn fallbacks_follow_the_table() {
        use GgmlType::*;
        assert_eq!(fallback(Q4_K, 576), Q5_0);
        assert_eq!(fallback(Q6_K, 640), Q8_0);
        assert_eq!(fallback(Q5_K, 640), Q5_1);
        assert_eq!(fallback(Q3_K, 96), Q4_0);
        assert_eq!(fallback(Q2_K, 512), Q2_K);
        assert_eq!(fallback(Q4_K, 80), F16);
        assert_eq!(fallback(Q8_0, 48), F16);
    }

    #[test]
    fn use_more_bits_matches_llama_cpp_for_30_layers() {
        let layers: Vec<i64> = (0..30).filter(|&i| use_more_bits(i, 30)).collect();
        // n/8 = 3, 7n/8 = 26: 0..3, 26..30, and (i - 3) % 3 == 2.
        assert_eq!(layers, [0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29]);
    }

    #[test]
    fn moe_ffn_tensors_need_a_layer_in_their_name() {
        let model = ModelInfo {
            arch: "qwen3moe".into(),
            n_layer: 2,
            n_head: 4,
            n_head_kv: 1,
            n_expert: 4,
        };
        let dims = [256u64, 256, 4];
        let t = |name| TensorDesc {
            name,
            ty: GgmlType::F32,
            dims: &dims,
        };
        let e = plan(&model, &[t("ffn_down_exps.weight")], FileType::Q4_K_M).unwrap_err();
        assert!(matches!(e, RecipeError::NoLayer { .. }), "{e}");
        let e = plan(&model, &[t("blk.2.ffn_down_exps.weight")], FileType::Q4_K_M).unwrap_err();
        assert!(matches!(e, RecipeError::BadLayer { layer: 2, .. }), "{e}");
        let ok = plan(&model, &[t("blk.1.ffn_down_exps.weight")], FileType::Q4_K_M).unwrap();
        // Layer 1 of 2: 1 >= 7*2/8 = 1, so more bits.
        assert_eq!(ok[0].ty, GgmlType::Q6_K);
    }
}

//! The shader variants engine/build.rs compiles, as data: ops compiled once
//! ([`ONCE`]) and weight-reading ops compiled once per weight type
//! ([`PER_TYPE`] x [`WEIGHT_TYPES`], as ggml's vulkan-shaders-gen loops over
//! (op, type)). A `.comp` file named by neither is compiled once under its
//! file stem.

use crate::ggml_type::{GgmlType, WEIGHT_TYPES};

/// One compiled shader: `name` is the Rust-side name (a lower-case
/// identifier), `source` a file in `shaders/`, `defines` the macros set for
/// this variant.
pub struct Variant {
    pub name: String,
    pub source: String,
    pub defines: Vec<(String, String)>,
}

/// Ops compiled once each: (name, source, defines).
type Once = (
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
);

pub const ONCE: &[Once] = &[
    ("rms_norm", "rms_norm.comp", &[]),
    ("rms_norm_w", "rms_norm.comp", &[("HAS_WEIGHT", "1")]),
    // RMS norm with its weight, also writing the next matmul's quantized
    // input (op_quantize.rs fuses it with the quantization that follows).
    (
        "rms_norm_w_q8_0",
        "rms_norm.comp",
        &[("HAS_WEIGHT", "1"), ("QUANT", "1"), ("ACT_Q8_0", "1")],
    ),
    (
        "rms_norm_w_q8_1",
        "rms_norm.comp",
        &[("HAS_WEIGHT", "1"), ("QUANT", "1"), ("ACT_Q8_1", "1")],
    ),
    // The residual add before the norm fused into it (op_elementwise.rs),
    // and with the quantization too.
    (
        "add_rms_norm_w",
        "rms_norm.comp",
        &[("HAS_WEIGHT", "1"), ("ADD", "1")],
    ),
    (
        "add_rms_norm_w_q8_0",
        "rms_norm.comp",
        &[
            ("HAS_WEIGHT", "1"),
            ("ADD", "1"),
            ("QUANT", "1"),
            ("ACT_Q8_0", "1"),
        ],
    ),
    (
        "add_rms_norm_w_q8_1",
        "rms_norm.comp",
        &[
            ("HAS_WEIGHT", "1"),
            ("ADD", "1"),
            ("QUANT", "1"),
            ("ACT_Q8_1", "1"),
        ],
    ),
    // A post-norm fused with the residual add after it (op_elementwise.rs).
    (
        "rms_norm_w_add_to",
        "rms_norm.comp",
        &[("HAS_WEIGHT", "1"), ("ADD_TO", "1")],
    ),
    ("attention_f32", "attention.comp", &[]),
    ("attention_f16", "attention.comp", &[("KV_F16", "1")]),
    // Prefill: sixteen query rows per workgroup (op_attention.rs ROWS). On
    // the H200, SmolLM2 pp512 at depth 2048, t/s: 13,700 with four rows a
    // workgroup (attention.comp RB 4), 19,000-19,200 with these; sixteen
    // rows of 512 invocations 14,100, 32 rows 14,900-15,100, eight rows of
    // 128 19,000-19,200 (synth-qwen3moe 69,700 against 75,700-79,200).
    ("attention_f32_rows", "attention_rows.comp", &[]),
    (
        "attention_f16_rows",
        "attention_rows.comp",
        &[("KV_F16", "1")],
    ),
    // Prefill through an f16 cache with cooperative matrices, where the
    // device has them, in runs of keys whose partials
    // attention_combine_rows.comp weighs together (op_attention.rs COOP):
    // head dims up to 64 in tiles of 64 keys, four subgroups (64 rows) a
    // workgroup; up to 128 in tiles of 32, two subgroups (shared memory:
    // 48 KiB at most). On the H200, SmolLM2 pp512 at depth 2048: 30.6-31.0k
    // t/s with four subgroups, 24.8-25.3k with two (115 us a dispatch
    // against 173); twice the workgroups (2,048) no faster.
    (
        "attention_coop_d64",
        "attention_coop.comp",
        &[("MAX_D", "64u"), ("BC", "64u"), ("NSG", "4u")],
    ),
    (
        "attention_coop_d128",
        "attention_coop.comp",
        &[("MAX_D", "128u"), ("BC", "32u"), ("NSG", "2u")],
    ),
    ("attention_f32_split", "attention.comp", &[("SPLIT", "1")]),
    (
        "attention_f16_split",
        "attention.comp",
        &[("KV_F16", "1"), ("SPLIT", "1")],
    ),
    ("attention_cpu_f32", "attention_cpu.comp", &[]),
    (
        "attention_cpu_f16",
        "attention_cpu.comp",
        &[("KV_F16", "1")],
    ),
    ("attention_keys_cpu_f32", "attention_keys_cpu.comp", &[]),
    (
        "attention_keys_cpu_f16",
        "attention_keys_cpu.comp",
        &[("KV_F16", "1")],
    ),
    // A gated unit also writing the down projection's quantized input
    // (op_quantize.rs fuses it with the quantization that follows).
    ("glu_q8_0", "glu_quant.comp", &[("ACT_Q8_0", "1")]),
    ("glu_q8_1", "glu_quant.comp", &[("ACT_Q8_1", "1")]),
    ("kv_write_f32", "kv_write.comp", &[]),
    ("rope", "rope.comp", &[]),
    ("norm_rope", "norm_rope.comp", &[]),
    // RoPE of K fused with its cache write (op_attention.rs).
    ("rope_kv_f32", "rope.comp", &[("KV_WRITE", "1")]),
    (
        "rope_kv_f16",
        "rope.comp",
        &[("KV_WRITE", "1"), ("KV_F16", "1")],
    ),
    ("kv_write_f16", "kv_write.comp", &[("KV_F16", "1")]),
    // Activations in a weight type's dot format (ggml's vec_dot_type).
    ("quantize_q8_0", "quantize_act.comp", &[("ACT_Q8_0", "1")]),
    ("quantize_q8_1", "quantize_act.comp", &[("ACT_Q8_1", "1")]),
    ("quantize_q8_k", "quantize_act.comp", &[("ACT_Q8_K", "1")]),
];

/// Shaders of the `fault-injection` feature (engine/src/fault.rs), compiled
/// only with it: normal builds carry none of them. `gpu-softmax-unshifted`:
/// the attention kernels with the running max of their online softmax
/// held at 0 (exp(s) unshifted). `gpu-act-f16-truncate`: the activation
/// quantizer's f16 block scale truncated instead of rounded.
/// `gpu-post-norm-add`: the fused post-norm and add adding the unweighted
/// normed value.
pub const FAULT: &[Once] = &[
    (
        "quantize_q8_0_f16trunc",
        "quantize_act.comp",
        &[("ACT_Q8_0", "1"), ("FAULT_F16_TRUNCATE", "1")],
    ),
    (
        "quantize_q8_1_f16trunc",
        "quantize_act.comp",
        &[("ACT_Q8_1", "1"), ("FAULT_F16_TRUNCATE", "1")],
    ),
    (
        "rms_norm_w_q8_0_f16trunc",
        "rms_norm.comp",
        &[
            ("HAS_WEIGHT", "1"),
            ("QUANT", "1"),
            ("ACT_Q8_0", "1"),
            ("FAULT_F16_TRUNCATE", "1"),
        ],
    ),
    (
        "rms_norm_w_q8_1_f16trunc",
        "rms_norm.comp",
        &[
            ("HAS_WEIGHT", "1"),
            ("QUANT", "1"),
            ("ACT_Q8_1", "1"),
            ("FAULT_F16_TRUNCATE", "1"),
        ],
    ),
    (
        "glu_q8_0_f16trunc",
        "glu_quant.comp",
        &[("ACT_Q8_0", "1"), ("FAULT_F16_TRUNCATE", "1")],
    ),
    (
        "glu_q8_1_f16trunc",
        "glu_quant.comp",
        &[("ACT_Q8_1", "1"), ("FAULT_F16_TRUNCATE", "1")],
    ),
    (
        "add_rms_norm_w_q8_0_f16trunc",
        "rms_norm.comp",
        &[
            ("HAS_WEIGHT", "1"),
            ("ADD", "1"),
            ("QUANT", "1"),
            ("ACT_Q8_0", "1"),
            ("FAULT_F16_TRUNCATE", "1"),
        ],
    ),
    (
        "add_rms_norm_w_q8_1_f16trunc",
        "rms_norm.comp",
        &[
            ("HAS_WEIGHT", "1"),
            ("ADD", "1"),
            ("QUANT", "1"),
            ("ACT_Q8_1", "1"),
            ("FAULT_F16_TRUNCATE", "1"),
        ],
    ),
    (
        "rms_norm_w_add_to_unweighted",
        "rms_norm.comp",
        &[
            ("HAS_WEIGHT", "1"),
            ("ADD_TO", "1"),
            ("FAULT_ADD_UNWEIGHTED", "1"),
        ],
    ),
    (
        "attention_f32_unshifted",
        "attention.comp",
        &[("FAULT_SOFTMAX_UNSHIFTED", "1")],
    ),
    (
        "attention_f16_unshifted",
        "attention.comp",
        &[("KV_F16", "1"), ("FAULT_SOFTMAX_UNSHIFTED", "1")],
    ),
    (
        "attention_f32_rows_unshifted",
        "attention_rows.comp",
        &[("FAULT_SOFTMAX_UNSHIFTED", "1")],
    ),
    (
        "attention_f16_rows_unshifted",
        "attention_rows.comp",
        &[("KV_F16", "1"), ("FAULT_SOFTMAX_UNSHIFTED", "1")],
    ),
    (
        "attention_coop_d64_unshifted",
        "attention_coop.comp",
        &[
            ("MAX_D", "64u"),
            ("BC", "64u"),
            ("NSG", "4u"),
            ("FAULT_SOFTMAX_UNSHIFTED", "1"),
        ],
    ),
    (
        "attention_coop_d128_unshifted",
        "attention_coop.comp",
        &[
            ("MAX_D", "128u"),
            ("BC", "32u"),
            ("NSG", "2u"),
            ("FAULT_SOFTMAX_UNSHIFTED", "1"),
        ],
    ),
    (
        "attention_f32_split_unshifted",
        "attention.comp",
        &[("SPLIT", "1"), ("FAULT_SOFTMAX_UNSHIFTED", "1")],
    ),
    (
        "attention_f16_split_unshifted",
        "attention.comp",
        &[
            ("KV_F16", "1"),
            ("SPLIT", "1"),
            ("FAULT_SOFTMAX_UNSHIFTED", "1"),
        ],
    ),
    (
        "attention_cpu_f32_unshifted",
        "attention_cpu.comp",
        &[("FAULT_SOFTMAX_UNSHIFTED", "1")],
    ),
    (
        "attention_cpu_f16_unshifted",
        "attention_cpu.comp",
        &[("KV_F16", "1"), ("FAULT_SOFTMAX_UNSHIFTED", "1")],
    ),
    (
        "attention_keys_cpu_f32_unshifted",
        "attention_keys_cpu.comp",
        &[("FAULT_SOFTMAX_UNSHIFTED", "1")],
    ),
    (
        "attention_keys_cpu_f16_unshifted",
        "attention_keys_cpu.comp",
        &[("KV_F16", "1"), ("FAULT_SOFTMAX_UNSHIFTED", "1")],
    ),
];

/// An op compiled once per weight type: variant `{name}_{type}` of `source`
/// with `WEIGHT_{TYPE}` defined, then the defines `extra` gives for the type.
pub struct PerType {
    pub name: &'static str,
    source: &'static str,
    extra: fn(GgmlType) -> Vec<(&'static str, &'static str)>,
    /// The types it is compiled for (`None`: every weight type; the
    /// `by_type` array then holds `Option`s).
    pub only: Option<fn(GgmlType) -> bool>,
}

/// The super-block types whose products sum in eight lanes (Q3_K..Q6_K:
/// `shaders/common/qdot.glsl`).
pub fn k_lanes(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::Q3_K | GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K
    )
}

/// The block types whose activations are Q8_0 or Q8_1 (32-element blocks,
/// the legacy dot products of `shaders/common/qdot.glsl`).
pub fn q8_legacy(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q8_0
    )
}

/// The super-block types whose activations are Q8_K.
pub fn q8_k_dot(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::Q2_K | GgmlType::Q3_K | GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K
    )
}

/// The block types with fused decode matvecs: those whose activations the
/// prologue quantizes (Q8_0, Q8_1: `common/quant_row.glsl`; Q8_K:
/// `common/quant_row_k.glsl`).
pub fn fusable(ty: GgmlType) -> bool {
    q8_legacy(ty) || q8_k_dot(ty)
}

/// The decode matvec with a prologue that computes its activation row
/// (and an epilogue that adds its result to the residual): `PRO_*`,
/// `PRO_OUT` and `EPI_ADD` of `shaders/matvec.comp`, fused by
/// engine/src/vulkan/backend/op_matvec_fused.rs; with the 32-element
/// activation format defined up front (act.glsl's Q8_1 block head reads
/// it; qdot.glsl defines Q8_K's for the super-block types).
fn fused(
    ty: GgmlType,
    defines: &[(&'static str, &'static str)],
) -> Vec<(&'static str, &'static str)> {
    let act = match ty {
        GgmlType::Q4_1 | GgmlType::Q5_1 => vec![("ACT_Q8_1", "1")],
        t if q8_legacy(t) => vec![("ACT_Q8_0", "1")],
        _ => Vec::new(),
    };
    [gpu_decode(ty), act, defines.to_vec()].concat()
}

fn pro_quant(ty: GgmlType) -> Vec<(&'static str, &'static str)> {
    fused(ty, &[("PRO_QUANT", "1")])
}

fn pro_quant_add(ty: GgmlType) -> Vec<(&'static str, &'static str)> {
    fused(ty, &[("PRO_QUANT", "1"), ("EPI_ADD", "1")])
}

fn pro_quant_post(ty: GgmlType) -> Vec<(&'static str, &'static str)> {
    fused(ty, &[("PRO_QUANT", "1"), ("EPI_POST_NORM", "1")])
}

fn pro_norm(ty: GgmlType) -> Vec<(&'static str, &'static str)> {
    fused(ty, &[("PRO_NORM", "1")])
}

fn pro_norm_out(ty: GgmlType) -> Vec<(&'static str, &'static str)> {
    fused(ty, &[("PRO_NORM", "1"), ("PRO_OUT", "1")])
}

fn pro_norm_rope(ty: GgmlType) -> Vec<(&'static str, &'static str)> {
    fused(ty, &[("PRO_NORM", "1"), ("EPI_ROPE", "1")])
}

fn pro_norm_out_rope(ty: GgmlType) -> Vec<(&'static str, &'static str)> {
    fused(
        ty,
        &[("PRO_NORM", "1"), ("PRO_OUT", "1"), ("EPI_ROPE", "1")],
    )
}

fn pro_norm_multi(ty: GgmlType) -> Vec<(&'static str, &'static str)> {
    fused(
        ty,
        &[
            ("PRO_NORM", "1"),
            ("PRO_OUT", "1"),
            ("EPI_ROPE", "1"),
            ("MULTI", "1"),
        ],
    )
}

fn pro_norm_out_glu(ty: GgmlType) -> Vec<(&'static str, &'static str)> {
    fused(
        ty,
        &[("PRO_NORM", "1"), ("PRO_OUT", "1"), ("PAIR_GLU", "1")],
    )
}

/// A fused variant's twin with `SG_RED` (shuffles for the reductions'
/// steps within a subgroup).
fn sg_red(mut defines: Vec<(&'static str, &'static str)>) -> Vec<(&'static str, &'static str)> {
    defines.push(("SG_RED", "1"));
    defines
}

/// The products for CPU Vulkan implementations (`shaders/matmul_cpu.comp`):
/// ROWS weight rows for TOKENS activation rows per invocation. Measured on
/// lavapipe (2 cores, Q4_1 576x1536): decode is fastest at 1 row (2 for the
/// float types, whose weights are read one element at a time), prefill at 8
/// rows x 4 tokens (12 ms for 64 tokens; 8 x 8: 23 ms, 4 x 4: 18 ms, 1 x 8:
/// 35 ms).
fn cpu_decode(ty: GgmlType) -> Vec<(&'static str, &'static str)> {
    let rows = if ty.block_elems() == 1 { "2" } else { "1" };
    vec![("TOKENS", "1"), ("ROWS", rows)]
}

fn cpu_prefill(_: GgmlType) -> Vec<(&'static str, &'static str)> {
    vec![("TOKENS", "4"), ("ROWS", "8")]
}

/// The decode matvec (`shaders/matvec.comp`) on block types: weight rows per
/// workgroup of 128, so 16 invocations per row for the 32-element blocks
/// (a row of 576 has 18) and 8 for the 256-element ones (6 in a row of
/// 1536). Float types keep 2 rows per workgroup.
fn gpu_decode(ty: GgmlType) -> Vec<(&'static str, &'static str)> {
    match ty.block_elems() {
        1 => Vec::new(),
        32 => vec![("ROWS_PER_WG", "8")],
        // The super-block types with Q8_K products: four lanes a block
        // (KSPLIT), 32 lanes a row.
        _ if q8_k_dot(ty) => vec![("ROWS_PER_WG", "4"), ("KSPLIT", "4")],
        _ => vec![("ROWS_PER_WG", "16")],
    }
}

/// The same products routed by expert ids (ggml mul_mat_id; `MATMUL_ID` in
/// matvec.comp, matmul.comp and matmul_cpu.comp), with the same ROWS and
/// TOKENS as the plain ones.
fn id(_: GgmlType) -> Vec<(&'static str, &'static str)> {
    vec![("MATMUL_ID", "1")]
}

fn gpu_decode_id(ty: GgmlType) -> Vec<(&'static str, &'static str)> {
    [gpu_decode(ty), id(ty)].concat()
}

fn cpu_decode_id(ty: GgmlType) -> Vec<(&'static str, &'static str)> {
    [cpu_decode(ty), id(ty)].concat()
}

fn cpu_prefill_id(ty: GgmlType) -> Vec<(&'static str, &'static str)> {
    [cpu_prefill(ty), id(ty)].concat()
}

pub const PER_TYPE: &[PerType] = &[
    PerType {
        name: "matvec",
        source: "matvec.comp",
        extra: gpu_decode,
        only: None,
    },
    PerType {
        name: "matmul",
        source: "matmul.comp",
        extra: |_| Vec::new(),
        only: None,
    },
    // Prefill of the 32-element block types with packed integer dot
    // products (devices with them), tiled through shared memory. The tile
    // measured on the H200 (SmolLM2 Q4_1 pp512, t/s): 32 x 32, 2 x 4 per
    // invocation, 8 blocks a stage 38,900; 64 x 32 36,500; 32 x 64 35,400;
    // 64 x 64 30,400; 128 x 64 20,500 (smaller tiles: more workgroups for
    // these narrow matrices).
    PerType {
        name: "matmul_tiled",
        source: "matmul_tiled.comp",
        extra: |_| {
            vec![
                ("TM", "32"),
                ("TN", "32"),
                ("RM", "2"),
                ("RT", "4"),
                ("KB", "8"),
            ]
        },
        only: Some(q8_legacy),
    },
    // The same for the super-block types summed in eight lanes, 16 rows x
    // 32 tokens, 1 x 4 per invocation (H200, SmolLM2 requantized to
    // Q4_K_M, pp512, us per product: Q6_K 71, Q4_K 44; at 32 x 32 97, 52;
    // the 32-element types' products were slower at 16 x 32).
    PerType {
        name: "matmul_tiled_k",
        source: "matmul_tiled_k.comp",
        extra: |_| vec![("TM", "16"), ("TN", "32"), ("RM", "1"), ("RT", "4")],
        only: Some(k_lanes),
    },
    PerType {
        name: "matvec_cpu",
        source: "matmul_cpu.comp",
        extra: cpu_decode,
        only: None,
    },
    PerType {
        name: "matmul_cpu",
        source: "matmul_cpu.comp",
        extra: cpu_prefill,
        only: None,
    },
    PerType {
        name: "matvec_id",
        source: "matvec.comp",
        extra: gpu_decode_id,
        only: None,
    },
    PerType {
        name: "matmul_id",
        source: "matmul.comp",
        extra: id,
        only: None,
    },
    PerType {
        name: "matvec_cpu_id",
        source: "matmul_cpu.comp",
        extra: cpu_decode_id,
        only: None,
    },
    PerType {
        name: "matmul_cpu_id",
        source: "matmul_cpu.comp",
        extra: cpu_prefill_id,
        only: None,
    },
    PerType {
        name: "matvec_q",
        source: "matvec.comp",
        extra: pro_quant,
        only: Some(fusable),
    },
    PerType {
        name: "matvec_q_add",
        source: "matvec.comp",
        extra: pro_quant_add,
        only: Some(fusable),
    },
    PerType {
        name: "matvec_q_post",
        source: "matvec.comp",
        extra: pro_quant_post,
        only: Some(fusable),
    },
    PerType {
        name: "matvec_norm",
        source: "matvec.comp",
        extra: pro_norm,
        only: Some(fusable),
    },
    PerType {
        name: "matvec_norm_out",
        source: "matvec.comp",
        extra: pro_norm_out,
        only: Some(fusable),
    },
    PerType {
        name: "matvec_norm_rope",
        source: "matvec.comp",
        extra: pro_norm_rope,
        only: Some(fusable),
    },
    PerType {
        name: "matvec_norm_out_rope",
        source: "matvec.comp",
        extra: pro_norm_out_rope,
        only: Some(fusable),
    },
    PerType {
        name: "matvec_norm_multi",
        source: "matvec.comp",
        extra: pro_norm_multi,
        only: Some(fusable),
    },
    PerType {
        name: "matvec_norm_out_glu",
        source: "matvec.comp",
        extra: pro_norm_out_glu,
        only: Some(fusable),
    },
    // The fused families' twins whose reductions end in subgroup shuffles
    // (`SG_RED`: the same bits, fewer barriers), for devices with them.
    PerType {
        name: "matvec_q_sg",
        source: "matvec.comp",
        extra: |t| sg_red(pro_quant(t)),
        only: Some(fusable),
    },
    PerType {
        name: "matvec_q_add_sg",
        source: "matvec.comp",
        extra: |t| sg_red(pro_quant_add(t)),
        only: Some(fusable),
    },
    PerType {
        name: "matvec_q_post_sg",
        source: "matvec.comp",
        extra: |t| sg_red(pro_quant_post(t)),
        only: Some(fusable),
    },
    PerType {
        name: "matvec_norm_sg",
        source: "matvec.comp",
        extra: |t| sg_red(pro_norm(t)),
        only: Some(fusable),
    },
    PerType {
        name: "matvec_norm_out_sg",
        source: "matvec.comp",
        extra: |t| sg_red(pro_norm_out(t)),
        only: Some(fusable),
    },
    PerType {
        name: "matvec_norm_rope_sg",
        source: "matvec.comp",
        extra: |t| sg_red(pro_norm_rope(t)),
        only: Some(fusable),
    },
    PerType {
        name: "matvec_norm_out_rope_sg",
        source: "matvec.comp",
        extra: |t| sg_red(pro_norm_out_rope(t)),
        only: Some(fusable),
    },
    PerType {
        name: "matvec_norm_multi_sg",
        source: "matvec.comp",
        extra: |t| sg_red(pro_norm_multi(t)),
        only: Some(fusable),
    },
    PerType {
        name: "matvec_norm_out_glu_sg",
        source: "matvec.comp",
        extra: |t| sg_red(pro_norm_out_glu(t)),
        only: Some(fusable),
    },
    // A decode step's feed-forward block in one dispatch (norm, gate and
    // up, their unit, the down projection and its add; op_matvec_ffn.rs).
    PerType {
        name: "ffn_decode",
        source: "ffn_decode.comp",
        extra: |t| fused(t, &[]),
        only: Some(q8_legacy),
    },
    // Decode attention with the output projection after it and its add
    // (op_attention_oproj.rs), by cache type, plain and split-K.
    PerType {
        name: "attention_f32_oproj",
        source: "attention.comp",
        extra: |t| fused(t, &[("OUT_PROJ", "1")]),
        only: Some(q8_legacy),
    },
    PerType {
        name: "attention_f16_oproj",
        source: "attention.comp",
        extra: |t| fused(t, &[("OUT_PROJ", "1"), ("KV_F16", "1")]),
        only: Some(q8_legacy),
    },
    PerType {
        name: "attention_f32_split_oproj",
        source: "attention.comp",
        extra: |t| fused(t, &[("OUT_PROJ", "1"), ("SPLIT", "1")]),
        only: Some(q8_legacy),
    },
    PerType {
        name: "attention_f16_split_oproj",
        source: "attention.comp",
        extra: |t| fused(t, &[("OUT_PROJ", "1"), ("KV_F16", "1"), ("SPLIT", "1")]),
        only: Some(q8_legacy),
    },
    PerType {
        name: "get_rows",
        source: "get_rows.comp",
        extra: |_| Vec::new(),
        only: None,
    },
];

/// Lower-case suffix of a type's variants (`q4_k`).
pub fn type_suffix(ty: GgmlType) -> String {
    ty.name().to_ascii_lowercase()
}

/// Every listed variant: [`ONCE`], then each [`PER_TYPE`] op for every
/// weight type, then (with `faults`) [`FAULT`].
pub fn listed(faults: bool) -> Vec<Variant> {
    let owned = |defines: &[(&str, &str)]| -> Vec<(String, String)> {
        defines
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let fault: &[Once] = if faults { FAULT } else { &[] };
    let mut out: Vec<Variant> = ONCE
        .iter()
        .chain(fault)
        .map(|&(name, source, defines)| Variant {
            name: name.to_string(),
            source: source.to_string(),
            defines: owned(defines),
        })
        .collect();
    for op in PER_TYPE {
        for ty in WEIGHT_TYPES {
            if op.only.is_some_and(|only| !only(ty)) {
                continue;
            }
            let weight = format!("WEIGHT_{}", ty.name());
            let mut defines = vec![(weight, "1".to_string())];
            defines.extend(owned(&(op.extra)(ty)));
            out.push(Variant {
                name: format!("{}_{}", op.name, type_suffix(ty)),
                source: op.source.to_string(),
                defines,
            });
        }
    }
    out
}

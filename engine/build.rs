//! Compiles every `shaders/*.comp` to SPIR-V with shaderc and generates the Rust
//! table that `engine/src/vulkan/shaders.rs` includes.
//!
//! - `#include "x.glsl"` resolves next to the including file first, then in
//!   `shaders/common/`; `#include <x.glsl>` resolves in `shaders/common/` only.
//! - Optimisation is on and warnings are errors; a failing shader fails the build
//!   with shaderc's message.
//! - Variants are data: [`VARIANTS`] lists (output name, source, defines). A
//!   `.comp` file not named there is compiled once under its file stem.
//! - A small SPIR-V reflection pass records, per shader, the storage-buffer
//!   bindings of set 0 (and whether each is read-only / write-only), the size of
//!   the push-constant block and the workgroup size, so that the pipeline layout
//!   comes from the shader itself and Rust's push-constant mirrors can be checked.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::{env, fs};

/// One compiled shader: `name` is the Rust-side name (a lower-case identifier),
/// `source` a file in `shaders/`, `defines` the macros set for this variant.
struct Variant {
    name: &'static str,
    source: &'static str,
    defines: &'static [(&'static str, &'static str)],
}

/// Shader variants as data. Later, e.g. one matmul source per weight type:
/// `Variant { name: "matmul_q4_0", source: "matmul.comp", defines: &[("WEIGHT_Q4_0", "1")] }`.
const VARIANTS: &[Variant] = &[
    Variant {
        name: "add",
        source: "add.comp",
        defines: &[],
    },
    Variant {
        name: "scale",
        source: "unary.comp",
        defines: &[("OP_SCALE", "1")],
    },
    Variant {
        name: "softcap",
        source: "unary.comp",
        defines: &[("OP_SOFTCAP", "1")],
    },
    Variant {
        name: "glu_swiglu",
        source: "glu.comp",
        defines: &[("GLU_SWIGLU", "1")],
    },
    Variant {
        name: "glu_geglu",
        source: "glu.comp",
        defines: &[("GLU_GEGLU", "1")],
    },
    Variant {
        name: "rms_norm",
        source: "rms_norm.comp",
        defines: &[],
    },
    Variant {
        name: "rms_norm_w",
        source: "rms_norm.comp",
        defines: &[("HAS_WEIGHT", "1")],
    },
    // Weight-reading ops, one variant per weight type (shaders/common/blocks.glsl).
    Variant {
        name: "matvec_f32",
        source: "matvec.comp",
        defines: &[("WEIGHT_F32", "1")],
    },
    Variant {
        name: "matvec_f16",
        source: "matvec.comp",
        defines: &[("WEIGHT_F16", "1")],
    },
    Variant {
        name: "matvec_bf16",
        source: "matvec.comp",
        defines: &[("WEIGHT_BF16", "1")],
    },
    Variant {
        name: "matvec_q4_0",
        source: "matvec.comp",
        defines: &[("WEIGHT_Q4_0", "1")],
    },
    Variant {
        name: "matvec_q4_1",
        source: "matvec.comp",
        defines: &[("WEIGHT_Q4_1", "1")],
    },
    Variant {
        name: "matvec_q5_0",
        source: "matvec.comp",
        defines: &[("WEIGHT_Q5_0", "1")],
    },
    Variant {
        name: "matvec_q5_1",
        source: "matvec.comp",
        defines: &[("WEIGHT_Q5_1", "1")],
    },
    Variant {
        name: "matvec_q8_0",
        source: "matvec.comp",
        defines: &[("WEIGHT_Q8_0", "1")],
    },
    Variant {
        name: "matvec_q2_k",
        source: "matvec.comp",
        defines: &[("WEIGHT_Q2_K", "1")],
    },
    Variant {
        name: "matvec_q3_k",
        source: "matvec.comp",
        defines: &[("WEIGHT_Q3_K", "1")],
    },
    Variant {
        name: "matvec_q4_k",
        source: "matvec.comp",
        defines: &[("WEIGHT_Q4_K", "1")],
    },
    Variant {
        name: "matvec_q5_k",
        source: "matvec.comp",
        defines: &[("WEIGHT_Q5_K", "1")],
    },
    Variant {
        name: "matvec_q6_k",
        source: "matvec.comp",
        defines: &[("WEIGHT_Q6_K", "1")],
    },
    Variant {
        name: "matmul_f32",
        source: "matmul.comp",
        defines: &[("WEIGHT_F32", "1")],
    },
    Variant {
        name: "matmul_f16",
        source: "matmul.comp",
        defines: &[("WEIGHT_F16", "1")],
    },
    Variant {
        name: "matmul_bf16",
        source: "matmul.comp",
        defines: &[("WEIGHT_BF16", "1")],
    },
    Variant {
        name: "matmul_q4_0",
        source: "matmul.comp",
        defines: &[("WEIGHT_Q4_0", "1")],
    },
    Variant {
        name: "matmul_q4_1",
        source: "matmul.comp",
        defines: &[("WEIGHT_Q4_1", "1")],
    },
    Variant {
        name: "matmul_q5_0",
        source: "matmul.comp",
        defines: &[("WEIGHT_Q5_0", "1")],
    },
    Variant {
        name: "matmul_q5_1",
        source: "matmul.comp",
        defines: &[("WEIGHT_Q5_1", "1")],
    },
    Variant {
        name: "matmul_q8_0",
        source: "matmul.comp",
        defines: &[("WEIGHT_Q8_0", "1")],
    },
    Variant {
        name: "matmul_q2_k",
        source: "matmul.comp",
        defines: &[("WEIGHT_Q2_K", "1")],
    },
    Variant {
        name: "matmul_q3_k",
        source: "matmul.comp",
        defines: &[("WEIGHT_Q3_K", "1")],
    },
    Variant {
        name: "matmul_q4_k",
        source: "matmul.comp",
        defines: &[("WEIGHT_Q4_K", "1")],
    },
    Variant {
        name: "matmul_q5_k",
        source: "matmul.comp",
        defines: &[("WEIGHT_Q5_K", "1")],
    },
    Variant {
        name: "matmul_q6_k",
        source: "matmul.comp",
        defines: &[("WEIGHT_Q6_K", "1")],
    },
    // The same products for CPU Vulkan implementations (shaders/matmul_cpu.comp):
    // ROWS weight rows for TOKENS activation rows per invocation (TOKENS = 1:
    // decode). Measured on lavapipe (2 cores, Q4_1 576x1536): decode is
    // fastest at 1 row (2 for the float types, whose weights are read one
    // element at a time), prefill at 8 rows x 4 tokens (12 ms for 64 tokens;
    // 8 x 8: 23 ms, 4 x 4: 18 ms, 1 x 8: 35 ms).
    Variant {
        name: "matvec_cpu_f32",
        source: "matmul_cpu.comp",
        defines: &[("WEIGHT_F32", "1"), ("TOKENS", "1"), ("ROWS", "2")],
    },
    Variant {
        name: "matvec_cpu_f16",
        source: "matmul_cpu.comp",
        defines: &[("WEIGHT_F16", "1"), ("TOKENS", "1"), ("ROWS", "2")],
    },
    Variant {
        name: "matvec_cpu_bf16",
        source: "matmul_cpu.comp",
        defines: &[("WEIGHT_BF16", "1"), ("TOKENS", "1"), ("ROWS", "2")],
    },
    Variant {
        name: "matvec_cpu_q4_0",
        source: "matmul_cpu.comp",
        defines: &[("WEIGHT_Q4_0", "1"), ("TOKENS", "1"), ("ROWS", "1")],
    },
    Variant {
        name: "matvec_cpu_q4_1",
        source: "matmul_cpu.comp",
        defines: &[("WEIGHT_Q4_1", "1"), ("TOKENS", "1"), ("ROWS", "1")],
    },
    Variant {
        name: "matvec_cpu_q5_0",
        source: "matmul_cpu.comp",
        defines: &[("WEIGHT_Q5_0", "1"), ("TOKENS", "1"), ("ROWS", "1")],
    },
    Variant {
        name: "matvec_cpu_q5_1",
        source: "matmul_cpu.comp",
        defines: &[("WEIGHT_Q5_1", "1"), ("TOKENS", "1"), ("ROWS", "1")],
    },
    Variant {
        name: "matvec_cpu_q8_0",
        source: "matmul_cpu.comp",
        defines: &[("WEIGHT_Q8_0", "1"), ("TOKENS", "1"), ("ROWS", "1")],
    },
    Variant {
        name: "matvec_cpu_q2_k",
        source: "matmul_cpu.comp",
        defines: &[("WEIGHT_Q2_K", "1"), ("TOKENS", "1"), ("ROWS", "1")],
    },
    Variant {
        name: "matvec_cpu_q3_k",
        source: "matmul_cpu.comp",
        defines: &[("WEIGHT_Q3_K", "1"), ("TOKENS", "1"), ("ROWS", "1")],
    },
    Variant {
        name: "matvec_cpu_q4_k",
        source: "matmul_cpu.comp",
        defines: &[("WEIGHT_Q4_K", "1"), ("TOKENS", "1"), ("ROWS", "1")],
    },
    Variant {
        name: "matvec_cpu_q5_k",
        source: "matmul_cpu.comp",
        defines: &[("WEIGHT_Q5_K", "1"), ("TOKENS", "1"), ("ROWS", "1")],
    },
    Variant {
        name: "matvec_cpu_q6_k",
        source: "matmul_cpu.comp",
        defines: &[("WEIGHT_Q6_K", "1"), ("TOKENS", "1"), ("ROWS", "1")],
    },
    Variant {
        name: "matmul_cpu_f32",
        source: "matmul_cpu.comp",
        defines: &[("WEIGHT_F32", "1"), ("TOKENS", "4"), ("ROWS", "8")],
    },
    Variant {
        name: "matmul_cpu_f16",
        source: "matmul_cpu.comp",
        defines: &[("WEIGHT_F16", "1"), ("TOKENS", "4"), ("ROWS", "8")],
    },
    Variant {
        name: "matmul_cpu_bf16",
        source: "matmul_cpu.comp",
        defines: &[("WEIGHT_BF16", "1"), ("TOKENS", "4"), ("ROWS", "8")],
    },
    Variant {
        name: "matmul_cpu_q4_0",
        source: "matmul_cpu.comp",
        defines: &[("WEIGHT_Q4_0", "1"), ("TOKENS", "4"), ("ROWS", "8")],
    },
    Variant {
        name: "matmul_cpu_q4_1",
        source: "matmul_cpu.comp",
        defines: &[("WEIGHT_Q4_1", "1"), ("TOKENS", "4"), ("ROWS", "8")],
    },
    Variant {
        name: "matmul_cpu_q5_0",
        source: "matmul_cpu.comp",
        defines: &[("WEIGHT_Q5_0", "1"), ("TOKENS", "4"), ("ROWS", "8")],
    },
    Variant {
        name: "matmul_cpu_q5_1",
        source: "matmul_cpu.comp",
        defines: &[("WEIGHT_Q5_1", "1"), ("TOKENS", "4"), ("ROWS", "8")],
    },
    Variant {
        name: "matmul_cpu_q8_0",
        source: "matmul_cpu.comp",
        defines: &[("WEIGHT_Q8_0", "1"), ("TOKENS", "4"), ("ROWS", "8")],
    },
    Variant {
        name: "matmul_cpu_q2_k",
        source: "matmul_cpu.comp",
        defines: &[("WEIGHT_Q2_K", "1"), ("TOKENS", "4"), ("ROWS", "8")],
    },
    Variant {
        name: "matmul_cpu_q3_k",
        source: "matmul_cpu.comp",
        defines: &[("WEIGHT_Q3_K", "1"), ("TOKENS", "4"), ("ROWS", "8")],
    },
    Variant {
        name: "matmul_cpu_q4_k",
        source: "matmul_cpu.comp",
        defines: &[("WEIGHT_Q4_K", "1"), ("TOKENS", "4"), ("ROWS", "8")],
    },
    Variant {
        name: "matmul_cpu_q5_k",
        source: "matmul_cpu.comp",
        defines: &[("WEIGHT_Q5_K", "1"), ("TOKENS", "4"), ("ROWS", "8")],
    },
    Variant {
        name: "matmul_cpu_q6_k",
        source: "matmul_cpu.comp",
        defines: &[("WEIGHT_Q6_K", "1"), ("TOKENS", "4"), ("ROWS", "8")],
    },
    // The same products routed by expert ids (ggml mul_mat_id; MATMUL_ID in
    // matvec.comp, matmul.comp and matmul_cpu.comp), with the same ROWS and
    // TOKENS as the plain ones.
    Variant {
        name: "matvec_id_f32",
        source: "matvec.comp",
        defines: &[("WEIGHT_F32", "1"), ("MATMUL_ID", "1")],
    },
    Variant {
        name: "matvec_id_f16",
        source: "matvec.comp",
        defines: &[("WEIGHT_F16", "1"), ("MATMUL_ID", "1")],
    },
    Variant {
        name: "matvec_id_bf16",
        source: "matvec.comp",
        defines: &[("WEIGHT_BF16", "1"), ("MATMUL_ID", "1")],
    },
    Variant {
        name: "matvec_id_q4_0",
        source: "matvec.comp",
        defines: &[("WEIGHT_Q4_0", "1"), ("MATMUL_ID", "1")],
    },
    Variant {
        name: "matvec_id_q4_1",
        source: "matvec.comp",
        defines: &[("WEIGHT_Q4_1", "1"), ("MATMUL_ID", "1")],
    },
    Variant {
        name: "matvec_id_q5_0",
        source: "matvec.comp",
        defines: &[("WEIGHT_Q5_0", "1"), ("MATMUL_ID", "1")],
    },
    Variant {
        name: "matvec_id_q5_1",
        source: "matvec.comp",
        defines: &[("WEIGHT_Q5_1", "1"), ("MATMUL_ID", "1")],
    },
    Variant {
        name: "matvec_id_q8_0",
        source: "matvec.comp",
        defines: &[("WEIGHT_Q8_0", "1"), ("MATMUL_ID", "1")],
    },
    Variant {
        name: "matvec_id_q2_k",
        source: "matvec.comp",
        defines: &[("WEIGHT_Q2_K", "1"), ("MATMUL_ID", "1")],
    },
    Variant {
        name: "matvec_id_q3_k",
        source: "matvec.comp",
        defines: &[("WEIGHT_Q3_K", "1"), ("MATMUL_ID", "1")],
    },
    Variant {
        name: "matvec_id_q4_k",
        source: "matvec.comp",
        defines: &[("WEIGHT_Q4_K", "1"), ("MATMUL_ID", "1")],
    },
    Variant {
        name: "matvec_id_q5_k",
        source: "matvec.comp",
        defines: &[("WEIGHT_Q5_K", "1"), ("MATMUL_ID", "1")],
    },
    Variant {
        name: "matvec_id_q6_k",
        source: "matvec.comp",
        defines: &[("WEIGHT_Q6_K", "1"), ("MATMUL_ID", "1")],
    },
    Variant {
        name: "matmul_id_f32",
        source: "matmul.comp",
        defines: &[("WEIGHT_F32", "1"), ("MATMUL_ID", "1")],
    },
    Variant {
        name: "matmul_id_f16",
        source: "matmul.comp",
        defines: &[("WEIGHT_F16", "1"), ("MATMUL_ID", "1")],
    },
    Variant {
        name: "matmul_id_bf16",
        source: "matmul.comp",
        defines: &[("WEIGHT_BF16", "1"), ("MATMUL_ID", "1")],
    },
    Variant {
        name: "matmul_id_q4_0",
        source: "matmul.comp",
        defines: &[("WEIGHT_Q4_0", "1"), ("MATMUL_ID", "1")],
    },
    Variant {
        name: "matmul_id_q4_1",
        source: "matmul.comp",
        defines: &[("WEIGHT_Q4_1", "1"), ("MATMUL_ID", "1")],
    },
    Variant {
        name: "matmul_id_q5_0",
        source: "matmul.comp",
        defines: &[("WEIGHT_Q5_0", "1"), ("MATMUL_ID", "1")],
    },
    Variant {
        name: "matmul_id_q5_1",
        source: "matmul.comp",
        defines: &[("WEIGHT_Q5_1", "1"), ("MATMUL_ID", "1")],
    },
    Variant {
        name: "matmul_id_q8_0",
        source: "matmul.comp",
        defines: &[("WEIGHT_Q8_0", "1"), ("MATMUL_ID", "1")],
    },
    Variant {
        name: "matmul_id_q2_k",
        source: "matmul.comp",
        defines: &[("WEIGHT_Q2_K", "1"), ("MATMUL_ID", "1")],
    },
    Variant {
        name: "matmul_id_q3_k",
        source: "matmul.comp",
        defines: &[("WEIGHT_Q3_K", "1"), ("MATMUL_ID", "1")],
    },
    Variant {
        name: "matmul_id_q4_k",
        source: "matmul.comp",
        defines: &[("WEIGHT_Q4_K", "1"), ("MATMUL_ID", "1")],
    },
    Variant {
        name: "matmul_id_q5_k",
        source: "matmul.comp",
        defines: &[("WEIGHT_Q5_K", "1"), ("MATMUL_ID", "1")],
    },
    Variant {
        name: "matmul_id_q6_k",
        source: "matmul.comp",
        defines: &[("WEIGHT_Q6_K", "1"), ("MATMUL_ID", "1")],
    },
    Variant {
        name: "matvec_cpu_id_f32",
        source: "matmul_cpu.comp",
        defines: &[
            ("WEIGHT_F32", "1"),
            ("TOKENS", "1"),
            ("ROWS", "2"),
            ("MATMUL_ID", "1"),
        ],
    },
    Variant {
        name: "matvec_cpu_id_f16",
        source: "matmul_cpu.comp",
        defines: &[
            ("WEIGHT_F16", "1"),
            ("TOKENS", "1"),
            ("ROWS", "2"),
            ("MATMUL_ID", "1"),
        ],
    },
    Variant {
        name: "matvec_cpu_id_bf16",
        source: "matmul_cpu.comp",
        defines: &[
            ("WEIGHT_BF16", "1"),
            ("TOKENS", "1"),
            ("ROWS", "2"),
            ("MATMUL_ID", "1"),
        ],
    },
    Variant {
        name: "matvec_cpu_id_q4_0",
        source: "matmul_cpu.comp",
        defines: &[
            ("WEIGHT_Q4_0", "1"),
            ("TOKENS", "1"),
            ("ROWS", "1"),
            ("MATMUL_ID", "1"),
        ],
    },
    Variant {
        name: "matvec_cpu_id_q4_1",
        source: "matmul_cpu.comp",
        defines: &[
            ("WEIGHT_Q4_1", "1"),
            ("TOKENS", "1"),
            ("ROWS", "1"),
            ("MATMUL_ID", "1"),
        ],
    },
    Variant {
        name: "matvec_cpu_id_q5_0",
        source: "matmul_cpu.comp",
        defines: &[
            ("WEIGHT_Q5_0", "1"),
            ("TOKENS", "1"),
            ("ROWS", "1"),
            ("MATMUL_ID", "1"),
        ],
    },
    Variant {
        name: "matvec_cpu_id_q5_1",
        source: "matmul_cpu.comp",
        defines: &[
            ("WEIGHT_Q5_1", "1"),
            ("TOKENS", "1"),
            ("ROWS", "1"),
            ("MATMUL_ID", "1"),
        ],
    },
    Variant {
        name: "matvec_cpu_id_q8_0",
        source: "matmul_cpu.comp",
        defines: &[
            ("WEIGHT_Q8_0", "1"),
            ("TOKENS", "1"),
            ("ROWS", "1"),
            ("MATMUL_ID", "1"),
        ],
    },
    Variant {
        name: "matvec_cpu_id_q2_k",
        source: "matmul_cpu.comp",
        defines: &[
            ("WEIGHT_Q2_K", "1"),
            ("TOKENS", "1"),
            ("ROWS", "1"),
            ("MATMUL_ID", "1"),
        ],
    },
    Variant {
        name: "matvec_cpu_id_q3_k",
        source: "matmul_cpu.comp",
        defines: &[
            ("WEIGHT_Q3_K", "1"),
            ("TOKENS", "1"),
            ("ROWS", "1"),
            ("MATMUL_ID", "1"),
        ],
    },
    Variant {
        name: "matvec_cpu_id_q4_k",
        source: "matmul_cpu.comp",
        defines: &[
            ("WEIGHT_Q4_K", "1"),
            ("TOKENS", "1"),
            ("ROWS", "1"),
            ("MATMUL_ID", "1"),
        ],
    },
    Variant {
        name: "matvec_cpu_id_q5_k",
        source: "matmul_cpu.comp",
        defines: &[
            ("WEIGHT_Q5_K", "1"),
            ("TOKENS", "1"),
            ("ROWS", "1"),
            ("MATMUL_ID", "1"),
        ],
    },
    Variant {
        name: "matvec_cpu_id_q6_k",
        source: "matmul_cpu.comp",
        defines: &[
            ("WEIGHT_Q6_K", "1"),
            ("TOKENS", "1"),
            ("ROWS", "1"),
            ("MATMUL_ID", "1"),
        ],
    },
    Variant {
        name: "matmul_cpu_id_f32",
        source: "matmul_cpu.comp",
        defines: &[
            ("WEIGHT_F32", "1"),
            ("TOKENS", "4"),
            ("ROWS", "8"),
            ("MATMUL_ID", "1"),
        ],
    },
    Variant {
        name: "matmul_cpu_id_f16",
        source: "matmul_cpu.comp",
        defines: &[
            ("WEIGHT_F16", "1"),
            ("TOKENS", "4"),
            ("ROWS", "8"),
            ("MATMUL_ID", "1"),
        ],
    },
    Variant {
        name: "matmul_cpu_id_bf16",
        source: "matmul_cpu.comp",
        defines: &[
            ("WEIGHT_BF16", "1"),
            ("TOKENS", "4"),
            ("ROWS", "8"),
            ("MATMUL_ID", "1"),
        ],
    },
    Variant {
        name: "matmul_cpu_id_q4_0",
        source: "matmul_cpu.comp",
        defines: &[
            ("WEIGHT_Q4_0", "1"),
            ("TOKENS", "4"),
            ("ROWS", "8"),
            ("MATMUL_ID", "1"),
        ],
    },
    Variant {
        name: "matmul_cpu_id_q4_1",
        source: "matmul_cpu.comp",
        defines: &[
            ("WEIGHT_Q4_1", "1"),
            ("TOKENS", "4"),
            ("ROWS", "8"),
            ("MATMUL_ID", "1"),
        ],
    },
    Variant {
        name: "matmul_cpu_id_q5_0",
        source: "matmul_cpu.comp",
        defines: &[
            ("WEIGHT_Q5_0", "1"),
            ("TOKENS", "4"),
            ("ROWS", "8"),
            ("MATMUL_ID", "1"),
        ],
    },
    Variant {
        name: "matmul_cpu_id_q5_1",
        source: "matmul_cpu.comp",
        defines: &[
            ("WEIGHT_Q5_1", "1"),
            ("TOKENS", "4"),
            ("ROWS", "8"),
            ("MATMUL_ID", "1"),
        ],
    },
    Variant {
        name: "matmul_cpu_id_q8_0",
        source: "matmul_cpu.comp",
        defines: &[
            ("WEIGHT_Q8_0", "1"),
            ("TOKENS", "4"),
            ("ROWS", "8"),
            ("MATMUL_ID", "1"),
        ],
    },
    Variant {
        name: "matmul_cpu_id_q2_k",
        source: "matmul_cpu.comp",
        defines: &[
            ("WEIGHT_Q2_K", "1"),
            ("TOKENS", "4"),
            ("ROWS", "8"),
            ("MATMUL_ID", "1"),
        ],
    },
    Variant {
        name: "matmul_cpu_id_q3_k",
        source: "matmul_cpu.comp",
        defines: &[
            ("WEIGHT_Q3_K", "1"),
            ("TOKENS", "4"),
            ("ROWS", "8"),
            ("MATMUL_ID", "1"),
        ],
    },
    Variant {
        name: "matmul_cpu_id_q4_k",
        source: "matmul_cpu.comp",
        defines: &[
            ("WEIGHT_Q4_K", "1"),
            ("TOKENS", "4"),
            ("ROWS", "8"),
            ("MATMUL_ID", "1"),
        ],
    },
    Variant {
        name: "matmul_cpu_id_q5_k",
        source: "matmul_cpu.comp",
        defines: &[
            ("WEIGHT_Q5_K", "1"),
            ("TOKENS", "4"),
            ("ROWS", "8"),
            ("MATMUL_ID", "1"),
        ],
    },
    Variant {
        name: "matmul_cpu_id_q6_k",
        source: "matmul_cpu.comp",
        defines: &[
            ("WEIGHT_Q6_K", "1"),
            ("TOKENS", "4"),
            ("ROWS", "8"),
            ("MATMUL_ID", "1"),
        ],
    },
    Variant {
        name: "get_rows_f32",
        source: "get_rows.comp",
        defines: &[("WEIGHT_F32", "1")],
    },
    Variant {
        name: "get_rows_f16",
        source: "get_rows.comp",
        defines: &[("WEIGHT_F16", "1")],
    },
    Variant {
        name: "get_rows_bf16",
        source: "get_rows.comp",
        defines: &[("WEIGHT_BF16", "1")],
    },
    Variant {
        name: "get_rows_q4_0",
        source: "get_rows.comp",
        defines: &[("WEIGHT_Q4_0", "1")],
    },
    Variant {
        name: "get_rows_q4_1",
        source: "get_rows.comp",
        defines: &[("WEIGHT_Q4_1", "1")],
    },
    Variant {
        name: "get_rows_q5_0",
        source: "get_rows.comp",
        defines: &[("WEIGHT_Q5_0", "1")],
    },
    Variant {
        name: "get_rows_q5_1",
        source: "get_rows.comp",
        defines: &[("WEIGHT_Q5_1", "1")],
    },
    Variant {
        name: "get_rows_q8_0",
        source: "get_rows.comp",
        defines: &[("WEIGHT_Q8_0", "1")],
    },
    Variant {
        name: "get_rows_q2_k",
        source: "get_rows.comp",
        defines: &[("WEIGHT_Q2_K", "1")],
    },
    Variant {
        name: "get_rows_q3_k",
        source: "get_rows.comp",
        defines: &[("WEIGHT_Q3_K", "1")],
    },
    Variant {
        name: "get_rows_q4_k",
        source: "get_rows.comp",
        defines: &[("WEIGHT_Q4_K", "1")],
    },
    Variant {
        name: "get_rows_q5_k",
        source: "get_rows.comp",
        defines: &[("WEIGHT_Q5_K", "1")],
    },
    Variant {
        name: "get_rows_q6_k",
        source: "get_rows.comp",
        defines: &[("WEIGHT_Q6_K", "1")],
    },
    Variant {
        name: "attention_f32",
        source: "attention.comp",
        defines: &[],
    },
    Variant {
        name: "attention_f16",
        source: "attention.comp",
        defines: &[("KV_F16", "1")],
    },
];

/// The Vulkan version the SPIR-V targets (SPIR-V 1.5). The context requires a
/// device of at least this version.
const TARGET_VULKAN: shaderc::EnvVersion = shaderc::EnvVersion::Vulkan1_2;

fn main() {
    if let Err(message) = run() {
        // A plain message (not a panic) so that shaderc's diagnostics read as they are.
        eprintln!("error: {message}");
        std::process::exit(1);
    }
}

struct Owned {
    name: String,
    source: String,
    defines: Vec<(String, String)>,
}

fn run() -> Result<(), String> {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").map_err(|e| e.to_string())?);
    let root = manifest
        .parent()
        .ok_or("engine crate has no parent folder")?
        .to_path_buf();
    let shader_dir = root.join("shaders");
    let common_dir = shader_dir.join("common");
    let out_dir = PathBuf::from(env::var("OUT_DIR").map_err(|e| e.to_string())?);
    let spv_dir = out_dir.join("shaders");
    fs::create_dir_all(&spv_dir).map_err(|e| format!("{}: {e}", spv_dir.display()))?;
    let big_endian = env::var("CARGO_CFG_TARGET_ENDIAN").as_deref() == Ok("big");

    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={}", shader_dir.display());
    for file in files_under(&shader_dir)? {
        println!("cargo:rerun-if-changed={}", file.display());
    }

    // Every .comp in shaders/ (not in common/), sorted for a stable table.
    let mut comp_files = BTreeSet::new();
    for entry in fs::read_dir(&shader_dir).map_err(|e| format!("{}: {e}", shader_dir.display()))? {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.is_file() && path.extension().is_some_and(|x| x == "comp") {
            let file = path
                .file_name()
                .and_then(|n| n.to_str())
                .ok_or("non-UTF-8 shader file name")?;
            comp_files.insert(file.to_string());
        }
    }

    let mut variants: Vec<Owned> = Vec::new();
    for v in VARIANTS {
        if !comp_files.contains(v.source) {
            return Err(format!(
                "shader variant `{}` names shaders/{}, which does not exist",
                v.name, v.source
            ));
        }
        variants.push(Owned {
            name: v.name.to_string(),
            source: v.source.to_string(),
            defines: v
                .defines
                .iter()
                .map(|(k, x)| (k.to_string(), x.to_string()))
                .collect(),
        });
    }
    for file in &comp_files {
        if !VARIANTS.iter().any(|v| v.source == file) {
            let stem = file.trim_end_matches(".comp").to_string();
            variants.push(Owned {
                name: stem,
                source: file.clone(),
                defines: Vec::new(),
            });
        }
    }
    let mut seen = BTreeSet::new();
    for v in &variants {
        let valid = !v.name.is_empty()
            && v.name.starts_with(|c: char| c.is_ascii_lowercase())
            && v.name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !valid {
            return Err(format!(
                "shader name `{}` (from {}) must be a lower-case identifier",
                v.name, v.source
            ));
        }
        if !seen.insert(v.name.clone()) {
            return Err(format!("two shader variants are named `{}`", v.name));
        }
    }

    let compiler = shaderc::Compiler::new().map_err(|e| format!("shaderc: {e}"))?;
    let mut table = String::new();
    table.push_str("// @generated by engine/build.rs from shaders/; do not edit.\n\n");
    let mut all = Vec::new();
    for (index, v) in variants.iter().enumerate() {
        let source_path = shader_dir.join(&v.source);
        let text = fs::read_to_string(&source_path)
            .map_err(|e| format!("{}: {e}", source_path.display()))?;
        let mut options = shaderc::CompileOptions::new().map_err(|e| format!("shaderc: {e}"))?;
        options.set_source_language(shaderc::SourceLanguage::GLSL);
        options.set_target_env(shaderc::TargetEnv::Vulkan, TARGET_VULKAN as u32);
        options.set_optimization_level(shaderc::OptimizationLevel::Performance);
        options.set_warnings_as_errors();
        for (key, value) in &v.defines {
            options.add_macro_definition(key, Some(value));
        }
        let root_for_includes = root.clone();
        let common_for_includes = common_dir.clone();
        options.set_include_callback(move |requested, kind, requesting, _depth| {
            resolve_include(
                &root_for_includes,
                &common_for_includes,
                requested,
                kind,
                requesting,
            )
        });
        let display_name = format!("shaders/{}", v.source);
        let artifact = compiler
            .compile_into_spirv(
                &text,
                shaderc::ShaderKind::Compute,
                &display_name,
                "main",
                Some(&options),
            )
            .map_err(|e| {
                format!(
                    "shader `{}` ({display_name}) failed to compile: {e}",
                    v.name
                )
            })?;
        let words = artifact.as_binary();
        let info =
            reflect(words).map_err(|e| format!("shader `{}` ({display_name}): {e}", v.name))?;

        let mut bytes = Vec::with_capacity(words.len() * 4);
        for w in words {
            bytes.extend_from_slice(&if big_endian {
                w.to_be_bytes()
            } else {
                w.to_le_bytes()
            });
        }
        let spv_name = format!("{}.spv", v.name);
        let spv_path = spv_dir.join(&spv_name);
        write_if_changed(&spv_path, &bytes)?;

        let upper = v.name.to_ascii_uppercase();
        let defines: Vec<String> = v
            .defines
            .iter()
            .map(|(k, x)| format!("({k:?}, {x:?})"))
            .collect();
        let bindings: Vec<&str> = info
            .bindings
            .iter()
            .map(|b| match b {
                Access::Unused => "BindingAccess::Unused",
                Access::Read => "BindingAccess::Read",
                Access::Write => "BindingAccess::Write",
                Access::ReadWrite => "BindingAccess::ReadWrite",
            })
            .collect();
        let [lx, ly, lz] = info.local_size;
        writeln!(
            table,
            "/// `{name}`: compiled from `shaders/{source}`.\n\
             pub const {upper}: Shader = Shader {{\n    \
                 index: {index},\n    \
                 name: {name:?},\n    \
                 source: {source:?},\n    \
                 defines: &[{defines}],\n    \
                 words: || {{\n        \
                     static BYTES: SpirvBytes<{len}> =\n            \
                         SpirvBytes(*include_bytes!(concat!(env!(\"OUT_DIR\"), \"/shaders/{spv_name}\")));\n        \
                     BYTES.words()\n    \
                 }},\n    \
                 bindings: &[{bindings}],\n    \
                 push_constant_size: {push},\n    \
                 local_size: [{lx}, {ly}, {lz}],\n\
             }};\n",
            name = v.name,
            source = v.source,
            defines = defines.join(", "),
            len = bytes.len(),
            bindings = bindings.join(", "),
            push = info.push_constant_size,
        )
        .map_err(|e| e.to_string())?;
        all.push(upper);
    }
    writeln!(
        table,
        "/// Every compiled shader, in index order.\npub const ALL: &[Shader] = &[{}];",
        all.join(", ")
    )
    .map_err(|e| e.to_string())?;
    write_if_changed(&out_dir.join("shaders.rs"), table.as_bytes())
}

fn resolve_include(
    root: &Path,
    common: &Path,
    requested: &str,
    kind: shaderc::IncludeType,
    requesting: &str,
) -> shaderc::IncludeCallbackResult {
    let mut candidates = Vec::new();
    if kind == shaderc::IncludeType::Relative {
        if let Some(dir) = root.join(requesting).parent() {
            candidates.push(dir.join(requested));
        }
    }
    candidates.push(common.join(requested));
    for path in candidates {
        if path.is_file() {
            let content =
                fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let resolved_name = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .to_string_lossy()
                .into_owned();
            return Ok(shaderc::ResolvedInclude {
                resolved_name,
                content,
            });
        }
    }
    Err(format!(
        "cannot find include `{requested}` (looked next to {requesting} and in shaders/common/)"
    ))
}

fn files_under(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).map_err(|e| format!("{}: {e}", d.display()))? {
            let path = entry.map_err(|e| e.to_string())?.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Writing only on change keeps the engine crate from recompiling when a shader
/// edit does not change its SPIR-V.
fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<(), String> {
    if fs::read(path).ok().as_deref() == Some(bytes) {
        return Ok(());
    }
    fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))
}

// ---------------------------------------------------------------------------
// Minimal SPIR-V reflection (only what the pipeline layout needs).

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Access {
    Unused,
    Read,
    Write,
    ReadWrite,
}

struct Reflection {
    /// Indexed by binding number in set 0.
    bindings: Vec<Access>,
    push_constant_size: u32,
    local_size: [u32; 3],
}

enum Type {
    Scalar(u32),
    Vector(u32, u32),
    Array { len_id: u32 },
    RuntimeArray,
    Struct(Vec<u32>),
    Other,
}

const OP_EXECUTION_MODE: u32 = 16;
const OP_TYPE_BOOL: u32 = 20;
const OP_TYPE_INT: u32 = 21;
const OP_TYPE_FLOAT: u32 = 22;
const OP_TYPE_VECTOR: u32 = 23;
const OP_TYPE_ARRAY: u32 = 28;
const OP_TYPE_RUNTIME_ARRAY: u32 = 29;
const OP_TYPE_STRUCT: u32 = 30;
const OP_TYPE_POINTER: u32 = 32;
const OP_CONSTANT: u32 = 43;
const OP_VARIABLE: u32 = 59;
const OP_DECORATE: u32 = 71;
const OP_MEMBER_DECORATE: u32 = 72;
const OP_EXECUTION_MODE_ID: u32 = 331;

const MODE_LOCAL_SIZE: u32 = 17;
const MODE_LOCAL_SIZE_ID: u32 = 38;

const DEC_BUFFER_BLOCK: u32 = 3;
const DEC_ARRAY_STRIDE: u32 = 6;
const DEC_NON_WRITABLE: u32 = 24;
const DEC_NON_READABLE: u32 = 25;
const DEC_BINDING: u32 = 33;
const DEC_DESCRIPTOR_SET: u32 = 34;
const DEC_OFFSET: u32 = 35;

const SC_UNIFORM_CONSTANT: u32 = 0;
const SC_UNIFORM: u32 = 2;
const SC_PUSH_CONSTANT: u32 = 9;
const SC_STORAGE_BUFFER: u32 = 12;

fn reflect(words: &[u32]) -> Result<Reflection, String> {
    if words.len() < 5 || words[0] != 0x0723_0203 {
        return Err("not SPIR-V (bad magic number)".into());
    }
    let mut types: HashMap<u32, Type> = HashMap::new();
    let mut pointers: HashMap<u32, (u32, u32)> = HashMap::new(); // id -> (storage class, pointee)
    let mut constants: HashMap<u32, u32> = HashMap::new();
    let mut variables: Vec<(u32, u32, u32)> = Vec::new(); // (id, pointer type, storage class)
    let mut decorations: HashMap<(u32, u32), Vec<u32>> = HashMap::new(); // (id, decoration) -> literals
    let mut member_decorations: HashMap<(u32, u32, u32), Vec<u32>> = HashMap::new(); // (struct, member, decoration)
    let mut local_size = None;

    let mut at = 5;
    while at < words.len() {
        let count = (words[at] >> 16) as usize;
        let op = words[at] & 0xffff;
        if count == 0 || at + count > words.len() {
            return Err("malformed SPIR-V instruction stream".into());
        }
        let w = &words[at + 1..at + count];
        match op {
            OP_EXECUTION_MODE if w.len() >= 5 && w[1] == MODE_LOCAL_SIZE => {
                local_size = Some([w[2], w[3], w[4]])
            }
            OP_EXECUTION_MODE_ID if w.len() >= 2 && w[1] == MODE_LOCAL_SIZE_ID => {
                return Err(
                    "LocalSizeId (workgroup size from specialization constants) is not supported"
                        .into(),
                )
            }
            OP_TYPE_BOOL => {
                types.insert(w[0], Type::Other);
            }
            OP_TYPE_INT | OP_TYPE_FLOAT => {
                types.insert(w[0], Type::Scalar(w[1] / 8));
            }
            OP_TYPE_VECTOR => {
                types.insert(w[0], Type::Vector(w[1], w[2]));
            }
            OP_TYPE_ARRAY => {
                types.insert(w[0], Type::Array { len_id: w[2] });
            }
            OP_TYPE_RUNTIME_ARRAY => {
                types.insert(w[0], Type::RuntimeArray);
            }
            OP_TYPE_STRUCT => {
                types.insert(w[0], Type::Struct(w[1..].to_vec()));
            }
            OP_TYPE_POINTER => {
                pointers.insert(w[0], (w[1], w[2]));
            }
            OP_CONSTANT if w.len() >= 3 => {
                constants.insert(w[1], w[2]);
            }
            OP_VARIABLE => variables.push((w[1], w[0], w[2])),
            OP_DECORATE if w.len() >= 2 => {
                decorations.insert((w[0], w[1]), w[2..].to_vec());
            }
            OP_MEMBER_DECORATE if w.len() >= 3 => {
                member_decorations.insert((w[0], w[1], w[2]), w[3..].to_vec());
            }
            _ => {}
        }
        at += count;
    }

    let mut bindings: BTreeMap<u32, Access> = BTreeMap::new();
    let mut push_constant_size = 0;
    for &(id, pointer, class) in &variables {
        let Some(&(_, pointee)) = pointers.get(&pointer) else {
            return Err(format!("variable %{id} has no pointer type"));
        };
        match class {
            SC_PUSH_CONSTANT => {
                push_constant_size = size_of_type(
                    pointee,
                    &types,
                    &constants,
                    &decorations,
                    &member_decorations,
                )?
            }
            SC_STORAGE_BUFFER | SC_UNIFORM | SC_UNIFORM_CONSTANT => {
                let set = decorations
                    .get(&(id, DEC_DESCRIPTOR_SET))
                    .and_then(|l| l.first().copied());
                let binding = decorations
                    .get(&(id, DEC_BINDING))
                    .and_then(|l| l.first().copied());
                let (Some(set), Some(binding)) = (set, binding) else {
                    return Err(format!("resource %{id} lacks an explicit set/binding"));
                };
                let is_storage = class == SC_STORAGE_BUFFER
                    || (class == SC_UNIFORM
                        && decorations.contains_key(&(pointee, DEC_BUFFER_BLOCK)));
                if !is_storage {
                    return Err(format!(
                        "binding {binding}: only storage buffers are supported"
                    ));
                }
                if set != 0 {
                    return Err(format!(
                        "binding {binding} is in set {set}; only set 0 is supported"
                    ));
                }
                let members = match types.get(&pointee) {
                    Some(Type::Struct(m)) => m.len() as u32,
                    _ => 0,
                };
                let all_members = |dec: u32| {
                    decorations.contains_key(&(id, dec))
                        || (members > 0
                            && (0..members)
                                .all(|m| member_decorations.contains_key(&(pointee, m, dec))))
                };
                let access = match (all_members(DEC_NON_WRITABLE), all_members(DEC_NON_READABLE)) {
                    (true, false) => Access::Read,
                    (false, true) => Access::Write,
                    (false, false) => Access::ReadWrite,
                    (true, true) => Access::Unused,
                };
                if bindings.insert(binding, access).is_some() {
                    return Err(format!("binding {binding} is declared twice"));
                }
            }
            _ => {}
        }
    }
    let count = bindings.keys().next_back().map_or(0, |b| b + 1);
    let bindings = (0..count)
        .map(|b| bindings.get(&b).copied().unwrap_or(Access::Unused))
        .collect();
    let local_size =
        local_size.ok_or("no LocalSize execution mode (layout(local_size_x = ...) in;)")?;
    Ok(Reflection {
        bindings,
        push_constant_size: push_constant_size.div_ceil(4) * 4,
        local_size,
    })
}

/// Bytes a push-constant type occupies: the end of its last member (std430 offsets
/// come from the Offset decorations).
fn size_of_type(
    id: u32,
    types: &HashMap<u32, Type>,
    constants: &HashMap<u32, u32>,
    decorations: &HashMap<(u32, u32), Vec<u32>>,
    member_decorations: &HashMap<(u32, u32, u32), Vec<u32>>,
) -> Result<u32, String> {
    match types.get(&id) {
        Some(Type::Scalar(bytes)) => Ok(*bytes),
        Some(Type::Vector(elem, n)) => {
            Ok(n * size_of_type(*elem, types, constants, decorations, member_decorations)?)
        }
        Some(Type::Array { len_id, .. }) => {
            let len = constants
                .get(len_id)
                .ok_or("array length is not a plain constant")?;
            let stride = decorations
                .get(&(id, DEC_ARRAY_STRIDE))
                .and_then(|l| l.first())
                .ok_or("array without ArrayStride")?;
            Ok(len * stride)
        }
        Some(Type::Struct(members)) => {
            let mut end = 0;
            for (i, &member) in members.iter().enumerate() {
                let offset = member_decorations
                    .get(&(id, i as u32, DEC_OFFSET))
                    .and_then(|l| l.first().copied())
                    .ok_or("struct member without Offset")?;
                end = end.max(
                    offset
                        + size_of_type(member, types, constants, decorations, member_decorations)?,
                );
            }
            Ok(end)
        }
        Some(Type::RuntimeArray) => Err("runtime array in a push-constant block".into()),
        Some(Type::Other) | None => Err(format!("unsupported type %{id} in a push-constant block")),
    }
}

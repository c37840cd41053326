//! The shader variants engine/build.rs compiles, generated as the product of
//! axes, as ggml's vulkan-shaders-gen loops over (op, type): each kernel
//! [`Family`] names the axes it varies over, and [`listed`] writes out one
//! variant per point of their product:
//!
//! - the weight type ([`WEIGHT_TYPES`], `WEIGHT_{TYPE}` plus the family's
//!   per-type defines; all of them or those its filter keeps);
//! - the KV cache type ([`KV_TYPES`]: `{kv}` in the family's name, its
//!   define selecting its branch of `shaders/common/kv.glsl`);
//! - the activation format a kernel quantizes into ([`Act`]);
//! - plain or subgroup (`_sg`: `SG_RED`, the reductions' steps within a
//!   subgroup in shuffles);
//! - a fault of the `fault-injection` feature ([`Fault`]), compiled only
//!   with it.
//!
//! A variant's name is the family's, `{kv}` replaced by the KV type, then
//! `_{act}`, `_sg`, `_{weight type}` and `_{fault}` for the axes it has. A
//! `.comp` file named by no family is compiled once under its file stem.

use crate::ggml_type::{GgmlType, WEIGHT_TYPES};
use crate::kv_type::{KvType, KV_TYPES};

/// One compiled shader: `name` is the Rust-side name (a lower-case
/// identifier), `source` a file in `shaders/`, `defines` the macros set for
/// this variant. `by_type` and `by_kv`: the arrays of `shaders::by_type` /
/// `shaders::by_kv` that hold it (fault variants are in neither).
pub struct Variant {
    pub name: String,
    pub source: String,
    pub defines: Vec<(String, String)>,
    pub by_type: Option<Grouped>,
    pub by_kv: Option<Grouped>,
}

/// A variant's place in an array of its family, indexed by one axis.
pub struct Grouped {
    /// The array's name (the variant's name without that axis).
    pub array: String,
    /// Its index along the axis.
    pub index: usize,
    /// Whether the family has every value of the axis (else the array
    /// holds `Option`s).
    pub whole: bool,
}

type Defines = &'static [(&'static str, &'static str)];

/// An activation format a kernel writes (ggml's vec_dot_type).
#[derive(Clone, Copy)]
pub struct Act {
    name: &'static str,
    define: &'static str,
    /// Whether its block scale is an f16 (the `f16trunc` fault's target).
    f16_scale: bool,
}

pub const Q8_0: Act = Act {
    name: "q8_0",
    define: "ACT_Q8_0",
    f16_scale: true,
};
pub const Q8_1: Act = Act {
    name: "q8_1",
    define: "ACT_Q8_1",
    f16_scale: true,
};
pub const Q8_K: Act = Act {
    name: "q8_k",
    define: "ACT_Q8_K",
    f16_scale: false,
};

/// A fault of engine/src/fault.rs compiled into a twin of the kernels it
/// breaks (only with the `fault-injection` feature: normal builds carry
/// none of them).
#[derive(Clone, Copy)]
pub struct Fault {
    suffix: &'static str,
    define: &'static str,
}

/// `gpu-act-f16-truncate`: the activation quantizer's f16 block scale
/// truncated instead of rounded (formats with an f16 scale only).
pub const F16_TRUNC: Fault = Fault {
    suffix: "f16trunc",
    define: "FAULT_F16_TRUNCATE",
};
/// `gpu-softmax-unshifted`: the attention kernels with the running max of
/// their online softmax held at 0 (exp(s) unshifted).
pub const UNSHIFTED: Fault = Fault {
    suffix: "unshifted",
    define: "FAULT_SOFTMAX_UNSHIFTED",
};
/// `gpu-post-norm-add`: the fused post-norm and add adding the unweighted
/// normed value.
pub const UNWEIGHTED: Fault = Fault {
    suffix: "unweighted",
    define: "FAULT_ADD_UNWEIGHTED",
};

/// The weight types a family is compiled for.
#[derive(Clone, Copy)]
pub enum Weights {
    /// None: no weight axis.
    No,
    /// Every weight type (`by_type` arrays of `&Shader`).
    All(fn(GgmlType) -> Vec<(&'static str, &'static str)>),
    /// The types the filter keeps (`by_type` arrays of `Option<&Shader>`).
    Only(
        fn(GgmlType) -> bool,
        fn(GgmlType) -> Vec<(&'static str, &'static str)>,
    ),
}

/// A kernel family: one source with its defines, and its axes.
pub struct Family {
    /// Its name; `{kv}` where the KV type goes (with `kv`).
    pub name: &'static str,
    pub source: &'static str,
    pub defines: Defines,
    pub weights: Weights,
    /// Compiled per KV cache type.
    pub kv: bool,
    /// Compiled per activation format (empty: no such axis).
    pub acts: &'static [Act],
    /// Compiled plain and as the `_sg` twin.
    pub sg: bool,
    /// Its fault twins.
    pub faults: &'static [Fault],
}

/// A family with no axes (set the ones it has with struct update syntax).
pub const ONE: Family = Family {
    name: "",
    source: "",
    defines: &[],
    weights: Weights::No,
    kv: false,
    acts: &[],
    sg: false,
    faults: &[],
};

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

/// The decode kernels with a prologue that computes their activation row
/// (matvec.comp's `PRO_*`, ffn_decode.comp, attention.comp's `OUT_PROJ`):
/// the matvec's rows per workgroup, with the 32-element activation format
/// defined up front (act.glsl's Q8_1 block head reads it; qdot.glsl
/// defines Q8_K's for the super-block types).
fn fused(ty: GgmlType) -> Vec<(&'static str, &'static str)> {
    let act = match ty {
        GgmlType::Q4_1 | GgmlType::Q5_1 => vec![("ACT_Q8_1", "1")],
        t if q8_legacy(t) => vec![("ACT_Q8_0", "1")],
        _ => Vec::new(),
    };
    [gpu_decode(ty), act].concat()
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

fn no_extra(_: GgmlType) -> Vec<(&'static str, &'static str)> {
    Vec::new()
}

/// The products routed by expert ids (ggml mul_mat_id) take `MATMUL_ID` in
/// matvec.comp, matmul.comp and matmul_cpu.comp, with the same ROWS and
/// TOKENS as the plain ones.
const ID: Defines = &[("MATMUL_ID", "1")];

/// The fused decode matvecs (`PRO_*` and `EPI_*` of `shaders/matvec.comp`,
/// fused by engine/src/vulkan/backend/op_matvec_fused.rs), each plain and
/// with its `_sg` twin (`SG_RED`: the same bits, fewer barriers).
const fn fused_matvec(name: &'static str, defines: Defines) -> Family {
    Family {
        name,
        source: "matvec.comp",
        defines,
        weights: Weights::Only(fusable, fused),
        sg: true,
        ..ONE
    }
}

/// Decode attention with the output projection after it and its add
/// (op_attention_oproj.rs), by cache type.
const fn attention_oproj(name: &'static str, defines: Defines) -> Family {
    Family {
        name,
        source: "attention.comp",
        defines,
        weights: Weights::Only(q8_legacy, fused),
        kv: true,
        ..ONE
    }
}

/// An attention kernel per cache type, with its `unshifted` fault twin.
const fn attention(name: &'static str, source: &'static str, defines: Defines) -> Family {
    Family {
        name,
        source,
        defines,
        kv: true,
        faults: &[UNSHIFTED],
        ..ONE
    }
}

const W: (&str, &str) = ("HAS_WEIGHT", "1");
const QUANT: (&str, &str) = ("QUANT", "1");
const ADD: (&str, &str) = ("ADD", "1");

pub const FAMILIES: &[Family] = &[
    Family {
        name: "rms_norm",
        source: "rms_norm.comp",
        ..ONE
    },
    Family {
        name: "rms_norm_w",
        source: "rms_norm.comp",
        defines: &[W],
        ..ONE
    },
    // RMS norm with its weight, also writing the next matmul's quantized
    // input (op_quantize.rs fuses it with the quantization that follows).
    Family {
        name: "rms_norm_w",
        source: "rms_norm.comp",
        defines: &[W, QUANT],
        acts: &[Q8_0, Q8_1],
        faults: &[F16_TRUNC],
        ..ONE
    },
    // The residual add before the norm fused into it (op_elementwise.rs),
    // and with the quantization too.
    Family {
        name: "add_rms_norm_w",
        source: "rms_norm.comp",
        defines: &[W, ADD],
        ..ONE
    },
    Family {
        name: "add_rms_norm_w",
        source: "rms_norm.comp",
        defines: &[W, ADD, QUANT],
        acts: &[Q8_0, Q8_1],
        faults: &[F16_TRUNC],
        ..ONE
    },
    // A post-norm fused with the residual add after it (op_elementwise.rs).
    Family {
        name: "rms_norm_w_add_to",
        source: "rms_norm.comp",
        defines: &[W, ("ADD_TO", "1")],
        faults: &[UNWEIGHTED],
        ..ONE
    },
    attention("attention_{kv}", "attention.comp", &[]),
    // Prefill: sixteen query rows per workgroup (op_attention.rs ROWS). On
    // the H200, SmolLM2 pp512 at depth 2048, t/s: 13,700 with four rows a
    // workgroup (attention.comp RB 4), 19,000-19,200 with these; sixteen
    // rows of 512 invocations 14,100, 32 rows 14,900-15,100, eight rows of
    // 128 19,000-19,200 (synth-qwen3moe 69,700 against 75,700-79,200).
    attention("attention_{kv}_rows", "attention_rows.comp", &[]),
    // Prefill through an f16 cache with cooperative matrices, where the
    // device has them, in runs of keys whose partials
    // attention_combine_rows.comp weighs together (op_attention.rs COOP):
    // head dims up to 64 in tiles of 64 keys, four subgroups (64 rows) a
    // workgroup; up to 128 in tiles of 32, two subgroups (shared memory:
    // 48 KiB at most). On the H200, SmolLM2 pp512 at depth 2048: 30.6-31.0k
    // t/s with four subgroups, 24.8-25.3k with two (115 us a dispatch
    // against 173); twice the workgroups (2,048) no faster.
    Family {
        name: "attention_coop_d64",
        source: "attention_coop.comp",
        defines: &[("MAX_D", "64u"), ("BC", "64u"), ("NSG", "4u")],
        faults: &[UNSHIFTED],
        ..ONE
    },
    Family {
        name: "attention_coop_d128",
        source: "attention_coop.comp",
        defines: &[("MAX_D", "128u"), ("BC", "32u"), ("NSG", "2u")],
        faults: &[UNSHIFTED],
        ..ONE
    },
    attention("attention_{kv}_split", "attention.comp", &[("SPLIT", "1")]),
    attention("attention_cpu_{kv}", "attention_cpu.comp", &[]),
    attention("attention_keys_cpu_{kv}", "attention_keys_cpu.comp", &[]),
    // A gated unit also writing the down projection's quantized input
    // (op_quantize.rs fuses it with the quantization that follows).
    Family {
        name: "glu",
        source: "glu_quant.comp",
        acts: &[Q8_0, Q8_1],
        faults: &[F16_TRUNC],
        ..ONE
    },
    Family {
        name: "kv_write_{kv}",
        source: "kv_write.comp",
        kv: true,
        ..ONE
    },
    Family {
        name: "rope",
        source: "rope.comp",
        ..ONE
    },
    Family {
        name: "norm_rope",
        source: "norm_rope.comp",
        ..ONE
    },
    // RoPE of K fused with its cache write (op_attention.rs).
    Family {
        name: "rope_kv_{kv}",
        source: "rope.comp",
        defines: &[("KV_WRITE", "1")],
        kv: true,
        ..ONE
    },
    // Activations in a weight type's dot format (ggml's vec_dot_type).
    Family {
        name: "quantize",
        source: "quantize_act.comp",
        acts: &[Q8_0, Q8_1, Q8_K],
        faults: &[F16_TRUNC],
        ..ONE
    },
    Family {
        name: "matvec",
        source: "matvec.comp",
        weights: Weights::All(gpu_decode),
        ..ONE
    },
    Family {
        name: "matmul",
        source: "matmul.comp",
        weights: Weights::All(no_extra),
        ..ONE
    },
    // Prefill of the 32-element block types with packed integer dot
    // products (devices with them), tiled through shared memory. The tile
    // measured on the H200 (SmolLM2 Q4_1 pp512, t/s): 32 x 32, 2 x 4 per
    // invocation, 8 blocks a stage 38,900; 64 x 32 36,500; 32 x 64 35,400;
    // 64 x 64 30,400; 128 x 64 20,500 (smaller tiles: more workgroups for
    // these narrow matrices).
    Family {
        name: "matmul_tiled",
        source: "matmul_tiled.comp",
        defines: &[
            ("TM", "32"),
            ("TN", "32"),
            ("RM", "2"),
            ("RT", "4"),
            ("KB", "8"),
        ],
        weights: Weights::Only(q8_legacy, no_extra),
        ..ONE
    },
    // The same for the super-block types summed in eight lanes, 16 rows x
    // 32 tokens, 1 x 4 per invocation (H200, SmolLM2 requantized to
    // Q4_K_M, pp512, us per product: Q6_K 71, Q4_K 44; at 32 x 32 97, 52;
    // the 32-element types' products were slower at 16 x 32).
    Family {
        name: "matmul_tiled_k",
        source: "matmul_tiled_k.comp",
        defines: &[("TM", "16"), ("TN", "32"), ("RM", "1"), ("RT", "4")],
        weights: Weights::Only(k_lanes, no_extra),
        ..ONE
    },
    Family {
        name: "matvec_cpu",
        source: "matmul_cpu.comp",
        weights: Weights::All(cpu_decode),
        ..ONE
    },
    Family {
        name: "matmul_cpu",
        source: "matmul_cpu.comp",
        weights: Weights::All(cpu_prefill),
        ..ONE
    },
    Family {
        name: "matvec_id",
        source: "matvec.comp",
        defines: ID,
        weights: Weights::All(gpu_decode),
        ..ONE
    },
    Family {
        name: "matmul_id",
        source: "matmul.comp",
        defines: ID,
        weights: Weights::All(no_extra),
        ..ONE
    },
    Family {
        name: "matvec_cpu_id",
        source: "matmul_cpu.comp",
        defines: ID,
        weights: Weights::All(cpu_decode),
        ..ONE
    },
    Family {
        name: "matmul_cpu_id",
        source: "matmul_cpu.comp",
        defines: ID,
        weights: Weights::All(cpu_prefill),
        ..ONE
    },
    fused_matvec("matvec_q", &[("PRO_QUANT", "1")]),
    fused_matvec("matvec_q_add", &[("PRO_QUANT", "1"), ("EPI_ADD", "1")]),
    fused_matvec(
        "matvec_q_post",
        &[("PRO_QUANT", "1"), ("EPI_POST_NORM", "1")],
    ),
    fused_matvec("matvec_norm", &[("PRO_NORM", "1")]),
    fused_matvec("matvec_norm_out", &[("PRO_NORM", "1"), ("PRO_OUT", "1")]),
    fused_matvec("matvec_norm_rope", &[("PRO_NORM", "1"), ("EPI_ROPE", "1")]),
    fused_matvec(
        "matvec_norm_out_rope",
        &[("PRO_NORM", "1"), ("PRO_OUT", "1"), ("EPI_ROPE", "1")],
    ),
    fused_matvec(
        "matvec_norm_multi",
        &[
            ("PRO_NORM", "1"),
            ("PRO_OUT", "1"),
            ("EPI_ROPE", "1"),
            ("MULTI", "1"),
        ],
    ),
    fused_matvec(
        "matvec_norm_out_glu",
        &[("PRO_NORM", "1"), ("PRO_OUT", "1"), ("PAIR_GLU", "1")],
    ),
    // A decode step's feed-forward block in one dispatch (norm, gate and
    // up, their unit, the down projection and its add; op_matvec_ffn.rs).
    Family {
        name: "ffn_decode",
        source: "ffn_decode.comp",
        weights: Weights::Only(q8_legacy, fused),
        ..ONE
    },
    attention_oproj("attention_{kv}_oproj", &[("OUT_PROJ", "1")]),
    attention_oproj(
        "attention_{kv}_split_oproj",
        &[("OUT_PROJ", "1"), ("SPLIT", "1")],
    ),
    Family {
        name: "get_rows",
        source: "get_rows.comp",
        weights: Weights::All(no_extra),
        ..ONE
    },
];

/// Lower-case suffix of a type's variants (`q4_k`).
pub fn type_suffix(ty: GgmlType) -> String {
    ty.name().to_ascii_lowercase()
}

/// One point of a family's axes other than the weight type's.
struct Point {
    kv: Option<KvType>,
    act: Option<Act>,
    sg: bool,
    fault: Option<Fault>,
}

impl Family {
    /// The points of its axes other than the weight type, faults last (only
    /// with `faults`).
    fn points(&self, faults: bool) -> Vec<Point> {
        let kvs: Vec<Option<KvType>> = if self.kv {
            KV_TYPES.into_iter().map(Some).collect()
        } else {
            vec![None]
        };
        let acts: Vec<Option<Act>> = if self.acts.is_empty() {
            vec![None]
        } else {
            self.acts.iter().copied().map(Some).collect()
        };
        let sgs: &[bool] = if self.sg { &[false, true] } else { &[false] };
        let fault_axis: Vec<Option<Fault>> = std::iter::once(None)
            .chain(self.faults.iter().copied().filter(|_| faults).map(Some))
            .collect();
        let mut out = Vec::new();
        for &fault in &fault_axis {
            for &sg in sgs {
                for &kv in &kvs {
                    for &act in &acts {
                        // A truncated f16 scale needs a format with one.
                        let applies = match fault {
                            Some(f) if f.define == F16_TRUNC.define => {
                                act.is_some_and(|a| a.f16_scale)
                            }
                            _ => true,
                        };
                        if applies {
                            out.push(Point { kv, act, sg, fault });
                        }
                    }
                }
            }
        }
        out
    }
}

impl Point {
    /// The family's name at this point, with `weight` for the weight
    /// type's place (`None`: left out).
    fn name(&self, family: &str, weight: Option<&str>) -> String {
        let kv = self.kv.map_or("", KvType::name);
        let mut name = family.replace("{kv}", kv);
        if let Some(act) = self.act {
            name = format!("{name}_{}", act.name);
        }
        if self.sg {
            name.push_str("_sg");
        }
        if let Some(w) = weight {
            name = format!("{name}_{w}");
        }
        if let Some(f) = self.fault {
            name = format!("{name}_{}", f.suffix);
        }
        name
    }

    fn defines(&self) -> Vec<(&'static str, &'static str)> {
        let mut out = Vec::new();
        if let Some(act) = self.act {
            out.push((act.define, "1"));
        }
        if let Some(define) = self.kv.and_then(KvType::define) {
            out.push((define, "1"));
        }
        if self.sg {
            out.push(("SG_RED", "1"));
        }
        if let Some(f) = self.fault {
            out.push((f.define, "1"));
        }
        out
    }
}

/// Every variant: each family at every point of its axes (fault twins only
/// with `faults`), in the order of [`FAMILIES`].
pub fn listed(faults: bool) -> Vec<Variant> {
    let owned = |defines: &[(&str, &str)]| -> Vec<(String, String)> {
        defines
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let mut out = Vec::new();
    for family in FAMILIES {
        for point in family.points(faults) {
            let mut defines = owned(family.defines);
            defines.extend(owned(&point.defines()));
            let plain = point.fault.is_none();
            let by_kv = |name: String| {
                point.kv.filter(|_| plain).map(|kv| Grouped {
                    array: name,
                    index: kv.index(),
                    whole: true,
                })
            };
            let (keep, extra, whole): (fn(GgmlType) -> bool, _, _) = match family.weights {
                Weights::No => {
                    out.push(Variant {
                        name: point.name(family.name, None),
                        source: family.source.to_string(),
                        defines,
                        by_type: None,
                        by_kv: by_kv(point.name(&family.name.replace("_{kv}", ""), None)),
                    });
                    continue;
                }
                Weights::All(extra) => (|_| true, extra, true),
                Weights::Only(keep, extra) => (keep, extra, false),
            };
            for (index, &ty) in WEIGHT_TYPES.iter().enumerate() {
                if !keep(ty) {
                    continue;
                }
                let mut typed = vec![(format!("WEIGHT_{}", ty.name()), "1".to_string())];
                typed.extend(owned(&extra(ty)));
                typed.extend(defines.iter().cloned());
                out.push(Variant {
                    name: point.name(family.name, Some(&type_suffix(ty))),
                    source: family.source.to_string(),
                    defines: typed,
                    by_type: plain.then(|| Grouped {
                        array: point.name(family.name, None),
                        index,
                        whole,
                    }),
                    by_kv: None,
                });
            }
        }
    }
    out
}

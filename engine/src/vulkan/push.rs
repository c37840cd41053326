//! Push-constant blocks mirrored from the shaders' push blocks
//! (`shaders/common/push.glsl`, `elementwise.glsl`, `weights.glsl`,
//! `attention.glsl`, `moe.glsl`, and the blocks of the fused kernels), each
//! with its size checked against the compiled shaders' reflection. A leaf:
//! the ops that record a kernel and the fusion rules that rewrite one read
//! the same struct.

use super::shaders::{self, Shader};
use crate::op_codes;
use crate::ops::{BinaryOp, GluKind};

/// A `#[repr(C)]` push-constant block that can be handed to the device as bytes.
///
/// # Safety
/// Implementors must be `#[repr(C)]`, contain only 32-bit scalar fields
/// (`u32`, `i32`, `f32`) laid out exactly as the GLSL block, and have no padding,
/// so that every byte of the value is initialised.
pub unsafe trait PushConstants: Copy + 'static {
    /// The block's bytes, as `vkCmdPushConstants` takes them.
    fn as_bytes(&self) -> &[u8] {
        // SAFETY: the trait's contract: `Self` is repr(C) with only 32-bit scalar
        // fields and no padding, so all size_of::<Self>() bytes behind `self` are
        // initialised; the slice borrows `self` and lives no longer than it.
        unsafe {
            std::slice::from_raw_parts(
                (self as *const Self).cast::<u8>(),
                std::mem::size_of::<Self>(),
            )
        }
    }
}

/// No push constants, for shaders without a push-constant block.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoPush;

// SAFETY: a zero-sized repr(C) struct has no bytes at all.
unsafe impl PushConstants for NoPush {}

/// `BinaryPush` of `push.glsl`: elementwise binary ops over f32
/// (`shaders/binary.comp`), `out[out_offset + i] = a[a_offset + i] OP
/// b[b_offset + i]` for `i < n`, `OP` chosen by `op` (0: add; the codes are
/// listed in `binary.comp`). Offsets count elements.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BinaryPush {
    pub n: u32,
    pub a_offset: u32,
    pub b_offset: u32,
    pub out_offset: u32,
    pub op: u32,
}

const _: () = assert!(std::mem::size_of::<BinaryPush>() == 20);
const _: () =
    assert!(std::mem::size_of::<BinaryPush>() == shaders::BINARY.push_constant_size as usize);

// SAFETY: repr(C), five u32 fields, 20 bytes (asserted above): no padding.
unsafe impl PushConstants for BinaryPush {}

impl BinaryPush {
    /// An add (`op` 0) of `n` elements from the start of each buffer.
    pub fn new(n: u32) -> Self {
        Self {
            n,
            ..Self::default()
        }
    }
}

/// `UnaryPush` of `shaders/common/elementwise.glsl`: `x[offset + i] =
/// f(x[offset + i])` for `i < n`, `f` chosen by `op` (a `UNARY_*` code of
/// `shaders/unary.comp`; scale: `x * a`; softcap: `tanh(x * a) * b`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct UnaryPush {
    pub n: u32,
    pub offset: u32,
    pub a: f32,
    pub b: f32,
    pub op: u32,
}

const _: () = assert!(std::mem::size_of::<UnaryPush>() == 20);
const _: () =
    assert!(std::mem::size_of::<UnaryPush>() == shaders::UNARY.push_constant_size as usize);

// SAFETY: repr(C), five 32-bit scalar fields, 20 bytes (asserted above): no padding.
unsafe impl PushConstants for UnaryPush {}

/// `RmsNormPush` of `shaders/common/elementwise.glsl`: `n_groups` contiguous
/// groups of `group` elements from `x_offset` (read) and `out_offset` (written).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct RmsNormPush {
    pub n_groups: u32,
    pub group: u32,
    pub x_offset: u32,
    pub out_offset: u32,
    pub eps: f32,
}

const _: () = assert!(std::mem::size_of::<RmsNormPush>() == 20);
const _: () =
    assert!(std::mem::size_of::<RmsNormPush>() == shaders::RMS_NORM.push_constant_size as usize);
const _: () =
    assert!(std::mem::size_of::<RmsNormPush>() == shaders::RMS_NORM_W.push_constant_size as usize);
// The fused variants (add and / or quantization): RmsNormPush, then the
// first word of the quantized blocks and the addend's element offset
// (`fuse_add_into_norm`, op_quantize.rs `fuse_into_norm`).
pub(crate) const FUSED_NORM_PUSH: usize = std::mem::size_of::<RmsNormPush>() + 8;
/// The largest group a norm fused with its quantization takes (it keeps
/// the group's normed values in shared memory: `MAX_QUANT_GROUP` of
/// `shaders/rms_norm.comp`, 12 KiB of the 16 KiB every device has).
pub(crate) const MAX_FUSED_QUANT_GROUP: u32 = 3072;
// glu_quant.comp: BinaryPush, then the first word of the quantized blocks.
const _: () = {
    let size = std::mem::size_of::<BinaryPush>() + 4;
    assert!(size == shaders::GLU_Q8_0.push_constant_size as usize);
    assert!(size == shaders::GLU_Q8_1.push_constant_size as usize);
};
const _: () = {
    assert!(FUSED_NORM_PUSH == shaders::RMS_NORM_W_Q8_0.push_constant_size as usize);
    assert!(FUSED_NORM_PUSH == shaders::RMS_NORM_W_ADD_TO.push_constant_size as usize);
    assert!(FUSED_NORM_PUSH == shaders::RMS_NORM_W_Q8_1.push_constant_size as usize);
    assert!(FUSED_NORM_PUSH == shaders::ADD_RMS_NORM_W.push_constant_size as usize);
    assert!(FUSED_NORM_PUSH == shaders::ADD_RMS_NORM_W_Q8_0.push_constant_size as usize);
    assert!(FUSED_NORM_PUSH == shaders::ADD_RMS_NORM_W_Q8_1.push_constant_size as usize);
};

// SAFETY: repr(C), five 32-bit scalar fields, 20 bytes (asserted above): no padding.
unsafe impl PushConstants for RmsNormPush {}

/// `RopePush` of `shaders/common/elementwise.glsl`: RoPE in place of `rows`
/// rows of `width` elements from `offset`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct RopePush {
    pub rows: u32,
    pub width: u32,
    pub head_dim: u32,
    pub half_rot: u32,
    pub offset: u32,
    /// Where the first row's position is: word `pos_at` of the inbox
    /// (`shaders/common/step.glsl`).
    pub pos_at: u32,
    /// 1 for [`RopeStyle::Neox`], 0 for [`RopeStyle::Norm`].
    pub neox: u32,
    /// `base^(-2 / n_rot)`, as the CPU computes it (f32 `powf`).
    pub theta_scale: f32,
    pub freq_scale: f32,
}

const _: () = assert!(std::mem::size_of::<RopePush>() == 36);
const _: () = assert!(std::mem::size_of::<RopePush>() == shaders::ROPE.push_constant_size as usize);

// SAFETY: repr(C), nine 32-bit scalar fields, 36 bytes (asserted above): no padding.
unsafe impl PushConstants for RopePush {}

/// `BiasPush` of `shaders/common/elementwise.glsl`: `x[offset + i] +=
/// bias[i % width]` for `i < n` (`shaders/add_bias.comp`: a bias added to
/// every row of a `[n / width, width]` view).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct BiasPush {
    pub n: u32,
    pub offset: u32,
    pub width: u32,
}

const _: () = assert!(std::mem::size_of::<BiasPush>() == 12);
const _: () =
    assert!(std::mem::size_of::<BiasPush>() == shaders::ADD_BIAS.push_constant_size as usize);

// SAFETY: repr(C), three u32 fields, 12 bytes (asserted above): no padding.
unsafe impl PushConstants for BiasPush {}

/// `WeightPush` of `shaders/common/weights.glsl`: one chunk of a weight
/// against activations. Offsets count elements (`x_offset`: u32 words of the
/// token ids for the lookup).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct WeightPush {
    pub n_in: u32,
    pub row_bytes: u32,
    pub rows: u32,
    pub col0: u32,
    pub x_offset: u32,
    pub out_offset: u32,
    pub n_out: u32,
    pub n_tok: u32,
    pub units: u32,
}

const _: () = assert!(std::mem::size_of::<WeightPush>() == 36);
const _: () = {
    use shaders::by_type::{
        GET_ROWS, MATMUL, MATMUL_CPU, MATMUL_TILED, MATMUL_TILED_K, MATVEC, MATVEC_CPU,
    };
    let mut t = 0;
    while t < MATVEC.len() {
        let size = std::mem::size_of::<WeightPush>();
        assert!(size == MATVEC[t].push_constant_size as usize);
        assert!(size == MATMUL[t].push_constant_size as usize);
        if let Some(tiled) = MATMUL_TILED[t] {
            assert!(size == tiled.push_constant_size as usize);
        }
        if let Some(tiled) = MATMUL_TILED_K[t] {
            assert!(size == tiled.push_constant_size as usize);
        }
        assert!(size == GET_ROWS[t].push_constant_size as usize);
        assert!(size == MATVEC_CPU[t].push_constant_size as usize);
        assert!(size == MATMUL_CPU[t].push_constant_size as usize);
        t += 1;
    }
};

// SAFETY: repr(C), nine u32 fields, 36 bytes (asserted above): no padding.
unsafe impl PushConstants for WeightPush {}

/// `IdPush` of `shaders/common/weights.glsl`: the routing part of a
/// `MATMUL_ID` push block.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct IdPush {
    pub ids_offset: u32,
    pub k: u32,
    pub x_per_slot: u32,
    pub e0: u32,
    pub n_e: u32,
}

/// The push block of the `MATMUL_ID` variants: `{ WeightPush p; IdPush q; }`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct WeightIdPush {
    pub w: WeightPush,
    pub id: IdPush,
}

const _: () = assert!(std::mem::size_of::<WeightIdPush>() == 56);
const _: () = {
    use shaders::by_type::{MATMUL_CPU_ID, MATMUL_ID, MATVEC_CPU_ID, MATVEC_ID};
    let mut t = 0;
    while t < MATVEC_ID.len() {
        let size = std::mem::size_of::<WeightIdPush>();
        assert!(size == MATVEC_ID[t].push_constant_size as usize);
        assert!(size == MATMUL_ID[t].push_constant_size as usize);
        assert!(size == MATVEC_CPU_ID[t].push_constant_size as usize);
        assert!(size == MATMUL_CPU_ID[t].push_constant_size as usize);
        t += 1;
    }
};

// SAFETY: repr(C), fourteen u32 fields (two structs of nine and five, each
// without padding), 56 bytes (asserted above): no padding.
unsafe impl PushConstants for WeightIdPush {}

/// `RowsPush` of `shaders/common/moe.glsl`: `rows` rows of `width` elements
/// from element `offset`, in place.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RowsPush {
    pub rows: u32,
    pub width: u32,
    pub offset: u32,
}

const _: () = assert!(std::mem::size_of::<RowsPush>() == 12);
const _: () =
    assert!(std::mem::size_of::<RowsPush>() == shaders::SOFTMAX.push_constant_size as usize);
const _: () =
    assert!(std::mem::size_of::<RowsPush>() == shaders::NORMALIZE_ROWS.push_constant_size as usize);

// SAFETY: repr(C), three u32 fields, 12 bytes (asserted above): no padding.
unsafe impl PushConstants for RowsPush {}

/// `TopKPush` of `shaders/common/moe.glsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TopKPush {
    pub rows: u32,
    pub n: u32,
    pub k: u32,
    pub probs_offset: u32,
    pub ids_offset: u32,
    pub weights_offset: u32,
}

const _: () = assert!(std::mem::size_of::<TopKPush>() == 24);
const _: () =
    assert!(std::mem::size_of::<TopKPush>() == shaders::TOP_K.push_constant_size as usize);

// SAFETY: repr(C), six u32 fields, 24 bytes (asserted above): no padding.
unsafe impl PushConstants for TopKPush {}

/// `GroupsPush` of `shaders/common/moe.glsl`: `x` is `rows` rows of `g`
/// groups of `n` elements.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct GroupsPush {
    pub rows: u32,
    pub g: u32,
    pub n: u32,
    pub x_offset: u32,
    pub s_offset: u32,
    pub out_offset: u32,
}

const _: () = assert!(std::mem::size_of::<GroupsPush>() == 24);
const _: () =
    assert!(std::mem::size_of::<GroupsPush>() == shaders::MUL_GROUPS.push_constant_size as usize);
const _: () =
    assert!(std::mem::size_of::<GroupsPush>() == shaders::SUM_GROUPS.push_constant_size as usize);

// SAFETY: repr(C), six u32 fields, 24 bytes (asserted above): no padding.
unsafe impl PushConstants for GroupsPush {}

/// The push block of `quantize_act.comp`: `n_seg` segments of 32 elements
/// from element `x_offset` of x, blocks written from word `out_offset`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct QuantizePush {
    pub n_seg: u32,
    pub x_offset: u32,
    pub out_offset: u32,
}

const _: () = assert!(std::mem::size_of::<QuantizePush>() == 12);
const _: () = {
    assert!(shaders::QUANTIZE_Q8_0.push_constant_size == 12);
    assert!(shaders::QUANTIZE_Q8_1.push_constant_size == 12);
    assert!(shaders::QUANTIZE_Q8_K.push_constant_size == 12);
};

// SAFETY: repr(C), three u32 fields, 12 bytes (asserted above): no padding.
unsafe impl PushConstants for QuantizePush {}

/// `KvWritePush` of `shaders/common/attention.glsl`: `rows` rows of
/// `width` elements from `src[src_offset..]` into the cache at the
/// position in inbox word `pos_at`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct KvWritePush {
    pub rows: u32,
    pub width: u32,
    pub src_offset: u32,
    pub pos_at: u32,
}

const _: () = assert!(std::mem::size_of::<KvWritePush>() == 16);
const _: () = {
    let size = std::mem::size_of::<KvWritePush>();
    assert!(size == shaders::KV_WRITE_F32.push_constant_size as usize);
    assert!(size == shaders::KV_WRITE_F16.push_constant_size as usize);
};

// SAFETY: repr(C), four u32 fields, 16 bytes (asserted above): no padding.
unsafe impl PushConstants for KvWritePush {}

/// `AttnPush` of `shaders/common/attention.glsl`. `window` 0 means none,
/// `softcap` 0 means none; offsets count elements.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct AttnPush {
    pub n_head: u32,
    /// `n_head / n_kv_head`.
    pub group: u32,
    pub head_dim_k: u32,
    pub head_dim_v: u32,
    pub k_width: u32,
    pub v_width: u32,
    /// Where the first row's position is: word `pos_at` of the inbox.
    pub pos_at: u32,
    pub q_offset: u32,
    pub out_offset: u32,
    pub window: u32,
    pub scale: f32,
    pub softcap: f32,
    /// Query rows T.
    pub n_rows: u32,
}

const _: () = assert!(std::mem::size_of::<AttnPush>() == 52);
const _: () = {
    let size = std::mem::size_of::<AttnPush>();
    assert!(size == shaders::ATTENTION_F32.push_constant_size as usize);
    assert!(size == shaders::ATTENTION_F16.push_constant_size as usize);
    assert!(size == shaders::ATTENTION_F32_ROWS.push_constant_size as usize);
    assert!(size == shaders::ATTENTION_F16_ROWS.push_constant_size as usize);
    assert!(size + 8 == shaders::ATTENTION_F32_SPLIT.push_constant_size as usize);
    assert!(size + 8 == shaders::ATTENTION_F16_SPLIT.push_constant_size as usize);
    assert!(size == shaders::ATTENTION_CPU_F32.push_constant_size as usize);
    assert!(size == shaders::ATTENTION_CPU_F16.push_constant_size as usize);
    assert!(size == shaders::ATTENTION_KEYS_CPU_F32.push_constant_size as usize);
    assert!(size == shaders::ATTENTION_KEYS_CPU_F16.push_constant_size as usize);
};

// SAFETY: repr(C), thirteen 32-bit fields (u32 / f32), 52 bytes (asserted
// above): no padding.
unsafe impl PushConstants for AttnPush {}

/// `Push` of `shaders/attention_combine_rows.comp`: `n_split` runs of
/// partials for `n_rows` rows of `n_head` heads of `head_dim_v` into the
/// output from element `out_offset`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CombinePush {
    pub n_rows: u32,
    pub n_head: u32,
    pub head_dim_v: u32,
    pub n_split: u32,
    pub out_offset: u32,
    /// The partials' first word of (m, l).
    pub ml_at: u32,
}

const _: () = {
    let size = std::mem::size_of::<CombinePush>();
    assert!(size == 24);
    assert!(size == shaders::ATTENTION_COMBINE_ROWS.push_constant_size as usize);
    let coop = shaders::ATTENTION_COOP_D64.push_constant_size as usize;
    assert!(coop == std::mem::size_of::<AttnPush>() + 8);
    assert!(coop == shaders::ATTENTION_COOP_D128.push_constant_size as usize);
};

// SAFETY: repr(C), six u32 fields, 24 bytes (asserted above): no padding.
unsafe impl PushConstants for CombinePush {}

/// `FusedPush` of `shaders/matvec.comp`: element offsets of the f32 input
/// (binding 1), of the norm weight or the gated unit's second input
/// (binding 3), of the prologue's f32 output and of the residual; the
/// norm's eps; the gated unit (0: SwiGLU, 1: GeGLU).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct FusedPush {
    pub src_offset: u32,
    pub aux_offset: u32,
    pub pro_out_offset: u32,
    pub res_offset: u32,
    pub eps: f32,
    pub op: u32,
}

/// The push block of the fused variants.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct MatvecFusedPush {
    pub w: WeightPush,
    pub f: FusedPush,
}

pub(crate) const PUSH_BYTES: usize = std::mem::size_of::<MatvecFusedPush>();
const _: () = assert!(PUSH_BYTES == 60);
const _: () = {
    use shaders::by_type::{
        MATVEC_NORM, MATVEC_NORM_OUT, MATVEC_NORM_OUT_GLU, MATVEC_NORM_OUT_GLU_SG,
        MATVEC_NORM_OUT_SG, MATVEC_NORM_SG, MATVEC_Q, MATVEC_Q_ADD, MATVEC_Q_ADD_SG, MATVEC_Q_POST,
        MATVEC_Q_POST_SG, MATVEC_Q_SG,
    };
    let mut t = 0;
    while t < MATVEC_Q.len() {
        let all = [
            MATVEC_Q[t],
            MATVEC_Q_ADD[t],
            MATVEC_Q_POST[t],
            MATVEC_NORM[t],
            MATVEC_NORM_OUT[t],
            MATVEC_NORM_OUT_GLU[t],
            MATVEC_Q_SG[t],
            MATVEC_Q_ADD_SG[t],
            MATVEC_Q_POST_SG[t],
            MATVEC_NORM_SG[t],
            MATVEC_NORM_OUT_SG[t],
            MATVEC_NORM_OUT_GLU_SG[t],
        ];
        let mut i = 0;
        while i < all.len() {
            if let Some(s) = all[i] {
                assert!(s.push_constant_size as usize == PUSH_BYTES);
            }
            i += 1;
        }
        t += 1;
    }
};

// SAFETY: repr(C), fifteen 32-bit scalar fields, 60 bytes (asserted above):
// no padding.
unsafe impl PushConstants for MatvecFusedPush {}

/// `RopeEpi` of `shaders/matvec.comp`: whether to rotate, the head dim,
/// the inbox word of the position, the CPU's theta_scale and freq_scale;
/// the cache write (0 none, 1 f32, 2 f16), the inbox word of its position,
/// the cache's row width.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct RopeEpi {
    pub rope: u32,
    pub head_dim: u32,
    pub pos_at: u32,
    pub theta_scale: f32,
    pub freq_scale: f32,
    pub kv: u32,
    pub kv_pos_at: u32,
    pub kv_width: u32,
}

pub(crate) const EPI_BYTES: usize = std::mem::size_of::<RopeEpi>();
const _: () = assert!(EPI_BYTES == 32);
const _: () = {
    use shaders::by_type::{
        MATVEC_NORM_OUT_ROPE, MATVEC_NORM_OUT_ROPE_SG, MATVEC_NORM_ROPE, MATVEC_NORM_ROPE_SG,
    };
    let mut t = 0;
    while t < MATVEC_NORM_ROPE.len() {
        let all = [
            MATVEC_NORM_ROPE[t],
            MATVEC_NORM_OUT_ROPE[t],
            MATVEC_NORM_ROPE_SG[t],
            MATVEC_NORM_OUT_ROPE_SG[t],
        ];
        let mut i = 0;
        while i < all.len() {
            if let Some(s) = all[i] {
                assert!(s.push_constant_size as usize == PUSH_BYTES + EPI_BYTES);
            }
            i += 1;
        }
        t += 1;
    }
};

/// `NormRopePush` of `shaders/norm_rope.comp`: heads per row; half the
/// rotated dimensions; the inbox word of the first row's position; NEOX
/// (1) or NORM (0) pairs; the CPU's theta_scale and freq_scale; the query
/// scale (where `has_scale` is 1); the cache write (0 none, 1 f32, 2 f16),
/// the inbox word of its first row's position, the cache's row width.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct NormRopePush {
    pub heads: u32,
    pub half_rot: u32,
    pub pos_at: u32,
    pub neox: u32,
    pub theta_scale: f32,
    pub freq_scale: f32,
    pub has_scale: u32,
    pub scale: f32,
    pub kv: u32,
    pub kv_pos_at: u32,
    pub kv_width: u32,
}

// SAFETY: repr(C), eleven 32-bit scalar fields, 44 bytes (asserted below):
// no padding.
unsafe impl PushConstants for NormRopePush {}

pub(crate) const NORM_BYTES: usize = std::mem::size_of::<RmsNormPush>();
const _: () = assert!(std::mem::size_of::<NormRopePush>() == 44);
const _: () = assert!(
    NORM_BYTES + std::mem::size_of::<NormRopePush>()
        == shaders::NORM_ROPE.push_constant_size as usize
);
// Dispatched with the norm's workgroups.
const _: () = assert!(shaders::NORM_ROPE.local_size[0] == shaders::RMS_NORM_W.local_size[0]);

/// `FfnPush` of `shaders/ffn_decode.comp`: the down projection's weight
/// row bytes and rows, the element offsets of its output and of the
/// residual.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct FfnPush {
    pub down_row_bytes: u32,
    pub down_rows: u32,
    pub down_out_offset: u32,
    pub res_offset: u32,
}

// SAFETY: repr(C), four 32-bit scalar fields: no padding.
unsafe impl PushConstants for FfnPush {}

pub(crate) const FFN_BYTES: usize = std::mem::size_of::<FfnPush>();
const _: () = assert!(FFN_BYTES == 16);
const _: () = {
    let all = shaders::by_type::FFN_DECODE;
    let mut t = 0;
    while t < all.len() {
        if let Some(s) = all[t] {
            assert!(s.push_constant_size as usize == PUSH_BYTES + FFN_BYTES);
            assert!(s.bindings.len() == 12);
        }
        t += 1;
    }
};

/// `OprojPush` of `shaders/attention.comp`: the projection's weight row
/// bytes and rows, the element offsets of its output and of the residual.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct OprojPush {
    pub row_bytes: u32,
    pub rows: u32,
    pub out_offset: u32,
    pub res_offset: u32,
}

// SAFETY: repr(C), four 32-bit scalar fields: no padding.
unsafe impl PushConstants for OprojPush {}

pub(crate) const ATTN_BYTES: usize = std::mem::size_of::<AttnPush>();
/// The split-K variants' two words after `AttnPush`.
pub(crate) const SPLIT_BYTES: usize = 8;
pub(crate) const OPROJ_BYTES: usize = std::mem::size_of::<OprojPush>();
const _: () = assert!(OPROJ_BYTES == 16);
const _: () = {
    use shaders::by_type as t;
    let all = [
        (t::ATTENTION_F32_OPROJ, false),
        (t::ATTENTION_F16_OPROJ, false),
        (t::ATTENTION_F32_SPLIT_OPROJ, true),
        (t::ATTENTION_F16_SPLIT_OPROJ, true),
    ];
    let mut i = 0;
    while i < all.len() {
        let (family, split) = all[i];
        let mut t = 0;
        while t < family.len() {
            if let Some(s) = family[t] {
                let split_bytes = if split { SPLIT_BYTES } else { 0 };
                assert!(s.push_constant_size as usize == ATTN_BYTES + split_bytes + OPROJ_BYTES);
                assert!(s.bindings.len() == if split { 11 } else { 10 });
            }
            t += 1;
        }
        i += 1;
    }
};

/// The most products one dispatch takes (the shader's segments).
pub(crate) const SEGMENTS: usize = 3;

/// `MultiEpi` of `shaders/matvec.comp` (a layer's Q, K and V in one
/// dispatch, after [`MatvecFusedPush`]): the rope's head dim, theta_scale
/// and freq_scale; per segment its rows, output element offset, flags
/// ([`ROTATE`], the cache write shifted by [`KV_SHIFT`], [`WRITE_NORM`])
/// with the cache row width shifted by [`WIDTH_SHIFT`], and the inbox
/// words of its rope's position (low 16 bits) and its cache write's (high
/// 16 bits).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct MultiEpi {
    pub head_dim: u32,
    pub theta_scale: f32,
    pub freq_scale: f32,
    pub seg: [[u32; 4]; SEGMENTS],
}

pub(crate) const ROTATE: u32 = 1;
pub(crate) const KV_SHIFT: u32 = 1;
/// Segment 0 only: the dispatch's first workgroup writes the norm.
pub(crate) const WRITE_NORM: u32 = 8;
pub(crate) const WIDTH_SHIFT: u32 = 8;
/// The widest cache row and the last inbox word the packing holds.
pub(crate) const MAX_WIDTH: u32 = u32::MAX >> WIDTH_SHIFT;
pub(crate) const MAX_WORD: u32 = 0xffff;

pub(crate) const MULTI_EPI_BYTES: usize = std::mem::size_of::<MultiEpi>();
const _: () = assert!(MULTI_EPI_BYTES == 60);
// The whole block fits the 128 bytes every device offers.
const _: () = assert!(PUSH_BYTES + MULTI_EPI_BYTES <= 128);
const _: () = {
    let both = [
        shaders::by_type::MATVEC_NORM_MULTI,
        shaders::by_type::MATVEC_NORM_MULTI_SG,
    ];
    let mut i = 0;
    while i < both.len() {
        let mut t = 0;
        while t < both[i].len() {
            if let Some(s) = both[i][t] {
                assert!(s.push_constant_size as usize == PUSH_BYTES + MULTI_EPI_BYTES);
                assert!(s.bindings.len() == 13);
            }
            t += 1;
        }
        i += 1;
    }
};

/// The op's code in `shaders/binary.comp` (`BINARY_*`).
pub(crate) fn binary_code(op: BinaryOp) -> u32 {
    match op {
        BinaryOp::Add => op_codes::BINARY_ADD,
        BinaryOp::Mul => op_codes::BINARY_MUL,
        BinaryOp::Glu(GluKind::SwiGlu) => op_codes::BINARY_SWIGLU,
        BinaryOp::Glu(GluKind::GeGluTanh) => op_codes::BINARY_GEGLU,
    }
}

/// Whether a dispatch of `shader` with push-constant bytes `push` is an add
/// (the residual add before a norm, which fault `missing-barrier` targets).
pub(crate) fn is_add(shader: &Shader, push: &[u8]) -> bool {
    let at = std::mem::offset_of!(BinaryPush, op);
    shader.index == shaders::BINARY.index
        && push.get(at..at + 4) == Some(&binary_code(BinaryOp::Add).to_ne_bytes()[..])
}

/// `v` as a push word (panics past u32: a size the shaders cannot take).
pub(crate) fn u32_of(v: usize, what: &str) -> u32 {
    u32::try_from(v).unwrap_or_else(|_| panic!("{what} {v} exceeds u32"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_push_bytes() {
        let p = BinaryPush {
            n: 1,
            a_offset: 2,
            b_offset: 3,
            out_offset: 4,
            op: 5,
        };
        let bytes = p.as_bytes();
        assert_eq!(bytes.len(), 20);
        let words: Vec<u32> = bytes
            .chunks(4)
            .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(words, [1, 2, 3, 4, 5]);
        assert!(NoPush.as_bytes().is_empty());
    }
}

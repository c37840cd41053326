//! The codes by which the GPU kernels tell ops apart (the `op` word of a
//! push constant), listed once: the Vulkan backend writes these constants
//! for [`crate::ops::UnaryOp`], [`crate::ops::BinaryOp`],
//! [`crate::ops::GluKind`] and [`crate::ops::KvType`], and engine/build.rs
//! writes [`ALL`] as the
//! generated GLSL header `op_codes.glsl` (`#define UNARY_SCALE 0u`, ...)
//! that the shaders include. Imports nothing (build.rs includes it).

macro_rules! op_codes {
    ($($(#[$doc:meta])* $name:ident = $code:literal;)*) => {
        $($(#[$doc])* pub const $name: u32 = $code;)*
        /// Every code with its GLSL name, for the generated header.
        pub const ALL: &[(&str, u32)] = &[$((stringify!($name), $name)),*];
    };
}

op_codes! {
    /// `UnaryOp::Scale` (unary.comp, `UnaryPush.op`): `x * a`.
    UNARY_SCALE = 0;
    /// `UnaryOp::Softcap`: `tanh(x * a) * b`.
    UNARY_SOFTCAP = 1;
    /// `BinaryOp::Add` (binary.comp, glu_quant.comp: `BinaryPush.op`).
    BINARY_ADD = 0;
    /// `BinaryOp::Mul`.
    BINARY_MUL = 1;
    /// `BinaryOp::Glu(GluKind::SwiGlu)`.
    BINARY_SWIGLU = 2;
    /// `BinaryOp::Glu(GluKind::GeGluTanh)`.
    BINARY_GEGLU = 3;
    /// `GluKind::SwiGlu` as the fused decode kernels' gated unit
    /// (matvec.comp's PAIR_GLU and PRO_GLU, ffn_decode.comp: `FusedPush.op`).
    GLU_SWIGLU = 0;
    /// `GluKind::GeGluTanh` there.
    GLU_GEGLU = 1;
    /// `KvType::F32` as the decode kernels that write the cache of any
    /// type take it (`KvType::cache_code`: norm_rope.comp's
    /// `NormRopePush.kv`, matvec.comp's `RopeEpi.kv`; 0: no cache write):
    /// shaders/common/kv.glsl.
    KV_CACHE_F32 = 1;
    /// `KvType::F16` there.
    KV_CACHE_F16 = 2;
}

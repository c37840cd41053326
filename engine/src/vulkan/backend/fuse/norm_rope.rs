//! A per-head RMS norm fused with what follows it on the same rows: the
//! RoPE of every whole head, the query's scale and the K cache write, as
//! `shaders/norm_rope.comp` (Gemma 3's and Qwen3's q / k norms). Unfused,
//! a layer's q and k take a norm, a RoPE and (Gemma 3) a scale each, over
//! three dependent stages, and K's cache write a fourth dispatch; fused,
//! one dispatch for q and one for k (with the write), in one stage.
//!
//! Peepholes like those of `matvec_rope.rs`: `rope(x)` finds the norm
//! that wrote exactly `x` (`rms_norm_w` in groups of one head) among the
//! last commands, with nothing recorded after it touching `x` or the
//! norm's input and weight, and records it again in place as the fused
//! kernel; the scale of `x` and the cache write of `x` then find that
//! kernel the same way and set their fields in it. The model code records
//! the same ops on every backend. A tapped pass reads the norm's output
//! before the RoPE (a copy that touches `x`), which keeps the ops apart.
//!
//! The same bits as the unfused ops (tests:
//! `engine/tests/vulkan_norm_rope.rs`).

use super::super::cmd::Cmd;
use super::{on, Rule};
use super::{Bind, VulkanBackend};
use crate::ops::{Act, KvType};
use crate::vulkan::push::{NormRopePush, RmsNormPush, RopePush, NORM_BYTES};
use crate::vulkan::{shaders, PushConstants};

/// Byte offset of a `NormRopePush` field in the fused push bytes.
macro_rules! at {
    ($field:ident) => {
        NORM_BYTES + std::mem::offset_of!(NormRopePush, $field)
    };
}

fn field(push: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(push[at..at + 4].try_into().expect("four bytes"))
}

fn set(push: &mut [u8], at: usize, v: u32) {
    push[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// The recorded command of `shader` whose output (binding 1) is exactly
/// `x`, the latest to touch `x`: its index.
fn writer_of(b: &VulkanBackend, x: &Bind, shader: &shaders::Shader) -> Option<usize> {
    let i = b.window().last_touching(x)?;
    match &b.cmds[i] {
        Cmd::Dispatch {
            shader: s, access, ..
        } if s.index == shader.index && access[1].bind() == *x => Some(i),
        _ => None,
    }
}

/// Records the RoPE `p` of `x` within the per-head norm that wrote `x`,
/// when the RoPE turns every whole head in an even number of pairs (each
/// invocation takes two: whole words of an f16 cache) and the norm's
/// groups are those heads. Returns whether it did.
pub(in super::super) fn rope_into_norm(b: &mut VulkanBackend, x: Act, p: &RopePush) -> bool {
    if !on(b, Rule::NormRope) || 2 * p.half_rot != p.head_dim || !p.half_rot.is_multiple_of(2) {
        return false;
    }
    let xb = Bind::act(x);
    let Some(i) = writer_of(b, &xb, &shaders::RMS_NORM_W) else {
        return false;
    };
    let (binds, push, groups) = b.dispatch_parts(i);
    // Bindings: x, out, w.
    let (src, w) = (binds[0].clone(), binds[2].clone());
    let group = field(&push, std::mem::offset_of!(RmsNormPush, group));
    if group != p.head_dim || !b.window().untouched_after(i, &[src.clone(), w.clone()]) {
        return false;
    }
    let r = NormRopePush {
        heads: p.width / p.head_dim,
        half_rot: p.half_rot,
        pos_at: p.pos_at,
        neox: p.neox,
        theta_scale: p.theta_scale,
        freq_scale: p.freq_scale,
        kv_pos_at: p.pos_at,
        ..NormRopePush::default()
    };
    let mut bytes = push[..NORM_BYTES].to_vec();
    bytes.extend_from_slice(r.as_bytes());
    // The cache binding is the output until a cache write joins.
    let binds = [src, xb.clone(), w, Bind::step(p.pos_at), xb];
    b.replace_dispatch(i, &shaders::NORM_ROPE, &binds, bytes, groups);
    true
}

/// Records `x *= s` within the fused norm and RoPE that wrote `x`, when
/// it writes no cache (the cache holds the unscaled rows). Returns whether
/// it did.
pub(in super::super) fn scale_into_norm_rope(b: &mut VulkanBackend, x: Act, s: f32) -> bool {
    if !on(b, Rule::NormRopeScale) {
        return false;
    }
    let Some(i) = writer_of(b, &Bind::act(x), &shaders::NORM_ROPE) else {
        return false;
    };
    let Cmd::Dispatch { push, .. } = &mut b.cmds[i] else {
        return false;
    };
    if field(push, at!(kv)) != 0 || field(push, at!(has_scale)) != 0 {
        return false;
    }
    set(push, at!(has_scale), 1);
    set(push, at!(scale), s.to_bits());
    true
}

/// Records the cache write of `src` (`width` elements a row, into `dst`
/// at the position in inbox word `pos_at`) within the fused norm and RoPE
/// that wrote `src`, when nothing recorded after it touches the cache.
/// Returns whether it did.
pub(in super::super) fn kv_into_norm_rope(
    b: &mut VulkanBackend,
    src: Act,
    width: usize,
    dst: Bind,
    ty: KvType,
    pos_at: u32,
) -> bool {
    if !on(b, Rule::NormRopeKv) || src.width() != width {
        return false;
    }
    let Some(i) = writer_of(b, &Bind::act(src), &shaders::NORM_ROPE) else {
        return false;
    };
    let (mut binds, mut push, groups) = b.dispatch_parts(i);
    if field(&push, at!(kv)) != 0 || !b.window().untouched_after(i, std::slice::from_ref(&dst)) {
        return false;
    }
    let kv = match ty {
        KvType::F32 => 1,
        KvType::F16 => 2,
    };
    set(&mut push, at!(kv), kv);
    set(&mut push, at!(kv_pos_at), pos_at);
    set(
        &mut push,
        at!(kv_width),
        u32::try_from(width).expect("cache width fits u32"),
    );
    // Bindings: x, out, w, steps, cache.
    binds[3] = Bind::steps(field(&push, at!(pos_at)), pos_at);
    binds[4] = dst;
    b.replace_dispatch(i, &shaders::NORM_ROPE, &binds, push, groups);
    true
}

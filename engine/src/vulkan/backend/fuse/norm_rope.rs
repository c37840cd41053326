//! A per-head RMS norm fused with what follows it on the same rows: the
//! RoPE of every whole head, the query's scale and the K cache write, as
//! `shaders/norm_rope.comp` (Gemma 3's and Qwen3's q / k norms). Unfused,
//! a layer's q and k take a norm, a RoPE and (Gemma 3) a scale each, over
//! three dependent stages, and K's cache write a fourth dispatch; fused,
//! one dispatch for q and one for k (with the write), in one stage.
//!
//! One rule at the norm, reading ahead on its output `x`:
//!
//! - [`Rule::NormRope`](super::Rule::NormRope): the next command to touch
//!   `x` is the RoPE of exactly `x`, turning every whole head in an even
//!   number of pairs (each invocation takes two: whole words of an f16
//!   cache); the norm (`rms_norm_w`) wrote exactly `x` in groups of one
//!   head; nothing between the two touches the norm's input or weight.
//!   The fused kernel stands where the norm was. A tapped pass reads the
//!   norm's output before the RoPE (a copy that touches `x`), which keeps
//!   the two apart.
//! - Then, while the next command to touch `x` is one of these:
//!   [`Rule::NormRopeScale`](super::Rule::NormRopeScale), the scale of
//!   exactly `x`, when no cache is written yet (the cache holds the
//!   unscaled rows) and no scale taken; [`Rule::NormRopeKv`](super::Rule::NormRopeKv),
//!   the cache write of exactly `x` (rows as wide as the cache's), when no
//!   cache is written yet and nothing between the norm and the write
//!   touches the cache.
//!
//! The same bits as the unfused ops (tests:
//! `engine/tests/vulkan_norm_rope.rs`).

use super::super::cmd::{Cmd, Op};
use super::list::{Ctx, Fusion, List};
use super::{Bind, Rule};
use crate::vulkan::push::{NormRopePush, NORM_BYTES};
use crate::vulkan::{shaders, PushConstants};

/// Byte offset of a `NormRopePush` field in the fused push bytes.
macro_rules! at {
    ($field:ident) => {
        NORM_BYTES + std::mem::offset_of!(NormRopePush, $field)
    };
}

fn set(push: &mut [u8], at: usize, v: u32) {
    push[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// [`Rule::NormRope`] at command `i`, with the scale and cache write
/// after it where their rules are on (see the module docs).
pub(super) fn norm_rope(list: &List, i: usize, ctx: &Ctx) -> Option<Fusion> {
    let norm = list.at(i)?;
    let Op::RmsNorm(np) = norm.op else {
        return None;
    };
    // Norm bindings: x, out, w; RoPE: x, step.
    let (src, x, w) = (norm.bind(0), norm.bind(1), norm.bind(2));
    let j = list.next_touching(i, &x)?;
    let rope = list.at(j)?;
    let Op::Rope(p) = rope.op else {
        return None;
    };
    if rope.bind(0) != x
        || 2 * p.half_rot != p.head_dim
        || !p.half_rot.is_multiple_of(2)
        || np.group != p.head_dim
        || !list.untouched(i, j, &[src.clone(), w.clone()], &[])
    {
        return None;
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
    let mut push = norm.push[..NORM_BYTES].to_vec();
    push.extend_from_slice(r.as_bytes());
    // The cache binding is the output until a cache write joins.
    let mut binds = vec![src, x.clone(), w, Bind::step(p.pos_at), x.clone()];
    let mut takes = vec![j];
    let (mut scaled, mut cached) = (false, false);
    while let Some(k) = list.next_touching(*takes.last().expect("the RoPE"), &x) {
        let Some(d) = list.at(k) else {
            break;
        };
        let x_exactly = d.bind(0) == x;
        match d.op {
            Op::Scale(s) if ctx.on(Rule::NormRopeScale) && x_exactly && !cached && !scaled => {
                set(&mut push, at!(has_scale), 1);
                set(&mut push, at!(scale), s.to_bits());
                scaled = true;
            }
            Op::KvWrite { ty, push: kp } if ctx.on(Rule::NormRopeKv) && x_exactly && !cached => {
                // Cache write bindings: src, cache, step.
                let dst = d.bind(1);
                let elems = (x.bytes.end - x.bytes.start) / 4;
                let Some(code) = ty.cache_code() else {
                    break;
                };
                if elems != u64::from(kp.rows) * u64::from(kp.width)
                    || !list.untouched(i, k, std::slice::from_ref(&dst), &takes)
                {
                    break;
                }
                set(&mut push, at!(kv), code);
                set(&mut push, at!(kv_pos_at), kp.pos_at);
                set(&mut push, at!(kv_width), kp.width);
                // Bindings: x, out, w, steps, cache.
                binds[3] = Bind::steps(p.pos_at, kp.pos_at);
                binds[4] = dst;
                cached = true;
            }
            _ => break,
        }
        takes.push(k);
    }
    let cmd = Cmd::dispatch(Op::Other, &shaders::NORM_ROPE, &binds, push, norm.groups);
    Some(Fusion { cmd, takes })
}

#[cfg(test)]
#[path = "norm_rope_tests.rs"]
mod tests;

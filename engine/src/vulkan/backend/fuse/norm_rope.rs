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
use super::window::Window;
use super::{on, read_u32, Fused, Rule};
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

fn set(push: &mut [u8], at: usize, v: u32) {
    push[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// The command of `shader` among those in `win` whose output (binding 1)
/// is exactly `x`, the latest to touch `x`: its index.
fn writer_of(win: Window, x: &Bind, shader: &shaders::Shader) -> Option<usize> {
    let i = win.last_touching(x)?;
    let d = win.at(i)?;
    (d.shader.index == shader.index && d.access[1].bind() == *x).then_some(i)
}

/// [`Rule::NormRope`]'s pattern: the index of the per-head norm in `win`
/// that wrote exactly `x` and the fused kernel with its workgroups, when
/// the RoPE `p` turns every whole head in an even number of pairs (each
/// invocation takes two: whole words of an f16 cache), the norm's groups
/// are those heads, and nothing after the norm touches its input or
/// weight.
pub(super) fn norm_rope(win: Window, x: &Bind, p: &RopePush) -> Option<(usize, Fused, [u32; 3])> {
    if 2 * p.half_rot != p.head_dim || !p.half_rot.is_multiple_of(2) {
        return None;
    }
    let i = writer_of(win, x, &shaders::RMS_NORM_W)?;
    let norm = win.at(i)?;
    // Bindings: x, out, w.
    let binds = norm.binds();
    let (src, w) = (binds[0].clone(), binds[2].clone());
    let group = read_u32(norm.push, std::mem::offset_of!(RmsNormPush, group));
    if group != p.head_dim || !win.untouched_after(i, &[src.clone(), w.clone()]) {
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
    let binds = vec![src, x.clone(), w, Bind::step(p.pos_at), x.clone()];
    let fused = Fused {
        shader: &shaders::NORM_ROPE,
        binds,
        push,
    };
    Some((i, fused, norm.groups))
}

/// Records the RoPE `p` of `x` within the per-head norm that wrote `x`
/// ([`Rule::NormRope`]). Returns whether it did.
pub(in super::super) fn rope_into_norm(b: &mut VulkanBackend, x: Act, p: &RopePush) -> bool {
    if !on(b, Rule::NormRope) {
        return false;
    }
    let Some((i, f, groups)) = norm_rope(b.window(), &Bind::act(x), p) else {
        return false;
    };
    b.replace_dispatch(i, f.shader, &f.binds, f.push, groups);
    true
}

/// [`Rule::NormRopeScale`]'s pattern: the index of the fused norm and
/// RoPE in `win` that wrote exactly `x`, when it writes no cache (the
/// cache holds the unscaled rows) and has no scale yet.
pub(super) fn norm_rope_scale(win: Window, x: &Bind) -> Option<usize> {
    let i = writer_of(win, x, &shaders::NORM_ROPE)?;
    let push = win.at(i)?.push;
    (read_u32(push, at!(kv)) == 0 && read_u32(push, at!(has_scale)) == 0).then_some(i)
}

/// Records `x *= s` within the fused norm and RoPE that wrote `x`
/// ([`Rule::NormRopeScale`]). Returns whether it did.
pub(in super::super) fn scale_into_norm_rope(b: &mut VulkanBackend, x: Act, s: f32) -> bool {
    if !on(b, Rule::NormRopeScale) {
        return false;
    }
    let Some(i) = norm_rope_scale(b.window(), &Bind::act(x)) else {
        return false;
    };
    let Cmd::Dispatch { push, .. } = &mut b.cmds[i] else {
        return false;
    };
    set(push, at!(has_scale), 1);
    set(push, at!(scale), s.to_bits());
    true
}

/// [`Rule::NormRopeKv`]'s pattern: the index of the fused norm and RoPE
/// in `win` that wrote exactly `src` and the kernel with the cache write
/// of its rows (`width` elements, the cache's row width, into `dst` of
/// `ty` at the position in inbox word `pos_at`), when it writes no cache
/// yet and nothing after it touches `dst`.
pub(super) fn norm_rope_kv(
    win: Window,
    src: &Bind,
    dst: &Bind,
    ty: KvType,
    (width, pos_at): (usize, u32),
) -> Option<(usize, Fused, [u32; 3])> {
    let i = writer_of(win, src, &shaders::NORM_ROPE)?;
    let d = win.at(i)?;
    let (mut binds, mut push) = (d.binds(), d.push.to_vec());
    if read_u32(&push, at!(kv)) != 0 || !win.untouched_after(i, std::slice::from_ref(dst)) {
        return None;
    }
    let kv = ty.cache_code()?;
    set(&mut push, at!(kv), kv);
    set(&mut push, at!(kv_pos_at), pos_at);
    set(
        &mut push,
        at!(kv_width),
        u32::try_from(width).expect("cache width fits u32"),
    );
    // Bindings: x, out, w, steps, cache.
    binds[3] = Bind::steps(read_u32(&push, at!(pos_at)), pos_at);
    binds[4] = dst.clone();
    let fused = Fused {
        shader: &shaders::NORM_ROPE,
        binds,
        push,
    };
    Some((i, fused, d.groups))
}

/// Records the cache write of `src` (`width` elements a row, into `dst`
/// at the position in inbox word `pos_at`) within the fused norm and RoPE
/// that wrote `src` ([`Rule::NormRopeKv`]). Returns whether it did.
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
    let Some((i, f, groups)) = norm_rope_kv(b.window(), &Bind::act(src), &dst, ty, (width, pos_at))
    else {
        return false;
    };
    b.replace_dispatch(i, f.shader, &f.binds, f.push, groups);
    true
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{bind, dispatch};
    use super::*;

    /// A per-head norm of two heads of 8 from slot 3 into `out`.
    fn norm(out: &Bind) -> Cmd {
        let push = RmsNormPush {
            n_groups: 2,
            group: 8,
            ..RmsNormPush::default()
        };
        let (x, w) = (bind(3, 0, 64), bind(4, 0, 32));
        dispatch(&shaders::RMS_NORM_W, &[x, out.clone(), w], push.as_bytes())
    }

    fn rope(head_dim: u32, half_rot: u32) -> RopePush {
        RopePush {
            rows: 1,
            width: 16,
            head_dim,
            half_rot,
            pos_at: 1,
            ..RopePush::default()
        }
    }

    #[test]
    fn the_norm_rope_chain_fuses_step_by_step() {
        let (q, cache) = (bind(5, 0, 64), bind(7, 0, 4096));
        let mut cmds = vec![norm(&q)];
        let w = Window { cmds: &cmds };
        let (i, f, _) = norm_rope(w, &q, &rope(8, 4)).expect("matches");
        assert_eq!((i, f.shader.index), (0, shaders::NORM_ROPE.index));
        // A partial rotation, an odd number of pairs, heads other than
        // the norm's groups, another buffer.
        for p in [rope(8, 2), rope(6, 3), rope(16, 8)] {
            assert!(norm_rope(w, &q, &p).is_none());
        }
        assert!(norm_rope(w, &bind(5, 0, 32), &rope(8, 4)).is_none());
        cmds[0] = dispatch(f.shader, &f.binds, &f.push);
        let w = Window { cmds: &cmds };
        assert_eq!(norm_rope_scale(w, &q), Some(0));
        let (_, f, _) = norm_rope_kv(w, &q, &cache, KvType::F16, (16, 2)).expect("matches");
        assert_eq!(f.binds[4], cache);
        assert_eq!(read_u32(&f.push, at!(kv)), 2);
        // Once the cache is written, no scale (the cache holds the
        // unscaled rows) and no second write.
        cmds[0] = dispatch(f.shader, &f.binds, &f.push);
        let w = Window { cmds: &cmds };
        assert!(norm_rope_scale(w, &q).is_none());
        assert!(norm_rope_kv(w, &q, &cache, KvType::F16, (16, 2)).is_none());
    }

    #[test]
    fn a_norm_whose_input_is_touched_after_it_stays_apart() {
        let q = bind(5, 0, 64);
        let copy = Cmd::Copy {
            src: 3,
            src_offset: 0,
            dst: 9,
            dst_offset: 0,
            size: 64,
        };
        let cmds = [norm(&q), copy];
        assert!(norm_rope(Window { cmds: &cmds }, &q, &rope(8, 4)).is_none());
    }
}

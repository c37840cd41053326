//! The RoPE of a decode step's Q and K, and the K and V cache writes, as
//! the epilogue of the fused matvecs that computed them: `shaders/
//! matvec.comp`'s `EPI_ROPE` variants (`by_type::MATVEC_NORM_ROPE`,
//! `MATVEC_NORM_OUT_ROPE`), which write the products in pairs of rows
//! (2i, 2i + 1), rotated as `rope.comp` rotates NORM pairs and, when asked,
//! also into the cache as `kv_write.comp` writes it.
//!
//! Like the fusions of `matvec.rs`, each is a peephole on what
//! was recorded: `rope(x)` finds the normed matvec (`Norm` / `NormOut`)
//! that wrote exactly `x` among the last commands, with nothing recorded
//! after it touching `x`, and records it again as its `EPI_ROPE` variant;
//! the cache write of `x` does the same (to the rotated variant, or to a
//! plain normed matvec: V). The model code records the same ops on every
//! backend. A layer's RoPE and cache writes then need no dispatch of their
//! own, and attention follows the Q, K and V products after one barrier.
//! Only NORM pairing over whole heads (n_rot = head_dim): a NEOX pair
//! (i, i + n_rot / 2) is not within one workgroup's rows.
//!
//! The same bits as the unfused ops (tests:
//! `engine/tests/vulkan_matvec_fused.rs`).

use super::matvec::{family, kind_of, Kind};
use super::window::Window;
use super::{allowed, overlaps, Fused, Rule};
use super::{Bind, VulkanBackend};
use crate::ops::{Act, KvType};
use crate::vulkan::push::{MatvecFusedPush, RopeEpi, RopePush, WeightPush, PUSH_BYTES};
use crate::vulkan::shaders::matvec_rows;

/// The recorded normed matvec of a kind in `kinds` whose output binding is
/// exactly `x`, the latest command of `win` to touch `x`
/// (`Window::last_touching`: Q is three back when its RoPE is
/// recorded, after K and V): its index in `win`, kind and weight-type
/// index.
fn writer_of(win: Window, x: &Bind, kinds: &[Kind]) -> Option<(usize, Kind, usize)> {
    let j = win.last_touching(x)?;
    let d = win.at(j)?;
    let (k, t) = kind_of(d.shader)?;
    // Bindings: weight, norm input, out, ...
    (kinds.contains(&k) && d.bind(2) == *x).then_some((j, k, t))
}

/// Whether a normed matvec's rows pair up within its workgroups: one
/// chunk of all the rows (col0 0), an even number of them, even rows per
/// workgroup.
pub(in super::super) fn pairs_whole(push: &[u8], rows_per_wg: usize) -> bool {
    let field = |at: usize| u32::from_le_bytes(push[at..at + 4].try_into().expect("four bytes"));
    let w = std::mem::offset_of!(MatvecFusedPush, w);
    let rows = field(w + std::mem::offset_of!(WeightPush, rows));
    let n_out = field(w + std::mem::offset_of!(WeightPush, n_out));
    let col0 = field(w + std::mem::offset_of!(WeightPush, col0));
    col0 == 0 && rows == n_out && rows.is_multiple_of(2) && rows_per_wg.is_multiple_of(2)
}

/// [`Rule::MatvecRope`]'s pattern for the RoPE `p` of `x` after the
/// commands in `win`: one row, NORM pairing over whole heads (not NEOX,
/// `2 half_rot = head_dim`, a row of whole heads), the normed matvec
/// (`Norm` / `NormOut`) that wrote exactly `x` the latest command to touch
/// it ([`writer_of`]), its rows pairing within the workgroups of the
/// `EPI_ROPE` kernel (of the plain or `sg` family; [`pairs_whole`]).
/// Gives that command's index and the kernel to record in its place, with
/// its workgroups.
pub(super) fn matvec_rope(
    win: Window,
    x: Act,
    p: &RopePush,
    sg: bool,
) -> Option<(usize, Fused, [u32; 3])> {
    let head_dim = p.head_dim as usize;
    if x.rows() != 1
        || p.neox != 0
        || 2 * p.half_rot != p.head_dim
        || head_dim == 0
        || !x.width().is_multiple_of(head_dim)
    {
        return None;
    }
    let xb = Bind::act(x);
    let (j, kind, t) = writer_of(win, &xb, &[Kind::Norm, Kind::NormOut])?;
    let d = win.at(j)?;
    let (mut binds, mut push) = (d.binds(), d.push.to_vec());
    let rope_kind = if kind == Kind::NormOut {
        Kind::NormOutRope
    } else {
        Kind::NormRope
    };
    let shader = family(rope_kind, sg)[t].expect("every family has the same types");
    if !pairs_whole(&push, matvec_rows(shader)) {
        return None;
    }
    let epi = RopeEpi {
        rope: 1,
        head_dim: p.head_dim,
        pos_at: p.pos_at,
        theta_scale: p.theta_scale,
        freq_scale: p.freq_scale,
        kv: 0,
        kv_pos_at: p.pos_at,
        kv_width: 0,
    };
    push_epi(&mut push, &epi);
    // The cache binding, unused (kv 0): the output itself.
    binds.extend([Bind::step(p.pos_at), xb]);
    let fused = Fused {
        shader,
        binds,
        push,
    };
    Some((j, fused, d.groups))
}

/// Records the RoPE `p` of `x` (one row) as the epilogue of the normed
/// matvec that wrote it, when [`matvec_rope`] matches. Returns whether it
/// did.
pub(in super::super) fn rope_into_matvec(b: &mut VulkanBackend, x: Act, p: &RopePush) -> bool {
    if !allowed(b, Rule::MatvecRope) {
        return false;
    }
    let Some((j, f, groups)) = matvec_rope(b.window(), x, p, b.matvec_subgroups) else {
        return false;
    };
    b.replace_dispatch(j, f.shader, &f.binds, f.push, groups);
    true
}

/// [`Rule::MatvecKv`]'s pattern for the write of `src` (one row of
/// `width`, even) into the cache `dst` (of `ty`, at the position in inbox
/// word `pos_at`) after the commands in `win`: the normed matvec (rotated
/// by [`matvec_rope`] or not, with no cache write yet) that wrote exactly
/// `src` the latest command to touch it ([`writer_of`]), `dst` apart from
/// `src` and touched by no command after that one, its rows pairing
/// within the workgroups of the `EPI_ROPE` kernel (of the plain or `sg`
/// family; [`pairs_whole`]). Gives that command's index and the kernel to
/// record in its place, with its workgroups.
pub(super) fn matvec_kv(
    win: Window,
    src: Act,
    width: usize,
    dst: &Bind,
    ty: KvType,
    pos_at: u32,
    sg: bool,
) -> Option<(usize, Fused, [u32; 3])> {
    if src.rows() != 1 || src.width() != width || !width.is_multiple_of(2) {
        return None;
    }
    let code = ty.cache_code()?;
    let xb = Bind::act(src);
    let kinds = [Kind::Norm, Kind::NormOut, Kind::NormRope, Kind::NormOutRope];
    let (j, kind, t) = writer_of(win, &xb, &kinds)?;
    if overlaps(dst, &xb) || !win.untouched_after(j, std::slice::from_ref(dst)) {
        return None;
    }
    let d = win.at(j)?;
    let (mut binds, mut push) = (d.binds(), d.push.to_vec());
    let (rope_kind, mut epi) = match kind {
        Kind::NormRope | Kind::NormOutRope => {
            let epi = read_epi(&push);
            push.truncate(PUSH_BYTES);
            binds.truncate(binds.len() - 2);
            (kind, epi)
        }
        Kind::NormOut => (Kind::NormOutRope, RopeEpi::default()),
        _ => (Kind::NormRope, RopeEpi::default()),
    };
    if epi.kv != 0 {
        return None;
    }
    let shader = family(rope_kind, sg)[t].expect("every family has the same types");
    if !pairs_whole(&push, matvec_rows(shader)) {
        return None;
    }
    if epi.rope == 0 {
        epi.pos_at = pos_at;
    }
    epi.kv = code;
    epi.kv_pos_at = pos_at;
    epi.kv_width = u32::try_from(width).expect("a cache row width fits u32");
    push_epi(&mut push, &epi);
    binds.extend([Bind::steps(epi.pos_at, pos_at), dst.clone()]);
    let fused = Fused {
        shader,
        binds,
        push,
    };
    Some((j, fused, d.groups))
}

/// Records the write of `src` (one row of `width`) into the cache `dst`
/// (`[n_ctx, width]` of `ty`) at the position in inbox word `pos_at` as the
/// epilogue of the normed matvec that wrote `src`, when [`matvec_kv`]
/// matches. Returns whether it did.
pub(in super::super) fn kv_into_matvec(
    b: &mut VulkanBackend,
    src: Act,
    width: usize,
    dst: Bind,
    ty: KvType,
    pos_at: u32,
) -> bool {
    if !allowed(b, Rule::MatvecKv) {
        return false;
    }
    let sg = b.matvec_subgroups;
    let Some((j, f, groups)) = matvec_kv(b.window(), src, width, &dst, ty, pos_at, sg) else {
        return false;
    };
    b.replace_dispatch(j, f.shader, &f.binds, f.push, groups);
    true
}

fn push_epi(push: &mut Vec<u8>, e: &RopeEpi) {
    for v in [e.rope, e.head_dim, e.pos_at] {
        push.extend_from_slice(&v.to_le_bytes());
    }
    for v in [e.theta_scale, e.freq_scale] {
        push.extend_from_slice(&v.to_le_bytes());
    }
    for v in [e.kv, e.kv_pos_at, e.kv_width] {
        push.extend_from_slice(&v.to_le_bytes());
    }
}

pub(in super::super) fn read_epi(push: &[u8]) -> RopeEpi {
    let u = |i: usize| {
        let at = PUSH_BYTES + 4 * i;
        u32::from_le_bytes(push[at..at + 4].try_into().expect("four bytes"))
    };
    RopeEpi {
        rope: u(0),
        head_dim: u(1),
        pos_at: u(2),
        theta_scale: f32::from_bits(u(3)),
        freq_scale: f32::from_bits(u(4)),
        kv: u(5),
        kv_pos_at: u(6),
        kv_width: u(7),
    }
}

#[cfg(test)]
#[path = "matvec_rope_tests.rs"]
mod tests;

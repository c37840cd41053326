//! The decode matvec fused with the op that feeds it and the residual add
//! that follows it: `shaders/matvec.comp`'s `PRO_*` / `EPI_ADD` variants
//! (`by_type::MATVEC_Q`, `MATVEC_NORM`, ...), for the GPU kernel layout,
//! one activation row, and the block types whose activations are Q8_0,
//! Q8_1 or Q8_K (`fusable` of engine/build/variants.rs).
//!
//! A decode step's chain `rms_norm -> quantize -> matvec` (Q, K, V; gate,
//! up) becomes one dispatch per product whose every workgroup computes the
//! norm and its quantization into shared memory (the first also writes the
//! norm's f32 output, which the later products of the same input skip);
//! `quantize -> matvec` (the attention output, the gated unit's) becomes a
//! matvec that quantizes its input itself; a residual add `x += out` right
//! after such a matvec becomes its epilogue; the gated unit of two such
//! products of one normed row (gate and up) becomes one dispatch of both
//! with the unit in its epilogue. Each is a peephole on the last
//! recorded command, like the fusions of `op_quantize.rs`: the model code
//! records the same ops on every backend. The same bits as the unfused ops
//! (tests: `engine/tests/vulkan_matvec_fused.rs`); per transformer layer
//! three dependent dispatches (and their barriers) fewer.
//!
//! Not fused while fault `missing-barrier` or `gpu-act-f16-truncate` is
//! injected: both act on the unfused kernels (the add before a norm, the
//! standalone quantizers), which then run as before.

use super::super::hazard::Access;
use super::super::GpuWeight;
use super::list::Ctx;
use super::window::Window;
use super::{allowed, overlaps, post_counter, read_u32, Fused, Rule};
use super::{Bind, VulkanBackend};
use crate::fault;
use crate::ggml_type::weight_index;
use crate::ops::{Act, GluKind};
use crate::vulkan::push::{u32_of, FusedPush, MatvecFusedPush, RmsNormPush, WeightPush};
use crate::vulkan::shaders::matvec_rows;
use crate::vulkan::{shaders, DeviceLimits, Shader};

/// The most elements of the activation row the prologues hold in shared
/// memory (`MAX_K` of `shaders/matvec.comp`).
const MAX_K: usize = 3072;

/// The most workgroups a fused matvec may have. Every workgroup computes
/// the whole prologue again; past this (an output head of tens of
/// thousands of rows) one standalone dispatch that does it once is kept.
const MAX_FUSED_WORKGROUPS: usize = 1024;

/// The variant families, as `by_type` arrays.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(in super::super) enum Kind {
    Quant,
    QuantAdd,
    /// `Quant` with the post-norm and residual add after it
    /// ([`post_norm_into_matvec`]).
    QuantPost,
    Norm,
    NormOut,
    NormOutGlu,
    /// `Norm` and `NormOut` with the RoPE / KV-write epilogue
    /// (`matvec_rope.rs`).
    NormRope,
    NormOutRope,
    /// Up to three products of one normed row in one dispatch, each with
    /// its `NormRope` epilogue (`qkv.rs`).
    Multi,
}

impl Kind {
    const ALL: [Kind; 9] = [
        Kind::Quant,
        Kind::QuantAdd,
        Kind::QuantPost,
        Kind::Norm,
        Kind::NormOut,
        Kind::NormOutGlu,
        Kind::NormRope,
        Kind::NormOutRope,
        Kind::Multi,
    ];
}

/// A family's variants, or (`sg`) their twins whose reductions end in
/// subgroup shuffles (`SG_RED` of `shaders/matvec.comp`).
pub(super) fn family(kind: Kind, sg: bool) -> &'static [Option<&'static Shader>] {
    use shaders::by_type as t;
    match (kind, sg) {
        (Kind::Quant, false) => &t::MATVEC_Q,
        (Kind::QuantAdd, false) => &t::MATVEC_Q_ADD,
        (Kind::QuantPost, false) => &t::MATVEC_Q_POST,
        (Kind::Norm, false) => &t::MATVEC_NORM,
        (Kind::NormOut, false) => &t::MATVEC_NORM_OUT,
        (Kind::NormOutGlu, false) => &t::MATVEC_NORM_OUT_GLU,
        (Kind::NormRope, false) => &t::MATVEC_NORM_ROPE,
        (Kind::NormOutRope, false) => &t::MATVEC_NORM_OUT_ROPE,
        (Kind::Multi, false) => &t::MATVEC_NORM_MULTI,
        (Kind::Quant, true) => &t::MATVEC_Q_SG,
        (Kind::QuantAdd, true) => &t::MATVEC_Q_ADD_SG,
        (Kind::QuantPost, true) => &t::MATVEC_Q_POST_SG,
        (Kind::Norm, true) => &t::MATVEC_NORM_SG,
        (Kind::NormOut, true) => &t::MATVEC_NORM_OUT_SG,
        (Kind::NormOutGlu, true) => &t::MATVEC_NORM_OUT_GLU_SG,
        (Kind::NormRope, true) => &t::MATVEC_NORM_ROPE_SG,
        (Kind::NormOutRope, true) => &t::MATVEC_NORM_OUT_ROPE_SG,
        (Kind::Multi, true) => &t::MATVEC_NORM_MULTI_SG,
    }
}

/// The variants of a family that `b` dispatches.
pub(in super::super) fn variants(
    b: &VulkanBackend,
    kind: Kind,
) -> &'static [Option<&'static Shader>] {
    family(kind, b.matvec_subgroups)
}

/// Whether a device can run the `_sg` twins: subgroup shuffles in compute
/// shaders (the shaders themselves fall back to the shared-memory trees
/// where a workgroup is not whole subgroups of at least 8).
pub(in super::super) fn subgroups_supported(limits: &DeviceLimits) -> bool {
    limits.subgroup_shuffle && limits.subgroup_size >= 8
}

/// The family and weight-type index of a fused variant (either twin).
pub(in super::super) fn kind_of(shader: &Shader) -> Option<(Kind, usize)> {
    Kind::ALL.into_iter().find_map(|k| {
        [false, true].into_iter().find_map(|sg| {
            family(k, sg)
                .iter()
                .position(|s| s.is_some_and(|s| s.index == shader.index))
                .map(|t| (k, t))
        })
    })
}

/// The norm a fused matvec computed in its prologue, for the next product
/// of the same normed row (K and V after Q, up after gate): valid while
/// that matvec is the last recorded command.
#[derive(Clone, Debug)]
pub(in super::super) struct NormPrologue {
    /// The norm's output (the products' input), its input, its weight.
    out: Bind,
    src: Bind,
    w: Bind,
    src_offset: u32,
    eps: f32,
    /// (submission, command count) right after the matvec was recorded.
    at: (usize, usize),
}

/// What the matvec's prologue computes its row from.
enum Source {
    /// `x` itself, f32.
    Quant,
    /// The RMS norm of `src` with weight `w` (its output is `x`); `write`:
    /// the matvec also writes it (the first product of that norm).
    Norm {
        src: Bind,
        w: Bind,
        src_offset: u32,
        eps: f32,
        write: bool,
    },
}

/// [`Rule::Matvec`]'s shapes for `out = W x` with the weight `gw` (the
/// plain or `sg` family): a block type with its fused variants, one
/// activation row, one chunk, a row of whole blocks of at most [`MAX_K`]
/// elements not already quantized (`held`: whether it is, in the weight's
/// activation format; `None` for a type without one), at most
/// [`MAX_FUSED_WORKGROUPS`] workgroups. Gives the weight-type index and
/// the workgroups.
pub(super) fn matvec_fits(
    gw: &GpuWeight,
    x: Act,
    held: Option<bool>,
    sg: bool,
) -> Option<(usize, usize)> {
    let t = weight_index(gw.ty)?;
    let held = held?;
    let quant = family(Kind::Quant, sg)[t]?;
    let wgs = gw.n_out.div_ceil(matvec_rows(quant));
    if x.rows() != 1
        || gw.chunks.len() != 1
        || !gw.n_in.is_multiple_of(32)
        || gw.n_in > MAX_K
        || wgs > MAX_FUSED_WORKGROUPS
        || held
    {
        return None;
    }
    Some((t, wgs))
}

/// Records `out = W x` for one activation row (the GPU kernel layout) as
/// a fused matvec, when [`matvec_fits`] takes its shapes, its prologue the norm
/// [`norm_source`] finds (else the quantization of `x`). Returns whether
/// it did.
pub(in super::super) fn matvec(
    b: &mut VulkanBackend,
    gw: &GpuWeight,
    x: Act,
    out: Act,
    held: Option<bool>,
) -> bool {
    if !allowed(b, Rule::Matvec) {
        return false;
    }
    let Some((t, wgs)) = matvec_fits(gw, x, held, b.matvec_subgroups) else {
        return false;
    };
    let xb = Bind::act(x);
    let now = (b.stats.submissions, b.cmds.len());
    let prologue = b.fuse.norm_prologue.as_ref().filter(|n| n.at == now);
    let source = norm_source(b.window(), prologue, x, &xb, &Ctx::of(b));
    if let Some(Source::Norm { write: true, .. }) = source {
        b.drop_last(1); // the norm, now the prologue
    }
    let source = source.unwrap_or(Source::Quant);
    let c = gw.chunks[0];
    let w = WeightPush {
        n_in: u32_of(gw.n_in, "n_in"),
        row_bytes: u32_of(gw.row_bytes, "row bytes"),
        rows: u32_of(c.rows, "rows"),
        col0: u32_of(c.row0, "row"),
        x_offset: 0,
        out_offset: u32_of(out.elems().start, "offset"),
        n_out: u32_of(gw.n_out, "n_out"),
        n_tok: 1,
        units: 0,
    };
    let wbind = Bind::chunk(gw, &c);
    let x_offset = u32_of(x.elems().start, "offset");
    let (kind, binds, f) = match &source {
        Source::Quant => (
            Kind::Quant,
            vec![wbind, xb.clone(), Bind::act(out)],
            FusedPush {
                src_offset: x_offset,
                ..FusedPush::default()
            },
        ),
        Source::Norm {
            src,
            w: nw,
            src_offset,
            eps,
            write,
        } => {
            let mut binds = vec![wbind, src.clone(), Bind::act(out), nw.clone()];
            if *write {
                binds.push(xb.clone());
            }
            let kind = if *write { Kind::NormOut } else { Kind::Norm };
            let f = FusedPush {
                src_offset: *src_offset,
                pro_out_offset: x_offset,
                eps: *eps,
                ..FusedPush::default()
            };
            (kind, binds, f)
        }
    };
    let shader = variants(b, kind)[t].expect("every family has the same types");
    let groups = b.groups_1d(shader, wgs as u64 * u64::from(shader.local_size[0]));
    b.dispatch(shader, &binds, &MatvecFusedPush { w, f }, groups);
    b.fuse.norm_prologue = match source {
        Source::Norm {
            src,
            w,
            src_offset,
            eps,
            ..
        } => Some(NormPrologue {
            out: xb,
            src,
            w,
            src_offset,
            eps,
            at: (b.stats.submissions, b.cmds.len()),
        }),
        Source::Quant => None,
    };
    true
}

/// [`Rule::Matvec`]'s prologue pattern: the norm whose output `x` (`xb`)
/// is, when the matvec can compute it itself. Either `prologue`, the norm
/// the fused matvec recorded last computed (given while it is the last
/// command of `win`), when its output is exactly `xb` (`write` false); or
/// the last command of `win`, an RMS norm with its weight
/// (`RMS_NORM_W`) into exactly `xb`, one group of the whole row, not in
/// place, that [`Rule::AddNorm`] does not take under `ctx` (`write`: the
/// caller drops it, the matvec writes its output).
fn norm_source(
    win: Window,
    prologue: Option<&NormPrologue>,
    x: Act,
    xb: &Bind,
    ctx: &Ctx,
) -> Option<Source> {
    if let Some(n) = prologue {
        if n.out == *xb {
            return Some(Source::Norm {
                src: n.src.clone(),
                w: n.w.clone(),
                src_offset: n.src_offset,
                eps: n.eps,
                write: false,
            });
        }
    }
    let last = win.last()?;
    if last.shader.index != shaders::RMS_NORM_W.index
        || super::norm::add_norm_takes(win.cmds, win.cmds.len() - 1, ctx)
    {
        return None;
    }
    let field = |at: usize| read_u32(last.push, at);
    let n_groups = field(std::mem::offset_of!(RmsNormPush, n_groups));
    let group = field(std::mem::offset_of!(RmsNormPush, group));
    let src_offset = field(std::mem::offset_of!(RmsNormPush, x_offset));
    let eps = f32::from_bits(field(std::mem::offset_of!(RmsNormPush, eps)));
    // Bindings x, out, w.
    let [src, dst, w] = [0, 1, 2].map(|i| Access::bind(&last.access[i]));
    if n_groups != 1 || group as usize != x.width() || dst != *xb || overlaps(&src, &dst) {
        return None;
    }
    Some(Source::Norm {
        src,
        w,
        src_offset,
        eps,
        write: true,
    })
}

/// [`Rule::MatvecAdd`]'s pattern: the `EPI_ADD` kernel (of the plain
/// or `sg` family) for `x += y` (`x` from element `x_offset`) after the
/// commands in `win`, with the product's workgroups, when the last is a
/// fused product of an f32 row (`Quant`) that wrote exactly `y` and
/// touches nothing of `x`.
pub(super) fn matvec_add(
    win: Window,
    x: &Bind,
    y: &Bind,
    x_offset: u32,
    sg: bool,
) -> Option<(Fused, [u32; 3])> {
    let last = win.last()?;
    let (Kind::Quant, t) = kind_of(last.shader)? else {
        return None;
    };
    let binds = last.binds();
    // Bindings: weight, input, out, ...
    if binds[2] != *y || binds.iter().any(|bd| overlaps(bd, x)) {
        return None;
    }
    let shader = family(Kind::QuantAdd, sg)[t].expect("every family has the same types");
    let mut push = last.push.to_vec();
    let at = std::mem::offset_of!(MatvecFusedPush, f) + std::mem::offset_of!(FusedPush, res_offset);
    push[at..at + 4].copy_from_slice(&x_offset.to_le_bytes());
    let binds: Vec<Bind> = binds.into_iter().chain([x.clone()]).collect();
    Some((
        Fused {
            shader,
            binds,
            push,
        },
        last.groups,
    ))
}

/// Records `x += y` as the epilogue of the fused matvec recorded last
/// ([`Rule::MatvecAdd`]). Returns whether it did.
pub(in super::super) fn add_into_matvec(b: &mut VulkanBackend, x: Act, y: Act) -> bool {
    if !allowed(b, Rule::MatvecAdd) {
        return false;
    }
    let x_offset = u32_of(x.elems().start, "offset");
    let (xb, yb) = (Bind::act(x), Bind::act(y));
    let Some((f, groups)) = matvec_add(b.window(), &xb, &yb, x_offset, b.matvec_subgroups) else {
        return false;
    };
    b.drop_last(1);
    b.dispatch_bytes(f.shader, &f.binds, f.push, groups);
    true
}

/// The largest row a post-norm epilogue takes (one workgroup norms it).
const MAX_POST_ROW: usize = 8192;

/// [`Rule::MatvecPostNorm`]'s pattern for `x += y` (`x` from element
/// `x_offset`; `y` one row of `width`) on the last two commands in `win`:
/// the fused product of an f32 row (`Quant`) that wrote exactly `y` (one
/// chunk of all its rows) and touches nothing of `x`, then the RMS norm
/// of `y` in place, one group of the whole row, with its weight; `x`
/// apart from `y`, a row of at most [`MAX_POST_ROW`]. Gives the
/// `EPI_POST_NORM` kernel (of the plain or `sg` family) with its bindings
/// before the counter, and the product's workgroups.
pub(super) fn post_norm(
    win: Window,
    (xb, yb): (&Bind, &Bind),
    x_offset: u32,
    width: usize,
    sg: bool,
) -> Option<(Fused, [u32; 3])> {
    if width > MAX_POST_ROW {
        return None;
    }
    let (mv, norm) = (win.back(1)?, win.last()?);
    let Some((Kind::Quant, t)) = kind_of(mv.shader) else {
        return None;
    };
    if norm.shader.index != shaders::RMS_NORM_W.index {
        return None;
    }
    // Norm bindings: x, out, w; matvec: weight, input, out.
    let nb = norm.binds();
    let mb = mv.binds();
    let field = |push: &[u8], at: usize| read_u32(push, at);
    let n_groups = field(norm.push, std::mem::offset_of!(RmsNormPush, n_groups));
    let eps = field(norm.push, std::mem::offset_of!(RmsNormPush, eps));
    let w_at = std::mem::offset_of!(MatvecFusedPush, w);
    let rows = field(mv.push, w_at + std::mem::offset_of!(WeightPush, rows));
    let col0 = field(mv.push, w_at + std::mem::offset_of!(WeightPush, col0));
    if nb[0] != *yb
        || nb[1] != *yb
        || n_groups != 1
        || mb[2] != *yb
        || col0 != 0
        || rows as usize != width
        || overlaps(xb, yb)
        || mb.iter().any(|m| overlaps(m, xb))
    {
        return None;
    }
    let mut push = mv.push.to_vec();
    let f_at = std::mem::offset_of!(MatvecFusedPush, f);
    let put = |push: &mut Vec<u8>, at: usize, v: u32| {
        push[f_at + at..f_at + at + 4].copy_from_slice(&v.to_le_bytes());
    };
    put(&mut push, std::mem::offset_of!(FusedPush, aux_offset), 0);
    put(&mut push, std::mem::offset_of!(FusedPush, eps), eps);
    put(
        &mut push,
        std::mem::offset_of!(FusedPush, res_offset),
        x_offset,
    );
    let shader = family(Kind::QuantPost, sg)[t].expect("every family has the same types");
    let binds = vec![
        mb[0].clone(),
        mb[1].clone(),
        yb.clone(),
        nb[2].clone(),
        xb.clone(),
    ];
    let fused = Fused {
        shader,
        binds,
        push,
    };
    Some((fused, mv.groups))
}

/// Records `x += y` after the RMS norm recorded last within the fused
/// matvec recorded before it, when [`post_norm`] matches them: the
/// `EPI_POST_NORM` variant replaces both, its last workgroup norming the
/// row and adding it (a post-norm, Gemma-3's). Not while fault
/// `gpu-post-norm-add` is injected (it acts on `rms_norm.comp`'s ADD_TO,
/// which then runs as before). Returns whether it did.
pub(in super::super) fn post_norm_into_matvec(b: &mut VulkanBackend, x: Act, y: Act) -> bool {
    if !allowed(b, Rule::MatvecPostNorm) || fault::active("gpu-post-norm-add") || y.rows() != 1 {
        return false;
    }
    let (xb, yb) = (Bind::act(x), Bind::act(y));
    let x_offset = u32_of(x.elems().start, "offset");
    let sg = b.matvec_subgroups;
    let Some((f, groups)) = post_norm(b.window(), (&xb, &yb), x_offset, y.width(), sg) else {
        return false;
    };
    b.drop_last(2);
    b.fuse.norm_prologue = None;
    // After the two are taken off: making the counter records its fill.
    if let Some(cnt) = post_counter(b) {
        let mut binds = f.binds;
        binds.push(cnt);
        b.dispatch_bytes(f.shader, &binds, f.push, groups);
    }
    true
}

/// Records the gated unit `x = glu(x, y)` (x the gate's product, y the up
/// projection's, in place as `binary.comp` computes it) within the two
/// fused matvecs recorded last, when they are the two products of one
/// normed row (the first writing the norm's output), of one weight type
/// and shape, and wrote exactly `x` and `y`: `matvec.comp`'s PAIR_GLU
/// variant replaces both. Returns whether it did.
pub(in super::super) fn glu_into_matvecs(
    b: &mut VulkanBackend,
    kind: GluKind,
    x: Act,
    y: Act,
) -> bool {
    if !allowed(b, Rule::MatvecGlu) || x.rows() != 1 {
        return false;
    }
    let (xb, yb) = (Bind::act(x), Bind::act(y));
    let Some((f, n)) = matvec_glu(b.window(), kind, (&xb, &yb), b.matvec_subgroups) else {
        return false;
    };
    b.drop_last(2);
    b.fuse.norm_prologue = None;
    let groups = b.groups_1d(f.shader, n);
    b.dispatch_bytes(f.shader, &f.binds, f.push, groups);
    true
}

/// [`Rule::MatvecGlu`]'s pattern: the PAIR_GLU kernel (of the plain or
/// `sg` family) for `x = glu(x, y)` after the commands in `win`, and its
/// invocations, when the last two are the products of one normed row (the
/// first writing the norm's output) of one weight type and shape that
/// wrote exactly `x` and `y`.
pub(super) fn matvec_glu(
    win: Window,
    kind: GluKind,
    (xb, yb): (&Bind, &Bind),
    sg: bool,
) -> Option<(Fused, u64)> {
    let (Some(first), Some(second)) = (win.back(1), win.last()) else {
        return None;
    };
    let (Some((k1, t1)), Some((k2, t2))) = (kind_of(first.shader), kind_of(second.shader)) else {
        return None;
    };
    if k1 != Kind::NormOut || k2 != Kind::Norm || t1 != t2 || first.groups != second.groups {
        return None;
    }
    let b1: Vec<Bind> = first.access.iter().map(Access::bind).collect();
    let b2: Vec<Bind> = second.access.iter().map(Access::bind).collect();
    // Bindings: weight, norm input, out, norm weight (, norm output).
    let (gate, up) = if b1[2] == *xb && b2[2] == *yb {
        (&b1, &b2)
    } else if b2[2] == *xb && b1[2] == *yb {
        (&b2, &b1)
    } else {
        return None;
    };
    let f_at = std::mem::offset_of!(MatvecFusedPush, f);
    let w_at = std::mem::offset_of!(MatvecFusedPush, w);
    let same_norm = b1[1] == b2[1]
        && b1[3] == b2[3]
        && first.push[f_at..f_at + 8] == second.push[f_at..f_at + 8]
        && first.push[f_at + 16..f_at + 20] == second.push[f_at + 16..f_at + 20]
        && first.push[w_at..w_at + 16] == second.push[w_at..w_at + 16];
    if !same_norm {
        return None;
    }
    let out_at = w_at + std::mem::offset_of!(WeightPush, out_offset);
    let res_at = f_at + std::mem::offset_of!(FusedPush, res_offset);
    let op_at = f_at + std::mem::offset_of!(FusedPush, op);
    let (gate_push, up_push) = if b1[2] == *xb {
        (first.push, second.push)
    } else {
        (second.push, first.push)
    };
    let mut push = first.push.to_vec(); // the norm's output offset
    push[out_at..out_at + 4].copy_from_slice(&gate_push[out_at..out_at + 4]);
    push[res_at..res_at + 4].copy_from_slice(&up_push[out_at..out_at + 4]);
    let op: u32 = match kind {
        GluKind::SwiGlu => crate::op_codes::GLU_SWIGLU,
        GluKind::GeGluTanh => crate::op_codes::GLU_GEGLU,
    };
    push[op_at..op_at + 4].copy_from_slice(&op.to_le_bytes());
    let shader = family(Kind::NormOutGlu, sg)[t1].expect("every family has the same types");
    // Bindings: gate weight, norm input, gate out, norm weight, norm
    // output, up weight, up out.
    let binds = vec![
        gate[0].clone(),
        b1[1].clone(),
        gate[2].clone(),
        b1[3].clone(),
        b1[4].clone(),
        up[0].clone(),
        up[2].clone(),
    ];
    let rows = u64::from(u32::from_le_bytes(
        push[w_at + 8..w_at + 12].try_into().expect("four bytes"),
    ));
    let per = (matvec_rows(shader) / 2) as u64;
    let invocations = rows.div_ceil(per) * u64::from(shader.local_size[0]);
    let fused = Fused {
        shader,
        binds,
        push,
    };
    Some((fused, invocations))
}

#[cfg(test)]
#[path = "matvec_tests.rs"]
mod tests;

//! A decode step's feed-forward block in one dispatch
//! (`shaders/ffn_decode.comp`, `by_type::FFN_DECODE`): where the fused
//! gate / up / unit dispatch (`Kind::NormOutGlu`) is followed at once by
//! the down projection of its unit with the residual add
//! (`Kind::QuantAdd`), both of one 32-element block type with Q8_0 or
//! Q8_1 activations, the two become one dispatch, one dependent stage
//! fewer per layer, with the same bits (tests:
//! `engine/tests/vulkan_matvec_fused.rs`). A peephole at the add, like the
//! other matvec fusions: the model code records the same ops on every
//! backend.
//!
//! Each workgroup takes one 32-element block of the unit and writes its
//! term of every down row to a partials buffer; the last workgroup to
//! finish sums them (the shader's docs). The residual may be the norm's
//! input (a pre-norm layer's `x += ffn(norm(x))`): every workgroup has read
//! the input before it counts itself done, and only the last one writes the
//! residual.

use super::super::hazard::Access;
use super::matvec::{kind_of, Kind};
use super::window::Window;
use super::{allowed, overlaps, partials, post_counter, read_u32, Fused, Rule};
use super::{Bind, VulkanBackend};
use crate::fault;
use crate::vulkan::push::{FfnPush, FusedPush, MatvecFusedPush, WeightPush};
use crate::vulkan::{shaders, PushConstants, Shader};

/// Unit elements per workgroup (`UB` of the shader: one activation block).
const UNIT_BLOCK: u32 = 32;

/// The variant for weight-type index `t`, where the block is fused.
fn variant(t: usize) -> Option<&'static Shader> {
    shaders::by_type::FFN_DECODE.get(t).copied().flatten()
}

/// [`Rule::Ffn`]'s pattern on the last two commands in `win`: the fused
/// gate / up / unit dispatch (`NormOutGlu`) then the down projection of
/// its unit with the residual add (`QuantAdd`), of one type that has the
/// block kernel, whole 32-element blocks of units, one chunk each; the
/// down projection reads exactly the unit; the outputs apart from each
/// other and from every input, the residual apart from all but the norm's
/// input. Gives the kernel with its bindings before the partials and the
/// counter, the partials' bytes and the workgroups.
pub(super) fn ffn(win: Window) -> Option<(Fused, u64, u64)> {
    let (glu, down) = (win.back(1)?, win.last()?);
    let (Some((Kind::NormOutGlu, t)), Some((Kind::QuantAdd, t2))) =
        (kind_of(glu.shader), kind_of(down.shader))
    else {
        return None;
    };
    let shader = variant(t)?;
    if t != t2 {
        return None;
    }
    // Gate / up bindings: gate weight, norm input, gate out, norm weight,
    // norm output, up weight, up out. Down: weight, input, out, residual.
    let gb: Vec<Bind> = glu.access.iter().map(Access::bind).collect();
    let db: Vec<Bind> = down.access.iter().map(Access::bind).collect();
    let w_at = std::mem::offset_of!(MatvecFusedPush, w);
    let f_at = std::mem::offset_of!(MatvecFusedPush, f);
    let gw = |at: usize| read_u32(glu.push, w_at + at);
    let dw = |at: usize| read_u32(down.push, w_at + at);
    let df = |at: usize| read_u32(down.push, f_at + at);
    let units = gw(std::mem::offset_of!(WeightPush, rows));
    let down_rows = dw(std::mem::offset_of!(WeightPush, rows));
    let fits = units.is_multiple_of(UNIT_BLOCK)
        && units > 0
        && gw(std::mem::offset_of!(WeightPush, col0)) == 0
        && dw(std::mem::offset_of!(WeightPush, col0)) == 0
        && dw(std::mem::offset_of!(WeightPush, n_in)) == units
        && down_rows == dw(std::mem::offset_of!(WeightPush, n_out));
    // The down projection reads exactly the unit the first wrote.
    let reads_unit = db[1] == gb[2]
        && df(std::mem::offset_of!(FusedPush, src_offset))
            == gw(std::mem::offset_of!(WeightPush, out_offset));
    // Outputs apart from each other and from every input; the residual
    // apart from all but the norm's input.
    let outs = [&gb[2], &gb[4], &gb[6], &db[2]];
    let ins = [&gb[0], &gb[1], &gb[3], &gb[5], &db[0]];
    let res = &db[3];
    let apart = outs.iter().enumerate().all(|(i, o)| {
        outs[i + 1..].iter().all(|p| !overlaps(o, p)) && ins.iter().all(|x| !overlaps(o, x))
    }) && outs.iter().all(|o| !overlaps(o, res))
        && [&gb[0], &gb[3], &gb[5], &db[0]]
            .iter()
            .all(|x| !overlaps(x, res));
    if !fits || !reads_unit || !apart {
        return None;
    }
    let groups_n = u64::from(units / UNIT_BLOCK);
    let part_bytes = groups_n * u64::from(down_rows) * 4;
    let mut push = glu.push.to_vec();
    let ffn = FfnPush {
        down_row_bytes: dw(std::mem::offset_of!(WeightPush, row_bytes)),
        down_rows,
        down_out_offset: dw(std::mem::offset_of!(WeightPush, out_offset)),
        res_offset: df(std::mem::offset_of!(FusedPush, res_offset)),
    };
    push.extend_from_slice(ffn.as_bytes());
    let mut binds: Vec<Bind> = gb
        .iter()
        .cloned()
        .chain([db[0].clone(), db[2].clone(), db[3].clone()])
        .collect();
    if fault::active("gpu-ffn-bind") {
        // The up weight bound where the gate's goes.
        binds[0] = gb[5].clone();
    }
    let fused = Fused {
        shader,
        binds,
        push,
    };
    Some((fused, part_bytes, groups_n))
}

/// Records the fused gate / up / unit dispatch and the down projection
/// with its add recorded right after it as one `ffn_decode` dispatch,
/// when [`ffn`] matches them (see the module docs). Called right after
/// the add fused into the down projection. Returns whether it did.
pub(in super::super) fn ffn_into_matvecs(b: &mut VulkanBackend) -> bool {
    if !allowed(b, Rule::Ffn) {
        return false;
    }
    let Some((f, part_bytes, groups_n)) = ffn(b.window()) else {
        return false;
    };
    b.drop_last(2);
    // After the two are taken off: making a buffer may record its fill.
    let (Some(part), Some(cnt)) = (partials(b, part_bytes), post_counter(b)) else {
        return true; // the backend's error is set
    };
    let mut binds = f.binds;
    binds.extend([part, cnt]);
    let groups = b.groups_1d(f.shader, groups_n * u64::from(f.shader.local_size[0]));
    b.dispatch_bytes(f.shader, &binds, f.push, groups);
    true
}

#[cfg(test)]
#[path = "ffn_tests.rs"]
mod tests;

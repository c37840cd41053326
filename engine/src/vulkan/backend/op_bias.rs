//! A projection's bias added to every row of its output, in place
//! (`shaders/add_bias.comp`): a plain kernel of its own. It writes the
//! product's output, so the decode fusion rules that join a later op to
//! the product that wrote its input (the RoPE and cache-write epilogues,
//! the residual add: `fuse/`) find the bias add as that input's last
//! writer instead, and leave the product as it is.

use super::{Bind, VulkanBackend};
use crate::ggml_type::GgmlType;
use crate::ops::{Act, Weight};
use crate::vulkan::push::BiasPush;
use crate::vulkan::shaders;

/// `x[t, i] += bias[i]` for every row `t` of `x` `[rows, width]`; `bias`
/// is `width` f32 values in one chunk (as the norms' weights are).
pub(super) fn add_bias(b: &mut VulkanBackend, x: Act, bias: Weight) {
    let gw = b.weight(bias);
    assert!(
        gw.ty == GgmlType::F32 && gw.n_out == 1 && gw.n_in == x.width() && gw.chunks.len() == 1,
        "add_bias: bias {} must be {} f32 values in one chunk",
        gw.name,
        x.width()
    );
    let bind = Bind::chunk(gw, &gw.chunks[0]);
    let push = BiasPush {
        n: u32::try_from(x.len()).expect("add_bias: elements fit u32"),
        offset: u32::try_from(x.elems().start).expect("activation offsets fit u32"),
        width: x.width() as u32,
    };
    let groups = b.groups_1d(&shaders::ADD_BIAS, u64::from(push.n));
    b.dispatch(&shaders::ADD_BIAS, &[Bind::act(x), bind], &push, groups);
}

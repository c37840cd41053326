//! Elementwise ops, norms and RoPE on the device.

use super::{Bind, VulkanBackend};
use crate::ops::{Act, GluKind, RopeParams, Weight};
use crate::vulkan::{shaders, BinaryPush};

fn same_shape(op: &str, x: Act, y: Act) {
    assert!(
        x.rows() == y.rows() && x.width() == y.width(),
        "{op}: shapes {x:?} and {y:?} differ"
    );
}

/// `x += y`, through `shaders/add.comp` (out = a + b, elementwise; `x` is
/// both an input and the output: each invocation reads and writes its own
/// element).
pub(super) fn add(b: &mut VulkanBackend, x: Act, y: Act) {
    same_shape("add", x, y);
    let n = x.len() as u32;
    let push = BinaryPush {
        n,
        a_offset: x.elems().start as u32,
        b_offset: y.elems().start as u32,
        out_offset: x.elems().start as u32,
    };
    let groups = b.groups_1d(&shaders::ADD, u64::from(n));
    b.dispatch(
        &shaders::ADD,
        &[Bind::act(x), Bind::act(y), Bind::act(x)],
        &push,
        groups,
    );
}

pub(super) fn mul(_b: &mut VulkanBackend, _x: Act, _y: Act) {
    unimplemented!("vulkan mul")
}

pub(super) fn scale(_b: &mut VulkanBackend, _x: Act, _s: f32) {
    unimplemented!("vulkan scale")
}

pub(super) fn softcap(_b: &mut VulkanBackend, _x: Act, _cap: f32) {
    unimplemented!("vulkan softcap")
}

pub(super) fn glu(_b: &mut VulkanBackend, _kind: GluKind, _gate: Act, _up: Act) {
    unimplemented!("vulkan glu")
}

pub(super) fn rms_norm(
    _b: &mut VulkanBackend,
    _x: Act,
    _w: Option<Weight>,
    _eps: f32,
    _group: usize,
    _out: Act,
) {
    unimplemented!("vulkan rms_norm")
}

pub(super) fn rope(_b: &mut VulkanBackend, _x: Act, _p: &RopeParams, _pos0: usize) {
    unimplemented!("vulkan rope")
}

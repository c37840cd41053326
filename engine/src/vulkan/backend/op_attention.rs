//! Attention through the KV cache on the device.

use super::VulkanBackend;
use crate::ops::{Act, AttnParams, Kv};

#[allow(clippy::too_many_arguments)]
pub(super) fn attention(
    _b: &mut VulkanBackend,
    _kv: Kv,
    _q: Act,
    _k: Act,
    _v: Act,
    _out: Act,
    _pos0: usize,
    _p: &AttnParams,
) {
    unimplemented!("vulkan attention")
}

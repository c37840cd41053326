//! Matrix products on quantized weights and the embedding lookup.

use super::VulkanBackend;
use crate::ggml_type::GgmlType;
use crate::ops::{Act, Weight};

/// Weight types the device ops read.
pub(super) fn supports(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::F32)
}

pub(super) fn embed(_b: &mut VulkanBackend, _table: Weight, _tokens: &[u32], _out: Act) {
    unimplemented!("vulkan embed")
}

pub(super) fn matmul(_b: &mut VulkanBackend, _w: Weight, _x: Act, _out: Act) {
    unimplemented!("vulkan matmul")
}

//! [`DeviceLimits`]: what the rest of the backend needs to know of a device,
//! read from its properties once when the [`Context`](super::Context) is made.

use ash::vk;

/// Limits the rest of the backend needs.
#[derive(Clone, Copy, Debug)]
pub struct DeviceLimits {
    pub max_compute_work_group_count: [u32; 3],
    pub max_push_constants_size: u32,
    pub max_storage_buffer_range: u32,
    /// Bytes of the device-local memory heaps together (the budget of
    /// weights, KV caches and activations).
    pub device_local_bytes: u64,
    pub min_storage_buffer_offset_alignment: u64,
    /// Nanoseconds per timestamp tick (`timestampPeriod`).
    pub timestamp_period: f32,
    /// Invocations per subgroup (`subgroupSize`).
    pub subgroup_size: u32,
    /// Whether compute shaders have subgroup shuffles
    /// (`VK_SUBGROUP_FEATURE_SHUFFLE_BIT` in the compute stage).
    pub subgroup_shuffle: bool,
    /// Whether compute shaders have subgroup arithmetic (min, max, add).
    pub subgroup_arithmetic: bool,
    /// Whether the device can keep f32 denormals
    /// (`shaderDenormPreserveFloat32`). Shaders do not ask it to, so a device
    /// may flush them either way (NVIDIA's H200 does, and says false;
    /// lavapipe keeps them, and says false too); the op tests allow a
    /// flushed denormal where this is false.
    pub denorm_preserve_f32: bool,
    /// Whether shaders may take packed 4 x 8-bit integer dot products
    /// (`shaderIntegerDotProduct` of VK_KHR_shader_integer_dot_product,
    /// enabled at device creation where the device has it).
    pub integer_dot: bool,
    /// Whether shaders may take cooperative matrices of halves into f32
    /// (VK_NV_cooperative_matrix, 16 x 16 x 16 at subgroup scope, with
    /// `shaderFloat16`, both enabled at device creation where the device
    /// has them; subgroups of 32 with shuffles): the prefill attention's
    /// `attention_coop` variants.
    pub coop_f16: bool,
}

impl DeviceLimits {
    /// The limits of a device with properties `props` and memory `memory`.
    pub(crate) fn new(
        props: &vk::PhysicalDeviceProperties,
        subgroup: &vk::PhysicalDeviceSubgroupProperties,
        float_controls: &vk::PhysicalDeviceFloatControlsProperties,
        memory: &vk::PhysicalDeviceMemoryProperties,
    ) -> DeviceLimits {
        let device_local_bytes = memory.memory_heaps[..memory.memory_heap_count as usize]
            .iter()
            .filter(|h| h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL))
            .map(|h| h.size)
            .sum();
        let l = &props.limits;
        // Whether compute shaders have the subgroup operations `ops`.
        let compute_has = |ops: vk::SubgroupFeatureFlags| {
            subgroup
                .supported_stages
                .contains(vk::ShaderStageFlags::COMPUTE)
                && subgroup.supported_operations.contains(ops)
        };
        DeviceLimits {
            max_compute_work_group_count: l.max_compute_work_group_count,
            max_push_constants_size: l.max_push_constants_size,
            max_storage_buffer_range: l.max_storage_buffer_range,
            device_local_bytes,
            min_storage_buffer_offset_alignment: l.min_storage_buffer_offset_alignment,
            timestamp_period: l.timestamp_period,
            subgroup_size: subgroup.subgroup_size,
            subgroup_shuffle: compute_has(vk::SubgroupFeatureFlags::SHUFFLE),
            subgroup_arithmetic: compute_has(vk::SubgroupFeatureFlags::ARITHMETIC),
            denorm_preserve_f32: float_controls.shader_denorm_preserve_float32 == vk::TRUE,
            integer_dot: false,
            coop_f16: false,
        }
    }
}

//! Compute pipelines built from the shader table: the layout (N storage-buffer
//! bindings in set 0 and a push-constant range) comes from the shader's reflection.
//! [`Context::pipeline`](super::Context::pipeline) creates each one once and caches it.

use ash::vk;

use super::error::{VkCall, VkError, VkResult};
use super::limits::DeviceLimits;
use super::shaders::Shader;

/// A compute pipeline with its layouts. Owned by the context's cache.
#[derive(Debug)]
pub struct Pipeline {
    pub(crate) raw: vk::Pipeline,
    pub(crate) layout: vk::PipelineLayout,
    pub(crate) set_layout: vk::DescriptorSetLayout,
    /// The device this pipeline belongs to (checked when recording).
    pub(crate) device: vk::Device,
    shader: Shader,
    max_groups: [u32; 3],
}

impl Pipeline {
    /// `stats`: the statistics queries where they are asked for
    /// ([`super::pipeline_stats`]): the pipeline is created to capture
    /// them, and they are printed.
    pub(crate) fn new(
        device: &ash::Device,
        shader: &Shader,
        limits: &DeviceLimits,
        stats: Option<&ash::khr::pipeline_executable_properties::Device>,
    ) -> VkResult<Self> {
        if shader.push_constant_size > limits.max_push_constants_size {
            return Err(VkError::Dispatch {
                shader: shader.name,
                message: format!(
                    "{} bytes of push constants exceed the device's {}",
                    shader.push_constant_size, limits.max_push_constants_size
                ),
            });
        }
        let bindings: Vec<vk::DescriptorSetLayoutBinding> = (0..shader.bindings.len() as u32)
            .map(|binding| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(binding)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        let set_info = vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings);
        // SAFETY: valid create info (bindings outlive the call) for a live device.
        let set_layout = unsafe { device.create_descriptor_set_layout(&set_info, None) }
            .call("vkCreateDescriptorSetLayout")?;

        let ranges = [vk::PushConstantRange::default()
            .stage_flags(vk::ShaderStageFlags::COMPUTE)
            .offset(0)
            .size(shader.push_constant_size)];
        let set_layouts = [set_layout];
        let mut layout_info = vk::PipelineLayoutCreateInfo::default().set_layouts(&set_layouts);
        if shader.push_constant_size > 0 {
            layout_info = layout_info.push_constant_ranges(&ranges);
        }
        // SAFETY: `set_layout` is live; the arrays outlive the call.
        let layout = match unsafe { device.create_pipeline_layout(&layout_info, None) } {
            Ok(l) => l,
            Err(result) => {
                // SAFETY: `set_layout` was created above and nothing uses it.
                unsafe { device.destroy_descriptor_set_layout(set_layout, None) };
                return Err(VkError::Vk {
                    call: "vkCreatePipelineLayout",
                    result,
                });
            }
        };
        let destroy_layouts = || {
            // SAFETY: both were created above; no pipeline uses them (creation failed).
            unsafe {
                device.destroy_pipeline_layout(layout, None);
                device.destroy_descriptor_set_layout(set_layout, None);
            }
        };

        let module_info = vk::ShaderModuleCreateInfo::default().code(shader.spirv());
        // SAFETY: the words are SPIR-V that shaderc produced for this target
        // environment (validated by shaderc's optimiser); the slice outlives the call.
        let module = match unsafe { device.create_shader_module(&module_info, None) } {
            Ok(m) => m,
            Err(result) => {
                destroy_layouts();
                return Err(VkError::Vk {
                    call: "vkCreateShaderModule",
                    result,
                });
            }
        };
        let stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(module)
            .name(c"main");
        let flags = if stats.is_some() {
            vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR
        } else {
            vk::PipelineCreateFlags::empty()
        };
        let info = [vk::ComputePipelineCreateInfo::default()
            .flags(flags)
            .stage(stage)
            .layout(layout)];
        // SAFETY: module and layout are live, and the layout matches the shader's
        // interface (built from its reflection above).
        let created =
            unsafe { device.create_compute_pipelines(vk::PipelineCache::null(), &info, None) };
        // SAFETY: a shader module may be destroyed once pipelines are created from it.
        unsafe { device.destroy_shader_module(module, None) };
        let raw = match created {
            Ok(p) => p[0],
            Err((_, result)) => {
                destroy_layouts();
                return Err(VkError::Vk {
                    call: "vkCreateComputePipelines",
                    result,
                });
            }
        };
        if let Some(loader) = stats {
            super::pipeline_stats::report(loader, raw, shader.name);
        }
        Ok(Self {
            raw,
            layout,
            set_layout,
            device: device.handle(),
            shader: *shader,
            max_groups: limits.max_compute_work_group_count,
        })
    }

    /// The shader this pipeline runs.
    pub fn shader(&self) -> &Shader {
        &self.shader
    }

    /// Workgroup counts covering `invocations` invocations of a 1-D problem with
    /// `local_size_x` invocations per group. Above the device's x limit the groups
    /// spill into y; shaders index with `global_index_1d()` (common/index.glsl) and
    /// must bounds-check, since the grid may cover more than asked.
    pub fn groups_for(&self, invocations: u64) -> VkResult<[u32; 3]> {
        groups_1d(invocations, self.shader.local_size[0], self.max_groups)
    }

    pub(crate) fn destroy(self, device: &ash::Device) {
        // SAFETY: called only when the context is being dropped after
        // vkDeviceWaitIdle (or for a pipeline never handed out), so no command
        // buffer in use refers to these objects; each is destroyed once (self is
        // consumed).
        unsafe {
            device.destroy_pipeline(self.raw, None);
            device.destroy_pipeline_layout(self.layout, None);
            device.destroy_descriptor_set_layout(self.set_layout, None);
        }
    }
}

/// Workgroups for `invocations` with `local` invocations per group: x up to
/// `max[0]`, the rest in y.
pub(crate) fn groups_1d(invocations: u64, local: u32, max: [u32; 3]) -> VkResult<[u32; 3]> {
    let groups = invocations.div_ceil(u64::from(local.max(1)));
    if groups == 0 {
        return Ok([0, 1, 1]);
    }
    let x = groups.min(u64::from(max[0]));
    let y = groups.div_ceil(x);
    if y > u64::from(max[1]) {
        return Err(VkError::TooLarge { invocations });
    }
    Ok([x as u32, y as u32, 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_spill_into_y() {
        let max = [65535, 65535, 65535];
        assert_eq!(groups_1d(0, 256, max).unwrap(), [0, 1, 1]);
        assert_eq!(groups_1d(1, 256, max).unwrap(), [1, 1, 1]);
        assert_eq!(groups_1d(100_003, 256, max).unwrap(), [391, 1, 1]);
        assert_eq!(groups_1d(65535 * 256, 256, max).unwrap(), [65535, 1, 1]);
        assert_eq!(groups_1d(65535 * 256 + 1, 256, max).unwrap(), [65535, 2, 1]);
        let [x, y, _] = groups_1d(1 << 32, 256, max).unwrap();
        assert!(u64::from(x) * u64::from(y) * 256 >= 1 << 32);
        assert!(groups_1d(u64::MAX, 256, max).is_err());
    }
}

//! The process's Vulkan devices: one instance per validation setting and one
//! logical device per physical device, opened once and kept for the life of
//! the process. Every [`Context`](super::Context) on a physical device
//! shares its [`Device`]: queue, memory allocator and pipelines.
//!
//! Why nothing is destroyed while the process runs: the Khronos validation
//! layer keeps its per-instance and per-device state in one process-wide
//! map (`layer_data_map`) that it reads on every call and writes, without a
//! lock, in vkCreateInstance/vkCreateDevice and vkDestroyInstance/
//! vkDestroyDevice (its own source says "We probably should lock here, or
//! have caller lock"). One context being created or dropped while another
//! thread called into its own device crashed the process inside the layer
//! (docs/threading.md has the backtrace). So with validation every device
//! of the instance is opened together, when the instance is created, under
//! the registry's lock, and none is ever destroyed: after that first call
//! the layer's map is only read. Without validation devices open on first
//! use, under the same lock.

use std::sync::{Mutex, MutexGuard, OnceLock};

use ash::vk;
use gpu_allocator::vulkan::{Allocator, AllocatorCreateDesc};

use super::error::{VkCall, VkError, VkResult};
use super::instance::{extension_features, DeviceInfo, Instance, API_VERSION};
use super::limits::DeviceLimits;
use super::pipeline::Pipeline;
use super::pipeline_stats;
use super::shaders;

/// One logical device with its compute queue, memory allocator and
/// pipelines; shared by every context on its physical device, never
/// destroyed.
pub(crate) struct Device {
    pub(crate) raw: ash::Device,
    /// vkQueueSubmit and vkDeviceWaitIdle need the queue externally
    /// synchronised.
    queue: Mutex<vk::Queue>,
    pub(crate) queue_family: u32,
    allocator: Mutex<Allocator>,
    /// One slot per entry of [`shaders::ALL`], filled on first use.
    pub(crate) pipelines: Vec<OnceLock<Pipeline>>,
    pub(crate) info: DeviceInfo,
    pub(crate) limits: DeviceLimits,
    pub(crate) instance: &'static Instance,
    /// The statistics queries ([`pipeline_stats`]), where asked for and
    /// the device has them.
    pub(crate) stats: Option<ash::khr::pipeline_executable_properties::Device>,
}

impl Device {
    pub(crate) fn allocator(&self) -> MutexGuard<'_, Allocator> {
        self.allocator.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn queue(&self) -> MutexGuard<'_, vk::Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens the physical device `physical` (`info`) of `instance`.
    fn open(
        instance: &'static Instance,
        physical: vk::PhysicalDevice,
        info: &DeviceInfo,
    ) -> VkResult<Device> {
        let info = info.clone();
        // SAFETY: `physical` was enumerated from this live instance.
        let props = unsafe { instance.raw.get_physical_device_properties(physical) };
        if props.api_version < API_VERSION {
            let v = |x| format!("{}.{}", vk::api_version_major(x), vk::api_version_minor(x));
            return Err(VkError::DeviceTooOld {
                name: info.name,
                have: v(props.api_version),
                need: v(API_VERSION),
            });
        }
        // SAFETY: as above.
        let families = unsafe {
            instance
                .raw
                .get_physical_device_queue_family_properties(physical)
        };
        let queue_family = choose_compute_family(&families)
            .ok_or_else(|| VkError::NoComputeQueue(info.name.clone()))?;

        let integer_dot = integer_dot_product(instance, physical)?;
        let coop = coop_f16(instance, physical)?;
        let priorities = [1.0f32];
        let queue_info = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(queue_family)
            .queue_priorities(&priorities)];
        let stats = pipeline_stats::enabled() && pipeline_stats::supported(instance, physical)?;
        if pipeline_stats::enabled() && !stats {
            eprintln!(
                "sharpi: pipeline stats: {} lacks VK_KHR_pipeline_executable_properties",
                info.name
            );
        }
        let mut extensions = Vec::new();
        let mut dot_features = vk::PhysicalDeviceShaderIntegerDotProductFeatures::default()
            .shader_integer_dot_product(true);
        let mut exec_features =
            vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default()
                .pipeline_executable_info(true);
        let mut coop_features =
            vk::PhysicalDeviceCooperativeMatrixFeaturesNV::default().cooperative_matrix(true);
        let mut f16_features =
            vk::PhysicalDeviceShaderFloat16Int8Features::default().shader_float16(true);
        let mut model_features = vk::PhysicalDeviceVulkanMemoryModelFeatures::default()
            .vulkan_memory_model(true)
            .vulkan_memory_model_device_scope(true);
        let mut device_info = vk::DeviceCreateInfo::default().queue_create_infos(&queue_info);
        if coop {
            extensions.push(ash::nv::cooperative_matrix::NAME.as_ptr());
            device_info = device_info
                .push_next(&mut coop_features)
                .push_next(&mut f16_features)
                .push_next(&mut model_features);
        }
        if integer_dot {
            extensions.push(ash::khr::shader_integer_dot_product::NAME.as_ptr());
            device_info = device_info.push_next(&mut dot_features);
        }
        if stats {
            extensions.push(ash::khr::pipeline_executable_properties::NAME.as_ptr());
            device_info = device_info.push_next(&mut exec_features);
        }
        device_info = device_info.enabled_extension_names(&extensions);
        // SAFETY: `physical` belongs to this instance; the create info points to
        // locals that outlive the call; one queue of an existing family is
        // requested; the extensions and features enabled were found supported.
        let raw = unsafe { instance.raw.create_device(physical, &device_info, None) }
            .call("vkCreateDevice")?;
        // SAFETY: queue 0 of `queue_family` was requested at device creation.
        let queue = unsafe { raw.get_device_queue(queue_family, 0) };

        let allocator = Allocator::new(&AllocatorCreateDesc {
            instance: instance.raw.clone(),
            device: raw.clone(),
            physical_device: physical,
            debug_settings: Default::default(),
            buffer_device_address: false,
            allocation_sizes: Default::default(),
        });
        let allocator = match allocator {
            Ok(a) => a,
            Err(source) => {
                // SAFETY: the device was just created and nothing uses it yet.
                unsafe { raw.destroy_device(None) };
                return Err(VkError::Alloc {
                    what: "allocator".into(),
                    source,
                });
            }
        };
        // SAFETY: `physical` belongs to this live instance.
        let memory = unsafe { instance.raw.get_physical_device_memory_properties(physical) };
        let mut subgroup = vk::PhysicalDeviceSubgroupProperties::default();
        let mut float_controls = vk::PhysicalDeviceFloatControlsProperties::default();
        let mut props2 = vk::PhysicalDeviceProperties2::default()
            .push_next(&mut subgroup)
            .push_next(&mut float_controls);
        // SAFETY: `physical` belongs to this live instance (Vulkan 1.2+,
        // checked above, where both chained structs are core); the chain's
        // structs outlive the call.
        unsafe {
            instance
                .raw
                .get_physical_device_properties2(physical, &mut props2)
        };
        let mut limits = DeviceLimits::new(&props, &subgroup, &float_controls, &memory);
        limits.integer_dot = integer_dot;
        // The kernels assume subgroups of 32 with shuffles.
        limits.coop_f16 = coop && limits.subgroup_size == 32 && limits.subgroup_shuffle;
        // No timestamps on this queue: nothing to profile with.
        if families[queue_family as usize].timestamp_valid_bits == 0 {
            limits.timestamp_period = 0.0;
        }
        let stats = stats
            .then(|| ash::khr::pipeline_executable_properties::Device::new(&instance.raw, &raw));
        Ok(Device {
            raw,
            queue: Mutex::new(queue),
            queue_family,
            allocator: Mutex::new(allocator),
            pipelines: shaders::ALL.iter().map(|_| OnceLock::new()).collect(),
            info,
            limits,
            instance,
            stats,
        })
    }
}

/// Whether `physical` has VK_KHR_shader_integer_dot_product with
/// `shaderIntegerDotProduct` (packed 4 x 8-bit dot products: the prefill
/// products' `DOT4` variants).
fn integer_dot_product(instance: &Instance, physical: vk::PhysicalDevice) -> VkResult<bool> {
    let mut dot = vk::PhysicalDeviceShaderIntegerDotProductFeatures::default();
    let name = ash::khr::shader_integer_dot_product::NAME;
    Ok(extension_features(instance, physical, name, &mut dot)?
        && dot.shader_integer_dot_product == vk::TRUE)
}

/// Whether `physical` has VK_NV_cooperative_matrix with `cooperativeMatrix`,
/// 16 x 16 x 16 products of f16 matrices into f32 ones at subgroup scope
/// in compute shaders, `shaderFloat16`, and `vulkanMemoryModel` with
/// `vulkanMemoryModelDeviceScope` (glslang compiles cooperative matrices
/// under the Vulkan memory model; with it enabled, the other shaders'
/// device-scope barriers need the second):
/// `shaders/attention_coop.comp`.
fn coop_f16(instance: &Instance, physical: vk::PhysicalDevice) -> VkResult<bool> {
    let mut coop = vk::PhysicalDeviceCooperativeMatrixFeaturesNV::default();
    let name = ash::nv::cooperative_matrix::NAME;
    if !extension_features(instance, physical, name, &mut coop)?
        || coop.cooperative_matrix != vk::TRUE
    {
        return Ok(false);
    }
    let mut f16 = vk::PhysicalDeviceShaderFloat16Int8Features::default();
    let mut model = vk::PhysicalDeviceVulkanMemoryModelFeatures::default();
    let mut all = vk::PhysicalDeviceFeatures2::default()
        .push_next(&mut f16)
        .push_next(&mut model);
    let mut props = vk::PhysicalDeviceCooperativeMatrixPropertiesNV::default();
    let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut props);
    // SAFETY: `physical` belongs to this live instance (Vulkan 1.2+, where
    // both queries are core and the float16 struct is too); the extension
    // of the chained properties struct is supported (checked above); the
    // chains outlive the calls.
    unsafe {
        instance
            .raw
            .get_physical_device_features2(physical, &mut all);
        instance
            .raw
            .get_physical_device_properties2(physical, &mut props2);
    }
    if f16.shader_float16 != vk::TRUE
        || model.vulkan_memory_model != vk::TRUE
        || model.vulkan_memory_model_device_scope != vk::TRUE
        || !props
            .cooperative_matrix_supported_stages
            .contains(vk::ShaderStageFlags::COMPUTE)
    {
        return Ok(false);
    }
    let fns = ash::nv::cooperative_matrix::Instance::new(super::instance::entry()?, &instance.raw);
    let get = fns
        .fp()
        .get_physical_device_cooperative_matrix_properties_nv;
    let mut count = 0u32;
    // SAFETY: the function was loaded for this instance, whose device
    // `physical` has the extension (checked above); a null array asks for
    // the count only.
    // A device that cannot list its shapes runs the other kernels: an
    // optional feature does not keep the device from opening.
    let got = unsafe { get(physical, &mut count, std::ptr::null_mut()) };
    if got != vk::Result::SUCCESS {
        return Ok(false);
    }
    let mut shapes = vec![vk::CooperativeMatrixPropertiesNV::default(); count as usize];
    // SAFETY: as above; `shapes` holds `count` initialised structs.
    let got = unsafe { get(physical, &mut count, shapes.as_mut_ptr()) };
    if got != vk::Result::SUCCESS && got != vk::Result::INCOMPLETE {
        return Ok(false);
    }
    shapes.truncate(count as usize);
    let f16 = vk::ComponentTypeNV::FLOAT16;
    let f32 = vk::ComponentTypeNV::FLOAT32;
    Ok(shapes.iter().any(|s| {
        (s.m_size, s.n_size, s.k_size) == (16, 16, 16)
            && (s.a_type, s.b_type, s.c_type, s.d_type) == (f16, f16, f32, f32)
            && s.scope == vk::ScopeNV::SUBGROUP
    }))
}

/// What became of opening one physical device: not tried yet, its
/// device, or why it could not be opened (the message, kept).
type OpenState = Option<Result<&'static Device, String>>;

/// The instance of one validation setting and, in enumeration order, its
/// physical devices, what each is, and its [`OpenState`].
struct Opened {
    instance: &'static Instance,
    devices: Vec<(vk::PhysicalDevice, DeviceInfo, OpenState)>,
}

/// `[without validation, with validation]`.
static REGISTRY: [Mutex<Option<Opened>>; 2] = [Mutex::new(None), Mutex::new(None)];

/// The physical devices of the instance with `validation` (created on
/// first use, never destroyed).
pub(crate) fn physical_devices(validation: bool) -> VkResult<Vec<DeviceInfo>> {
    let mut slot = lock(validation);
    let opened = opened(&mut slot, validation)?;
    Ok(opened.devices.iter().map(|(_, i, _)| i.clone()).collect())
}

/// The device at enumeration index `index` of the instance with
/// `validation`, opened on first use.
pub(crate) fn device(validation: bool, index: usize) -> VkResult<&'static Device> {
    let mut slot = lock(validation);
    let opened = opened(&mut slot, validation)?;
    let instance = opened.instance;
    let Some((physical, info, state)) = opened.devices.get_mut(index) else {
        return Err(VkError::NoDevice);
    };
    let state = state.get_or_insert_with(|| open(instance, *physical, info));
    match state {
        Ok(d) => Ok(*d),
        Err(message) => Err(VkError::DeviceUnusable {
            name: info.name.clone(),
            message: message.clone(),
        }),
    }
}

fn lock(validation: bool) -> MutexGuard<'static, Option<Opened>> {
    REGISTRY[usize::from(validation)]
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

fn open(
    instance: &'static Instance,
    physical: vk::PhysicalDevice,
    info: &DeviceInfo,
) -> Result<&'static Device, String> {
    // Messages of the creation belong to no context.
    super::validation::attribute_to(None);
    Device::open(instance, physical, info)
        .map(|d| &*Box::leak(Box::new(d)))
        .map_err(|e| e.to_string())
}

/// The registry entry of `validation`, created on first use: the instance
/// and, with validation, every physical device opened (see the module docs).
fn opened(slot: &mut Option<Opened>, validation: bool) -> VkResult<&mut Opened> {
    if slot.is_none() {
        super::validation::attribute_to(None);
        let instance: &'static Instance = Box::leak(Box::new(Instance::new(validation)?));
        let mut devices: Vec<_> = instance
            .devices()?
            .into_iter()
            .map(|(pd, info)| (pd, info, None))
            .collect();
        if validation {
            for (pd, info, state) in &mut devices {
                *state = Some(open(instance, *pd, info));
            }
        }
        *slot = Some(Opened { instance, devices });
    }
    Ok(slot.as_mut().expect("filled above"))
}

/// A queue family with compute support: one without graphics first (a dedicated
/// compute queue, as llama.cpp's Vulkan backend also prefers), else any.
fn choose_compute_family(families: &[vk::QueueFamilyProperties]) -> Option<u32> {
    let compute = |f: &vk::QueueFamilyProperties| {
        f.queue_flags.contains(vk::QueueFlags::COMPUTE) && f.queue_count > 0
    };
    let dedicated = families
        .iter()
        .position(|f| compute(f) && !f.queue_flags.contains(vk::QueueFlags::GRAPHICS));
    dedicated
        .or_else(|| families.iter().position(compute))
        .map(|i| i as u32)
}

/// Lists the physical devices (through the process's instance without
/// validation).
pub fn list_devices() -> VkResult<Vec<DeviceInfo>> {
    physical_devices(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefers_a_dedicated_compute_family() {
        let fam = |flags| vk::QueueFamilyProperties {
            queue_flags: flags,
            queue_count: 1,
            ..Default::default()
        };
        let general =
            fam(vk::QueueFlags::GRAPHICS | vk::QueueFlags::COMPUTE | vk::QueueFlags::TRANSFER);
        let transfer = fam(vk::QueueFlags::TRANSFER);
        let compute = fam(vk::QueueFlags::COMPUTE | vk::QueueFlags::TRANSFER);
        assert_eq!(
            choose_compute_family(&[general, transfer, compute]),
            Some(2)
        );
        assert_eq!(choose_compute_family(&[transfer, general]), Some(1));
        assert_eq!(choose_compute_family(&[transfer]), None);
    }
}

//! [`Context`]: one logical device with its compute queue, memory allocator,
//! pipeline cache and validation log.

use std::mem::ManuallyDrop;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use ash::vk;
use gpu_allocator::vulkan::{Allocator, AllocatorCreateDesc};

use super::error::{VkCall, VkError, VkResult};
use super::instance::{DeviceInfo, DeviceSelector, Instance, API_VERSION};
use super::limits::DeviceLimits;
use super::pipeline::Pipeline;
use super::shaders::{self, Shader};
use super::validation::ValidationLog;

/// How to create a [`Context`].
#[derive(Clone, Debug, Default)]
pub struct ContextOptions {
    /// Enable VK_LAYER_KHRONOS_validation with synchronization validation; the
    /// context then records warnings and errors ([`Context::validation_messages`]).
    /// Creation fails if the layer is not installed.
    pub validation: bool,
    /// Which physical device to use.
    pub device: DeviceSelector,
}

/// A Vulkan device ready for compute work. Cheap to clone (shared handle);
/// buffers and submissions keep it alive, so the device outlives them.
#[derive(Clone)]
pub struct Context {
    pub(crate) shared: Arc<Shared>,
}

pub(crate) struct Shared {
    /// One slot per entry of [`shaders::ALL`], filled on first use.
    pipelines: Vec<OnceLock<Pipeline>>,
    allocator: ManuallyDrop<Mutex<Allocator>>,
    /// vkQueueSubmit needs the queue externally synchronised.
    queue: Mutex<vk::Queue>,
    pub(crate) queue_family: u32,
    pub(crate) device: ash::Device,
    pub(crate) info: DeviceInfo,
    pub(crate) limits: DeviceLimits,
    /// Dropped after `Drop::drop` destroyed the device: messenger, then instance.
    instance: Instance,
}

impl Context {
    /// Creates a context on the device `options.device` picks.
    pub fn new(options: &ContextOptions) -> VkResult<Self> {
        let instance = Instance::new(options.validation)?;
        let devices = instance.devices()?;
        let infos: Vec<DeviceInfo> = devices.iter().map(|(_, i)| i.clone()).collect();
        let info = options.device.choose(&infos)?.clone();
        let physical = devices[info.index].0;
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

        let priorities = [1.0f32];
        let queue_info = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(queue_family)
            .queue_priorities(&priorities)];
        let device_info = vk::DeviceCreateInfo::default().queue_create_infos(&queue_info);
        // SAFETY: `physical` belongs to this instance; the create info points to
        // locals that outlive the call; one queue of an existing family is requested.
        let device = unsafe { instance.raw.create_device(physical, &device_info, None) }
            .call("vkCreateDevice")?;
        // SAFETY: queue 0 of `queue_family` was requested at device creation.
        let queue = unsafe { device.get_device_queue(queue_family, 0) };

        let allocator = Allocator::new(&AllocatorCreateDesc {
            instance: instance.raw.clone(),
            device: device.clone(),
            physical_device: physical,
            debug_settings: Default::default(),
            buffer_device_address: false,
            allocation_sizes: Default::default(),
        });
        let allocator = match allocator {
            Ok(a) => a,
            Err(source) => {
                // SAFETY: the device was just created and nothing uses it yet.
                unsafe { device.destroy_device(None) };
                return Err(VkError::Alloc {
                    what: "allocator".into(),
                    source,
                });
            }
        };
        // SAFETY: `physical` belongs to this live instance.
        let memory = unsafe { instance.raw.get_physical_device_memory_properties(physical) };
        let mut subgroup = vk::PhysicalDeviceSubgroupProperties::default();
        let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut subgroup);
        // SAFETY: `physical` belongs to this live instance (Vulkan 1.1+,
        // checked above); the chain is one struct that outlives the call.
        unsafe {
            instance
                .raw
                .get_physical_device_properties2(physical, &mut props2)
        };
        let mut limits = DeviceLimits::new(&props, &subgroup, &memory);
        // No timestamps on this queue: nothing to profile with.
        if families[queue_family as usize].timestamp_valid_bits == 0 {
            limits.timestamp_period = 0.0;
        }
        Ok(Self {
            shared: Arc::new(Shared {
                pipelines: shaders::ALL.iter().map(|_| OnceLock::new()).collect(),
                allocator: ManuallyDrop::new(Mutex::new(allocator)),
                queue: Mutex::new(queue),
                queue_family,
                device,
                info,
                limits,
                instance,
            }),
        })
    }

    /// The physical device in use.
    pub fn device_info(&self) -> &DeviceInfo {
        &self.shared.info
    }

    /// Limits of the device in use.
    pub fn limits(&self) -> &DeviceLimits {
        &self.shared.limits
    }

    /// Whether validation is on.
    pub fn validation_enabled(&self) -> bool {
        self.shared.instance.validation_enabled()
    }

    /// Warning and error messages from the validation layer so far (always empty
    /// without validation).
    pub fn validation_messages(&self) -> Vec<String> {
        self.shared.instance.log.messages()
    }

    /// Number of warning and error messages so far.
    pub fn validation_message_count(&self) -> usize {
        self.shared.instance.log.count()
    }

    /// Number of error-severity messages so far.
    pub fn validation_error_count(&self) -> usize {
        self.shared.instance.log.error_count()
    }

    /// The log itself: it outlives the context, so messages reported while the
    /// device and instance are destroyed (e.g. leaked objects) can be read after
    /// the context is dropped.
    pub fn validation_log(&self) -> Arc<ValidationLog> {
        Arc::clone(&self.shared.instance.log)
    }

    /// Forgets the messages so far.
    pub fn clear_validation_messages(&self) {
        self.shared.instance.log.clear()
    }

    /// The compute pipeline of `shader`, created on first use and cached for the
    /// life of the context.
    pub fn pipeline(&self, shader: &Shader) -> VkResult<&Pipeline> {
        let slot = self
            .shared
            .pipelines
            .get(shader.index)
            .filter(|_| {
                shaders::ALL
                    .get(shader.index)
                    .is_some_and(|s| s.name == shader.name)
            })
            .ok_or(VkError::Dispatch {
                shader: shader.name,
                message: "not in the shader table".into(),
            })?;
        if let Some(p) = slot.get() {
            return Ok(p);
        }
        let created = Pipeline::new(&self.shared.device, shader, &self.shared.limits)?;
        if let Err(lost) = slot.set(created) {
            // Another thread won the race; its pipeline is the cached one.
            lost.destroy(&self.shared.device);
        }
        Ok(slot.get().expect("pipeline slot was just filled"))
    }

    /// Waits until the device is idle.
    pub fn wait_idle(&self) -> VkResult<()> {
        let _queue = self.shared.queue();
        // SAFETY: the device is live; holding the queue lock keeps other threads
        // from submitting meanwhile (vkDeviceWaitIdle needs all queues synchronised).
        unsafe { self.shared.device.device_wait_idle() }.call("vkDeviceWaitIdle")
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("device", &self.shared.info)
            .field("queue_family", &self.shared.queue_family)
            .field("validation", &self.validation_enabled())
            .finish()
    }
}

impl Shared {
    pub(crate) fn allocator(&self) -> MutexGuard<'_, Allocator> {
        self.allocator.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn queue(&self) -> MutexGuard<'_, vk::Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: the last handle to the device is going away: no other thread can
        // record or submit; waiting makes sure no submitted work still runs.
        let _ = unsafe { self.device.device_wait_idle() };
        for slot in &mut self.pipelines {
            if let Some(p) = slot.take() {
                p.destroy(&self.device);
            }
        }
        // Buffers hold an Arc<Shared>, so all allocations have been freed by now;
        // the allocator frees its memory blocks before the device goes.
        // SAFETY: dropped exactly once, here, and never used afterwards.
        unsafe { ManuallyDrop::drop(&mut self.allocator) };
        // SAFETY: all children (pipelines, buffers, pools, fences, memory) are gone.
        unsafe { self.device.destroy_device(None) };
        // `instance` drops after this: the messenger, then the instance.
    }
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

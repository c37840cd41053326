//! [`Context`]: one session's handle on a Vulkan device: the device's
//! queue, memory allocator and pipelines (shared by every context on that
//! device, see [`super::device`]), this context's validation log, and the
//! count of the Vulkan objects it has made.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, MutexGuard};

use ash::vk;
use gpu_allocator::vulkan::Allocator;

use super::device::{self, Device};
use super::error::{VkCall, VkError, VkResult};
use super::instance::{DeviceInfo, DeviceSelector};
use super::limits::DeviceLimits;
use super::pipeline::Pipeline;
use super::shaders::{self, Shader};
use super::validation::{self, ValidationLog};

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

/// A Vulkan device ready for compute work, for one session. Cheap to clone
/// (shared handle); buffers and submissions keep it alive. `Send` and
/// `Sync`: contexts on one device share its queue (behind a lock), its
/// allocator (behind a lock) and its pipelines; what a context makes
/// (buffers, submissions) is its own. See docs/threading.md.
#[derive(Clone)]
pub struct Context {
    pub(crate) shared: Arc<Shared>,
}

/// The kinds of Vulkan object a context makes and destroys.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Object {
    Buffer,
    CommandPool,
    Fence,
    DescriptorPool,
    QueryPool,
}

const OBJECTS: [(Object, &str); 5] = [
    (Object::Buffer, "VkBuffer"),
    (Object::CommandPool, "VkCommandPool"),
    (Object::Fence, "VkFence"),
    (Object::DescriptorPool, "VkDescriptorPool"),
    (Object::QueryPool, "VkQueryPool"),
];

/// How many objects of each kind a context has made and not destroyed.
/// The device outlives every context, so nothing else would notice an
/// object a context forgot: its drop reports each one left in its log.
#[derive(Default)]
pub(crate) struct Live([AtomicI64; OBJECTS.len()]);

impl Live {
    pub(crate) fn made(&self, o: Object) {
        self.0[o as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn destroyed(&self, o: Object) {
        self.0[o as usize].fetch_sub(1, Ordering::Relaxed);
    }

    /// `"2 VkBuffer"` for each kind whose count is not zero.
    fn left(&self) -> Vec<String> {
        OBJECTS
            .iter()
            .filter_map(|&(o, name)| {
                let n = self.0[o as usize].load(Ordering::Relaxed);
                (n != 0).then(|| format!("{n} {name}"))
            })
            .collect()
    }
}

pub(crate) struct Shared {
    /// The process's device this context works on (queue family, limits).
    pub(crate) dev: &'static Device,
    /// What the layer reported on this context's calls.
    log: Arc<ValidationLog>,
    pub(crate) live: Live,
}

impl Context {
    /// Creates a context on the device `options.device` picks (opening the
    /// device on the process's first use of it).
    pub fn new(options: &ContextOptions) -> VkResult<Self> {
        let infos = device::physical_devices(options.validation)?;
        let info = options.device.choose(&infos)?;
        let dev = device::device(options.validation, info.index)?;
        Ok(Self {
            shared: Arc::new(Shared {
                dev,
                log: Arc::new(ValidationLog::default()),
                live: Live::default(),
            }),
        })
    }

    /// The physical device in use.
    pub fn device_info(&self) -> &DeviceInfo {
        &self.shared.dev.info
    }

    /// Limits of the device in use.
    pub fn limits(&self) -> &DeviceLimits {
        &self.shared.dev.limits
    }

    /// Whether validation is on.
    pub fn validation_enabled(&self) -> bool {
        self.shared.dev.instance.validation_enabled()
    }

    /// Warning and error messages from the validation layer so far (always empty
    /// without validation): those raised by this context's calls, after those
    /// raised by no context's call (creating the instance or a device).
    pub fn validation_messages(&self) -> Vec<String> {
        let mut all = self.shared.dev.instance.log.messages();
        all.extend(self.shared.log.messages());
        all
    }

    /// Number of warning and error messages so far.
    pub fn validation_message_count(&self) -> usize {
        self.shared.dev.instance.log.count() + self.shared.log.count()
    }

    /// Number of error-severity messages so far.
    pub fn validation_error_count(&self) -> usize {
        self.shared.dev.instance.log.error_count() + self.shared.log.error_count()
    }

    /// This context's own log: it outlives the context, so what its drop
    /// reports (objects it made and never destroyed) can be read after.
    pub fn validation_log(&self) -> Arc<ValidationLog> {
        Arc::clone(&self.shared.log)
    }

    /// Forgets this context's messages so far.
    pub fn clear_validation_messages(&self) {
        self.shared.log.clear()
    }

    /// The compute pipeline of `shader`, created on first use and cached for the
    /// life of the context.
    pub fn pipeline(&self, shader: &Shader) -> VkResult<&Pipeline> {
        let slot = self
            .shared
            .dev
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
        let created = Pipeline::new(
            self.shared.device(),
            shader,
            &self.shared.dev.limits,
            self.shared.dev.stats.as_ref(),
        )?;
        if let Err(lost) = slot.set(created) {
            // Another thread won the race; its pipeline is the cached one.
            lost.destroy(self.shared.device());
        }
        Ok(slot.get().expect("pipeline slot was just filled"))
    }

    /// Waits until the device is idle (the work of every context on it).
    pub fn wait_idle(&self) -> VkResult<()> {
        let _queue = self.shared.queue();
        // SAFETY: the device is live; holding the queue lock keeps other threads
        // from submitting meanwhile (vkDeviceWaitIdle needs all queues synchronised).
        unsafe { self.shared.device().device_wait_idle() }.call("vkDeviceWaitIdle")
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("device", &self.shared.dev.info)
            .field("queue_family", &self.shared.dev.queue_family)
            .field("validation", &self.validation_enabled())
            .finish()
    }
}

impl Shared {
    /// The device, for a call made on this context's behalf: what the
    /// validation layer reports during the call goes to this context's log.
    pub(crate) fn device(&self) -> &ash::Device {
        self.attribute();
        &self.dev.raw
    }

    pub(crate) fn allocator(&self) -> MutexGuard<'_, Allocator> {
        self.attribute();
        self.dev.allocator()
    }

    pub(crate) fn queue(&self) -> MutexGuard<'_, vk::Queue> {
        self.attribute();
        self.dev.queue()
    }

    fn attribute(&self) {
        if self.dev.instance.validation_enabled() {
            validation::attribute_to(Some(&self.log));
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Buffers and submissions hold the context, so each has been dropped
        // (and its work waited for) by now; each should have destroyed what
        // it made.
        let left = self.live.left();
        if !left.is_empty() {
            self.log.record(
                true,
                format!(
                    "ERROR [context] dropped with Vulkan objects never destroyed: {}",
                    left.join(", ")
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_context_dropped_with_an_object_left_says_so_in_its_log() {
        let ctx =
            Context::new(&ContextOptions::default()).expect("a Vulkan device (scripts/setup)");
        let buf = ctx
            .create_buffer("b", 64, super::super::BufferKind::Storage)
            .unwrap();
        let sub = ctx.submission().unwrap();
        drop((buf, sub));
        let log = ctx.validation_log();
        // As if a fence were made and never destroyed.
        ctx.shared.live.made(Object::Fence);
        drop(ctx);
        let messages = log.messages();
        assert_eq!(messages.len(), 1, "{messages:?}");
        assert!(
            messages[0].ends_with("never destroyed: 1 VkFence"),
            "{messages:?}"
        );
        assert_eq!(log.error_count(), 1);
    }

    #[test]
    fn contexts_on_one_device_share_it_and_keep_their_own_logs() {
        let a = Context::new(&ContextOptions::default()).unwrap();
        let b = Context::new(&ContextOptions::default()).unwrap();
        assert!(std::ptr::eq(a.shared.dev, b.shared.dev));
        assert!(!Arc::ptr_eq(&a.validation_log(), &b.validation_log()));
    }
}

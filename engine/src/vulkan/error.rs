//! The Vulkan backend's error type: one line per failure.

use ash::vk;

/// Everything the Vulkan backend can fail with.
#[derive(Debug, thiserror::Error)]
pub enum VkError {
    /// `libvulkan.so.1` (or the platform's loader) could not be loaded.
    #[error("no Vulkan loader found (libvulkan.so.1): {0}")]
    Loader(String),
    /// The loader found no physical device at all.
    #[error("no Vulkan device")]
    NoDevice,
    /// The loader found no driver (vkCreateInstance: ERROR_INCOMPATIBLE_DRIVER).
    #[error("no Vulkan device: the loader found no usable driver (vkCreateInstance: ERROR_INCOMPATIBLE_DRIVER)")]
    NoDriver,
    /// A device selector matched nothing.
    #[error("no Vulkan device matches `{selector}` (devices: {available})")]
    DeviceNotFound { selector: String, available: String },
    /// The chosen device is older than the Vulkan version the shaders target.
    #[error("Vulkan device `{name}` supports Vulkan {have}, {need} is required")]
    DeviceTooOld {
        name: String,
        have: String,
        need: String,
    },
    /// The chosen device could not be opened (too old, no compute queue, or
    /// its creation failed); the message says which. Kept for the life of
    /// the process, as the device would have been.
    #[error("{message}")]
    DeviceUnusable { name: String, message: String },
    /// The chosen device has no queue family with compute support.
    #[error("Vulkan device `{0}` has no compute queue")]
    NoComputeQueue(String),
    /// Validation was requested and `VK_LAYER_KHRONOS_validation` is not installed.
    #[error("validation layer requested but not installed (VK_LAYER_KHRONOS_validation; scripts/setup installs it)")]
    ValidationLayerMissing,
    /// A required instance extension is missing.
    #[error("Vulkan instance extension {0} is not available")]
    MissingExtension(&'static str),
    /// A Vulkan call failed; `call` names it.
    #[error("{call} failed: {result:?}")]
    Vk {
        call: &'static str,
        result: vk::Result,
    },
    /// gpu-allocator could not create the allocator or an allocation.
    #[error("GPU memory allocation failed ({what}): {source}")]
    Alloc {
        what: String,
        #[source]
        source: gpu_allocator::AllocationError,
    },
    /// A buffer access fell outside the buffer, or the buffer is of the wrong kind.
    #[error("buffer `{name}`: {message}")]
    Buffer { name: String, message: String },
    /// A dispatch does not match its pipeline (binding count, push-constant size).
    #[error("dispatch of `{shader}`: {message}")]
    Dispatch {
        shader: &'static str,
        message: String,
    },
    /// A submission was used in the wrong state (e.g. recording after submit).
    #[error("submission: {0}")]
    Submission(&'static str),
    /// A dispatch needs more workgroups than the device allows.
    #[error("dispatch of {invocations} invocations exceeds the device's workgroup-count limits")]
    TooLarge { invocations: u64 },
}

/// Result alias of the Vulkan backend.
pub type VkResult<T> = Result<T, VkError>;

/// Adapts an `ash` result into a [`VkError::Vk`] naming the call.
pub(crate) trait VkCall<T> {
    fn call(self, name: &'static str) -> VkResult<T>;
}

impl<T> VkCall<T> for Result<T, vk::Result> {
    fn call(self, name: &'static str) -> VkResult<T> {
        self.map_err(|result| VkError::Vk { call: name, result })
    }
}

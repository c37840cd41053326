//! The Vulkan backend's foundation: instance and device ([`Context`]), buffers
//! ([`Buffer`]), compute pipelines from the build-time shader table
//! ([`shaders`], [`Pipeline`]), per-dispatch descriptor sets, and command
//! recording with fence-based completion ([`Submission`]).
//!
//! ```no_run
//! use engine::vulkan::{shaders, BinaryPush, Context, ContextOptions, Stages};
//! # fn main() -> Result<(), engine::vulkan::VkError> {
//! let ctx = Context::new(&ContextOptions { validation: true, ..Default::default() })?;
//! let n = 1000;
//! let (a, b, out) = (
//!     ctx.storage_buffer::<f32>("a", n)?,
//!     ctx.storage_buffer::<f32>("b", n)?,
//!     ctx.storage_buffer::<f32>("out", n)?,
//! );
//! ctx.upload(&a, 0, &vec![1.0f32; n])?;
//! ctx.upload(&b, 0, &vec![2.0f32; n])?;
//! let add = ctx.pipeline(&shaders::BINARY)?;
//! let mut sub = ctx.submission()?;
//! sub.dispatch(add, &[&a, &b, &out], &BinaryPush::new(n as u32), add.groups_for(n as u64)?)?;
//! sub.submit_and_wait()?;
//! let sum: Vec<f32> = ctx.download_vec(&out, 0, n)?;
//! assert_eq!(ctx.validation_message_count(), 0);
//! # Ok(()) }
//! ```
//!
//! Buffers and submissions hold their context; a submission waits for its
//! fence before it drops. The instance and the devices (queue, allocator,
//! pipelines) are the process's, shared by every context and never
//! destroyed while it runs (`device.rs` says why; docs/threading.md gives
//! the threading contract).
//!
//! Every `unsafe` block and impl here carries a `// SAFETY:` comment saying why
//! it holds (enforced by clippy below).

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod backend;
mod context;
mod descriptors;
mod device;
mod error;
mod instance;
mod limits;
mod memory;
mod pipeline;
pub mod pipeline_stats;
pub mod profile;
pub mod push;
pub mod shaders;
mod submit;
mod transfer;
mod validation;

pub use backend::{
    attention_partial_bytes, twin_bytes, CombinePush, KernelLayout, Rule, Unfused, VulkanBackend,
    VulkanOptions, VulkanStats, RULES,
};
pub use context::{Context, ContextOptions};
pub use device::list_devices;
pub use error::{VkError, VkResult};
pub use instance::{validation_layer_present, DeviceInfo, DeviceKind, DeviceSelector};
pub use limits::DeviceLimits;
pub use memory::{Buffer, BufferKind, HostScalar};
pub use pipeline::Pipeline;
pub use push::{BinaryPush, NoPush, PushConstants};
pub use shaders::{BindingAccess, Shader};
pub use submit::{BufferRef, Stages, Submission};
pub use validation::ValidationLog;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_send_and_sync() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Context>();
        send_sync::<Buffer>();
        send_sync::<Pipeline>();
        send_sync::<ValidationLog>();
        fn send<T: Send>() {}
        send::<Submission<'static>>();
    }
}

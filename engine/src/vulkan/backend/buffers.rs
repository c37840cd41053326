//! Device buffers of a [`VulkanBackend`]: making them (within the memory
//! budget, with a sentinel tail), the handles' lookups, and host data staged
//! for the next submission's inbox.

use std::sync::Arc;

use super::cmd::Cmd;
use super::{GpuKv, GpuWeight, Slot, VulkanBackend, INBOX, SENTINEL_BYTES, SENTINEL_WORD};
use crate::ops::{Kv, Weight};
use crate::vulkan::{BufferKind, VkError, VkResult};

impl VulkanBackend {
    /// A device-local storage buffer of `bytes` usable bytes (rounded up to
    /// whole words), with a sentinel tail when `sentinel`; zeroed (at the
    /// next submission) when `zero`.
    pub(super) fn new_buffer(
        &mut self,
        name: &str,
        bytes: u64,
        sentinel: bool,
        zero: bool,
    ) -> VkResult<u32> {
        let usable = bytes.max(4).div_ceil(4) * 4;
        let size = usable + if sentinel { SENTINEL_BYTES } else { 0 };
        if self.allocated + size > self.budget {
            return Err(VkError::Buffer {
                name: name.to_string(),
                message: format!(
                    "does not fit in device memory: {} MiB more on top of {} MiB allocated exceeds the device's {} MiB of device-local memory",
                    size.div_ceil(1 << 20),
                    self.allocated >> 20,
                    self.budget >> 20
                ),
            });
        }
        let buffer = self.ctx.create_buffer(name, size, BufferKind::Storage)?;
        self.allocated += size;
        let id = u32::try_from(self.slots.len()).expect("fewer than 2^32 buffers");
        self.slots.push(Slot {
            buffer: Some(Arc::new(buffer)),
            usable,
            sentinel,
        });
        if zero {
            self.cmds.push(Cmd::Fill {
                buf: id,
                offset: 0,
                size: usable,
                value: 0,
            });
        }
        if sentinel {
            self.cmds.push(Cmd::Fill {
                buf: id,
                offset: usable,
                size: SENTINEL_BYTES,
                value: SENTINEL_WORD,
            });
        }
        Ok(id)
    }

    /// An activation buffer of `bytes` usable bytes with a sentinel tail,
    /// every word set to `fill` (zeros, or the poison of test builds:
    /// [`crate::poison`]) at the next submission.
    pub(super) fn new_buffer_filled(&mut self, name: &str, bytes: u64, fill: f32) -> VkResult<u32> {
        let id = self.new_buffer(name, bytes, true, fill.to_bits() == 0)?;
        if fill.to_bits() != 0 {
            let size = self.slots[id as usize].usable;
            self.cmds.push(Cmd::Fill {
                buf: id,
                offset: 0,
                size,
                value: fill.to_bits(),
            });
        }
        Ok(id)
    }

    /// The weight behind a handle.
    pub fn weight(&self, w: Weight) -> &GpuWeight {
        &self.weights[w.0 as usize]
    }

    /// The KV cache behind a handle.
    pub fn kv(&self, kv: Kv) -> GpuKv {
        self.kvs[kv.0 as usize]
    }

    /// Usable bytes of buffer `buf`.
    pub fn buffer_bytes(&self, buf: u32) -> u64 {
        self.slots[buf as usize].usable
    }

    /// Stages host words for the next submission: returns the inbox and the
    /// element (u32) offset where `data` will be.
    pub fn stage_u32(&mut self, data: &[u32]) -> (u32, u32) {
        let start = self.staged.len().div_ceil(16) * 16;
        self.staged.resize(start, 0);
        for v in data {
            self.staged.extend_from_slice(&v.to_le_bytes());
        }
        (INBOX, (start / 4) as u32)
    }

    /// Stages host bytes for the next submission: returns the inbox and the
    /// byte offset where `data` will be.
    pub(super) fn stage_bytes(&mut self, data: &[u8]) -> (u32, u64) {
        let start = self.staged.len().div_ceil(16) * 16;
        self.staged.resize(start, 0);
        self.staged.extend_from_slice(data);
        (INBOX, start as u64)
    }

    /// For tests: split weights uploaded from now on into chunks of at most
    /// `bytes` (whole rows; at least one row), as if the device's
    /// `maxStorageBufferRange` were that small.
    #[doc(hidden)]
    pub fn set_max_chunk_bytes(&mut self, bytes: u64) {
        self.max_chunk_bytes = Some(bytes);
    }
}

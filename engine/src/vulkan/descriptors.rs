//! Descriptor sets: a fresh set for every recorded dispatch, bump-allocated from
//! pools that one submission owns.
//!
//! A set is written once, right after allocation and before any command buffer
//! binds it, and never again: a set that a recorded or pending command buffer uses
//! is never updated. The pools are reset only when the owning submission's fence
//! has signalled (see `Submission::reset`), which returns every set at once.

use ash::vk;

use super::context::{Live, Object};
use super::error::{VkCall, VkError, VkResult};
use crate::fault;

/// Sets per pool.
const SETS_PER_POOL: u32 = 256;
/// Storage-buffer descriptors per pool (8 per set on average).
const BUFFERS_PER_POOL: u32 = SETS_PER_POOL * 8;

/// The descriptor pools of one submission. Grows by whole pools; pools are kept
/// across resets and reused.
#[derive(Default)]
pub(crate) struct DescriptorArena {
    pools: Vec<vk::DescriptorPool>,
    /// Pool currently allocated from (index into `pools`).
    current: usize,
    sets_left: u32,
    buffers_left: u32,
    /// Sets handed out since the last reset.
    allocated: usize,
    /// Fault `descriptor-reuse`: the one set of each layout.
    reused: Vec<(vk::DescriptorSetLayout, vk::DescriptorSet)>,
}

impl DescriptorArena {
    /// A fresh set of `layout`, which has `buffers` storage-buffer bindings.
    /// The caller writes it once before binding it and never touches it again.
    pub(crate) fn allocate(
        &mut self,
        device: &ash::Device,
        live: &Live,
        layout: vk::DescriptorSetLayout,
        buffers: u32,
    ) -> VkResult<vk::DescriptorSet> {
        if buffers > BUFFERS_PER_POOL {
            return Err(VkError::Submission(
                "descriptor set with more bindings than a pool holds",
            ));
        }
        // We count what is left ourselves instead of relying on
        // VK_ERROR_OUT_OF_POOL_MEMORY, which is not guaranteed to be returned.
        let reuse = fault::active("descriptor-reuse");
        if let Some(&(_, set)) = self.reused.iter().find(|(l, _)| reuse && *l == layout) {
            return Ok(set);
        }
        if self.pools.is_empty() || self.sets_left == 0 || self.buffers_left < buffers {
            self.next_pool(device, live)?;
        }
        let layouts = [layout];
        let info = vk::DescriptorSetAllocateInfo::default()
            .descriptor_pool(self.pools[self.current])
            .set_layouts(&layouts);
        // SAFETY: the pool and layout are live objects of `device`; the pool has room
        // for one more set of this size (counted above); access to the pool is
        // externally synchronised because the arena is borrowed mutably.
        let sets =
            unsafe { device.allocate_descriptor_sets(&info) }.call("vkAllocateDescriptorSets")?;
        self.sets_left -= 1;
        self.buffers_left -= buffers;
        self.allocated += 1;
        if reuse {
            self.reused.push((layout, sets[0]));
        }
        Ok(sets[0])
    }

    /// Number of sets handed out since the last reset.
    pub(crate) fn allocated(&self) -> usize {
        self.allocated
    }

    /// Moves to the next pool, creating one if all are in use.
    fn next_pool(&mut self, device: &ash::Device, live: &Live) -> VkResult<()> {
        let next = if self.pools.is_empty() {
            0
        } else {
            self.current + 1
        };
        if next == self.pools.len() {
            let sizes = [vk::DescriptorPoolSize {
                ty: vk::DescriptorType::STORAGE_BUFFER,
                descriptor_count: BUFFERS_PER_POOL,
            }];
            // No FREE_DESCRIPTOR_SET flag: sets are only ever returned by a reset.
            let info = vk::DescriptorPoolCreateInfo::default()
                .max_sets(SETS_PER_POOL)
                .pool_sizes(&sizes);
            // SAFETY: valid create info for a live device; destroyed in `destroy`.
            let pool = unsafe { device.create_descriptor_pool(&info, None) }
                .call("vkCreateDescriptorPool")?;
            live.made(Object::DescriptorPool);
            self.pools.push(pool);
        }
        self.current = next;
        self.sets_left = SETS_PER_POOL;
        self.buffers_left = BUFFERS_PER_POOL;
        Ok(())
    }

    /// Returns every set to the pools.
    ///
    /// Only call once no command buffer that uses these sets is pending or will be
    /// submitted again: the owning submission calls it after its fence signalled
    /// and before it re-records its command buffer.
    pub(crate) fn reset(&mut self, device: &ash::Device) -> VkResult<()> {
        for &pool in &self.pools[..self.pools.len().min(self.current + 1)] {
            // SAFETY: per this function's contract no command buffer in use refers
            // to sets from these pools; the pools belong to `device`.
            unsafe { device.reset_descriptor_pool(pool, vk::DescriptorPoolResetFlags::empty()) }
                .call("vkResetDescriptorPool")?;
        }
        self.current = 0;
        self.sets_left = if self.pools.is_empty() {
            0
        } else {
            SETS_PER_POOL
        };
        self.buffers_left = if self.pools.is_empty() {
            0
        } else {
            BUFFERS_PER_POOL
        };
        self.allocated = 0;
        self.reused.clear();
        Ok(())
    }

    /// Destroys the pools (and with them their sets). Same contract as `reset`.
    pub(crate) fn destroy(&mut self, device: &ash::Device, live: &Live) {
        for pool in self.pools.drain(..) {
            // SAFETY: per the contract no command buffer in use refers to these
            // sets; each pool is destroyed once (drained from the list).
            unsafe { device.destroy_descriptor_pool(pool, None) };
            live.destroyed(Object::DescriptorPool);
        }
        self.current = 0;
        self.sets_left = 0;
        self.buffers_left = 0;
        self.allocated = 0;
        self.reused.clear();
    }
}

//! [`Submission`]: one command buffer, its descriptor pools and a fence.
//! Record copies, barriers and dispatches; submit; wait; reset and record again.
//! A reusable submission ([`Context::reusable_submission`]) can also be
//! submitted again as recorded ([`Submission::replay`]) once it completed.
//!
//! Barriers are explicit at this level: the caller says where one is needed
//! ([`Submission::barrier`]). Buffers recorded into a submission are borrowed for
//! its lifetime `'a` or shared with it ([`BufferRef`]: the submission keeps a
//! clone of each `Arc<Buffer>` it records until it is reset or dropped), and
//! dropping a pending submission waits for its fence, so a buffer can never be
//! freed while the device may still use it. A submission that outlives the
//! owner of its buffers (a `Submission<'static>` left running) records `Arc`s.

use std::marker::PhantomData;
use std::ops::BitOr;
use std::sync::Arc;

use ash::vk;

use super::context::{Context, Object};
use super::descriptors::DescriptorArena;
use super::error::{VkCall, VkError, VkResult};
use super::memory::{Buffer, BufferKind};
use super::pipeline::Pipeline;
use super::profile::Timestamps;
use super::push::PushConstants;

/// A set of places memory is accessed from, for [`Submission::barrier`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stages(u8);

impl Stages {
    /// No stage (the empty set).
    pub const NONE: Self = Self(0);
    /// Host reads and writes of mapped memory.
    pub const HOST: Self = Self(1);
    /// Copies and fills.
    pub const TRANSFER: Self = Self(2);
    /// Compute shaders.
    pub const COMPUTE: Self = Self(4);

    fn has(self, other: Self) -> bool {
        self.0 & other.0 != 0
    }

    /// Pipeline stages, and the accesses that are made available when these
    /// stages are the source (writes) and visible when they are the destination
    /// (reads and writes).
    fn masks(self) -> (vk::PipelineStageFlags, vk::AccessFlags, vk::AccessFlags) {
        let mut stages = vk::PipelineStageFlags::empty();
        let mut writes = vk::AccessFlags::empty();
        let mut all = vk::AccessFlags::empty();
        if self.has(Self::HOST) {
            stages |= vk::PipelineStageFlags::HOST;
            writes |= vk::AccessFlags::HOST_WRITE;
            all |= vk::AccessFlags::HOST_READ | vk::AccessFlags::HOST_WRITE;
        }
        if self.has(Self::TRANSFER) {
            stages |= vk::PipelineStageFlags::TRANSFER;
            writes |= vk::AccessFlags::TRANSFER_WRITE;
            all |= vk::AccessFlags::TRANSFER_READ | vk::AccessFlags::TRANSFER_WRITE;
        }
        if self.has(Self::COMPUTE) {
            stages |= vk::PipelineStageFlags::COMPUTE_SHADER;
            writes |= vk::AccessFlags::SHADER_WRITE;
            all |= vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE;
        }
        (stages, writes, all)
    }
}

impl BitOr for Stages {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

/// A buffer as a [`Submission`] records it: `&'a Buffer`, borrowed for the
/// submission's life, or `&Arc<Buffer>`, of which the submission keeps a clone
/// until its fence has signalled (it is reset or dropped). Sealed: these two
/// are the only ways a recorded buffer is kept alive.
pub trait BufferRef<'a>: sealed::Sealed {
    /// The buffer recorded.
    fn buffer(&self) -> &Buffer;
    /// The handle the submission keeps (none for a borrow).
    fn shared(&self) -> Option<&Arc<Buffer>>;
}

mod sealed {
    use super::{Arc, Buffer};
    pub trait Sealed {}
    impl Sealed for &Buffer {}
    impl Sealed for &Arc<Buffer> {}
}

impl<'a> BufferRef<'a> for &'a Buffer {
    fn buffer(&self) -> &Buffer {
        self
    }
    fn shared(&self) -> Option<&Arc<Buffer>> {
        None
    }
}

impl<'a> BufferRef<'a> for &Arc<Buffer> {
    fn buffer(&self) -> &Buffer {
        self
    }
    fn shared(&self) -> Option<&Arc<Buffer>> {
        Some(self)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Recording,
    Pending,
    Complete,
}

/// One command buffer being recorded, pending, or complete. See the module docs.
pub struct Submission<'a> {
    ctx: Context,
    pool: vk::CommandPool,
    cmd: vk::CommandBuffer,
    fence: vk::Fence,
    descriptors: DescriptorArena,
    state: State,
    /// Recorded without ONE_TIME_SUBMIT: may be replayed.
    reusable: bool,
    /// Recording ended (submitted at least once since the last reset).
    ended: bool,
    /// Shared buffers recorded since the last reset, kept until the fence has
    /// signalled.
    kept: Vec<Arc<Buffer>>,
    /// Per-dispatch timestamps when profiling ([`profile`](super::profile)).
    timestamps: Option<Timestamps>,
    /// Borrowed buffers recorded here must outlive the submission.
    _buffers: PhantomData<&'a Buffer>,
}

impl Context {
    /// A new submission, recording.
    pub fn submission<'a>(&self) -> VkResult<Submission<'a>> {
        self.new_submission(false)
    }

    /// A new submission, recording, that can be submitted again as
    /// recorded once it completed ([`Submission::replay`]).
    pub fn reusable_submission<'a>(&self) -> VkResult<Submission<'a>> {
        self.new_submission(true)
    }

    fn new_submission<'a>(&self, reusable: bool) -> VkResult<Submission<'a>> {
        let device = self.shared.device();
        let pool_info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(self.shared.dev.queue_family)
            .flags(vk::CommandPoolCreateFlags::TRANSIENT);
        // SAFETY: valid create info for a live device; destroyed in Drop.
        let pool =
            unsafe { device.create_command_pool(&pool_info, None) }.call("vkCreateCommandPool")?;
        self.shared.live.made(Object::CommandPool);
        let mut sub = Submission {
            ctx: self.clone(),
            pool,
            cmd: vk::CommandBuffer::null(),
            fence: vk::Fence::null(),
            descriptors: DescriptorArena::default(),
            state: State::Complete,
            reusable,
            ended: false,
            kept: Vec::new(),
            timestamps: None,
            _buffers: PhantomData,
        };
        sub.timestamps = Timestamps::new(
            device,
            &self.shared.live,
            self.shared.dev.limits.timestamp_period,
        )?;
        let alloc = vk::CommandBufferAllocateInfo::default()
            .command_pool(pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: `pool` is live and only used through this submission.
        sub.cmd =
            unsafe { device.allocate_command_buffers(&alloc) }.call("vkAllocateCommandBuffers")?[0];
        // SAFETY: valid create info for a live device; destroyed in Drop.
        sub.fence = unsafe { device.create_fence(&vk::FenceCreateInfo::default(), None) }
            .call("vkCreateFence")?;
        self.shared.live.made(Object::Fence);
        sub.begin()?;
        Ok(sub)
    }
}

impl<'a> Submission<'a> {
    fn device(&self) -> &ash::Device {
        self.ctx.shared.device()
    }

    fn begin(&mut self) -> VkResult<()> {
        let flags = if self.reusable {
            vk::CommandBufferUsageFlags::empty()
        } else {
            vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT
        };
        let info = vk::CommandBufferBeginInfo::default().flags(flags);
        // SAFETY: the command buffer is in the initial state (fresh, or its pool was
        // reset after the fence signalled) and only this submission records into it.
        unsafe { self.device().begin_command_buffer(self.cmd, &info) }
            .call("vkBeginCommandBuffer")?;
        if let Some(t) = self.timestamps.as_mut() {
            t.begin(self.ctx.shared.device(), self.cmd);
        }
        self.state = State::Recording;
        Ok(())
    }

    fn recording(&self) -> VkResult<()> {
        match self.state {
            State::Recording => Ok(()),
            _ => Err(VkError::Submission(
                "not recording (already submitted; call reset first)",
            )),
        }
    }

    /// Keeps `b` until the fence has signalled, if it is shared.
    fn keep<'b>(&mut self, b: &impl BufferRef<'b>) {
        if let Some(shared) = b.shared() {
            self.kept.push(Arc::clone(shared));
        }
    }

    fn own(&self, buffer: &Buffer) -> VkResult<()> {
        if Arc::ptr_eq(&buffer.ctx.shared, &self.ctx.shared) {
            Ok(())
        } else {
            Err(VkError::Buffer {
                name: buffer.name().into(),
                message: "belongs to another context".into(),
            })
        }
    }

    /// Records a copy of `size` bytes from `src` at `src_offset` to `dst` at
    /// `dst_offset`. Needs barriers around it like any other access.
    pub fn copy(
        &mut self,
        src: impl BufferRef<'a>,
        src_offset: u64,
        dst: impl BufferRef<'a>,
        dst_offset: u64,
        size: u64,
    ) -> VkResult<()> {
        let (src_ref, dst_ref) = (&src, &dst);
        let (src, dst) = (src_ref.buffer(), dst_ref.buffer());
        self.recording()?;
        self.own(src)?;
        self.own(dst)?;
        src.check_range(src_offset, size)?;
        dst.check_range(dst_offset, size)?;
        if size == 0 {
            return Ok(());
        }
        let region = [vk::BufferCopy {
            src_offset,
            dst_offset,
            size,
        }];
        // SAFETY: recording state checked; both buffers are live (borrowed for 'a
        // or kept until the fence signals) and belong to this device, with
        // TRANSFER_SRC/DST usage by kind (a wrong kind is a validation error, not
        // memory unsafety); ranges checked above.
        unsafe {
            self.device()
                .cmd_copy_buffer(self.cmd, src.raw, dst.raw, &region)
        };
        self.keep(src_ref);
        self.keep(dst_ref);
        Ok(())
    }

    /// Records a fill of `size` bytes (a multiple of 4) at `offset` (a multiple of
    /// 4) of a storage buffer with the 32-bit pattern `value`. A transfer write.
    pub fn fill(
        &mut self,
        dst: impl BufferRef<'a>,
        offset: u64,
        size: u64,
        value: u32,
    ) -> VkResult<()> {
        let dst_ref = &dst;
        let dst = dst_ref.buffer();
        self.recording()?;
        self.own(dst)?;
        dst.check_range(offset, size)?;
        if !offset.is_multiple_of(4) || !size.is_multiple_of(4) || dst.kind() != BufferKind::Storage
        {
            return Err(VkError::Buffer {
                name: dst.name().into(),
                message: "fill needs a storage buffer and 4-byte-aligned offset and size".into(),
            });
        }
        // SAFETY: recording state checked; the buffer is live (borrowed for 'a or
        // kept until the fence signals), has TRANSFER_DST usage (storage kind) and
        // the range is in bounds and aligned (checked above).
        unsafe {
            self.device()
                .cmd_fill_buffer(self.cmd, dst.raw, offset, size, value)
        };
        self.keep(dst_ref);
        Ok(())
    }

    /// Records a global memory barrier: writes by `from` are made available and
    /// visible to reads and writes by `to`, and `to` waits for `from`.
    pub fn barrier(&mut self, from: Stages, to: Stages) -> VkResult<()> {
        self.recording()?;
        let (src_stage, src_access, _) = from.masks();
        let (dst_stage, _, dst_access) = to.masks();
        let barrier = [vk::MemoryBarrier::default()
            .src_access_mask(src_access)
            .dst_access_mask(dst_access)];
        // SAFETY: recording state checked; the barrier's stage and access masks
        // are consistent (built together in `masks`) and supported by a compute queue.
        unsafe {
            self.device().cmd_pipeline_barrier(
                self.cmd,
                src_stage,
                dst_stage,
                vk::DependencyFlags::empty(),
                &barrier,
                &[],
                &[],
            )
        };
        Ok(())
    }

    /// Records a dispatch of `pipeline` over `groups` workgroups, with `buffers`
    /// bound to bindings 0.. of set 0 (whole buffers) and `push` as push constants.
    /// Each dispatch gets a fresh descriptor set, written here once and never again.
    /// Barriers against earlier accesses are the caller's business.
    pub fn dispatch<P: PushConstants, B: BufferRef<'a>>(
        &mut self,
        pipeline: &Pipeline,
        buffers: &[B],
        push: &P,
        groups: [u32; 3],
    ) -> VkResult<()> {
        self.dispatch_bytes(pipeline, buffers, push.as_bytes(), groups)
    }

    /// [`Submission::dispatch`] with the push constants as bytes (checked
    /// against the shader's block size).
    pub(crate) fn dispatch_bytes<B: BufferRef<'a>>(
        &mut self,
        pipeline: &Pipeline,
        buffers: &[B],
        push_bytes: &[u8],
        groups: [u32; 3],
    ) -> VkResult<()> {
        self.recording()?;
        let shader = pipeline.shader();
        let fail = |message: String| VkError::Dispatch {
            shader: shader.name,
            message,
        };
        if pipeline.device != self.device().handle() {
            return Err(fail("pipeline belongs to another context".into()));
        }
        if buffers.len() != shader.bindings.len() {
            return Err(fail(format!(
                "{} buffers for {} bindings",
                buffers.len(),
                shader.bindings.len()
            )));
        }
        if push_bytes.len() != shader.push_constant_size as usize {
            return Err(fail(format!(
                "{} bytes of push constants for a {}-byte block",
                push_bytes.len(),
                shader.push_constant_size
            )));
        }
        let max = self.ctx.shared.dev.limits.max_compute_work_group_count;
        if groups.iter().zip(max).any(|(&g, m)| g > m) {
            return Err(fail(format!(
                "{groups:?} workgroups exceed the device limit {max:?}"
            )));
        }
        for b in buffers.iter().map(BufferRef::buffer) {
            self.own(b)?;
            if b.kind() != BufferKind::Storage {
                return Err(fail(format!(
                    "buffer `{}` is not a storage buffer",
                    b.name()
                )));
            }
        }

        let device = self.ctx.shared.device();
        let set = self.descriptors.allocate(
            device,
            &self.ctx.shared.live,
            pipeline.set_layout,
            buffers.len() as u32,
        )?;
        let infos: Vec<[vk::DescriptorBufferInfo; 1]> = buffers
            .iter()
            .map(|b| {
                [vk::DescriptorBufferInfo {
                    buffer: b.buffer().raw,
                    offset: 0,
                    range: vk::WHOLE_SIZE,
                }]
            })
            .collect();
        let writes: Vec<vk::WriteDescriptorSet> = infos
            .iter()
            .enumerate()
            .map(|(binding, info)| {
                vk::WriteDescriptorSet::default()
                    .dst_set(set)
                    .dst_binding(binding as u32)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .buffer_info(info)
            })
            .collect();
        // SAFETY: `set` was allocated just now from this submission's pool and no
        // command buffer has bound it yet, so updating it is allowed; the buffers are
        // live storage buffers of this device no larger than maxStorageBufferRange
        // (checked at creation); `infos` outlives the call.
        unsafe { device.update_descriptor_sets(&writes, &[]) };
        // SAFETY: recording state checked; pipeline, layout and set belong to this
        // device (checked above) and stay alive while the submission exists (the
        // pipeline lives in the context's cache, the set in our pools; the buffers
        // are borrowed for 'a or kept until the fence signals); the push
        // bytes match the layout's single range (size checked above); the group
        // counts are within the device limits (checked above).
        unsafe {
            device.cmd_bind_pipeline(self.cmd, vk::PipelineBindPoint::COMPUTE, pipeline.raw);
            device.cmd_bind_descriptor_sets(
                self.cmd,
                vk::PipelineBindPoint::COMPUTE,
                pipeline.layout,
                0,
                &[set],
                &[],
            );
            if !push_bytes.is_empty() {
                device.cmd_push_constants(
                    self.cmd,
                    pipeline.layout,
                    vk::ShaderStageFlags::COMPUTE,
                    0,
                    push_bytes,
                );
            }
            device.cmd_dispatch(self.cmd, groups[0], groups[1], groups[2]);
        }
        if let Some(t) = self.timestamps.as_mut() {
            t.after(device, self.cmd, shader.name);
        }
        for b in buffers {
            self.keep(b);
        }
        Ok(())
    }

    /// Number of descriptor sets (= dispatches) recorded since the last reset.
    pub fn dispatch_count(&self) -> usize {
        self.descriptors.allocated()
    }

    /// Ends recording and submits to the context's queue, signalling the fence.
    pub fn submit(&mut self) -> VkResult<()> {
        self.recording()?;
        // SAFETY: the command buffer is in the recording state.
        unsafe { self.device().end_command_buffer(self.cmd) }.call("vkEndCommandBuffer")?;
        self.ended = true;
        self.queue_submit()
    }

    /// Submits the command buffer again as recorded, after the previous
    /// submission completed (reusable submissions only). Everything it
    /// records is still alive: borrowed buffers for 'a, shared ones kept
    /// until the next reset.
    pub fn replay(&mut self) -> VkResult<()> {
        if !self.reusable || !self.ended {
            return Err(VkError::Submission(
                "replay needs a reusable submission that was submitted",
            ));
        }
        self.wait()?;
        // SAFETY: the fence signalled (waited above) and the command
        // buffer is not pending, so the fence may be reset.
        unsafe { self.device().reset_fences(&[self.fence]) }.call("vkResetFences")?;
        self.queue_submit()
    }

    fn queue_submit(&mut self) -> VkResult<()> {
        let cmds = [self.cmd];
        let info = [vk::SubmitInfo::default().command_buffers(&cmds)];
        let queue = self.ctx.shared.queue();
        // SAFETY: the command buffer is executable and not pending (recorded
        // without ONE_TIME_SUBMIT when it is submitted again: `replay`); the
        // fence is unsignalled (fresh, or reset in `reset` / `replay`) and not in use; the queue is
        // externally synchronised by the lock; every object the commands use stays
        // alive until the fence signals (buffers are borrowed for 'a or kept in
        // `kept`, which only `reset` clears after waiting; Drop waits).
        unsafe {
            self.ctx
                .shared
                .device()
                .queue_submit(*queue, &info, self.fence)
        }
        .call("vkQueueSubmit")?;
        self.state = State::Pending;
        Ok(())
    }

    /// Waits for a submitted command buffer to complete (no-op otherwise).
    pub fn wait(&mut self) -> VkResult<()> {
        if self.state == State::Pending {
            // SAFETY: the fence is live and was submitted with the command buffer.
            unsafe { self.device().wait_for_fences(&[self.fence], true, u64::MAX) }
                .call("vkWaitForFences")?;
            self.state = State::Complete;
            if let Some(t) = self.timestamps.as_mut() {
                t.collect(self.ctx.shared.device())?;
            }
        }
        Ok(())
    }

    /// [`submit`](Self::submit), then [`wait`](Self::wait).
    pub fn submit_and_wait(&mut self) -> VkResult<()> {
        self.submit()?;
        self.wait()
    }

    /// Whether submitted work has completed (checks the fence without waiting).
    pub fn is_complete(&mut self) -> VkResult<bool> {
        if self.state == State::Pending {
            // SAFETY: the fence is live.
            if unsafe { self.device().get_fence_status(self.fence) }.call("vkGetFenceStatus")? {
                self.state = State::Complete;
                if let Some(t) = self.timestamps.as_mut() {
                    t.collect(self.ctx.shared.device())?;
                }
            }
        }
        Ok(self.state == State::Complete)
    }

    /// Waits for pending work, then returns the command buffer and every
    /// descriptor set to their pools and starts recording again.
    pub fn reset(&mut self) -> VkResult<()> {
        self.wait()?;
        let device = self.ctx.shared.device();
        // SAFETY: the fence has signalled (or was never submitted): the command
        // buffer is not pending, so its pool and the descriptor pools may be reset,
        // and the fence may be reset.
        unsafe {
            device.reset_fences(&[self.fence]).call("vkResetFences")?;
            device
                .reset_command_pool(self.pool, vk::CommandPoolResetFlags::empty())
                .call("vkResetCommandPool")?;
        }
        self.descriptors.reset(device)?;
        self.kept.clear();
        self.ended = false;
        self.begin()
    }
}

impl Drop for Submission<'_> {
    fn drop(&mut self) {
        if self.state == State::Pending {
            // Nothing may be freed while the device still runs the commands. If the
            // wait fails (device lost) fall back to waiting for the whole device.
            if self.wait().is_err() {
                let _ = self.ctx.wait_idle();
            }
        }
        let (device, live) = (self.ctx.shared.device(), &self.ctx.shared.live);
        self.descriptors.destroy(device, live);
        if let Some(t) = self.timestamps.as_mut() {
            t.destroy(device, live);
        }
        // SAFETY: no work is pending (waited above), so the fence, the command
        // buffer (freed with its pool) and the pool are unused; each is destroyed
        // once; a null fence (creation failed half-way) is ignored by Vulkan.
        unsafe {
            device.destroy_fence(self.fence, None);
            device.destroy_command_pool(self.pool, None);
        }
        if self.fence != vk::Fence::null() {
            live.destroyed(Object::Fence);
        }
        live.destroyed(Object::CommandPool);
    }
}

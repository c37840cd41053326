//! [`VulkanBackend`]: the [`Ops`] interface on a Vulkan device.
//!
//! Ops do not run when called: each appends a command (a dispatch, a copy, a
//! fill) to a list, with the byte ranges it reads and writes. A host transfer
//! ([`Ops::read`]) records the whole list into one command buffer, with a
//! barrier wherever [`hazard`] finds one command touching what an earlier
//! one wrote (or overwriting what it read), submits it once and waits for
//! its fence. A decode step is thus one submission; so is each prefill batch
//! up to the read of its logits. [`Ops::submit`] submits the list without
//! waiting (the expert slot cache's GPU half, while the host multiplies
//! the missed experts); the next flush waits for it before anything else,
//! so its commands need no barrier against it and the staging buffers are
//! free again. A waited submission is kept, and the next one with the same
//! commands (the next decode step: positions are staged, not pushed)
//! replays it instead of recording ([`replay`]).
//!
//! Memory: every tensor is a device-local storage buffer of its own.
//! Activations and KV caches carry a sentinel tail ([`SENTINEL_BYTES`] of a
//! fixed pattern) that no op may touch ([`VulkanBackend::check_sentinels`]).
//! A weight larger than the device's `maxStorageBufferRange` is split into
//! chunks of whole rows ([`GpuWeight::chunks`]; of whole matrices for
//! stacked experts); ops that read weights run once per chunk. Host data an
//! op needs (token ids, [`Ops::write`]'s values) is staged: all of it is
//! copied into one device buffer, the inbox, at the start of the submission.
//!
//! Errors: an op cannot return one, so the first failure while recording
//! (a pipeline that does not build, say) is kept and returned by the next
//! [`Ops::read`] / [`Ops::write`].

mod buffers;
mod cmd;
mod fuse;
pub mod hazard;
mod op_attention;
mod op_bias;
mod op_elementwise;
mod op_matmul;
mod op_matmul_id;
mod op_moe;
mod op_quantize;
mod ops_impl;
mod readback;
mod recorder;
mod replay;
mod resources;

use super::VkError;
use super::{
    Context, ContextOptions, DeviceKind, DeviceLimits, DeviceSelector, PushConstants, Shader,
    Submission,
};
use crate::ops::{BackendError, Ops};
pub use crate::vulkan::push::CombinePush;
use cmd::{Cmd, Op};
pub use op_attention::attention_partial_bytes;
pub use op_quantize::twin_bytes;
use resources::Slot;
pub use resources::{Bind, GpuKv, GpuWeight, WeightChunk};

/// Bytes after every activation and KV buffer that must keep
/// [`SENTINEL_WORD`].
pub const SENTINEL_BYTES: u64 = 256;
/// The sentinel pattern (a quiet NaN no computation is expected to produce).
pub const SENTINEL_WORD: u32 = 0x7fc0_dead;

/// Slot ids of the backend's own buffers.
const UPLOAD: u32 = 0;
const DOWNLOAD: u32 = 1;
const INBOX: u32 = 2;
const FIRST_TENSOR: u32 = 3;
pub use fuse::{Rule, RuleInfo, Unfused, RULES};

/// How to create a [`VulkanBackend`].
#[derive(Clone, Debug, Default)]
pub struct VulkanOptions {
    /// Which device (`--device INDEX|NAME`; default: discrete GPU first).
    pub device: DeviceSelector,
    /// VK_LAYER_KHRONOS_validation with synchronization validation.
    pub validation: bool,
    /// Record every submission afresh instead of replaying a recorded one
    /// whose commands are the same ([`replay`]); the results are the same
    /// bits (tests compare the two).
    pub record_every_step: bool,
    /// Decode fusions turned off, for comparing their cost (`--unfuse`;
    /// the results are the same bits).
    pub unfused: Unfused,
    /// Tests: force the kernel layout ([`VulkanBackend::set_kernel_layout`];
    /// None: by device kind), e.g. the GPU kernels on lavapipe.
    #[doc(hidden)]
    pub kernel_layout: Option<KernelLayout>,
}

/// Which family of matrix kernels (`matmul`, decode matvec) the backend
/// dispatches. Both compute the same products; they differ in how the work
/// is laid out, and so in f32 summation order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelLayout {
    /// Workgroups that cooperate through shared memory and barriers
    /// (`shaders/matvec.comp`, `shaders/matmul.comp`): for GPUs.
    Gpu,
    /// One invocation per weight row, no shared memory and no barrier
    /// (`shaders/matmul_cpu.comp`): for CPU implementations such as
    /// lavapipe, where a barrier costs far more than on a GPU. Needs
    /// subgroup shuffles in subgroups of a multiple of 8 invocations
    /// ([`KernelLayout::cpu_supported`]).
    Cpu,
}

impl KernelLayout {
    /// The layout for a device of `kind` with `limits`: [`KernelLayout::Cpu`]
    /// for a CPU implementation that supports it.
    pub fn for_device(kind: DeviceKind, limits: &DeviceLimits) -> KernelLayout {
        match kind {
            DeviceKind::Cpu if KernelLayout::cpu_supported(limits) => KernelLayout::Cpu,
            _ => KernelLayout::Gpu,
        }
    }

    /// Whether a device can run the [`KernelLayout::Cpu`] kernels: their
    /// activations (and attention's keys and values) are spread over 8
    /// lanes of a subgroup and shuffled; attention takes a subgroup min/max.
    pub fn cpu_supported(limits: &DeviceLimits) -> bool {
        limits.subgroup_shuffle
            && limits.subgroup_arithmetic
            && limits.subgroup_size >= 8
            && limits.subgroup_size.is_multiple_of(8)
    }
}

/// Counters since the backend was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VulkanStats {
    pub submissions: usize,
    /// Submissions that replayed a kept recording (counted in
    /// `submissions`, and their commands in `dispatches` and `barriers`).
    pub replays: usize,
    pub dispatches: usize,
    pub barriers: usize,
}

/// The Vulkan backend. See the module docs.
pub struct VulkanBackend {
    /// Work submitted by [`Ops::submit`] and not yet waited for. It holds
    /// the buffers it uses; dropping it waits for it.
    pending: Option<Submission<'static>>,
    /// The last waited submission, for replay ([`replay`]).
    replay: Option<replay::Replay>,
    /// Whether submissions are kept and replayed (tests turn it off to
    /// compare a replayed step with a fresh recording).
    replay_enabled: bool,
    ctx: Context,
    slots: Vec<Slot>,
    weights: Vec<GpuWeight>,
    kvs: Vec<GpuKv>,
    cmds: Vec<Cmd>,
    /// Host bytes for the inbox of the next submission.
    staged: Vec<u8>,
    /// The first error while recording, returned by the next transfer.
    error: Option<BackendError>,
    stats: VulkanStats,
    /// Bytes of device buffers made so far, and the most there may be (the
    /// device-local heaps).
    allocated: u64,
    budget: u64,
    /// Tests only ([`VulkanBackend::set_max_chunk_bytes`]): a weight chunk
    /// limit below the device's, so that chunking can be tested with small
    /// weights.
    max_chunk_bytes: Option<u64>,
    /// Matrix kernels: by device kind ([`KernelLayout::for_device`]), or
    /// what a test forced ([`VulkanBackend::set_kernel_layout`]).
    kernel_layout: KernelLayout,
    /// Quantized activations for the integer products (`op_quantize.rs`).
    act_scratch: op_quantize::ActScratch,
    /// Split-K attention's partials and counters (`op_attention.rs`):
    /// slot, bytes, and the first counter word (where the counters were
    /// last zeroed: every dispatch leaves them at zero).
    attn_partials: Option<(u32, u64, usize)>,
    /// Split-K prefill attention's partials (`op_attention.rs`
    /// `coop_split`): slot and bytes.
    coop_partials: Option<(u32, u64)>,
    /// The decode fusion rules' switches and what they keep ([`fuse`]).
    fuse: fuse::State,
    /// Whether the fused matvecs run their `_sg` twins, whose reductions
    /// end in subgroup shuffles (`fuse/matvec.rs`; where the device
    /// has them).
    matvec_subgroups: bool,
    /// Whether the prefill products of 32-element block types take packed
    /// integer dot products (`matmul_tiled_*`; where the device has them).
    integer_dot: bool,
    /// Whether a batch of rows on the GPU layout takes the attention kernel
    /// of several rows per workgroup (`attention_*_rows`).
    attention_rows: bool,
    /// Whether a batch of rows on the GPU layout through an f16 cache takes
    /// the attention kernel of cooperative matrices (`attention_coop_*`;
    /// where the device has them).
    attention_coop: bool,
}

impl VulkanBackend {
    /// Opens the device `opts` selects.
    pub fn new(opts: &VulkanOptions) -> Result<VulkanBackend, VkError> {
        let ctx = Context::new(&ContextOptions {
            validation: opts.validation,
            device: opts.device.clone(),
        })?;
        let mut b = VulkanBackend::with_context(ctx);
        b.set_replay(!opts.record_every_step);
        let u = opts.unfused;
        b.fuse.off = u;
        if u.subgroups {
            b.set_matvec_subgroups(false);
        }
        if let Some(layout) = opts.kernel_layout {
            if !b.set_kernel_layout(layout) {
                return Err(VkError::DeviceUnusable {
                    name: b.ctx.device_info().name.clone(),
                    message: format!("it cannot run the {layout:?} kernel layout"),
                });
            }
        }
        Ok(b)
    }

    /// A backend on an existing context.
    pub fn with_context(ctx: Context) -> VulkanBackend {
        let empty = || Slot {
            buffer: None,
            usable: 0,
            sentinel: false,
        };
        let budget = ctx.limits().device_local_bytes;
        let kernel_layout = KernelLayout::for_device(ctx.device_info().kind, ctx.limits());
        let integer_dot = ctx.limits().integer_dot;
        let attention_coop = ctx.limits().coop_f16;
        let matvec_subgroups = fuse::subgroups_supported(ctx.limits());
        let mut b = VulkanBackend {
            pending: None,
            replay: None,
            replay_enabled: true,
            ctx,
            slots: (0..FIRST_TENSOR).map(|_| empty()).collect(),
            weights: Vec::new(),
            kvs: Vec::new(),
            cmds: Vec::new(),
            staged: Vec::new(),
            error: None,
            stats: VulkanStats::default(),
            allocated: 0,
            budget,
            max_chunk_bytes: None,
            kernel_layout,
            act_scratch: op_quantize::ActScratch::default(),
            attn_partials: None,
            coop_partials: None,
            fuse: fuse::State::default(),
            matvec_subgroups,
            integer_dot,
            attention_rows: true,
            attention_coop,
        };
        // Made now, so that no recorded step holds its zero fill (a decode
        // step replays only what the step before it recorded).
        b.fuse.post_counter = b.new_buffer("matvec epilogue counter", 4, false, true).ok();
        b
    }

    /// Lowers the device-memory budget (tests: a model that does not fit).
    #[doc(hidden)]
    pub fn set_memory_budget(&mut self, bytes: u64) {
        self.budget = bytes;
    }

    /// Turns the replay of recorded submissions on (the default) or off
    /// (every submission recorded afresh: tests compare the two).
    #[doc(hidden)]
    pub fn set_replay(&mut self, on: bool) {
        self.replay_enabled = on;
        if !on {
            self.replay = None;
        }
    }

    /// Turns the decode fusion `rule` ([`RULES`]) on (the default) or
    /// off; the results are the same bits (tests compare the two).
    #[doc(hidden)]
    pub fn set_fusion(&mut self, rule: Rule, on: bool) {
        self.fuse.off.set(rule, !on);
    }

    /// Turns the decode matvec's fusions (`fuse/matvec.rs`) on (the
    /// default) or off; the results are the same bits (tests compare the
    /// two).
    #[doc(hidden)]
    pub fn set_matvec_fusion(&mut self, on: bool) {
        self.set_fusion(Rule::Matvec, on);
    }

    /// Turns the RoPE and cache-write epilogues of the fused decode matvecs
    /// (`fuse/matvec_rope.rs`) on (the default) or off, the other matvec
    /// fusions as they are; the same bits (tests compare the two).
    #[doc(hidden)]
    pub fn set_rope_epilogue(&mut self, on: bool) {
        self.set_fusion(Rule::MatvecRope, on);
        self.set_fusion(Rule::MatvecKv, on);
    }

    /// Turns the merge of a layer's fused Q, K and V products into one
    /// dispatch (`fuse/qkv.rs`) on (the default) or off; the same
    /// bits (tests compare the two).
    #[doc(hidden)]
    pub fn set_matvec_merge(&mut self, on: bool) {
        self.set_fusion(Rule::Qkv, on);
    }

    /// Turns the one-dispatch feed-forward block (`fuse/ffn.rs`) on
    /// (the default) or off, the other matvec fusions as they are; the
    /// same bits (tests compare the two).
    #[doc(hidden)]
    pub fn set_ffn_fusion(&mut self, on: bool) {
        self.set_fusion(Rule::Ffn, on);
    }

    /// Turns the decode attention's output-projection epilogue
    /// (`fuse/oproj.rs`) on (the default) or off, the other
    /// fusions as they are; the same bits (tests compare the two).
    #[doc(hidden)]
    pub fn set_oproj_fusion(&mut self, on: bool) {
        self.set_fusion(Rule::Oproj, on);
    }

    /// Turns the subgroup-shuffle twins of the fused decode matvecs
    /// (`fuse/matvec.rs`) on (the default, where the device has
    /// shuffles) or off; the same bits (tests compare the two). Returns
    /// whether they are on.
    #[doc(hidden)]
    pub fn set_matvec_subgroups(&mut self, on: bool) -> bool {
        self.matvec_subgroups = on && fuse::subgroups_supported(self.ctx.limits());
        self.matvec_subgroups
    }

    /// Turns the fusion of a per-head norm with the RoPE, query scale and
    /// K cache write after it (`fuse/norm_rope.rs`) on (the default) or off;
    /// the same bits (tests compare the two).
    #[doc(hidden)]
    pub fn set_norm_rope(&mut self, on: bool) {
        self.set_fusion(Rule::NormRope, on);
    }

    /// Turns the prefill products' packed integer dot products
    /// (`shaders/matmul_tiled.comp`) on (the default where the device has
    /// them) or off; the same bits (tests compare the two). Returns whether
    /// they are on.
    #[doc(hidden)]
    pub fn set_integer_dot(&mut self, on: bool) -> bool {
        self.integer_dot = on && self.ctx.limits().integer_dot;
        self.integer_dot
    }

    /// Turns the GPU layout's attention of several query rows per workgroup
    /// (`shaders/attention.comp` ROWS) on (the default) or off (one row
    /// per workgroup; tests compare the two).
    #[doc(hidden)]
    pub fn set_attention_rows(&mut self, on: bool) {
        self.attention_rows = on;
    }

    /// Turns the prefill attention of cooperative matrices
    /// (`shaders/attention_coop.comp`, an f16 cache on the GPU layout) on
    /// (the default where the device has them) or off (the kernels of f32
    /// products: tests compare each with the CPU). Returns whether it is on.
    #[doc(hidden)]
    pub fn set_attention_coop(&mut self, on: bool) -> bool {
        self.attention_coop = on && self.ctx.limits().coop_f16;
        self.attention_coop
    }

    /// Whether a batch of rows through an f16 cache on the GPU layout may
    /// take the attention kernel of cooperative matrices.
    pub fn attention_coop(&self) -> bool {
        self.attention_coop && self.kernel_layout == KernelLayout::Gpu
    }

    /// Whether attention of `t` query rows at `pos0` of `n_head` heads of
    /// dims `dk`/`dv` through a cache of `ty` takes the kernel of
    /// cooperative matrices (its f16 weights bound its outputs differently:
    /// `engine/tests/vulkan_attention.rs`).
    #[doc(hidden)]
    pub fn attention_takes_coop(
        &self,
        ty: crate::ops::KvType,
        (t, pos0): (usize, usize),
        (n_head, dk, dv): (usize, usize, usize),
    ) -> bool {
        op_attention::takes_coop(self, ty, (t, pos0), (n_head, dk, dv))
    }

    /// The matrix kernels this backend dispatches.
    pub fn kernel_layout(&self) -> KernelLayout {
        self.kernel_layout
    }

    /// Forces a kernel layout (tests: the GPU kernels on a CPU device, and
    /// the other way round). Ops recorded afterwards use it. Returns false
    /// (and changes nothing) for [`KernelLayout::Cpu`] on a device that
    /// cannot run it.
    #[doc(hidden)]
    pub fn set_kernel_layout(&mut self, layout: KernelLayout) -> bool {
        if layout == KernelLayout::Cpu && !KernelLayout::cpu_supported(self.ctx.limits()) {
            return false;
        }
        self.kernel_layout = layout;
        true
    }

    /// The most bytes of device buffers there may be: the device-local
    /// heaps (or what [`set_memory_budget`](Self::set_memory_budget) set).
    pub fn memory_budget(&self) -> u64 {
        self.budget
    }

    /// Bytes of device buffers made so far.
    pub fn allocated_bytes(&self) -> u64 {
        self.allocated
    }

    pub fn context(&self) -> &Context {
        &self.ctx
    }

    pub fn stats(&self) -> VulkanStats {
        self.stats
    }

    fn err(&self, message: impl std::fmt::Display) -> BackendError {
        BackendError::Device {
            backend: self.name(),
            message: message.to_string(),
        }
    }

    fn vk_err(&self, what: &'static str, bytes: u64, e: VkError) -> BackendError {
        match e {
            VkError::Alloc { .. } => BackendError::OutOfMemory {
                backend: format!("{} ({e})", self.name()),
                what,
                bytes,
            },
            e => self.err(e),
        }
    }

    /// Keeps the first recording error for the next transfer.
    fn fail(&mut self, e: BackendError) {
        if self.error.is_none() {
            self.error = Some(e);
        }
    }

    /// Records a dispatch of `shader` with `binds` at bindings 0.. and
    /// `push`, over `groups` workgroups.
    ///
    /// # Panics
    /// When the bindings or push constants do not match the shader (a bug in
    /// the op's code).
    pub fn dispatch<P: PushConstants>(
        &mut self,
        shader: &'static Shader,
        binds: &[Bind],
        push: &P,
        groups: [u32; 3],
    ) {
        self.dispatch_bytes(shader, binds, push.as_bytes().to_vec(), groups);
    }

    /// [`dispatch`](Self::dispatch) with the push constants as bytes.
    ///
    /// # Panics
    /// As `dispatch`.
    pub(super) fn dispatch_bytes(
        &mut self,
        shader: &'static Shader,
        binds: &[Bind],
        push: Vec<u8>,
        groups: [u32; 3],
    ) {
        self.dispatch_op(Op::Other, shader, binds, push, groups);
    }

    /// [`dispatch_bytes`](Self::dispatch_bytes) of a plain kernel tagged
    /// with its op, for the fusion pass ([`cmd::Op`]).
    ///
    /// # Panics
    /// As `dispatch`, and when a binding reaches past its buffer.
    fn dispatch_op(
        &mut self,
        op: Op,
        shader: &'static Shader,
        binds: &[Bind],
        push: Vec<u8>,
        groups: [u32; 3],
    ) {
        let cmd = Cmd::dispatch(op, shader, binds, push, groups);
        for b in binds {
            assert!(
                b.bytes.end <= self.slots[b.buf as usize].usable || b.buf == INBOX,
                "{}: binding range {:?} beyond buffer {}'s {} bytes",
                shader.name,
                b.bytes,
                b.buf,
                self.slots[b.buf as usize].usable
            );
        }
        if groups.contains(&0) {
            return;
        }
        self.cmds.push(cmd);
    }

    /// Workgroups for a 1-D problem of `n` invocations of `shader` (spilling
    /// into y past the device's x limit; shaders use `global_index_1d()`).
    pub fn groups_1d(&mut self, shader: &'static Shader, n: u64) -> [u32; 3] {
        match super::pipeline::groups_1d(
            n,
            shader.local_size[0],
            self.ctx.limits().max_compute_work_group_count,
        ) {
            Ok(g) => g,
            Err(e) => {
                let e = self.err(e);
                self.fail(e);
                [0, 1, 1]
            }
        }
    }

    /// Records a copy of `size` bytes between device buffers.
    pub fn copy_bytes(&mut self, src: u32, src_offset: u64, dst: u32, dst_offset: u64, size: u64) {
        self.cmds.push(Cmd::Copy {
            src,
            src_offset,
            dst,
            dst_offset,
            size,
        });
    }

    /// Tests: `x` quantized on the device to the activation format `fmt`
    /// (Q8_0, Q8_1 or Q8_K) as the products quantize it, in ggml's block
    /// bytes (what [`crate::cpu::act::quantize_act`] writes).
    #[doc(hidden)]
    pub fn quantize_act(
        &mut self,
        x: crate::ops::Act,
        fmt: crate::GgmlType,
    ) -> Result<Vec<u8>, BackendError> {
        op_quantize::read_quantized(self, x, fmt)
    }

    /// Validation-layer messages so far (0 without validation).
    pub fn validation_message_count(&self) -> usize {
        self.ctx.validation_message_count()
    }
}

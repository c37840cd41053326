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
//! free again.
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

pub mod hazard;
mod op_attention;
mod op_elementwise;
mod op_matmul;
mod op_matmul_id;
mod op_moe;
mod recorder;

use std::ops::Range;

use super::{
    Buffer, BufferKind, Context, ContextOptions, DeviceKind, DeviceSelector, PushConstants, Shader,
    Submission,
};
use super::{VkError, VkResult};
use crate::ggml_type::GgmlType;
use crate::ops::{
    Act, AttnParams, BackendError, BinaryOp, Kv, KvType, Ops, RopeParams, UnaryOp, Weight,
    WeightSource,
};
use hazard::Access;
use recorder::Cmd;

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

/// How to create a [`VulkanBackend`].
#[derive(Clone, Debug, Default)]
pub struct VulkanOptions {
    /// Which device (`--device INDEX|NAME`; default: discrete GPU first).
    pub device: DeviceSelector,
    /// VK_LAYER_KHRONOS_validation with synchronization validation.
    pub validation: bool,
}

/// One chunk of a weight: rows `row0..row0 + rows`, in buffer `buf`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WeightChunk {
    pub buf: u32,
    pub row0: usize,
    pub rows: usize,
}

/// A weight on the device: `n_out` rows of `n_in` elements of `ty`, in
/// ggml's block layout, split into chunks of whole rows.
#[derive(Clone, Debug)]
pub struct GpuWeight {
    pub name: String,
    pub ty: GgmlType,
    pub n_in: usize,
    pub n_out: usize,
    /// Bytes of one row.
    pub row_bytes: usize,
    pub chunks: Vec<WeightChunk>,
}

/// A KV cache on the device: `k` `[n_ctx, k_width]` and `v` `[n_ctx,
/// v_width]`, f32 or f16 (two halves per 32-bit word, low half first).
#[derive(Clone, Copy, Debug)]
pub struct GpuKv {
    pub k: u32,
    pub v: u32,
    pub n_ctx: usize,
    pub k_width: usize,
    pub v_width: usize,
    pub ty: KvType,
}

impl GpuKv {
    /// Bytes per element.
    pub fn elem_bytes(&self) -> u64 {
        match self.ty {
            KvType::F32 => 4,
            KvType::F16 => 2,
        }
    }
}

/// A buffer bound to one binding of a dispatch, and the bytes of it the
/// dispatch touches (for the hazard tracker; the whole buffer is bound).
/// Whether it is read or written comes from the shader's reflection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bind {
    pub buf: u32,
    pub bytes: Range<u64>,
}

impl Bind {
    /// The rows of an activation view.
    pub fn act(a: Act) -> Bind {
        let e = a.elems();
        Bind {
            buf: a.id(),
            bytes: e.start as u64 * 4..e.end as u64 * 4,
        }
    }

    /// A whole weight chunk.
    pub fn chunk(w: &GpuWeight, c: &WeightChunk) -> Bind {
        Bind {
            buf: c.buf,
            bytes: 0..(c.rows * w.row_bytes) as u64,
        }
    }
}

struct Slot {
    buffer: Option<Buffer>,
    /// Bytes ops may use (the sentinel tail follows).
    usable: u64,
    sentinel: bool,
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
    /// lavapipe, where a barrier costs far more than on a GPU.
    Cpu,
}

impl KernelLayout {
    /// The layout for a device of `kind`.
    pub fn for_device(kind: DeviceKind) -> KernelLayout {
        match kind {
            DeviceKind::Cpu => KernelLayout::Cpu,
            _ => KernelLayout::Gpu,
        }
    }
}

/// Counters since the backend was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VulkanStats {
    pub submissions: usize,
    pub dispatches: usize,
    pub barriers: usize,
}

/// The Vulkan backend. See the module docs.
pub struct VulkanBackend {
    /// Work submitted by [`Ops::submit`] and not yet waited for. First
    /// field: dropped (which waits for it) before the buffers it uses.
    pending: Option<Submission<'static>>,
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
}

impl VulkanBackend {
    /// Opens the device `opts` selects.
    pub fn new(opts: &VulkanOptions) -> Result<VulkanBackend, VkError> {
        let ctx = Context::new(&ContextOptions {
            validation: opts.validation,
            device: opts.device.clone(),
        })?;
        Ok(VulkanBackend::with_context(ctx))
    }

    /// A backend on an existing context.
    pub fn with_context(ctx: Context) -> VulkanBackend {
        let empty = || Slot {
            buffer: None,
            usable: 0,
            sentinel: false,
        };
        let budget = ctx.limits().device_local_bytes;
        let kernel_layout = KernelLayout::for_device(ctx.device_info().kind);
        VulkanBackend {
            pending: None,
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
        }
    }

    /// Lowers the device-memory budget (tests: a model that does not fit).
    #[doc(hidden)]
    pub fn set_memory_budget(&mut self, bytes: u64) {
        self.budget = bytes;
    }

    /// The matrix kernels this backend dispatches.
    pub fn kernel_layout(&self) -> KernelLayout {
        self.kernel_layout
    }

    /// Forces a kernel layout (tests: the GPU kernels on a CPU device, and
    /// the other way round). Ops recorded afterwards use it.
    #[doc(hidden)]
    pub fn set_kernel_layout(&mut self, layout: KernelLayout) {
        self.kernel_layout = layout;
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

    /// A device-local storage buffer of `bytes` usable bytes (rounded up to
    /// whole words), with a sentinel tail when `sentinel`; zeroed (at the
    /// next submission) when `zero`.
    fn new_buffer(&mut self, name: &str, bytes: u64, sentinel: bool, zero: bool) -> VkResult<u32> {
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
            buffer: Some(buffer),
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
    fn stage_bytes(&mut self, data: &[u8]) -> (u32, u64) {
        let start = self.staged.len().div_ceil(16) * 16;
        self.staged.resize(start, 0);
        self.staged.extend_from_slice(data);
        (INBOX, start as u64)
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
        assert_eq!(
            binds.len(),
            shader.bindings.len(),
            "{}: {} bindings for {}",
            shader.name,
            binds.len(),
            shader.bindings.len()
        );
        let push = push.as_bytes().to_vec();
        assert_eq!(
            push.len(),
            shader.push_constant_size as usize,
            "{}: push-constant size",
            shader.name
        );
        let access = binds
            .iter()
            .zip(shader.bindings)
            .map(|(b, how)| {
                assert!(
                    b.bytes.end <= self.slots[b.buf as usize].usable || b.buf == INBOX,
                    "{}: binding range {:?} beyond buffer {}'s {} bytes",
                    shader.name,
                    b.bytes,
                    b.buf,
                    self.slots[b.buf as usize].usable
                );
                Access {
                    buf: b.buf,
                    range: b.bytes.clone(),
                    write: !matches!(how, super::BindingAccess::Read),
                }
            })
            .collect();
        if groups.contains(&0) {
            return;
        }
        self.cmds.push(Cmd::Dispatch {
            shader,
            bufs: binds.iter().map(|b| b.buf).collect(),
            push,
            groups,
            access,
        });
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

    /// Submits everything recorded and waits; then downloads `read` (buffer,
    /// byte offset, f32 count) into `out`.
    fn flush(&mut self, read: Option<(u32, u64, &mut [f32])>) -> Result<(), BackendError> {
        if let Some(e) = self.error.take() {
            self.cmds.clear();
            self.staged.clear();
            return Err(e);
        }
        recorder::flush(self, read, true).map_err(|e| self.err(e))
    }

    /// Waits for the work [`Ops::submit`] started, if any.
    fn wait_pending(&mut self) -> Result<(), BackendError> {
        if let Some(mut p) = self.pending.take() {
            p.wait().map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    /// Checks every sentinel tail; `Err` lists the buffers whose tail
    /// changed. Submits pending work first.
    pub fn check_sentinels(&mut self) -> Result<(), BackendError> {
        self.flush(None)?;
        let mut bad = Vec::new();
        for (id, slot) in self.slots.iter().enumerate() {
            let (Some(b), true) = (&slot.buffer, slot.sentinel) else {
                continue;
            };
            let words: Vec<u32> = self
                .ctx
                .download_vec(b, slot.usable, (SENTINEL_BYTES / 4) as usize)
                .map_err(|e| self.err(e))?;
            if let Some(i) = words.iter().position(|&w| w != SENTINEL_WORD) {
                bad.push(format!(
                    "buffer {id} `{}`: word {i} after the end is {:#010x}",
                    b.name(),
                    words[i]
                ));
            }
        }
        if bad.is_empty() {
            Ok(())
        } else {
            Err(self.err(format!("sentinels overwritten: {}", bad.join("; "))))
        }
    }

    /// For tests: split weights uploaded from now on into chunks of at most
    /// `bytes` (whole rows; at least one row), as if the device's
    /// `maxStorageBufferRange` were that small.
    #[doc(hidden)]
    pub fn set_max_chunk_bytes(&mut self, bytes: u64) {
        self.max_chunk_bytes = Some(bytes);
    }

    /// Validation-layer messages so far (0 without validation).
    pub fn validation_message_count(&self) -> usize {
        self.ctx.validation_message_count()
    }
}

impl Ops for VulkanBackend {
    fn name(&self) -> String {
        format!("vulkan ({})", self.ctx.device_info().name)
    }

    fn validation_messages(&self) -> Vec<String> {
        self.ctx.validation_messages()
    }

    fn upload(&mut self, w: &WeightSource) -> Result<Weight, BackendError> {
        self.wait_pending()?;
        if !op_matmul::supports(w.ty()) {
            return Err(BackendError::UnsupportedWeight {
                backend: self.name(),
                name: w.name().to_string(),
                ty: w.ty(),
            });
        }
        let row_bytes = w.row_bytes();
        let limit = u64::from(self.ctx.limits().max_storage_buffer_range).min(1 << 30);
        // A smaller limit set by a test (set_max_chunk_bytes).
        let limit = self.max_chunk_bytes.map_or(limit, |m| m.min(limit));
        let rows_per_chunk = ((limit / row_bytes.max(1) as u64) as usize).max(1);
        // Stacked matrices (experts) are not split across chunks when one
        // fits: matmul_id reads each expert from one chunk.
        let per_matrix = w.n_out() / w.matrices();
        let rows_per_chunk = if w.matrices() > 1 && rows_per_chunk >= per_matrix {
            rows_per_chunk / per_matrix * per_matrix
        } else {
            rows_per_chunk
        };
        let mut chunks = Vec::new();
        let mut row0 = 0;
        while row0 < w.n_out() {
            let rows = rows_per_chunk.min(w.n_out() - row0);
            let bytes = &w.bytes()[row0 * row_bytes..(row0 + rows) * row_bytes];
            let size = bytes.len() as u64;
            let buf = self
                .new_buffer(w.name(), size, false, false)
                .map_err(|e| self.vk_err("weights", size, e))?;
            // Whole words: pad the tail of a chunk whose size is not a multiple of 4.
            let mut padded = bytes.to_vec();
            padded.resize(bytes.len().div_ceil(4) * 4, 0);
            let b = self.slots[buf as usize].buffer.as_ref().expect("just made");
            self.ctx
                .upload(b, 0, &padded)
                .map_err(|e| self.vk_err("weights", size, e))?;
            chunks.push(WeightChunk { buf, row0, rows });
            row0 += rows;
        }
        self.weights.push(GpuWeight {
            name: w.name().to_string(),
            ty: w.ty(),
            n_in: w.n_in(),
            n_out: w.n_out(),
            row_bytes,
            chunks,
        });
        Ok(Weight(self.weights.len() as u32 - 1))
    }

    fn write_weight_rows(
        &mut self,
        w: Weight,
        row0: usize,
        bytes: &[u8],
    ) -> Result<(), BackendError> {
        let gw = &self.weights[w.0 as usize];
        let rb = gw.row_bytes;
        assert!(
            bytes.len().is_multiple_of(rb) && row0 + bytes.len() / rb <= gw.n_out,
            "write_weight_rows {}: {} bytes at row {row0} of {} rows of {rb}",
            gw.name,
            bytes.len(),
            gw.n_out
        );
        let rows = row0..row0 + bytes.len() / rb;
        // (chunk buffer, byte offset in it, byte range of `bytes`) per chunk
        // the rows touch.
        let parts: Vec<(u32, u64, Range<usize>)> = gw
            .chunks
            .iter()
            .filter_map(|c| {
                let (a, b) = (rows.start.max(c.row0), rows.end.min(c.row0 + c.rows));
                (a < b).then(|| {
                    let src = (a - row0) * rb..(b - row0) * rb;
                    (c.buf, ((a - c.row0) * rb) as u64, src)
                })
            })
            .collect();
        for (buf, offset, src) in parts {
            let (inbox, at) = self.stage_bytes(&bytes[src.clone()]);
            self.copy_bytes(inbox, at, buf, offset, src.len() as u64);
        }
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        Ok(())
    }

    fn alloc(&mut self, rows: usize, width: usize) -> Result<Act, BackendError> {
        let bytes = (rows * width * 4) as u64;
        let id = self
            .new_buffer("activation", bytes, true, true)
            .map_err(|e| self.vk_err("activations", bytes, e))?;
        Ok(Act::new(id, rows, width))
    }

    fn alloc_kv(
        &mut self,
        n_ctx: usize,
        k_width: usize,
        v_width: usize,
        ty: KvType,
    ) -> Result<Kv, BackendError> {
        let eb = match ty {
            KvType::F32 => 4,
            KvType::F16 => 2,
        };
        let kb = (n_ctx * k_width * eb) as u64;
        let vb = (n_ctx * v_width * eb) as u64;
        let k = self
            .new_buffer("kv k", kb, true, true)
            .map_err(|e| self.vk_err("KV cache", kb, e))?;
        let v = self
            .new_buffer("kv v", vb, true, true)
            .map_err(|e| self.vk_err("KV cache", vb, e))?;
        self.kvs.push(GpuKv {
            k,
            v,
            n_ctx,
            k_width,
            v_width,
            ty,
        });
        Ok(Kv(self.kvs.len() as u32 - 1))
    }

    fn write(&mut self, dst: Act, src: &[f32]) -> Result<(), BackendError> {
        assert_eq!(src.len(), dst.len(), "write: length");
        let words: Vec<u32> = src.iter().map(|v| v.to_bits()).collect();
        let (inbox, at) = self.stage_u32(&words);
        let b = Bind::act(dst);
        self.copy_bytes(
            inbox,
            u64::from(at) * 4,
            b.buf,
            b.bytes.start,
            b.bytes.end - b.bytes.start,
        );
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        Ok(())
    }

    fn submit(&mut self) -> Result<(), BackendError> {
        if let Some(e) = self.error.take() {
            self.cmds.clear();
            self.staged.clear();
            return Err(e);
        }
        recorder::flush(self, None, false).map_err(|e| self.err(e))
    }

    fn read(&mut self, src: Act, dst: &mut [f32]) -> Result<(), BackendError> {
        assert_eq!(src.len(), dst.len(), "read: length");
        let b = Bind::act(src);
        self.flush(Some((b.buf, b.bytes.start, dst)))
    }

    fn embed(&mut self, table: Weight, tokens: &[u32], out: Act) {
        op_matmul::embed(self, table, tokens, out)
    }

    fn rms_norm(&mut self, x: Act, w: Option<Weight>, eps: f32, group: usize, out: Act) {
        op_elementwise::rms_norm(self, x, w, eps, group, out)
    }

    fn matmul(&mut self, w: Weight, x: Act, out: Act) {
        op_matmul::matmul(self, w, x, out)
    }

    fn rope(&mut self, x: Act, p: &RopeParams, pos0: usize) {
        op_elementwise::rope(self, x, p, pos0)
    }

    fn attention(&mut self, kv: Kv, q: Act, k: Act, v: Act, out: Act, pos0: usize, p: &AttnParams) {
        op_attention::attention(self, kv, q, k, v, out, pos0, p)
    }

    fn binary(&mut self, op: BinaryOp, x: Act, y: Act) {
        op_elementwise::binary(self, op, x, y)
    }

    fn unary(&mut self, op: UnaryOp, x: Act) {
        op_elementwise::unary(self, op, x)
    }

    fn copy(&mut self, src: Act, dst: Act) {
        assert_eq!(src.len(), dst.len(), "copy: shapes");
        assert!(!src.overlaps(dst), "copy: overlapping views");
        let (s, d) = (Bind::act(src), Bind::act(dst));
        self.copy_bytes(
            s.buf,
            s.bytes.start,
            d.buf,
            d.bytes.start,
            s.bytes.end - s.bytes.start,
        );
    }

    fn softmax(&mut self, x: Act) {
        op_moe::softmax(self, x)
    }

    fn top_k(&mut self, probs: Act, ids: Act, weights: Act) {
        op_moe::top_k(self, probs, ids, weights)
    }

    fn normalize_rows(&mut self, x: Act) {
        op_moe::normalize_rows(self, x)
    }

    fn matmul_id(&mut self, w: Weight, n_expert: usize, ids: Act, x: Act, out: Act) {
        op_matmul_id::matmul_id(self, w, n_expert, ids, x, out)
    }

    fn mul_groups(&mut self, x: Act, s: Act) {
        op_moe::mul_groups(self, x, s)
    }

    fn sum_groups(&mut self, x: Act, out: Act) {
        op_moe::sum_groups(self, x, out)
    }
}

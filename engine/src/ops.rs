//! The narrow interface every backend implements.
//!
//! Model code (`model::forward`) is written once against [`Ops`] and never
//! asks which backend it runs on. A backend owns its memory: activations
//! ([`Act`]), weights ([`Weight`]) and KV caches ([`Kv`]) are opaque handles
//! that only the backend that made them can resolve. Several backends can
//! serve one model (see [`crate::placement`]); the hidden state moves between
//! them in one place, [`crate::placement::Devices::handoff`].
//!
//! # Conventions
//! - An activation is a row-major f32 matrix `[rows, width]`: one row per
//!   token, `width` contiguous elements per row. Its memory order is that of
//!   the corresponding contiguous ggml tensor (ggml's `ne[0]` is our width):
//!   a `[n_tokens, n_head * head_dim]` Q is ggml's `[head_dim, n_head,
//!   n_tokens]`, head `h` of token `t` at `t * width + h * head_dim`.
//! - [`Act`] is a view: a buffer allocated with [`Ops::alloc`] for some
//!   number of rows, narrowed with [`Act::rows_from`] / [`Act::first`].
//!   Ops work on the rows of the views they are given.
//! - Weights use ggml's dimension order: a matrix `[n_in, n_out]` has
//!   `n_out` rows of `n_in` elements, and `matmul` computes `x · Wᵀ`.
//! - Rows of one sequence sit at consecutive positions: row `t` of a batch
//!   is at position `pos0 + t` (one sequence per session).
//! - Compute ops only record work: on the CPU they run at once; a GPU
//!   backend may queue them. Failures that only a device can have (lost
//!   device, out of memory at submission) surface at the next host transfer
//!   ([`Ops::read`] / [`Ops::write`]) as a [`BackendError`]. Shape mismatches
//!   are bugs in the caller and panic with a message naming the op.
//!
//! # Extreme values
//! Every backend gives each output element the IEEE class the CPU backend
//! gives it (which is ggml's CPU backend's, except where an op says
//! otherwise): NaN where it has NaN, an infinity of the same sign, a finite
//! value where it has one, over the whole f32 range and for NaN and ±inf
//! inputs; each op states its rules below. `engine/tests/vulkan_extreme_*.rs`
//! check the Vulkan backend against the CPU element by element on inputs
//! from 1e-38 to 3e38, planted NaN and ±inf, RoPE positions up to 2^24 and
//! attention scores up to ~1e9.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use crate::ggml_type::GgmlType;
use crate::gguf::{GgufFile, TensorInfo};
use crate::numerics::CpuNumerics;

/// An activation: a view of rows of a backend-owned f32 buffer.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Act {
    id: u32,
    dev: u16,
    row0: u32,
    rows: u32,
    width: u32,
}

impl Act {
    /// A handle for buffer `id` of a backend, covering rows `0..rows`.
    /// Backends call this from [`Ops::alloc`].
    pub fn new(id: u32, rows: usize, width: usize) -> Act {
        let c = |v: usize, what: &str| {
            u32::try_from(v).unwrap_or_else(|_| panic!("activation {what} {v} exceeds u32"))
        };
        Act {
            id,
            dev: 0,
            row0: 0,
            rows: c(rows, "rows"),
            width: c(width, "width"),
        }
    }

    /// The backend's buffer id.
    pub fn id(self) -> u32 {
        self.id
    }

    /// Index of the device (in a [`crate::placement::Devices`]) that holds
    /// the buffer; 0 for a backend used on its own.
    pub fn device(self) -> usize {
        usize::from(self.dev)
    }

    pub(crate) fn on_device(self, dev: usize) -> Act {
        Act {
            dev: u16::try_from(dev).expect("device index fits u16"),
            ..self
        }
    }

    /// First row of the buffer that this view covers.
    pub fn row0(self) -> usize {
        self.row0 as usize
    }

    /// Rows in this view.
    pub fn rows(self) -> usize {
        self.rows as usize
    }

    /// Elements per row.
    pub fn width(self) -> usize {
        self.width as usize
    }

    /// Elements in this view (`rows * width`).
    pub fn len(self) -> usize {
        self.rows() * self.width()
    }

    pub fn is_empty(self) -> bool {
        self.len() == 0
    }

    /// The view's element range within its buffer.
    pub fn elems(self) -> Range<usize> {
        let start = self.row0() * self.width();
        start..start + self.len()
    }

    /// The first `n` rows of this view.
    pub fn first(self, n: usize) -> Act {
        self.rows_from(0, n)
    }

    /// Rows `start..start + n` of this view.
    pub fn rows_from(self, start: usize, n: usize) -> Act {
        assert!(
            start + n <= self.rows(),
            "rows {start}..{} outside a {}-row activation",
            start + n,
            self.rows()
        );
        Act {
            row0: self.row0 + start as u32,
            rows: n as u32,
            ..self
        }
    }

    /// Whether two views share any element of the same buffer.
    pub fn overlaps(self, other: Act) -> bool {
        let (a, b) = (self.elems(), other.elems());
        self.id == other.id && self.dev == other.dev && a.start < b.end && b.start < a.end
    }
}

impl fmt::Debug for Act {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Act#{}@{}[rows {}..{}, width {}]",
            self.id,
            self.dev,
            self.row0,
            self.row0 + self.rows,
            self.width
        )
    }
}

/// A weight tensor prepared by a backend at load time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Weight(pub u32);

/// One layer's KV cache, allocated once for the whole context.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Kv(pub u32);

pub use crate::kv_type::KvType;

/// Where a weight's bytes come from: a tensor of a mapped GGUF file (no
/// copy) or bytes in memory (tests, synthetic models).
#[derive(Clone)]
pub struct WeightSource {
    name: String,
    ty: GgmlType,
    /// `[n_in, n_out]`: row length, rows (a vector is `[n, 1]`).
    dims: [usize; 2],
    /// Matrices stacked in the rows (a 3-D `[n_in, n_out / m, m]` tensor:
    /// `m`; 1 for a matrix or a vector).
    matrices: usize,
    bytes: WeightBytes,
}

#[derive(Clone)]
enum WeightBytes {
    Mapped {
        file: Arc<GgufFile>,
        range: Range<usize>,
    },
    Owned(Arc<[u8]>),
}

impl WeightSource {
    /// A tensor of `file` (1-D or 2-D; a 3-D or 4-D tensor is flattened to
    /// rows of `dims[0]`).
    pub fn from_gguf(file: &Arc<GgufFile>, t: &TensorInfo) -> WeightSource {
        let start = usize::try_from(t.offset).expect("mapped offsets fit usize");
        let len = usize::try_from(t.n_bytes).expect("mapped sizes fit usize");
        WeightSource {
            name: t.name.clone(),
            ty: t.ty,
            dims: [t.row_len() as usize, t.n_rows() as usize],
            matrices: t.dims.iter().skip(2).product::<u64>().max(1) as usize,
            bytes: WeightBytes::Mapped {
                file: Arc::clone(file),
                range: start..start + len,
            },
        }
    }

    /// Bytes in memory: `n_out` rows of `n_in` elements of type `ty`.
    ///
    /// # Panics
    /// If `bytes` is not exactly the size of such a matrix.
    pub fn from_bytes(
        name: &str,
        ty: GgmlType,
        n_in: usize,
        n_out: usize,
        bytes: Vec<u8>,
    ) -> WeightSource {
        let want = ty
            .bytes_for((n_in * n_out) as u64)
            .and_then(|b| usize::try_from(b).ok());
        assert!(
            n_in.is_multiple_of(ty.block_elems()) && want == Some(bytes.len()),
            "{name}: {} bytes for a [{n_in}, {n_out}] {} matrix",
            bytes.len(),
            ty.name()
        );
        WeightSource {
            name: name.to_string(),
            ty,
            dims: [n_in, n_out],
            matrices: 1,
            bytes: WeightBytes::Owned(bytes.into()),
        }
    }

    /// The same rows as `m` stacked matrices of `n_out / m` rows each (the
    /// experts of [`Ops::matmul_id`]).
    ///
    /// # Panics
    /// If `m` does not divide the rows.
    pub fn stacked(self, m: usize) -> WeightSource {
        assert!(
            m > 0 && self.n_out().is_multiple_of(m),
            "{}: {} rows are not {m} matrices",
            self.name,
            self.n_out()
        );
        WeightSource {
            matrices: m,
            ..self
        }
    }

    /// An f32 matrix (`values` row-major, `n_out` rows of `n_in`).
    pub fn from_f32(name: &str, n_in: usize, n_out: usize, values: &[f32]) -> WeightSource {
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        WeightSource::from_bytes(name, GgmlType::F32, n_in, n_out, bytes)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn ty(&self) -> GgmlType {
        self.ty
    }

    /// Row length (`ne[0]`).
    pub fn n_in(&self) -> usize {
        self.dims[0]
    }

    /// Number of rows (product of the other dimensions).
    pub fn n_out(&self) -> usize {
        self.dims[1]
    }

    /// Matrices stacked in the rows (1 unless the tensor has more than
    /// two dimensions, or [`WeightSource::stacked`] said so).
    pub fn matrices(&self) -> usize {
        self.matrices
    }

    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.n_in() / self.ty.block_elems() * self.ty.block_bytes()
    }

    /// All the weight's bytes.
    pub fn bytes(&self) -> &[u8] {
        match &self.bytes {
            WeightBytes::Mapped { file, range } => &file.bytes()[range.clone()],
            WeightBytes::Owned(b) => b,
        }
    }

    /// The bytes of row `r`.
    pub fn row(&self, r: usize) -> &[u8] {
        let rb = self.row_bytes();
        &self.bytes()[r * rb..(r + 1) * rb]
    }
}

impl fmt::Debug for WeightSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} [{}, {}]",
            self.name,
            self.ty.name(),
            self.dims[0],
            self.dims[1]
        )
    }
}

/// How RoPE pairs the elements of a head.
///
/// ggml calls these `GGML_ROPE_TYPE_NORMAL` (0) and `GGML_ROPE_TYPE_NEOX`
/// (2). Which one a model needs is a property of its architecture *as
/// converted to GGUF* (llama.cpp's `llama_model_rope_type`): the converter
/// permutes Llama's Q/K rows so that adjacent pairs are correct for it,
/// while Gemma 3 and Qwen 3 keep HF's half-split layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// Adjacent pairs `(x[2i], x[2i+1])` rotate by `theta_i`.
    Norm,
    /// Halves: `(x[i], x[i + n_rot/2])` rotate by `theta_i`.
    Neox,
}

/// RoPE of a `[rows, n_heads * head_dim]` activation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeParams {
    pub style: RopeStyle,
    /// Elements per head; `width` must be a multiple of it.
    pub head_dim: usize,
    /// Rotated elements at the start of each head (even, `<= head_dim`);
    /// the rest pass through unchanged.
    pub n_rot: usize,
    /// Frequency base (`rope.freq_base`, or the SWA base on local layers).
    pub base: f32,
    /// Linear position scale (1 / `rope.scaling.factor`; 1 when unscaled).
    pub freq_scale: f32,
}

/// Gated activation of the feed-forward network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GluKind {
    /// `silu(g) * u`, `silu(g) = g / (1 + exp(-g))` (ggml `swiglu`),
    /// in f32: `g` for large `g`, -0 once `exp(-g)` overflows (g below
    /// about -88.7), NaN for `g = -inf` (-inf / inf).
    SwiGlu,
    /// `gelu_tanh(g) * u`, `gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) g
    /// (1 + 0.044715 g²)))` (ggml `geglu`). ggml's CPU backend looks
    /// `gelu_tanh` up in a table of f16 values, and for `g <= -10` writes
    /// 0 itself (not `0 · u`: NaN or ±inf in `u` do not reach it), for
    /// `g >= 10` `g · u`; the CPU backend here does the same
    /// (`cpu::elementwise`), other backends may compute the table's
    /// entries in f32 but keep the two clamps exactly.
    GeGluTanh,
}

/// An elementwise op on one activation, in place (`x = f(x)`), with its
/// parameters: the op as data, run by [`Ops::unary`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum UnaryOp {
    /// `x *= s`.
    Scale(f32),
    /// `x = cap · tanh(x / cap)` (final-logit soft-capping), computed as
    /// ggml's scale, tanh, scale: `tanh(x · (1 / cap)) · cap`, with `1 /
    /// cap` rounded to f32. ±cap for ±inf (and wherever tanh rounds to
    /// ±1), NaN for NaN.
    Softcap(f32),
}

impl UnaryOp {
    /// The op's name in messages ("scale").
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Scale(_) => "scale",
            UnaryOp::Softcap(_) => "softcap",
        }
    }
}

/// An elementwise op on two activations of the same shape, in place in the
/// first (`x = f(x, y)`): the op as data, run by [`Ops::binary`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    /// `x += y`.
    Add,
    /// `x *= y`.
    Mul,
    /// Gated activation: `x = act(x) * y`, `x` the gate and `y` the up
    /// projection (see [`GluKind`] for `act`).
    Glu(GluKind),
}

impl BinaryOp {
    /// The op's name in messages ("add").
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Mul => "mul",
            BinaryOp::Glu(_) => "glu",
        }
    }
}

/// Shape and rules of one attention call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttnParams {
    pub n_head: usize,
    /// KV heads; `n_head` must be a multiple (grouped-query attention:
    /// query head `h` reads KV head `h / (n_head / n_kv_head)`).
    pub n_kv_head: usize,
    pub head_dim_k: usize,
    pub head_dim_v: usize,
    /// Multiplies `q · k` before the softmax.
    pub scale: f32,
    /// Sliding window: a query at position `p` sees keys at `j` with
    /// `p - j < window` (llama.cpp's `LLAMA_SWA_TYPE_STANDARD`). `None`:
    /// every earlier position.
    pub window: Option<usize>,
    /// Logit soft-capping after scaling: `s = cap * tanh(s / cap)` (±cap
    /// for infinite scores, NaN for a NaN one).
    pub softcap: Option<f32>,
}

/// Errors a backend reports.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    #[error("{backend}: weight {name:?} of type {ty} is not supported")]
    UnsupportedWeight {
        backend: String,
        name: String,
        ty: GgmlType,
    },
    #[error("{backend}: cannot allocate {bytes} bytes for {what}")]
    OutOfMemory {
        backend: String,
        what: &'static str,
        bytes: u64,
    },
    #[error("{backend}: {message}")]
    Device { backend: String, message: String },
}

/// A host worker team (the CPU backend's threads), entered around a
/// whole step: the ops run inside it find it without entering it again.
pub trait Workers: Send + Sync {
    /// Runs `step` on the calling thread with the team entered.
    fn enter(&self, step: &mut dyn FnMut());
}

impl dyn Workers {
    /// Runs `f` with the team entered and returns its result.
    pub fn install<R>(&self, f: impl FnOnce() -> R) -> R {
        let (mut f, mut r) = (Some(f), None);
        self.enter(&mut || r = f.take().map(|f| f()));
        r.expect("Workers::enter runs its step")
    }
}

/// The operations a backend provides. Object safe: a
/// [`crate::placement::Devices`] holds `Box<dyn Ops>`.
///
/// Every compute op names its output explicitly; where an op works in
/// place it says so. Unless stated otherwise, an output must not overlap an
/// input, inputs and outputs have the same number of rows, and all the
/// handles come from this backend.
pub trait Ops: Send {
    /// A short name for messages ("cpu (2 threads)").
    fn name(&self) -> String;

    /// The host worker team this backend's ops run on, if it has one (the
    /// CPU backend's threads). A forward pass enters it once around the
    /// whole step ([`Workers::install`]), so that the ops that split their
    /// work without being handed the team find it.
    fn workers(&self) -> Option<Arc<dyn Workers>> {
        None
    }

    /// A new, empty backend of this one's kind on the same host worker
    /// team, for host work beside this backend's (the expert cache's
    /// missed experts run on the CPU layers' threads); `None` for a
    /// backend without host workers.
    fn host_sibling(&self) -> Option<Box<dyn Ops>> {
        None
    }

    /// How a CPU backend rounds RoPE, attention, SwiGLU and the router
    /// softmax from now on ([`CpuNumerics`]); other backends ignore it.
    fn set_cpu_numerics(&mut self, numerics: CpuNumerics) {
        let _ = numerics;
    }

    /// Messages the device's validation layer reported so far (a GPU
    /// backend with validation on; empty otherwise).
    fn validation_messages(&self) -> Vec<String> {
        Vec::new()
    }

    /// Device submissions so far, and how many of them replayed a
    /// recorded command buffer (a GPU backend; `(0, 0)` otherwise).
    fn submissions(&self) -> (usize, usize) {
        (0, 0)
    }

    /// Dispatches submitted so far (a GPU backend; 0 otherwise): the
    /// decode fusions' tests count them.
    fn dispatches(&self) -> usize {
        0
    }

    // ---- memory, at load time ------------------------------------------

    /// Prepares a weight (CPU: keeps a reference to the mapped bytes; a GPU
    /// uploads it). Fails for a type the backend cannot multiply.
    fn upload(&mut self, w: &WeightSource) -> Result<Weight, BackendError>;

    /// A zeroed activation buffer `[rows, width]`.
    fn alloc(&mut self, rows: usize, width: usize) -> Result<Act, BackendError>;

    /// Refuses, before any is allocated, `n_layers` KV caches of
    /// [`Ops::alloc_kv`]'s shape that together need more memory than the
    /// backend can give (the CPU: the host's available memory), with the
    /// bytes they need. Backends that find out at allocation accept.
    fn check_kv(
        &self,
        _n_layers: usize,
        _n_ctx: usize,
        _k_width: usize,
        _v_width: usize,
        _ty: KvType,
    ) -> Result<(), BackendError> {
        Ok(())
    }

    /// A KV cache of `n_ctx` positions: K rows of `k_width` and V rows of
    /// `v_width` elements (`n_kv_head * head_dim`), stored as `ty`.
    fn alloc_kv(
        &mut self,
        n_ctx: usize,
        k_width: usize,
        v_width: usize,
        ty: KvType,
    ) -> Result<Kv, BackendError>;

    /// Overwrites rows `row0..` of a prepared weight with `bytes` (whole
    /// rows in the weight's own layout), ordered after every op recorded
    /// before it and before every op recorded after it, like
    /// [`Ops::write`]: the expert slots of [`crate::expert_cache`]. A
    /// backend that reads its weights where they lie (the CPU) refuses.
    fn write_weight_rows(
        &mut self,
        w: Weight,
        row0: usize,
        bytes: &[u8],
    ) -> Result<(), BackendError> {
        let _ = (w, row0, bytes);
        Err(BackendError::Device {
            backend: self.name(),
            message: "weights are read where they lie here; expert slots are device memory".into(),
        })
    }

    // ---- host transfers ------------------------------------------------

    /// Copies host data into `dst` (`src.len() == dst.len()`).
    fn write(&mut self, dst: Act, src: &[f32]) -> Result<(), BackendError>;

    /// Starts the work recorded so far without waiting for it, so that the
    /// host can compute meanwhile; ops recorded afterwards run after it. A
    /// backend that runs ops when they are called (the CPU) has nothing to
    /// start.
    fn submit(&mut self) -> Result<(), BackendError> {
        Ok(())
    }

    /// Copies `src` to the host (`dst.len() == src.len()`), after all
    /// recorded work has finished.
    fn read(&mut self, src: Act, dst: &mut [f32]) -> Result<(), BackendError>;

    // ---- compute -------------------------------------------------------

    /// `out[t] = table row tokens[t]`, dequantized. `table` is `[width,
    /// n_vocab]`; `out` is `[tokens.len(), width]`; every token must be
    /// `< n_vocab`.
    fn embed(&mut self, table: Weight, tokens: &[u32], out: Act);

    /// RMS normalisation of each group of `group` elements of each row
    /// (`group == width` for a whole row; `head_dim` for per-head QK-norm):
    /// `y = x * (1 / sqrt(mean(x²) + eps)) * w`, the mean accumulated in
    /// f64 and the rest in f32 as ggml does; `w` (length `group`) is
    /// optional. `out` may be `x` itself (in place).
    ///
    /// Range, as ggml's CPU: each square `x²` is an f32 product, so a group
    /// with an element past ~1.8e19 (`x² = inf`) has `mean = inf`, `scale =
    /// 0` and comes out ±0 (NaN where `x` is ±inf); squares that are all
    /// finite never overflow the f64 sum (a group of 1e19s normalises), and
    /// the mean overflows only when it passes f32's range. A NaN makes the
    /// group NaN. Tiny groups (1e-30) give `x / sqrt(eps)`.
    fn rms_norm(&mut self, x: Act, w: Option<Weight>, eps: f32, group: usize, out: Act);

    /// `out[t, r] = Σ_c W[r, c] · x[t, c]` for a weight `[n_in, n_out]`, `x`
    /// `[rows, n_in]`, `out` `[rows, n_out]`.
    ///
    /// Block weight types (Q4_0 .. Q6_K): every backend rounds `x` to the
    /// weight type's dot format as ggml's x86 CPU backend does (Q8_0 with an
    /// f16 scale `amax / 127` for Q4_0, Q5_0, Q8_0; Q8_1, whose f16 block
    /// sum `d · Σq` is at most `32 · amax`, for Q4_1, Q5_1; Q8_K with an f32
    /// scale for the K-quants), to the same bytes, and takes each block's
    /// product as ggml's generic kernel does (an integer dot, then the
    /// block's f32 expression): the backends differ only in the order of
    /// the f32 sum over blocks. Past the formats' ranges (|x| > 127 · 65504,
    /// 2047 per block for Q8_1's sum) the outputs overflow to ±inf or NaN as
    /// llama.cpp's do. NaN in `x` becomes the quant -128 of a finite block
    /// (unless nothing follows it in its block), ±inf a block scale of inf:
    /// the outputs are finite or not as the CPU's (NaN or ±inf: which one
    /// is not specified: the CPU's SIMD kernels sum lanes of a block apart).
    ///
    /// Float weights: the CPU rounds `x` to f16 for F16 weights (as ggml);
    /// the Vulkan backend multiplies f32 activations (F32, F16, BF16), so
    /// past |x| > 65504 the CPU's F16 products overflow and the GPU's do
    /// not; within that the backends agree to their tested limits. NaN and
    /// ±inf in `x`: every backend gives the IEEE result (an output that
    /// meets a NaN, or `inf · 0`, or infinities of both signs, is NaN; one
    /// that meets one infinity is that infinity times the weight's sign).
    /// Weights whose f16 scales overflowed to inf give what their
    /// dequantized values give (±inf, NaN), and subnormal scales count at
    /// their value on every backend.
    fn matmul(&mut self, w: Weight, x: Act, out: Act);

    /// `x[t, i] += bias[i]` in place, for `x` `[rows, n]` and `bias` a
    /// vector `[n]` (a weight `[n, 1]`: F32, or F16 / BF16 taken at their
    /// exact f32 values; a GPU backend may take F32 only, as for norm
    /// weights): a projection's bias, added to every row. ggml's `add` of
    /// the product and the bias broadcast over its rows, as llama.cpp adds
    /// `bq`, `bk`, `bv` right after the Q, K, V products (before any
    /// QK-norm and RoPE) and `bo` after the output projection. One f32
    /// addition per element, as [`BinaryOp::Add`]: every backend gives the
    /// same bits, NaN and ±inf as IEEE's sum gives them (`inf + -inf` is
    /// NaN).
    fn add_bias(&mut self, x: Act, bias: Weight);

    /// Rotates the first `n_rot` elements of every head of `x` in place.
    /// For row `t` (position `p = pos0 + t`) and pair `i < n_rot / 2`:
    /// `theta_i = freq_scale · p · base^(-2i / n_rot)`, computed in f32 as
    /// ggml does (`theta_{i+1} = theta_i · base^(-2/n_rot)`, starting from
    /// `p`), and the pair `(a, b)` (see [`RopeStyle`]) becomes
    /// `(a cos − b sin, a sin + b cos)`.
    ///
    /// `cos` and `sin` are those of the f32 angle to about 2 ulps at any
    /// position (the CPU's libm; the GPU reduces angles past 8192 exactly,
    /// by Payne-Hanek, rather than by a three-part `pi/4`); NaN and ±inf
    /// in `x` give what the two products give (an infinity, or NaN for
    /// `inf - inf`).
    fn rope(&mut self, x: Act, p: &RopeParams, pos0: usize);

    /// Causal self-attention of a batch, through the KV cache.
    ///
    /// `q` `[T, n_head · head_dim_k]`, `k` `[T, n_kv_head · head_dim_k]`, `v`
    /// `[T, n_kv_head · head_dim_v]`, `out` `[T, n_head · head_dim_v]`. First
    /// K and V rows are written to the cache at positions `pos0..pos0 + T`
    /// (converted to the cache's type). Then for row `t` (position `p = pos0
    /// + t`) and head `h` with KV head `g`: over visible positions `j`
    /// (`j <= p`, and `p - j < window` if any), `s_j = scale · (q_h · k_{j,g})`
    /// (soft-capped if asked), `a = softmax(s)` computed stably (max
    /// subtracted, sum in f64), `out_h = Σ_j a_j v_{j,g}`, accumulated in
    /// f32. `pos0 + T` must not exceed the cache's `n_ctx`.
    ///
    /// Extreme scores, as ggml's CPU `soft_max` (the reference captures run
    /// without flash attention): any finite scores, however large (exp of
    /// them would overflow; the max is subtracted first); a score of -inf
    /// weighs 0 when the row has another score, and a row whose scores are
    /// all -inf is NaN (`exp(-inf - -inf)`); a +inf or NaN score makes its
    /// row NaN. NaN or ±inf in a visible V row reaches the output elements
    /// it multiplies even at weight 0 (`0 · NaN`). Positions the causal
    /// mask or the window hides are not read: whatever they hold (stale
    /// NaN or inf) never reaches the output. An f16 cache keeps subnormal
    /// halves at their value.
    #[allow(clippy::too_many_arguments)]
    fn attention(&mut self, kv: Kv, q: Act, k: Act, v: Act, out: Act, pos0: usize, p: &AttnParams);

    /// `x = op(x, y)` elementwise, in place in `x` (same shapes; each op's
    /// math is at [`BinaryOp`]).
    fn binary(&mut self, op: BinaryOp, x: Act, y: Act);

    /// `x = op(x)` elementwise, in place (each op's math is at [`UnaryOp`]).
    fn unary(&mut self, op: UnaryOp, x: Act);

    /// Gated activation in place: `gate = act(gate) * up` (same shapes):
    /// [`BinaryOp::Glu`].
    fn glu(&mut self, kind: GluKind, gate: Act, up: Act) {
        self.binary(BinaryOp::Glu(kind), gate, up)
    }

    /// `x += y` (same shapes): [`BinaryOp::Add`].
    fn add(&mut self, x: Act, y: Act) {
        self.binary(BinaryOp::Add, x, y)
    }

    /// `x *= y` elementwise (same shapes): [`BinaryOp::Mul`].
    fn mul(&mut self, x: Act, y: Act) {
        self.binary(BinaryOp::Mul, x, y)
    }

    /// `x *= s`: [`UnaryOp::Scale`].
    fn scale(&mut self, x: Act, s: f32) {
        self.unary(UnaryOp::Scale(s), x)
    }

    /// `x = cap · tanh(x / cap)` (final-logit soft-capping):
    /// [`UnaryOp::Softcap`].
    fn softcap(&mut self, x: Act, cap: f32) {
        self.unary(UnaryOp::Softcap(cap), x)
    }

    /// `dst = src` (same shapes; the views must not overlap).
    fn copy(&mut self, src: Act, dst: Act);

    // ---- mixture of experts --------------------------------------------

    /// Softmax of each row in place (ggml `soft_max` without mask or
    /// scale): `e = exp(x - max(x))`, `x = e * (1 / Σ e)`, the sum
    /// accumulated in f64 and its reciprocal rounded to f32. Logits of any
    /// finite size (a row of 1e30s is one-hot); -inf gives 0; a row with
    /// +inf or NaN, or all -inf, is all NaN.
    fn softmax(&mut self, x: Act);

    /// The `k` largest values of each row of `probs` `[rows, n]`, largest
    /// first: `ids` `[rows, k]` receives their indices (as f32, exact: `n
    /// <= 2^24`), `weights` `[rows, k]` the values. Equal values come in
    /// the order llama.cpp's CPU `argsort` leaves them (libstdc++
    /// `std::sort`, descending: [`crate::cpu::argsort_desc`]). ±inf order
    /// as numbers, zeros and subnormals by value; NaN compares false both
    /// ways, so an all-NaN row (a softmax row is all NaN or free of NaN)
    /// orders as a row of ties.
    fn top_k(&mut self, probs: Act, ids: Act, weights: Act);

    /// Each row divided by its sum, in place: `x /= clamp(Σ x, 2^-14,
    /// inf)`, the sum accumulated in f64 and rounded to f32 (ggml
    /// `sum_rows`, `clamp` to [6.103515625e-5, inf], `div`). ggml's clamp is
    /// `MAX(MIN(s, inf), 2^-14)` with C's ternary `MIN`/`MAX`, so a NaN sum
    /// clamps to inf: the row's finite values become 0 and a NaN stays
    /// NaN; a sum past f32's range (or with +inf) is inf, the same.
    fn normalize_rows(&mut self, x: Act);

    /// Expert products (ggml `mul_mat_id`). `w` is `n_expert` matrices
    /// `[n_in, n_out]` stacked (a 3-D tensor `[n_in, n_out, n_expert]`:
    /// expert `e` is rows `e·n_out..(e+1)·n_out`); `ids` `[rows, k]` holds
    /// expert indices (as f32, each `< n_expert`). `x` is `[rows, n_in]`
    /// (every slot reads its row's input) or `[rows, k·n_in]` (slot `j`
    /// reads its own); `out` is `[rows, k·n_out]`: `out[t, j] =
    /// W_{ids[t, j]} · x[t (, j)]`, each product computed as [`Ops::matmul`]
    /// computes it. Rows routed to one expert are multiplied together (one
    /// product per expert used), not row by row.
    fn matmul_id(&mut self, w: Weight, n_expert: usize, ids: Act, x: Act, out: Act);

    /// `x[t, j·n..(j+1)·n] *= s[t, j]` for `x` `[rows, g·n]` and `s` `[rows,
    /// g]` (each group of `n` elements scaled by its own factor).
    fn mul_groups(&mut self, x: Act, s: Act);

    /// `out[t] = x[t, 0] + x[t, 1] + … + x[t, g-1]` for `x` `[rows, g·n]`
    /// and `out` `[rows, n]`: the `g` groups of each row added left to
    /// right in f32 (llama.cpp's chain of `add`s over the expert outputs).
    fn sum_groups(&mut self, x: Act, out: Act);
}

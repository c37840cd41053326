//! [`CpuBackend`]: the [`Ops`] interface on host memory.

use std::sync::Arc;

use super::dot::Kernels;
use super::kv::KvStore;
use super::matmul::matmul_tinyblas;
use super::parallel::for_chunks;
use super::{attention, elementwise, moe, norm, rope};
use super::{embedding_row, matmul, matvec, CpuError, CpuNumerics, WeightView};
use crate::ops::{
    Act, AttnParams, BackendError, BinaryOp, Kv, KvType, Ops, RopeParams, UnaryOp, Weight,
    WeightSource, Workers,
};
use crate::quant::{can_dequantize, dequantize_row};
use crate::threads::Threads;

/// A weight as the CPU keeps it: the source bytes (for a GGUF tensor, the
/// mapped file itself: nothing is copied), and for a vector (one row: norm
/// weights) its values as f32.
struct CpuWeight {
    src: WeightSource,
    vector: Option<Vec<f32>>,
}

/// The CPU backend. Activations, KV caches and scratch are allocated when
/// asked (once, at session creation); ops run on one [`Threads`] pool.
///
/// Matrix products go through the quantizing kernels ([`matvec`] for one
/// row, [`matmul`] for a batch): activations are put in the weight type's
/// partner format and dotted in integers, as llama.cpp's CPU backend does,
/// so the numbers are those of its x86 build, not of an f32 product of
/// dequantized weights. RoPE, attention, SwiGLU and the router softmax
/// round as [`CpuNumerics`] says (by default as ggml's CPU backend).
pub struct CpuBackend {
    threads: Arc<Threads>,
    numerics: CpuNumerics,
    /// `acts[id]`: one activation buffer, `[rows, width]` as allocated.
    acts: Vec<Vec<f32>>,
    weights: Vec<CpuWeight>,
    kvs: Vec<KvStore>,
}

impl CpuBackend {
    /// A backend running on `threads` threads (0: one per available core).
    /// The thread count is taken as given: no environment variable changes
    /// it, and results do not depend on it.
    ///
    /// # Panics
    /// When the threads cannot be started ([`CpuBackend::try_new`] says why
    /// instead).
    pub fn new(threads: usize) -> CpuBackend {
        CpuBackend::try_new(threads).expect("creating the CPU thread pool")
    }

    /// As [`CpuBackend::new`], failing with the reason the pool could not
    /// start.
    pub fn try_new(threads: usize) -> Result<CpuBackend, CpuError> {
        let n = match threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        Ok(CpuBackend::with_threads(Arc::new(Threads::new(n)?)))
    }

    /// A backend on an existing pool (which may be shared with other
    /// backends or with the caller).
    pub fn with_threads(threads: Arc<Threads>) -> CpuBackend {
        CpuBackend {
            threads,
            numerics: CpuNumerics::default(),
            acts: Vec::new(),
            weights: Vec::new(),
            kvs: Vec::new(),
        }
    }

    /// Worker threads.
    pub fn threads(&self) -> usize {
        self.threads.count()
    }

    /// How the ops round from now on ([`CpuNumerics::Ggml`] unless set).
    pub fn set_numerics(&mut self, numerics: CpuNumerics) {
        self.numerics = numerics;
    }

    /// How the ops round.
    pub fn numerics(&self) -> CpuNumerics {
        self.numerics
    }

    fn view(&self, a: Act) -> &[f32] {
        &self.acts[a.id() as usize][a.elems()]
    }

    fn weight(&self, w: Weight) -> &CpuWeight {
        &self.weights[w.0 as usize]
    }

    fn vector(&self, w: Weight, op: &str) -> &[f32] {
        let cw = self.weight(w);
        cw.vector
            .as_deref()
            .unwrap_or_else(|| panic!("{op}: {:?} is a matrix, not a vector", cw.src))
    }

    /// Runs `f` on the pool with `out`'s elements borrowed mutably and the
    /// backend shared (for inputs, weights, caches). Inputs must live in
    /// other buffers than `out`.
    fn with_out<R: Send>(
        &mut self,
        op: &str,
        out: Act,
        inputs: &[Act],
        f: impl FnOnce(&CpuBackend, &mut [f32]) -> R + Send,
    ) -> R {
        for i in inputs {
            assert!(
                i.id() != out.id(),
                "{op}: input {i:?} and output {out:?} share a buffer"
            );
            assert_eq!(i.rows(), out.rows(), "{op}: rows of {i:?} and {out:?}");
        }
        let id = out.id() as usize;
        let mut buf = std::mem::take(&mut self.acts[id]);
        let this = &*self;
        let r = this.threads.install(|| f(this, &mut buf[out.elems()]));
        self.acts[id] = buf;
        r
    }
}

/// The CPU device's threads as the op interface's worker team.
impl Workers for Threads {
    fn enter(&self, step: &mut dyn FnMut()) {
        self.install(step);
    }
}

/// The kernels' view of a weight: `n_out` rows of `n_in` elements.
fn weight_view(src: &WeightSource) -> WeightView<'_> {
    WeightView::new(src.ty(), src.n_out(), src.n_in(), src.bytes())
        .unwrap_or_else(|e| panic!("{src:?}: {e}"))
}

impl Ops for CpuBackend {
    fn name(&self) -> String {
        format!("cpu ({} threads)", self.threads())
    }

    fn workers(&self) -> Option<Arc<dyn Workers>> {
        Some(Arc::clone(&self.threads) as Arc<dyn Workers>)
    }

    fn host_sibling(&self) -> Option<Box<dyn Ops>> {
        Some(Box::new(CpuBackend::with_threads(Arc::clone(
            &self.threads,
        ))))
    }

    fn set_cpu_numerics(&mut self, numerics: CpuNumerics) {
        self.set_numerics(numerics);
    }

    fn upload(&mut self, w: &WeightSource) -> Result<Weight, BackendError> {
        // A matrix needs dot kernels; a vector (norm weights) is only ever
        // read as f32.
        let usable = if w.n_out() > 1 {
            Kernels::for_level(w.ty(), self.threads.simd()).is_ok()
        } else {
            can_dequantize(w.ty())
        };
        if !usable {
            return Err(BackendError::UnsupportedWeight {
                backend: self.name(),
                name: w.name().to_string(),
                ty: w.ty(),
            });
        }
        let vector = (w.n_out() == 1).then(|| {
            let mut v = vec![0.0; w.n_in()];
            dequantize_row(w.ty(), w.bytes(), &mut v)
                .expect("type checked, length from the tensor info");
            v
        });
        self.weights.push(CpuWeight {
            src: w.clone(),
            vector,
        });
        Ok(Weight((self.weights.len() - 1) as u32))
    }

    fn alloc(&mut self, rows: usize, width: usize) -> Result<Act, BackendError> {
        let len = rows
            .checked_mul(width)
            .ok_or_else(|| BackendError::OutOfMemory {
                backend: self.name(),
                what: "an activation",
                bytes: u64::MAX,
            })?;
        // len: rows · width, poisoned in test builds (crate::poison).
        self.acts.push(vec![crate::poison::fill(); len]);
        Ok(Act::new((self.acts.len() - 1) as u32, rows, width))
    }

    fn check_kv(
        &self,
        n_layers: usize,
        n_ctx: usize,
        k_width: usize,
        v_width: usize,
        ty: KvType,
    ) -> Result<(), BackendError> {
        let bytes = KvStore::bytes_for(n_ctx, k_width, v_width, ty).saturating_mul(n_layers as u64);
        if crate::host_memory::available_bytes().is_some_and(|avail| bytes > avail) {
            return Err(BackendError::OutOfMemory {
                backend: self.name(),
                what: "the KV caches (more than the host's available memory)",
                bytes,
            });
        }
        Ok(())
    }

    fn alloc_kv(
        &mut self,
        n_ctx: usize,
        k_width: usize,
        v_width: usize,
        ty: KvType,
    ) -> Result<Kv, BackendError> {
        let kv = KvStore::new(n_ctx, k_width, v_width, ty).map_err(|bytes| {
            BackendError::OutOfMemory {
                backend: self.name(),
                what: "a KV cache (more than the host's available memory)",
                bytes,
            }
        })?;
        self.kvs.push(kv);
        Ok(Kv((self.kvs.len() - 1) as u32))
    }

    fn write(&mut self, dst: Act, src: &[f32]) -> Result<(), BackendError> {
        self.acts[dst.id() as usize][dst.elems()].copy_from_slice(src);
        Ok(())
    }

    fn read(&mut self, src: Act, dst: &mut [f32]) -> Result<(), BackendError> {
        dst.copy_from_slice(self.view(src));
        Ok(())
    }

    fn embed(&mut self, table: Weight, tokens: &[u32], out: Act) {
        assert_eq!(tokens.len(), out.rows(), "embed: tokens and rows");
        self.with_out("embed", out, &[], |b, o| {
            let src = &b.weight(table).src;
            assert_eq!(
                src.n_in(),
                out.width(),
                "embed: {src:?} into width {}",
                out.width()
            );
            let w = weight_view(src);
            for_chunks(o, out.width(), o.len() * 4, |t, row| {
                embedding_row(w, tokens[t] as usize, row)
                    .unwrap_or_else(|e| panic!("embed: {src:?}: {e}"));
            });
        });
    }

    fn rms_norm(&mut self, x: Act, w: Option<Weight>, eps: f32, group: usize, out: Act) {
        if x != out {
            self.copy(x, out);
        }
        self.with_out("rms_norm", out, &[], |b, o| {
            norm::rms_norm(o, group, w.map(|w| b.vector(w, "rms_norm")), eps);
        });
    }

    fn matmul(&mut self, w: Weight, x: Act, out: Act) {
        self.with_out("matmul", out, &[x], |b, o| {
            // The one place the matmul kernel is chosen.
            let src = &b.weight(w).src;
            let view = weight_view(src);
            let r = if x.rows() == 1 {
                matvec(&b.threads, view, b.view(x), o)
            } else if b.numerics == CpuNumerics::Ggml {
                // ggml's product of a float weight with a batch (tinyBLAS),
                // where it takes one; its vec_dot otherwise.
                match matmul_tinyblas(&b.threads, view, b.view(x), o) {
                    Ok(true) => Ok(()),
                    Ok(false) => matmul(&b.threads, view, b.view(x), o),
                    Err(e) => Err(e),
                }
            } else {
                matmul(&b.threads, view, b.view(x), o)
            };
            r.unwrap_or_else(|e| panic!("matmul {src:?}: {e}"));
        });
    }

    fn add_bias(&mut self, x: Act, bias: Weight) {
        self.with_out("add_bias", x, &[], |b, o| {
            let v = b.vector(bias, "add_bias");
            assert_eq!(
                v.len(),
                x.width(),
                "add_bias: a bias of {} for rows of {}",
                v.len(),
                x.width()
            );
            elementwise::add_bias(o, v);
        });
    }

    fn rope(&mut self, x: Act, p: &RopeParams, pos0: usize) {
        self.with_out("rope", x, &[], |b, o| {
            rope::rope(o, x.width(), p, pos0, b.numerics)
        });
    }

    fn attention(&mut self, kv: Kv, q: Act, k: Act, v: Act, out: Act, pos0: usize, p: &AttnParams) {
        assert!(
            k.rows() == q.rows() && v.rows() == q.rows(),
            "attention: rows of q, k, v"
        );
        let (ks, vs) = (
            &self.acts[k.id() as usize][k.elems()],
            &self.acts[v.id() as usize][v.elems()],
        );
        self.kvs[kv.0 as usize].write(pos0, ks, vs);
        self.with_out("attention", out, &[q], |b, o| {
            attention::attention(&b.kvs[kv.0 as usize], b.view(q), o, pos0, p, b.numerics);
        });
    }

    fn binary(&mut self, op: BinaryOp, x: Act, y: Act) {
        self.with_out(op.name(), x, &[y], |b, o| match op {
            BinaryOp::Glu(kind) => elementwise::glu_rows(b.numerics, kind, o, b.view(y), x.width()),
            _ => elementwise::binary(op, o, b.view(y)),
        });
    }

    fn unary(&mut self, op: UnaryOp, x: Act) {
        self.with_out(op.name(), x, &[], |_, o| elementwise::unary(op, o));
    }

    fn copy(&mut self, src: Act, dst: Act) {
        assert!(
            src.rows() == dst.rows() && src.width() == dst.width(),
            "copy: {src:?} into {dst:?}"
        );
        assert!(!src.overlaps(dst), "copy: {src:?} and {dst:?} overlap");
        if src.id() == dst.id() {
            let start = dst.elems().start;
            self.acts[src.id() as usize].copy_within(src.elems(), start);
        } else {
            self.with_out("copy", dst, &[src], |b, o| o.copy_from_slice(b.view(src)));
        }
    }

    fn softmax(&mut self, x: Act) {
        self.with_out("softmax", x, &[], |b, o| {
            moe::softmax_rows(b.numerics, o, x.width())
        });
    }

    fn top_k(&mut self, probs: Act, ids: Act, weights: Act) {
        assert!(
            ids.width() == weights.width() && ids.rows() == weights.rows(),
            "top_k: {ids:?} and {weights:?}"
        );
        assert_ne!(
            ids.id(),
            weights.id(),
            "top_k: ids and weights share a buffer"
        );
        let id = ids.id() as usize;
        let mut ibuf = std::mem::take(&mut self.acts[id]);
        self.with_out("top_k", weights, &[probs], |b, o| {
            moe::top_k(
                b.view(probs),
                probs.width(),
                &mut ibuf[ids.elems()],
                o,
                ids.width(),
            )
        });
        self.acts[id] = ibuf;
    }

    fn normalize_rows(&mut self, x: Act) {
        self.with_out("normalize_rows", x, &[], |_, o| {
            moe::normalize_rows(o, x.width())
        });
    }

    fn matmul_id(&mut self, w: Weight, n_expert: usize, ids: Act, x: Act, out: Act) {
        self.with_out("matmul_id", out, &[ids, x], |b, o| {
            let src = &b.weight(w).src;
            let r = moe::matmul_id(
                &b.threads,
                weight_view(src),
                n_expert,
                b.view(ids),
                ids.width(),
                b.view(x),
                o,
            );
            r.unwrap_or_else(|e| panic!("matmul_id {src:?}: {e}"));
        });
    }

    fn mul_groups(&mut self, x: Act, s: Act) {
        self.with_out("mul_groups", x, &[s], |b, o| {
            moe::mul_groups(o, b.view(s), x.rows())
        });
    }

    fn sum_groups(&mut self, x: Act, out: Act) {
        self.with_out("sum_groups", out, &[x], |b, o| {
            moe::sum_groups(b.view(x), o, out.rows())
        });
    }
}

//! [`CpuBackend`]: the [`Ops`] interface on host memory.

use rayon::ThreadPool;

use super::kv::KvStore;
use super::parallel::for_chunks;
use super::{attention, elementwise, fallback_matmul, norm, rope};
use crate::ops::{
    Act, AttnParams, BackendError, GluKind, Kv, KvType, Ops, RopeParams, Weight, WeightSource,
};
use crate::quant::{can_dequantize, dequantize_row};

/// A weight as the CPU keeps it: the source bytes (for a GGUF tensor, the
/// mapped file itself: nothing is copied), and for a vector (one row: norm
/// weights) its values as f32.
struct CpuWeight {
    src: WeightSource,
    vector: Option<Vec<f32>>,
}

/// The CPU backend. Activations, KV caches and scratch are allocated when
/// asked (once, at session creation); ops run on a rayon pool of its own.
pub struct CpuBackend {
    pool: ThreadPool,
    threads: usize,
    /// `acts[id]`: one activation buffer, `[rows, width]` as allocated.
    acts: Vec<Vec<f32>>,
    weights: Vec<CpuWeight>,
    kvs: Vec<KvStore>,
    /// The transposed product of a batched matmul: as long as the largest
    /// activation.
    mm_tmp: Vec<f32>,
}

impl CpuBackend {
    /// A backend running on `threads` threads (0: one per available core).
    /// The thread count is taken as given: no environment variable changes
    /// it, and results do not depend on it.
    pub fn new(threads: usize) -> CpuBackend {
        let threads = if threads == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            threads
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("sharpi-cpu-{i}"))
            .build()
            .expect("creating the CPU thread pool");
        CpuBackend {
            pool,
            threads,
            acts: Vec::new(),
            weights: Vec::new(),
            kvs: Vec::new(),
            mm_tmp: Vec::new(),
        }
    }

    pub fn threads(&self) -> usize {
        self.threads
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
        let r = this.pool.install(|| f(this, &mut buf[out.elems()]));
        self.acts[id] = buf;
        r
    }
}

impl Ops for CpuBackend {
    fn name(&self) -> String {
        format!("cpu ({} threads)", self.threads)
    }

    fn upload(&mut self, w: &WeightSource) -> Result<Weight, BackendError> {
        if !can_dequantize(w.ty()) {
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
        self.acts.push(vec![0.0; len]);
        if self.mm_tmp.len() < len {
            self.mm_tmp.resize(len, 0.0);
        }
        Ok(Act::new((self.acts.len() - 1) as u32, rows, width))
    }

    fn alloc_kv(
        &mut self,
        n_ctx: usize,
        k_width: usize,
        v_width: usize,
        ty: KvType,
    ) -> Result<Kv, BackendError> {
        self.kvs.push(KvStore::new(n_ctx, k_width, v_width, ty));
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
            let w = &b.weight(table).src;
            assert_eq!(
                w.n_in(),
                out.width(),
                "embed: {w:?} into width {}",
                out.width()
            );
            for_chunks(o, out.width(), o.len() * 4, |t, row| {
                let tok = tokens[t] as usize;
                assert!(tok < w.n_out(), "embed: token {tok} outside {w:?}");
                dequantize_row(w.ty(), w.row(tok), row).expect("type checked at upload");
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
        let mut tmp = std::mem::take(&mut self.mm_tmp);
        self.with_out("matmul", out, &[x], |b, o| {
            // The one place the matmul kernel is chosen.
            fallback_matmul::matmul_fallback(&b.weight(w).src, b.view(x), o, &mut tmp);
        });
        self.mm_tmp = tmp;
    }

    fn rope(&mut self, x: Act, p: &RopeParams, pos0: usize) {
        self.with_out("rope", x, &[], |_, o| rope::rope(o, x.width(), p, pos0));
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
            attention::attention(&b.kvs[kv.0 as usize], b.view(q), o, pos0, p);
        });
    }

    fn glu(&mut self, kind: GluKind, gate: Act, up: Act) {
        self.with_out("glu", gate, &[up], |b, o| {
            elementwise::glu(kind, o, b.view(up))
        });
    }

    fn add(&mut self, x: Act, y: Act) {
        self.with_out("add", x, &[y], |b, o| elementwise::add(o, b.view(y)));
    }

    fn mul(&mut self, x: Act, y: Act) {
        self.with_out("mul", x, &[y], |b, o| elementwise::mul(o, b.view(y)));
    }

    fn scale(&mut self, x: Act, s: f32) {
        self.with_out("scale", x, &[], |_, o| elementwise::scale(o, s));
    }

    fn softcap(&mut self, x: Act, cap: f32) {
        self.with_out("softcap", x, &[], |_, o| elementwise::softcap(o, cap));
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
}

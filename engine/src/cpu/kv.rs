//! A layer's KV cache on the CPU: K and V rows for every position of the
//! context, allocated once.

use half::f16;

use crate::fault;
use crate::ops::KvType;

/// Rows of one cache tensor, in the cache's element type.
enum Rows {
    F32(Vec<f32>),
    F16(Vec<f16>),
}

impl Rows {
    /// `len` zeroed elements of `ty`, or None when they cannot be reserved.
    fn new(ty: KvType, len: usize) -> Option<Rows> {
        Some(match ty {
            // SAFETY: all-zero bytes are the f32 0.0 and the f16 +0.0.
            KvType::F32 => Rows::F32(unsafe { zeroed(len)? }),
            // SAFETY: as above.
            KvType::F16 => Rows::F16(unsafe { zeroed(len)? }),
        })
    }

    fn write(&mut self, start: usize, src: &[f32]) {
        match self {
            Rows::F32(d) => d[start..start + src.len()].copy_from_slice(src),
            Rows::F16(d) => {
                // Fault switch point "kv-f16-truncate": values stored
                // rounded toward zero instead of to nearest.
                let truncate = fault::active("kv-f16-truncate");
                d[start..start + src.len()]
                    .iter_mut()
                    .zip(src)
                    .for_each(|(d, &s)| {
                        let r = f16::from_f32(s);
                        *d = if truncate && r.is_finite() && r.to_f32().abs() > s.abs() {
                            f16::from_bits(r.to_bits() - 1)
                        } else {
                            r
                        };
                    })
            }
        }
    }
}

/// `len` elements of all-zero bytes, or None when the allocator refuses
/// them. Zeroed by the allocator (fresh pages from the system for a large
/// cache), not written here: a cache is sized for the whole context and
/// most of it may never be touched, so writing it would cost its full size
/// in memory and time at every start.
///
/// # Safety
/// All-zero bytes must be a valid `T`.
unsafe fn zeroed<T>(len: usize) -> Option<Vec<T>> {
    let layout = std::alloc::Layout::array::<T>(len).ok()?;
    if layout.size() == 0 {
        return Some(Vec::new());
    }
    // SAFETY: the layout has a non-zero size.
    let p = unsafe { std::alloc::alloc_zeroed(layout) } as *mut T;
    if p.is_null() {
        return None;
    }
    // SAFETY: `p` comes from the global allocator with the layout of `len`
    // elements of `T` (so capacity `len`), and its `len` elements are
    // initialised: zero bytes, a valid `T` by the caller's guarantee.
    Some(unsafe { Vec::from_raw_parts(p, len, len) })
}

/// One layer's cache: K `[n_ctx, k_width]` and V `[n_ctx, v_width]`.
pub struct KvStore {
    n_ctx: usize,
    k_width: usize,
    v_width: usize,
    k: Rows,
    v: Rows,
}

/// Rows `first..first + count` of one head of a cache tensor: row `r` is
/// `rows[r * stride..][..len]` (`rows` starts at the first row's head).
#[derive(Clone, Copy)]
pub struct Run<'a> {
    pub rows: Row<'a>,
    pub stride: usize,
    pub len: usize,
    pub count: usize,
}

impl<'a> Run<'a> {
    /// Rows `a..b` of the run (`a <= b <= count`).
    #[cfg(test)]
    pub(super) fn rows(&self, a: usize, b: usize) -> Run<'a> {
        assert!(
            a <= b && b <= self.count,
            "run rows {a}..{b} of {}",
            self.count
        );
        let at = if a == b { 0 } else { a * self.stride };
        let rows = match self.rows {
            Row::F32(d) => Row::F32(&d[at..]),
            Row::F16(d) => Row::F16(&d[at..]),
        };
        Run {
            rows,
            count: b - a,
            ..*self
        }
    }

    /// Whether every row lies inside the slice.
    pub(super) fn fits(&self) -> bool {
        let n = match self.rows {
            Row::F32(d) => d.len(),
            Row::F16(d) => d.len(),
        };
        self.count == 0 || (self.count - 1) * self.stride + self.len <= n
    }

    /// Element `i` of row `r`, as f32.
    #[inline]
    pub(super) fn at(&self, r: usize, i: usize) -> f32 {
        match self.rows {
            Row::F32(d) => d[r * self.stride + i],
            Row::F16(d) => f16::to_f32(d[r * self.stride + i]),
        }
    }
}

/// A borrowed row of a cache, in its stored type.
#[derive(Clone, Copy)]
pub enum Row<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
}

/// `x` rounded to f16 (to nearest even) and back, in place: what llama.cpp's
/// CPU does to the activation it multiplies an F16 tensor with.
pub fn round_f16(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = f16::from_f32(*v).to_f32());
}

impl KvStore {
    /// The bytes a cache of `n_ctx` positions needs (saturating).
    pub fn bytes_for(n_ctx: usize, k_width: usize, v_width: usize, ty: KvType) -> u64 {
        let el: u64 = match ty {
            KvType::F32 => 4,
            KvType::F16 => 2,
        };
        (n_ctx as u64)
            .saturating_mul(k_width as u64 + v_width as u64)
            .saturating_mul(el)
    }

    /// A zeroed cache of `n_ctx` positions, or the bytes it needs when the
    /// host cannot hold them: more than the kernel reports available
    /// ([`crate::host_memory::available_bytes`]), past `usize`, or refused
    /// by the allocator.
    pub fn new(n_ctx: usize, k_width: usize, v_width: usize, ty: KvType) -> Result<KvStore, u64> {
        let el: usize = match ty {
            KvType::F32 => 4,
            KvType::F16 => 2,
        };
        let elems = |w: usize| n_ctx.checked_mul(w);
        let (Some(k_len), Some(v_len)) = (elems(k_width), elems(v_width)) else {
            return Err(u64::MAX);
        };
        let bytes = (k_len as u64 + v_len as u64).saturating_mul(el as u64);
        if crate::host_memory::available_bytes().is_some_and(|avail| bytes > avail) {
            return Err(bytes);
        }
        match (Rows::new(ty, k_len), Rows::new(ty, v_len)) {
            (Some(k), Some(v)) => Ok(KvStore {
                n_ctx,
                k_width,
                v_width,
                k,
                v,
            }),
            _ => Err(bytes),
        }
    }

    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    pub fn k_width(&self) -> usize {
        self.k_width
    }

    pub fn v_width(&self) -> usize {
        self.v_width
    }

    /// Whether the cache holds halves (F16).
    pub fn is_f16(&self) -> bool {
        matches!(self.k, Rows::F16(_))
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        let el = match self.k {
            Rows::F32(_) => 4,
            Rows::F16(_) => 2,
        };
        self.n_ctx * (self.k_width + self.v_width) * el
    }

    /// Stores K rows `k` `[T, k_width]` and V rows `v` `[T, v_width]` at
    /// positions `pos0..pos0 + T`.
    ///
    /// # Panics
    /// If the rows run past the context.
    pub fn write(&mut self, pos0: usize, k: &[f32], v: &[f32]) {
        let t = k.len() / self.k_width;
        assert!(
            k.len() == t * self.k_width && v.len() == t * self.v_width && pos0 + t <= self.n_ctx,
            "kv write: {t} rows at {pos0} into a {}-position cache",
            self.n_ctx
        );
        // One position late, where the cache has room for it.
        let pos0 = if fault::active("kv-offset") && pos0 + t < self.n_ctx {
            pos0 + 1
        } else {
            pos0
        };
        self.k.write(pos0 * self.k_width, k);
        self.v.write(pos0 * self.v_width, v);
    }

    /// `len` elements from `start` (one head) of K rows `first..first +
    /// count`.
    #[inline]
    pub fn k_run(&self, first: usize, count: usize, start: usize, len: usize) -> Run<'_> {
        run(&self.k, self.k_width, first, count, start, len)
    }

    /// `len` elements from `start` (one head) of V rows `first..first +
    /// count`.
    #[inline]
    pub fn v_run(&self, first: usize, count: usize, start: usize, len: usize) -> Run<'_> {
        run(&self.v, self.v_width, first, count, start, len)
    }
}

#[inline]
fn run(r: &Rows, width: usize, first: usize, count: usize, start: usize, len: usize) -> Run<'_> {
    let at = first * width + start;
    let span = if count == 0 {
        0
    } else {
        (count - 1) * width + len
    };
    Run {
        rows: row(r, at, span),
        stride: width,
        len,
        count,
    }
}

#[inline]
fn row(r: &Rows, at: usize, len: usize) -> Row<'_> {
    match r {
        Rows::F32(d) => Row::F32(&d[at..at + len]),
        Rows::F16(d) => Row::F16(&d[at..at + len]),
    }
}

/// Rows for the attention kernels' tests: pseudo-random values and the
/// [`Run`]s over them.
#[cfg(test)]
pub(super) mod fixture {
    use half::f16;

    use super::{Row, Run};

    /// `n` values in `[-scale, scale)` from an xorshift stream of `seed`.
    pub fn values(seed: u64, n: usize, scale: f32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 40) as f32 / (1u64 << 23) as f32 - 1.0) * scale
            })
            .collect()
    }

    /// `count` rows of `len` values at `stride`, as f32 and rounded to f16.
    pub struct Rows {
        data: Vec<f32>,
        halves: Vec<f16>,
        stride: usize,
        len: usize,
        count: usize,
    }

    impl Rows {
        pub fn new(seed: u64, len: usize, count: usize, stride: usize, scale: f32) -> Rows {
            let data = values(seed, stride * count + len, scale);
            let halves = data.iter().map(|&x| f16::from_f32(x)).collect();
            Rows {
                data,
                halves,
                stride,
                len,
                count,
            }
        }

        /// The rows as an F16 (`f16_rows`) or an F32 cache holds them.
        pub fn run(&self, f16_rows: bool) -> Run<'_> {
            Run {
                rows: if f16_rows {
                    Row::F16(&self.halves)
                } else {
                    Row::F32(&self.data)
                },
                stride: self.stride,
                len: self.len,
                count: self.count,
            }
        }
    }
}

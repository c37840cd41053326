//! Dot products of a weight row with an activation row, as ggml's CPU
//! backend computes them, for every weight type the models use, and the
//! table that picks a SIMD or scalar kernel per type.
//!
//! Activations are first put in the weight type's partner format
//! ([`crate::cpu::act::vec_dot_type`], the second column of its scalar
//! row): Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K for the K-quants,
//! the weight's own type for F32, F16 and BF16. The quantized dots are then
//! integer dots per block scaled in f32.
//!
//! Two kernel families compute each dot:
//! - the scalar references ([`legacy`], [`k`], [`float`]): ggml's generic C
//!   kernels, operation for operation;
//! - the SIMD kernels (x86-64: [`SimdLevel::Avx2`] and
//!   [`SimdLevel::Avx512Vnni`]): ggml's AVX2 kernels' arithmetic, the same
//!   integers summed in the same f32 lanes in the same order, so every SIMD
//!   level gives the same bits as every other (and as llama.cpp's AVX2
//!   build). They differ from the scalar references only in the order of
//!   the f32 additions.
//!
//! [`Kernels::for_level`] hands out a type's kernels for one level only
//! when this CPU supports it. Each kernel file registers its own types, one
//! row per type keyed by the type: `SCALAR` in [`legacy`], [`k`] and
//! [`float`] (weight type, activation format, scalar dot), `kernels` in
//! each `x86` family file (the type's `Micro` at a level). The lookup
//! tables indexed as [`WEIGHT_TYPES`] (`SCALAR` here, one per SIMD level in
//! `x86`) are put together from those rows at compile time
//! (`by_weight_type`): a weight type without its rows fails the build.

pub mod float;
pub mod k;
pub mod legacy;
pub mod tiled;
#[cfg(target_arch = "x86_64")]
mod x86;

use crate::ggml_type::{weight_index, GgmlType, WEIGHT_TYPES};

use super::error::CpuError;
use crate::simd::SimdLevel;

/// `x` and `y` as pairs of `XB`- and `YB`-byte blocks.
///
/// # Panics
/// When either is not whole blocks or their block counts differ.
pub(crate) fn pairs<'a, const XB: usize, const YB: usize>(
    x: &'a [u8],
    y: &'a [u8],
) -> impl Iterator<Item = (&'a [u8; XB], &'a [u8; YB])> {
    assert!(
        x.len().is_multiple_of(XB) && y.len().is_multiple_of(YB) && x.len() / XB == y.len() / YB,
        "dot: {} weight bytes and {} activation bytes are not matching {XB}- and {YB}-byte blocks",
        x.len(),
        y.len()
    );
    x.chunks_exact(XB)
        .zip(y.chunks_exact(YB))
        .map(|(a, b)| (a.try_into().unwrap(), b.try_into().unwrap()))
}

/// `count` rows of ggml block bytes, `stride` bytes apart.
#[derive(Clone, Copy)]
pub(crate) struct Rows<'a> {
    pub data: &'a [u8],
    pub stride: usize,
    pub count: usize,
}

/// A block of weight rows against a block of activation rows; row `r`
/// dotted with activation row `c` goes to `out[c * ld + r]`. Built only
/// through [`Tile::new`], which checks every bound the kernels rely on.
pub(crate) struct Tile<'a> {
    pub w: &'a [u8],
    pub w_stride: usize,
    pub rows: usize,
    pub a: &'a [u8],
    pub a_stride: usize,
    pub cols: usize,
    /// Blocks per row (elements for the float types).
    pub n_blocks: usize,
}

impl<'a> Tile<'a> {
    /// # Panics
    /// When a row would run past its buffer (a bug in the caller).
    pub fn new(kern: &Kernels, w: Rows<'a>, a: Rows<'a>, n_blocks: usize) -> Tile<'a> {
        let wb = n_blocks * kern.weight.block_bytes();
        let ab = n_blocks * kern.act.block_bytes();
        let fits = |r: &Rows<'_>, bytes: usize| {
            r.stride >= bytes && (r.count == 0 || r.data.len() >= (r.count - 1) * r.stride + bytes)
        };
        assert!(
            fits(&w, wb) && fits(&a, ab),
            "tile: rows run past their buffers"
        );
        Tile {
            w: w.data,
            w_stride: w.stride,
            rows: w.count,
            a: a.data,
            a_stride: a.stride,
            cols: a.count,
            n_blocks,
        }
    }

    fn w_row(&self, r: usize, bytes: usize) -> &'a [u8] {
        &self.w[r * self.w_stride..r * self.w_stride + bytes]
    }

    fn a_row(&self, c: usize, bytes: usize) -> &'a [u8] {
        &self.a[c * self.a_stride..c * self.a_stride + bytes]
    }
}

/// Dots a weight row with an activation row (ggml block bytes, the same
/// number of blocks).
pub type DotFn = fn(&[u8], &[u8]) -> f32;
/// Fills `out[c * ld + r]` for a whole [`Tile`]; `out` is long enough
/// (checked by the caller).
type TileFn = fn(&Kernels, &Tile<'_>, &mut [f32], usize);

/// One weight type's kernels at one SIMD level.
#[derive(Clone, Copy)]
pub struct Kernels {
    pub weight: GgmlType,
    /// The activation format, ggml's `vec_dot_type`.
    pub act: GgmlType,
    pub level: SimdLevel,
    dot: DotFn,
    tile: TileFn,
}

impl std::fmt::Debug for Kernels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernels")
            .field("weight", &self.weight)
            .field("act", &self.act)
            .field("level", &self.level)
            .finish()
    }
}

impl Kernels {
    /// The kernels of the best level this CPU runs.
    pub fn detected(weight: GgmlType) -> Result<Kernels, CpuError> {
        Kernels::for_level(weight, SimdLevel::detected())
    }

    /// The kernels of `level`, refused when this CPU cannot run it. A type
    /// without SIMD kernels at that level gets the scalar ones.
    pub fn for_level(weight: GgmlType, level: SimdLevel) -> Result<Kernels, CpuError> {
        if !level.is_supported() {
            return Err(CpuError::SimdUnsupported(level));
        }
        let act = act_type(weight).ok_or(CpuError::NoKernels(weight))?;
        let dot = scalar_dot(weight).ok_or(CpuError::NoKernels(weight))?;
        let scalar = Kernels {
            weight,
            act,
            level: SimdLevel::Scalar,
            dot,
            tile: scalar_tile,
        };
        #[cfg(target_arch = "x86_64")]
        if level != SimdLevel::Scalar {
            if let Some((dot, tile)) = x86::kernels(weight, level) {
                return Ok(Kernels {
                    level,
                    dot,
                    tile,
                    ..scalar
                });
            }
        }
        Ok(scalar)
    }

    /// Weight row `w` dotted with activation row `a` (ggml bytes of
    /// [`Kernels::weight`] and [`Kernels::act`]).
    pub fn dot(&self, w: &[u8], a: &[u8]) -> Result<f32, CpuError> {
        let (wb, ab) = (self.weight.block_bytes(), self.act.block_bytes());
        let blocks = w.len() / wb;
        if !w.len().is_multiple_of(wb) {
            return Err(CpuError::NotMultiple {
                what: "weight row bytes",
                multiple_of: wb,
                actual: w.len(),
            });
        }
        if a.len() != blocks * ab {
            return Err(CpuError::Length {
                what: "activation row bytes",
                expected: blocks * ab,
                actual: a.len(),
            });
        }
        Ok((self.dot)(w, a))
    }

    /// Fills `out[c * ld + r]` for every row and column of `t`.
    ///
    /// # Panics
    /// When `out` is too short for the tile (a bug in the caller).
    pub(crate) fn tile(&self, t: &Tile<'_>, out: &mut [f32], ld: usize) {
        assert!(ld >= t.rows, "tile: ld below rows");
        assert!(
            t.rows == 0 || t.cols == 0 || out.len() >= (t.cols - 1) * ld + t.rows,
            "tile: out short"
        );
        (self.tile)(self, t, out, ld)
    }
}

/// A family's row for one weight type: the weight type, then the format its
/// activations take (ggml's `vec_dot_type`) and the scalar reference dot.
type ScalarRow = (GgmlType, (GgmlType, DotFn));

/// Every weight type's activation format and scalar dot, in [`WEIGHT_TYPES`]
/// order, from the families' `SCALAR` rows.
const SCALAR: [(GgmlType, DotFn); WEIGHT_TYPES.len()] =
    by_weight_type(&[&float::SCALAR, &legacy::SCALAR, &k::SCALAR]);

/// The rows of `families`, each keyed by its weight type, put in
/// [`WEIGHT_TYPES`] order. Evaluated at compile time: a weight type without
/// a row, a type with two rows or a row of a type outside [`WEIGHT_TYPES`]
/// fails the build.
const fn by_weight_type<T: Copy>(families: &[&[(GgmlType, T)]]) -> [T; WEIGHT_TYPES.len()] {
    let mut found: [Option<T>; WEIGHT_TYPES.len()] = [None; WEIGHT_TYPES.len()];
    let mut f = 0;
    while f < families.len() {
        let mut r = 0;
        while r < families[f].len() {
            let (ty, row) = families[f][r];
            let Some(t) = weight_index(ty) else {
                panic!("cpu::dot: a kernel row of a type outside WEIGHT_TYPES");
            };
            assert!(
                found[t].is_none(),
                "cpu::dot: a weight type with two kernel rows"
            );
            found[t] = Some(row);
            r += 1;
        }
        f += 1;
    }
    let mut out = [families[0][0].1; WEIGHT_TYPES.len()];
    let mut t = 0;
    while t < WEIGHT_TYPES.len() {
        let Some(row) = found[t] else {
            panic!("cpu::dot: a type of WEIGHT_TYPES without a kernel row");
        };
        out[t] = row;
        t += 1;
    }
    out
}

/// The format activations take to meet weights of type `w` (ggml's
/// `vec_dot_type`), or `None` when `w` has no CPU dot product here.
pub(crate) fn act_type(w: GgmlType) -> Option<GgmlType> {
    weight_index(w).map(|t| SCALAR[t].0)
}

/// The scalar reference for `weight`.
pub fn scalar_dot(weight: GgmlType) -> Option<DotFn> {
    weight_index(weight).map(|t| SCALAR[t].1)
}

/// A tile walked one dot at a time with the kernels' dot function.
fn scalar_tile(k: &Kernels, t: &Tile<'_>, out: &mut [f32], ld: usize) {
    let wb = t.n_blocks * k.weight.block_bytes();
    let ab = t.n_blocks * k.act.block_bytes();
    for c in 0..t.cols {
        let a = t.a_row(c, ab);
        for r in 0..t.rows {
            out[c * ld + r] = (k.dot)(t.w_row(r, wb), a);
        }
    }
}

/// Every weight type with kernels: [`WEIGHT_TYPES`].
pub fn weight_types() -> impl Iterator<Item = GgmlType> {
    WEIGHT_TYPES.into_iter()
}

/// Weight row `w` of type `weight` dotted with activation row `a` (in
/// `vec_dot_type(weight)` bytes) with the best kernels this CPU runs.
pub fn vec_dot(weight: GgmlType, w: &[u8], a: &[u8]) -> Result<f32, CpuError> {
    Kernels::detected(weight)?.dot(w, a)
}

//! Little-endian field access for block decoding. Blocks arrive as byte
//! slices at arbitrary alignment (an mmap'd file, a `Vec<u8>`), so every
//! field is read and written through these helpers, never through a pointer
//! cast.

use half::f16;

/// `N` bytes of `b` starting at `at`.
#[inline]
pub(crate) fn take<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[at..at + N]);
    a
}

#[inline]
pub(crate) fn f16_at(b: &[u8], at: usize) -> f16 {
    f16::from_le_bytes(take(b, at))
}

#[inline]
pub(crate) fn put(b: &mut [u8], at: usize, v: &[u8]) {
    b[at..at + v.len()].copy_from_slice(v);
}

#[inline]
pub(crate) fn i8s<const N: usize>(b: [u8; N]) -> [i8; N] {
    b.map(|v| v as i8)
}

#[inline]
pub(crate) fn u8s<const N: usize>(b: [i8; N]) -> [u8; N] {
    b.map(|v| v as u8)
}

/// Walks `src` in `B`-byte blocks and `dst` in `E`-element blocks together,
/// calling `f` on each pair. The caller has checked that both hold the same
/// number of whole blocks; the walk stops at whichever runs out first.
pub(crate) fn each_block<const B: usize, const E: usize>(
    mut src: &[u8],
    mut dst: &mut [f32],
    mut f: impl FnMut(&[u8; B], &mut [f32; E]),
) {
    while let Some((s, s_rest)) = src.split_first_chunk::<B>() {
        let Some((d, d_rest)) = std::mem::take(&mut dst).split_first_chunk_mut::<E>() else {
            return;
        };
        f(s, d);
        src = s_rest;
        dst = d_rest;
    }
}

/// The quantizing counterpart of [`each_block`]: `E` floats in, `B` bytes out.
pub(crate) fn each_block_mut<const B: usize, const E: usize>(
    mut src: &[f32],
    mut dst: &mut [u8],
    mut f: impl FnMut(&[f32; E], &mut [u8; B]),
) {
    while let Some((s, s_rest)) = src.split_first_chunk::<E>() {
        let Some((d, d_rest)) = std::mem::take(&mut dst).split_first_chunk_mut::<B>() else {
            return;
        };
        f(s, d);
        src = s_rest;
        dst = d_rest;
    }
}

// The scale of an RMS norm, 1 / sqrt(mean(x²) + eps), as
// engine/src/cpu/norm.rs computes it, by one workgroup of RMS_WG
// invocations (rms_norm.comp, and the decode matvec's norm prologue in
// matvec.comp). The CPU sums squares in f64; here they are summed in f32
// pairs hi + lo (compensated strided per-invocation sums, then a
// shared-memory tree of pairs, no float64) and divided by the element count
// with one rounding, then 1 / sqrt with a correctly rounded sqrt and
// division (math.glsl): the CPU's bits on lavapipe and on the H200. The
// squares are f32 on both (x² of |x| > 1.8e19 is inf: the mean is inf,
// scale 0). Where the squares are finite but their sum passes f32's range
// (which f64 holds), a second pass sums them scaled by 2^-64 (exact for
// every square that matters to such a sum).
//
// The includer defines RMS_WG (its workgroup size, a power of two) and
// RMS_VAL(a, b, c): element c of the group, from the two values a and b it
// passes to rms_scale (say a base offset and a group index); it may define
// RMS_EXTRA(c), run beside each read of element c (say a load of the
// weight's element c, so that it overlaps the sums). It may define RMS_SG
// (a uniform bool; the includer enables subgroup shuffles): where true,
// tid counts subgroup by subgroup and the tree's steps of strides below a
// subgroup are an xor butterfly in subgroup 0, whose lane 0 adds the
// tree's operands in the tree's order (the same bits).
#ifndef SHARPI_RMS_GLSL
#define SHARPI_RMS_GLSL

#include "math.glsl"

shared float partial_hi[RMS_WG];
shared float partial_lo[RMS_WG];

// Veltkamp's split of a into ah + al, each of at most 12 significant bits.
void split(float a, out float ah, out float al) {
    precise float c = 4097.0 * a;
    precise float h = c - (c - a);
    ah = h;
    al = a - h;
}

// Dekker: the exact a * b - p for p = a * b rounded.
float two_prod_err(float a, float b, float p) {
    float ah, al, bh, bl;
    split(a, ah, al);
    split(b, bh, bl);
    precise float e = (((ah * bh - p) + ah * bl) + al * bh) + al * bl;
    return e;
}

// The sum of squares of the n elements, each times `s` (1, or 2^-64:
// exact), as an unevaluated pair (partial_hi[0], partial_lo[0]) (2Sum keeps
// each addition's rounding error in lo), so that the f32 mean is almost
// always the CPU's (f64 sum, rounded once). Leaves the workgroup after a
// barrier.
void rms_sum_squares(uint a, uint b, uint n, uint tid, float s_mul) {
    precise float hi = 0.0;
    precise float lo = 0.0;
    for (uint c = tid; c < n; c += RMS_WG) {
        precise float v = RMS_VAL(a, b, c);
#ifdef RMS_EXTRA
        RMS_EXTRA(c);
#endif
        precise float sq = (v * v) * s_mul;
        precise float s = hi + sq;
        precise float bb = s - hi;
        lo += (hi - (s - bb)) + (sq - bb);
        hi = s;
    }
    partial_hi[tid] = hi;
    partial_lo[tid] = lo;
    barrier();
    // The shared steps: all of them, or (RMS_SG) those of strides of a
    // subgroup or more.
    uint k_end = 1u;
#ifdef RMS_SG
    if (RMS_SG) {
        k_end = gl_SubgroupSize;
    }
#endif
    for (uint k = RMS_WG / 2; k >= k_end && k > 0; k >>= 1) {
        if (tid < k) {
            precise float x = partial_hi[tid];
            precise float y = partial_hi[tid + k];
            precise float s = x + y;
            precise float bb = s - x;
            precise float e = (x - (s - bb)) + (y - bb);
            partial_hi[tid] = s;
            partial_lo[tid] = partial_lo[tid] + partial_lo[tid + k] + e;
        }
        barrier();
    }
#ifdef RMS_SG
    if (RMS_SG) {
        // Strides below a subgroup: the partials left in subgroup 0's lanes.
        if (gl_SubgroupID == 0u) {
            precise float x = partial_hi[tid];
            precise float xl = partial_lo[tid];
            for (uint k = min(RMS_WG, gl_SubgroupSize) / 2u; k > 0u; k >>= 1) {
                precise float y = subgroupShuffleXor(x, k);
                precise float yl = subgroupShuffleXor(xl, k);
                precise float s = x + y;
                precise float bb = s - x;
                precise float e = (x - (s - bb)) + (y - bb);
                x = s;
                xl = xl + yl + e;
            }
            if (tid == 0u) {
                partial_hi[0] = x;
                partial_lo[0] = xl;
            }
        }
        barrier();
    }
#endif
}

// (hi + lo) / n rounded once, as the CPU's f64 division is (a driver may
// divide as a * (1 / b), two roundings): q = hi / n, then the remainder
// hi + lo - q * n, with q * n exact (Dekker's product; no fma, which a
// driver may not fuse), corrects it. An infinite or NaN hi (lo is then
// NaN) is the mean itself.
float rms_mean_of(float hi, float lo, uint count) {
    float n = float(count);
    precise float q = hi / n;
    if (isinf(q) || isnan(q)) {
        return q;
    }
    if (q > 1e30) {
        // Veltkamp's split (4097 q) would overflow: the same at 2^-64.
        precise float hs = hi * 5.421010862427522e-20;
        precise float ls = lo * 5.421010862427522e-20;
        q = hs / n;
        precise float qn = q * n;
        precise float qn_err = two_prod_err(q, n, qn);
        precise float r = ((hs - qn) - qn_err) + ls;
        precise float mean = q + r / n;
        return mean * 18446744073709551616.0;
    }
    precise float qn = q * n;
    precise float qn_err = two_prod_err(q, n, qn);
    precise float r = ((hi - qn) - qn_err) + lo;
    precise float mean = q + r / n;
    return mean;
}

// 1 / sqrt(a) with each step correctly rounded, as the CPU's f32 sqrt and
// division are (a driver's are bounded only to a few ulps, and an ulp here
// moves the quantized activations of the next matmul).
float inv_sqrt_rn(float a) {
    uint b = floatBitsToUint(a);
    if (b >= 0x00800000u && b < 0x7f800000u) {
        return uintBitsToFloat(div_rn(0x3f800000u, sqrt_rn(b)));
    }
    return 1.0 / sqrt(a); // 0, inf, NaN, negative; or subnormal, which a device may flush
}

// The norm's scale for the n elements RMS_VAL(a, b, 0..n), the same in
// every invocation (all of the workgroup calls it: it has barriers).
float rms_scale(uint a, uint b, uint n, uint tid, float eps) {
    rms_sum_squares(a, b, n, tid, 1.0);
    precise float mean = rms_mean_of(partial_hi[0], partial_lo[0], n);
    if (isinf(partial_hi[0])) {
        // Past f32's range: again at 2^-64 (uniform: every invocation read
        // the same partial_hi[0] before the barrier below). An infinite
        // square keeps the sum infinite, as on the CPU.
        barrier();
        rms_sum_squares(a, b, n, tid, 5.421010862427522e-20);
        precise float m = rms_mean_of(partial_hi[0], partial_lo[0], n);
        mean = m * 18446744073709551616.0;
    }
    precise float s = mean + eps;
    return inv_sqrt_rn(s);
}

#endif

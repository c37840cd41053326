#version 450
// RMS norm, one workgroup per group of `group` contiguous elements:
// out = (x * scale) * w, scale = 1 / sqrt(mean(x²) + eps), as
// engine/src/cpu/norm.rs computes it. The CPU sums squares in f64; here they
// are summed in f32 pairs hi + lo (compensated strided per-invocation sums,
// then a shared-memory tree of pairs, no float64) and divided by the group
// size with one rounding, then 1 / sqrt with a correctly rounded sqrt and
// division (math.glsl): the CPU's bits on lavapipe and on the H200.
// The squares are f32 on both (x² of |x| > 1.8e19 is inf: the mean is inf,
// scale 0). Where the squares are finite but their sum passes f32's range
// (which f64 holds), a second pass sums them scaled by 2^-64 (exact for
// every square that matters to such a sum). `out` may be `x` (in place):
// every invocation writes only the elements it read itself, after the
// reduction's barriers.
// Variants (engine/build/variants.rs): HAS_WEIGHT multiplies by w (length group).
// Bindings: 0 = x (read), 1 = out (written), 2 = w (read; HAS_WEIGHT only).
// Push: RmsNormPush.

#include "elementwise.glsl"
#include "math.glsl"

#define WG 128
layout(local_size_x = WG, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) readonly buffer X { float x[]; };
layout(set = 0, binding = 1, std430) writeonly buffer Out { float o[]; };
#ifdef HAS_WEIGHT
layout(set = 0, binding = 2, std430) readonly buffer W { float w[]; };
#endif

layout(push_constant) uniform Push { RmsNormPush p; };

shared float partial_hi[WG];
shared float partial_lo[WG];

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

// The group's sum of squares, each times `s` (1, or 2^-64: exact), as an
// unevaluated pair (partial_hi[0], partial_lo[0]) (2Sum keeps each
// addition's rounding error in lo), so that the f32 mean is almost always
// the CPU's (f64 sum, rounded once). Leaves the workgroup after a barrier.
void sum_squares(uint xb, uint tid, float s_mul) {
    precise float hi = 0.0;
    precise float lo = 0.0;
    for (uint c = tid; c < p.group; c += WG) {
        precise float v = x[xb + c];
        precise float sq = (v * v) * s_mul;
        precise float s = hi + sq;
        precise float bb = s - hi;
        lo += (hi - (s - bb)) + (sq - bb);
        hi = s;
    }
    partial_hi[tid] = hi;
    partial_lo[tid] = lo;
    barrier();
    for (uint n = WG / 2; n > 0; n >>= 1) {
        if (tid < n) {
            precise float a = partial_hi[tid];
            precise float b = partial_hi[tid + n];
            precise float s = a + b;
            precise float bb = s - a;
            precise float e = (a - (s - bb)) + (b - bb);
            partial_hi[tid] = s;
            partial_lo[tid] = partial_lo[tid] + partial_lo[tid + n] + e;
        }
        barrier();
    }
}

// (hi + lo) / group rounded once, as the CPU's f64 division is (a driver
// may divide as a * (1 / b), two roundings): q = hi / group, then the
// remainder hi + lo - q * group, with q * group exact (Dekker's product; no
// fma, which a driver may not fuse), corrects it. An infinite or NaN hi
// (lo is then NaN) is the mean itself.
float mean_of(float hi, float lo) {
    float n = float(p.group);
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

void main() {
    // Workgroups may spill into y (groups_1d on the host); flat group index.
    uint g = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (g >= p.n_groups) {
        return; // uniform over the workgroup: no barrier is skipped by part of it
    }
    uint tid = gl_LocalInvocationID.x;
    uint xb = p.x_offset + g * p.group;
    uint ob = p.out_offset + g * p.group;

    sum_squares(xb, tid, 1.0);
    precise float mean = mean_of(partial_hi[0], partial_lo[0]);
    if (isinf(partial_hi[0])) {
        // Past f32's range: again at 2^-64 (uniform: every invocation read
        // the same partial_hi[0] before the barrier below). An infinite
        // square keeps the sum infinite, as on the CPU.
        barrier();
        sum_squares(xb, tid, 5.421010862427522e-20);
        precise float m = mean_of(partial_hi[0], partial_lo[0]);
        mean = m * 18446744073709551616.0;
    }
    precise float scale = inv_sqrt_rn(mean + p.eps);
    for (uint c = tid; c < p.group; c += WG) {
        precise float y = x[xb + c] * scale;
#ifdef HAS_WEIGHT
        y = y * w[c];
#endif
        o[ob + c] = y;
    }
}

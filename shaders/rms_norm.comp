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
// QUANT with ACT_Q8_0 or ACT_Q8_1 (and HAS_WEIGHT): the normed groups are
// also written quantized, as quantize_act.comp would write them from
// `out` (the next matmul's input), each group's blocks from word
// q_offset + 9 * (g * group / 32); the normed values are kept in shared
// memory for it (groups of at most MAX_QUANT_GROUP), the same bits as
// `out`'s.
// ADD (with HAS_WEIGHT): the residual add before the norm, fused: x = x + b
// first (b from element b_offset), then the norm of that sum. Every
// element of the sum is computed again where it is needed (x is written
// last, after a barrier), so no invocation reads another's writes.
// Bindings: 0 = x (read; with ADD read and written), 1 = out (written),
// 2 = w (read; HAS_WEIGHT only), 3 = quantized out (u32 words, written;
// QUANT only), then b (read; ADD only: binding 4 with QUANT, else 3).
// Push: RmsNormPush; with QUANT or ADD also q_offset and b_offset.

#include "elementwise.glsl"
#include "math.glsl"
#ifdef QUANT
#include "act.glsl"
#endif

#define WG 128
layout(local_size_x = WG, local_size_y = 1, local_size_z = 1) in;

#ifdef ADD
layout(set = 0, binding = 0, std430) buffer X { float x[]; };
#ifdef QUANT
layout(set = 0, binding = 4, std430) readonly buffer B { float bv[]; };
#else
layout(set = 0, binding = 3, std430) readonly buffer B { float bv[]; };
#endif
#else
layout(set = 0, binding = 0, std430) readonly buffer X { float x[]; };
#endif
layout(set = 0, binding = 1, std430) writeonly buffer Out { float o[]; };
#ifdef HAS_WEIGHT
layout(set = 0, binding = 2, std430) readonly buffer W { float w[]; };
#endif

#ifdef QUANT
layout(set = 0, binding = 3, std430) writeonly buffer Q { uint qo[]; };
shared int part_sum[WG];
// The group's normed values, for the quantization (groups of at most
// MAX_QUANT_GROUP: op_elementwise.rs MAX_FUSED_QUANT_GROUP).
#define MAX_QUANT_GROUP 3072
shared float sy[MAX_QUANT_GROUP];
#endif
#if defined(QUANT) || defined(ADD)
layout(push_constant) uniform Push {
    RmsNormPush p;
    uint q_offset;
    uint b_offset;
};
#else
layout(push_constant) uniform Push { RmsNormPush p; };
#endif

// Element c of the group starting at xb: x, or with ADD the sum x + b (as
// binary.comp adds: one rounding).
float val(uint xb, uint g, uint c) {
#ifdef ADD
    return x[xb + c] + bv[b_offset + g * p.group + c];
#else
    return x[xb + c];
#endif
}

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
void sum_squares(uint xb, uint g, uint tid, float s_mul) {
    precise float hi = 0.0;
    precise float lo = 0.0;
    for (uint c = tid; c < p.group; c += WG) {
        precise float v = val(xb, g, c);
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

    sum_squares(xb, g, tid, 1.0);
    precise float mean = mean_of(partial_hi[0], partial_lo[0]);
    if (isinf(partial_hi[0])) {
        // Past f32's range: again at 2^-64 (uniform: every invocation read
        // the same partial_hi[0] before the barrier below). An infinite
        // square keeps the sum infinite, as on the CPU.
        barrier();
        sum_squares(xb, g, tid, 5.421010862427522e-20);
        precise float m = mean_of(partial_hi[0], partial_lo[0]);
        mean = m * 18446744073709551616.0;
    }
    precise float scale = inv_sqrt_rn(mean + p.eps);
#ifdef QUANT
    // Eight invocations per block of 32, one word of four quants each (as
    // quantize_act.comp); every round of WG invocations is uniform.
    for (uint c = tid; c < p.group; c += WG) {
        precise float y = val(xb, g, c) * scale;
        y = y * w[c];
        sy[c] = y;
    }
    barrier();
    uint n_words = (p.group / 32u) * 8u;
    uint qb = q_offset + 9u * (g * p.group / 32u);
    for (uint base = 0u; base < n_words; base += WG) {
        uint k = base + tid;
        uint seg = k / 8u;
        uint wi = k % 8u;
        bool live = k < n_words;
        uint d = 0u;
        int sum = 0;
        if (live) {
            uint c0 = 32u * seg;
            uint amax = 0u;
            for (uint i = 0u; i < 32u; i++) {
                amax = q8_amax_step(amax, floatBitsToUint(sy[c0 + i]));
            }
            uint id;
            q8_scales(amax, d, id);
            uint word = 0u;
            for (uint j = 0u; j < 4u; j++) {
                int q = q8_quant(floatBitsToUint(sy[c0 + 4u * wi + j]), id);
                sum += q;
                word |= (uint(clamp(q, -128, 127)) & 0xffu) << (8u * j);
            }
            qo[qb + 9u * seg + 1u + wi] = word;
        }
#ifdef ACT_Q8_1
        part_sum[tid] = sum;
        barrier();
        for (uint j = 1u; j < 8u; j++) {
            sum += part_sum[(tid & ~7u) + (wi + j) % 8u];
        }
        barrier(); // part_sum is rewritten by the next round
#endif
        if (live && wi == 0u) {
            qo[qb + 9u * seg] = q8_head(d, sum);
        }
    }
#endif
#ifdef ADD
    barrier(); // every read of x (the sums above) before x is written
#endif
    for (uint c = tid; c < p.group; c += WG) {
        precise float v = val(xb, g, c); // before x is written (ADD)
#ifdef ADD
        x[xb + c] = v;
#endif
#ifdef QUANT
        o[ob + c] = sy[c]; // v * scale * w, computed above
#else
        precise float y = v * scale;
#ifdef HAS_WEIGHT
        y = y * w[c];
#endif
        o[ob + c] = y;
#endif
    }
}

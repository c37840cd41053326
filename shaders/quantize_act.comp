#version 450
// Activations to the weight type's dot format, bit for bit as the CPU's
// quantizer (engine/src/cpu/act.rs: ggml's x86 quantize_row_q8_0 / _q8_1,
// and quantize_row_q8_K_ref compiled with FMA): ACT_Q8_0, ACT_Q8_1 or
// ACT_Q8_K. Block layouts and the integer arithmetic: common/act.glsl.
//
// Q8_0 / Q8_1: eight invocations per block of 32 elements (a segment),
// each writing one word of four quants (common/quant_row.glsl). Q8_K: one invocation per segment,
// an eighth of a block (the eight segments of a block share a workgroup:
// 64 invocations, aligned, and meet in shared memory).
// Bindings: 0 = x (f32 elements), 1 = out (u32 words). Push: n_seg
// segments from element x_offset of x, blocks written from word out_offset.
// FAULT_F16_TRUNCATE (fault `gpu-act-f16-truncate`, fault-injection builds
// only): the f16 scale d truncated towards zero instead of rounded.

#include "act.glsl"
#include "index.glsl"

layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) readonly buffer Xt { float X[]; };
layout(set = 0, binding = 1, std430) writeonly buffer Ot { uint O[]; };

layout(push_constant) uniform Push {
    uint n_seg;
    uint x_offset;
    uint out_offset;
} p;

#if defined(ACT_Q8_0) || defined(ACT_Q8_1)

// A workgroup quantizes eight blocks (the row quantizer of
// common/quant_row.glsl, eight invocations per block).
#define QUANT_WG 64u
#define QV(i) X[x0 + (i)]
#define QSTORE(w, v) O[w] = (v)
uint x0;
#include "quant_row.glsl"

void main() {
    uint g = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    uint seg0 = 8u * g;
    uint segs = seg0 < p.n_seg ? min(8u, p.n_seg - seg0) : 0u;
    x0 = p.x_offset + 32u * seg0;
    quant_row(gl_LocalInvocationID.x, 32u * segs, p.out_offset + 9u * seg0);
}

#elif defined(ACT_Q8_K)

// Per segment: its first element of largest magnitude (bits of |x| and of
// x), NaN never counting.
shared uint seg_amax[64];
shared uint seg_max[64];

void main() {
    uint seg = global_index_1d();
    uint tid = gl_LocalInvocationID.x;
    bool live = seg < p.n_seg; // a whole block is live or not (n_seg % 8 == 0)
    uint x0 = p.x_offset + 32u * seg;
    uint amax = 0u, mx = 0u;
    if (live) {
        for (uint i = 0u; i < 32u; i++) {
            uint b = floatBitsToUint(X[x0 + i]);
            uint a = b & 0x7fffffffu;
            if (!is_nan_bits(a) && a > amax) {
                amax = a;
                mx = b;
            }
        }
    }
    seg_amax[tid] = amax;
    seg_max[tid] = mx;
    barrier();
    if (!live) {
        return;
    }
    // The block's: the first segment holding its largest magnitude.
    uint first = tid & ~7u;
    amax = 0u;
    mx = 0u;
    for (uint k = first; k < first + 8u; k++) {
        if (seg_amax[k] > amax) {
            amax = seg_amax[k];
            mx = seg_max[k];
        }
    }
    uint blk = seg / 8u;
    uint part = seg % 8u;
    uint o = p.out_offset + Q8_K_WORDS * blk;
    uint qs[8];
    uint dbits = 0u;
    if (amax == 0u) {
        for (uint w = 0u; w < 8u; w++) {
            qs[w] = 0u;
        }
    } else {
        // iscale = -127 / max; d = 1 / iscale.
        uint iscale;
        if (amax == 0x7f800000u) {
            iscale = (mx ^ 0x80000000u) & 0x80000000u; // -127 / ±inf = ∓0
        } else if (amax < 0x00800000u) {
            iscale = ((mx ^ 0x80000000u) & 0x80000000u) | 0x7f800000u; // overflow
        } else {
            iscale = div_rn(0xc2fe0000u, mx); // -127.0
        }
        if ((iscale & 0x7fffffffu) == 0u) {
            dbits = (iscale & 0x80000000u) | 0x7f800000u; // 1 / ∓0
        } else if ((iscale & 0x7fffffffu) == 0x7f800000u) {
            dbits = iscale & 0x80000000u; // 1 / ∓inf
        } else {
            dbits = div_rn(0x3f800000u, iscale);
        }
        bool iscale_finite_nonzero = is_finite_bits(iscale) && (iscale & 0x7fffffffu) != 0u;
        // q = min(127, nearest_int(iscale * x)): the product rounded to f32,
        // then to an integer (ggml-base's build has no FMA to fuse them).
        // Where the product is NaN or ±inf (x NaN, iscale 0 or inf) its bits
        // give 0 after ggml's mask; so does 0 * finite.
        for (uint w = 0u; w < 8u; w++) {
            uint word = 0u;
            for (uint j = 0u; j < 4u; j++) {
                uint xb = floatBitsToUint(X[x0 + 4u * w + j]);
                int q = 0;
                if (iscale_finite_nonzero && is_finite_bits(xb) && (xb & 0x7fffffffu) != 0u) {
                    q = min(round_product(xb, iscale, true), 127);
                }
                word |= (uint(q) & 0xffu) << (8u * j);
            }
            qs[w] = word;
        }
    }
    // Two bsums of 16 (i16, as ggml's: the quants are at most 127 apart).
    int s0 = 0, s1 = 0;
    for (uint w = 0u; w < 8u; w++) {
        ivec4 v = ivec4(uvec4(qs[w]) << uvec4(24u, 16u, 8u, 0u)) >> 24;
        int t = v.x + v.y + v.z + v.w;
        if (w < 4u) {
            s0 += t;
        } else {
            s1 += t;
        }
    }
    if (part == 0u) {
        O[o] = dbits;
    }
    for (uint w = 0u; w < 8u; w++) {
        O[o + 1u + 8u * part + w] = qs[w];
    }
    O[o + 65u + part] = (uint(s0) & 0xffffu) | (uint(s1) << 16);
}

#else
#error "quantize_act.comp: no ACT_* define"
#endif

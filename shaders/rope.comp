#version 450
// RoPE in place (NORM: adjacent pairs (2i, 2i+1); NEOX: halves (i, i + n_rot/2)),
// as engine/src/cpu/rope.rs computes it: theta_0 = p, theta_{i+1} = theta_i *
// theta_scale in f32 (theta_scale = base^(-2/n_rot), computed on the host with
// the CPU's powf), then cos/sin of freq_scale * theta_i (sincos_accurate: the
// drivers' own sin/cos are not accurate at large angles). One invocation per
// (row, PAIRS pairs from i0), looping over the row's heads; elements past
// n_rot are not touched.
// KV_WRITE (op_attention.rs fuses the K cache write that follows the RoPE
// of K): the rotated rows are also written to the cache at the position
// step_words[kv_pos_at], as kv_write.comp writes them (KV_F16: rounded to
// nearest even). Only for full rotation (n_rot = head_dim) and an even
// half_rot: each invocation takes two pairs, whose four elements fill two
// whole 32-bit words of an f16 cache (NORM: 4i0..4i0 + 3; NEOX: i0, i0 + 1
// and their partners), so no two invocations write one word.
// Bindings: 0 = x (read and written), 1 = step words (read: the
// positions); KV_WRITE: 2 = the cache (written; f16: as u32 words).
// Push: RopePush; KV_WRITE: then kv_pos_at.

#include "elementwise.glsl"
#include "math.glsl"
#include "index.glsl"
#include "step.glsl"

layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) buffer X { float x[]; };
STEP_WORDS(1)

#ifdef KV_WRITE
#define PAIRS 2u
#ifdef KV_F16
layout(set = 0, binding = 2, std430) writeonly buffer Kv { uint cache[]; };
#else
layout(set = 0, binding = 2, std430) writeonly buffer Kv { float cache[]; };
#endif
layout(push_constant) uniform Push {
    RopePush p;
    uint kv_pos_at;
};
#else
#define PAIRS 1u
layout(push_constant) uniform Push { RopePush p; };
#endif

void main() {
    uint id = global_index_1d();
    uint per_row = p.half_rot / PAIRS;
    if (id >= p.rows * per_row) {
        return;
    }
    uint t = id / per_row;
    uint i0 = (id % per_row) * PAIRS;

    float c[PAIRS];
    float s[PAIRS];
    precise float theta = float(step_words[p.pos_at] + t);
    for (uint k = 0; k < i0; k++) {
        theta = theta * p.theta_scale;
    }
    for (uint j = 0u; j < PAIRS; j++) {
        if (j > 0u) {
            theta = theta * p.theta_scale;
        }
        precise float th = p.freq_scale * theta;
        vec2 sc = sincos_accurate(th);
        c[j] = sc.y;
        s[j] = sc.x;
    }

    uint row = p.offset + t * p.width;
#ifdef KV_WRITE
    // The row's first element in the cache.
    uint cb = (step_words[kv_pos_at] + t) * p.width;
#endif
    for (uint h = 0u; h < p.width; h += p.head_dim) {
        float y0[PAIRS];
        float y1[PAIRS];
        uint ia[PAIRS];
        uint ib[PAIRS];
        for (uint j = 0u; j < PAIRS; j++) {
            uint i = i0 + j;
            ia[j] = h + (p.neox != 0 ? i : 2 * i);
            ib[j] = h + (p.neox != 0 ? i + p.half_rot : 2 * i + 1);
            float x0 = x[row + ia[j]];
            float x1 = x[row + ib[j]];
            precise float r0 = x0 * c[j] - x1 * s[j];
            precise float r1 = x0 * s[j] + x1 * c[j];
            y0[j] = r0;
            y1[j] = r1;
            x[row + ia[j]] = r0;
            x[row + ib[j]] = r1;
        }
#ifdef KV_WRITE
#ifdef KV_F16
        // Two whole words: NORM (a0, b0), (a1, b1); NEOX (a0, a1), (b0, b1).
        uint h00 = f32_to_f16_rne(y0[0]);
        uint h01 = f32_to_f16_rne(y1[0]);
        uint h10 = f32_to_f16_rne(y0[1]);
        uint h11 = f32_to_f16_rne(y1[1]);
        if (p.neox != 0) {
            cache[(cb + ia[0]) / 2u] = h00 | (h10 << 16);
            cache[(cb + ib[0]) / 2u] = h01 | (h11 << 16);
        } else {
            cache[(cb + ia[0]) / 2u] = h00 | (h01 << 16);
            cache[(cb + ia[1]) / 2u] = h10 | (h11 << 16);
        }
#else
        for (uint j = 0u; j < PAIRS; j++) {
            cache[cb + ia[j]] = y0[j];
            cache[cb + ib[j]] = y1[j];
        }
#endif
#endif
    }
}

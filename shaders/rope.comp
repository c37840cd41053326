#version 450
// RoPE in place (NORM: adjacent pairs (2i, 2i+1); NEOX: halves (i, i + n_rot/2)),
// as engine/src/cpu/rope.rs computes it (common/rope.glsl). One invocation
// per (row, PAIRS pairs from i0), looping over the row's heads; elements
// past n_rot are not touched.
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
#include "rope.glsl"
#include "kv.glsl"
#include "index.glsl"
#include "step.glsl"

layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) buffer X { float x[]; };
STEP_WORDS(1)

#ifdef KV_WRITE
#define PAIRS 2u
layout(set = 0, binding = 2, std430) writeonly buffer Kv { KV_WORD cache[]; };
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

    bool neox = p.neox != 0;
    vec2 sc[PAIRS];
    for (uint j = 0u; j < PAIRS; j++) {
        sc[j] = rope_sincos(step_words[p.pos_at] + t, i0 + j, p.theta_scale, p.freq_scale);
    }

    uint row = p.offset + t * p.width;
#ifdef KV_WRITE
    // The row's first element in the cache.
    uint cb = (step_words[kv_pos_at] + t) * p.width;
#endif
    for (uint h = 0u; h < p.width; h += p.head_dim) {
        vec2 y[PAIRS];
        uvec2 pr[PAIRS]; // the pairs' elements in the row
        for (uint j = 0u; j < PAIRS; j++) {
            pr[j] = h + rope_pair(i0 + j, p.half_rot, neox);
            y[j] = rope_turn(x[row + pr[j].x], x[row + pr[j].y], sc[j]);
            x[row + pr[j].x] = y[j].x;
            x[row + pr[j].y] = y[j].y;
        }
#ifdef KV_WRITE
        KV_STORE_PAIRS(cache, cb, pr, y, PAIRS, neox)
#endif
    }
}

#version 450
// A per-head RMS norm with its weight, then RoPE of the normed head (all of
// it: n_rot = head_dim), then optionally the query's scale and the K cache
// write: the chain rms_norm.comp (HAS_WEIGHT, groups of one head), rope.comp
// (KV_WRITE where kv is set), unary.comp's scale, in one dispatch with the
// same bits (op_norm_rope.rs fuses them: Gemma 3's and Qwen3's q/k norms).
// One workgroup per head of a row (group g: row g / heads, head g % heads).
// After the norm's scale (common/rms.glsl), each invocation takes two pairs
// at a time, (i, i + 1) for i even, so that its elements fill whole words of
// an f16 cache (NORM: 2i..2i + 3; NEOX: i, i + 1 and their partners at
// + half_rot; half_rot even), and writes only elements it read itself (out
// may be x).
// Bindings: 0 = x (read), 1 = out (written), 2 = w (the norm's weight,
// head_dim values), 3 = step words (the positions), 4 = the cache (u32
// words, written where kv is 1 (f32) or 2 (f16, rounded to nearest even);
// bound to out where kv is 0).
// Push: RmsNormPush (group = head_dim), then NormRopePush.

#include "elementwise.glsl"
#include "rope.glsl"
#include "kv.glsl"
#include "step.glsl"

#define WG 128
layout(local_size_x = WG, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) readonly buffer X { float x[]; };
layout(set = 0, binding = 1, std430) writeonly buffer Out { float o[]; };
layout(set = 0, binding = 2, std430) readonly buffer W { float w[]; };
STEP_WORDS(3)
layout(set = 0, binding = 4, std430) writeonly buffer Kv { uint cache[]; };

// op_norm_rope.rs's NormRopePush: heads per row; half the rotated
// dimensions; the step word of the first row's position; NEOX (1) or NORM
// (0) pairs; the CPU's theta_scale and freq_scale; the query scale (where
// has_scale is 1); the cache write (0 none, 1 f32, 2 f16), the step word of
// its first row's position and the cache's row width.
struct NormRopePush {
    uint heads;
    uint half_rot;
    uint pos_at;
    uint neox;
    float theta_scale;
    float freq_scale;
    uint has_scale;
    float scale;
    uint kv;
    uint kv_pos_at;
    uint kv_width;
};
layout(push_constant) uniform Push {
    RmsNormPush p;
    NormRopePush r;
};

#define RMS_WG WG
#define RMS_VAL(a, b, c) x[(a) + (c)]
#include "rms.glsl"

void main() {
    // Workgroups may spill into y (groups_1d on the host); flat group index.
    uint g = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (g >= p.n_groups) {
        return; // uniform over the workgroup
    }
    uint tid = gl_LocalInvocationID.x;
    uint xb = p.x_offset + g * p.group;
    uint ob = p.out_offset + g * p.group;
    uint t = g / r.heads;
    uint h = g % r.heads;

    precise float scale = rms_scale(xb, g, p.group, tid, p.eps);
    // The head's first element in the cache row of its position.
    uint cb = (step_words[r.kv_pos_at] + t) * r.kv_width + h * p.group;
    bool neox = r.neox != 0u;
    for (uint i0 = 2u * tid; i0 < r.half_rot; i0 += 2u * WG) {
        vec2 y[2]; // pair j's two elements
        uvec2 pr[2]; // and where they are in the head
        for (uint j = 0u; j < 2u; j++) {
            vec2 sc = rope_sincos(step_words[r.pos_at] + t, i0 + j, r.theta_scale, r.freq_scale);
            pr[j] = rope_pair(i0 + j, r.half_rot, neox);
            // The norm's values, as rms_norm.comp computes them.
            precise float x0 = x[xb + pr[j].x] * scale;
            x0 = x0 * w[pr[j].x];
            precise float x1 = x[xb + pr[j].y] * scale;
            x1 = x1 * w[pr[j].y];
            y[j] = rope_turn(x0, x1, sc);
            if (r.has_scale != 0u) {
                precise vec2 ys = y[j] * r.scale;
                y[j] = ys;
            }
        }
        for (uint j = 0u; j < 2u; j++) {
            o[ob + pr[j].x] = y[j].x;
            o[ob + pr[j].y] = y[j].y;
        }
        KV_STORE_PAIRS_BY_CODE(r.kv, cache, cb, pr, y, neox)
    }
}

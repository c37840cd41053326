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
#include "math.glsl"
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
    for (uint i0 = 2u * tid; i0 < r.half_rot; i0 += 2u * WG) {
        precise float theta = float(step_words[r.pos_at] + t);
        for (uint k = 0u; k < i0; k++) {
            theta = theta * r.theta_scale;
        }
        float y[4]; // pair j's two elements at 2j, 2j + 1
        uint at[4];
        for (uint j = 0u; j < 2u; j++) {
            if (j > 0u) {
                theta = theta * r.theta_scale;
            }
            precise float th = r.freq_scale * theta;
            vec2 sc = sincos_accurate(th);
            uint i = i0 + j;
            uint ia = r.neox != 0u ? i : 2u * i;
            uint ib = r.neox != 0u ? i + r.half_rot : 2u * i + 1u;
            // The norm's values, as rms_norm.comp computes them.
            precise float x0 = x[xb + ia] * scale;
            x0 = x0 * w[ia];
            precise float x1 = x[xb + ib] * scale;
            x1 = x1 * w[ib];
            precise float r0 = x0 * sc.y - x1 * sc.x;
            precise float r1 = x0 * sc.x + x1 * sc.y;
            if (r.has_scale != 0u) {
                r0 = r0 * r.scale;
                r1 = r1 * r.scale;
            }
            y[2u * j] = r0;
            y[2u * j + 1u] = r1;
            at[2u * j] = ia;
            at[2u * j + 1u] = ib;
        }
        for (uint e = 0u; e < 4u; e++) {
            o[ob + at[e]] = y[e];
        }
        if (r.kv == 1u) {
            for (uint e = 0u; e < 4u; e++) {
                cache[cb + at[e]] = floatBitsToUint(y[e]);
            }
        } else if (r.kv == 2u) {
            // Two whole words: NORM (a0, b0), (a1, b1); NEOX (a0, a1),
            // (b0, b1).
            uint f[4];
            for (uint e = 0u; e < 4u; e++) {
                f[e] = f32_to_f16_rne(y[e]);
            }
            if (r.neox != 0u) {
                cache[(cb + at[0]) / 2u] = f[0] | (f[2] << 16);
                cache[(cb + at[1]) / 2u] = f[1] | (f[3] << 16);
            } else {
                cache[(cb + at[0]) / 2u] = f[0] | (f[1] << 16);
                cache[(cb + at[2]) / 2u] = f[2] | (f[3] << 16);
            }
        }
    }
}

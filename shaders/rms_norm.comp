#version 450
// RMS norm, one workgroup per group of `group` contiguous elements:
// out = (x * scale) * w, scale = 1 / sqrt(mean(x²) + eps), as
// engine/src/cpu/norm.rs computes it, except that the sum of squares is
// accumulated in f32 (strided per-invocation sums, then a shared-memory tree)
// where the CPU uses f64. `out` may be `x` (in place): every invocation
// writes only the elements it read itself, after the reduction's barriers.
// Variants (engine/build.rs VARIANTS): HAS_WEIGHT multiplies by w (length group).
// Bindings: 0 = x (read), 1 = out (written), 2 = w (read; HAS_WEIGHT only).
// Push: RmsNormPush.

#include "elementwise.glsl"

#define WG 128
layout(local_size_x = WG, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) readonly buffer X { float x[]; };
layout(set = 0, binding = 1, std430) writeonly buffer Out { float o[]; };
#ifdef HAS_WEIGHT
layout(set = 0, binding = 2, std430) readonly buffer W { float w[]; };
#endif

layout(push_constant) uniform Push { RmsNormPush p; };

shared float partial[WG];

void main() {
    // Workgroups may spill into y (groups_1d on the host); flat group index.
    uint g = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (g >= p.n_groups) {
        return; // uniform over the workgroup: no barrier is skipped by part of it
    }
    uint tid = gl_LocalInvocationID.x;
    uint xb = p.x_offset + g * p.group;
    uint ob = p.out_offset + g * p.group;

    precise float sum = 0.0;
    for (uint c = tid; c < p.group; c += WG) {
        precise float v = x[xb + c];
        precise float sq = v * v;
        sum += sq;
    }
    partial[tid] = sum;
    barrier();
    for (uint s = WG / 2; s > 0; s >>= 1) {
        if (tid < s) {
            precise float t = partial[tid] + partial[tid + s];
            partial[tid] = t;
        }
        barrier();
    }
    precise float mean = partial[0] / float(p.group);
    precise float scale = 1.0 / sqrt(mean + p.eps);
    for (uint c = tid; c < p.group; c += WG) {
        precise float y = x[xb + c] * scale;
#ifdef HAS_WEIGHT
        y = y * w[c];
#endif
        o[ob + c] = y;
    }
}

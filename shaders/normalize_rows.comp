#version 450
// Each row divided by its sum, in place: x /= max(sum(x), 2^-14) (ggml
// sum_rows, clamp, div), one workgroup per row. The CPU sums in f64 and
// rounds to f32; here the sum is an f32 pair hi + lo (pairsum.glsl) rounded
// once, which is almost always the same f32.
// Binding: 0 = x (read and written). Push: RowsPush.

#include "moe.glsl"
#include "pairsum.glsl"

#define WG 128u
layout(local_size_x = 128, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) buffer X { float x[]; };

layout(push_constant) uniform Push { RowsPush p; };

shared float red_hi[WG];
shared float red_lo[WG];

// engine/src/cpu/moe.rs MIN_ROW_SUM: f16's smallest normal.
#define MIN_ROW_SUM 6.103515625e-5

void main() {
    uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (row >= p.rows) {
        return; // uniform over the workgroup
    }
    uint tid = gl_LocalInvocationID.x;
    uint base = p.offset + row * p.width;
    float hi = 0.0;
    float lo = 0.0;
    for (uint c = tid; c < p.width; c += WG) {
        pair_add(hi, lo, x[base + c]);
    }
    red_hi[tid] = hi;
    red_lo[tid] = lo;
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1) {
        if (tid < s) {
            float h = red_hi[tid];
            float l = red_lo[tid] + red_lo[tid + s];
            pair_add(h, l, red_hi[tid + s]);
            red_hi[tid] = h;
            red_lo[tid] = l;
        }
        barrier();
    }
    float d = max(red_hi[0] + red_lo[0], MIN_ROW_SUM);
    // Each invocation rewrites only the elements it read.
    for (uint c = tid; c < p.width; c += WG) {
        x[base + c] = x[base + c] / d;
    }
}

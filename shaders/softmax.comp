#version 450
// Softmax of each row in place (ggml soft_max without mask or scale), one
// workgroup per row: m = max(x), e = exp(x - m), x = e * (1 / sum(e)). The
// CPU sums in f64; here the sum is an f32 pair hi + lo (pairsum.glsl), and
// exp is the driver's: the result is within a few f32 ulps of the CPU's.
// Binding: 0 = x (read and written). Push: RowsPush.

#include "moe.glsl"
#include "pairsum.glsl"

#define WG 128u
layout(local_size_x = 128, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) buffer X { float x[]; };

layout(push_constant) uniform Push { RowsPush p; };

shared float red_hi[WG];
shared float red_lo[WG];

void main() {
    // Workgroups may spill into y (groups_1d on the host); flat row index.
    uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (row >= p.rows) {
        return; // uniform over the workgroup
    }
    uint tid = gl_LocalInvocationID.x;
    uint base = p.offset + row * p.width;

    float m = uintBitsToFloat(0xff800000u); // -inf
    for (uint c = tid; c < p.width; c += WG) {
        m = max(m, x[base + c]);
    }
    red_hi[tid] = m;
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1) {
        if (tid < s) {
            red_hi[tid] = max(red_hi[tid], red_hi[tid + s]);
        }
        barrier();
    }
    m = red_hi[0];
    barrier();

    // Each invocation writes e into the elements it reads, and scales the
    // same elements below: no other invocation touches them.
    float hi = 0.0;
    float lo = 0.0;
    for (uint c = tid; c < p.width; c += WG) {
        float e = exp(x[base + c] - m);
        x[base + c] = e;
        pair_add(hi, lo, e);
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
    float inv = 1.0 / (red_hi[0] + red_lo[0]);
    for (uint c = tid; c < p.width; c += WG) {
        x[base + c] = x[base + c] * inv;
    }
}

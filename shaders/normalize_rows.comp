#version 450
// Each row divided by its sum, in place: x /= clamp(sum(x), 2^-14, inf)
// (ggml sum_rows, clamp, div; a NaN sum clamps to inf), one workgroup per row. The CPU sums in f64 and
// rounds to f32; here the sum is an f32 pair hi + lo (pairsum.glsl) rounded
// once, which is almost always the same f32.
// Binding: 0 = x (read and written). Push: RowsPush.

#include "moe.glsl"
#include "pairsum.glsl"
#include "math.glsl"

#define WG 128u
layout(local_size_x = 128, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) buffer X { float x[]; };

layout(push_constant) uniform Push { RowsPush p; };

shared float red_hi[WG];
shared float red_lo[WG];

// engine/src/cpu/moe.rs MIN_ROW_SUM: f16's smallest normal.
#define MIN_ROW_SUM 6.103515625e-5
#define INF uintBitsToFloat(0x7f800000u)

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
    // An infinite or NaN hi makes lo NaN: the sum is hi. Then ggml's
    // clamp(sum, 2^-14, inf), MAX(MIN(sum, inf), 2^-14) with C's ternary
    // MIN/MAX: a NaN sum becomes inf (NaN < inf is false), so the row's
    // finite values become 0 (engine/src/cpu/moe.rs does the same).
    float sum = (isinf(red_hi[0]) || isnan(red_hi[0])) ? red_hi[0] : red_hi[0] + red_lo[0];
    float d = sum < INF ? sum : INF;
    d = d > MIN_ROW_SUM ? d : MIN_ROW_SUM;
    // The CPU's correctly rounded x / d (math.glsl): Vulkan bounds OpFDiv's
    // error only for divisors in [2^-126, 2^126], and NVIDIA's x / 2.8e38
    // came out 0 (its reciprocal is below f32's normals, flushed).
    // Each invocation rewrites only the elements it read.
    for (uint c = tid; c < p.width; c += WG) {
        x[base + c] = div_f32_rn(x[base + c], d);
    }
}

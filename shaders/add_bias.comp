#version 450
// A projection's bias added in place to every row of its output (engine/src/
// ops.rs Ops::add_bias; ggml's add with the bias broadcast over the rows):
// x[offset + i] += bias[i % width] for i < n, one f32 addition per element,
// as the CPU's (engine/src/cpu/elementwise.rs add_bias).
// Bindings: 0 = x (read and written), 1 = bias (read, `width` f32).
// Push: BiasPush.

#include "elementwise.glsl"
#include "index.glsl"

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) buffer X { float x[]; };
layout(set = 0, binding = 1, std430) readonly buffer Bias { float bias[]; };

layout(push_constant) uniform Push { BiasPush p; };

void main() {
    uint i = global_index_1d();
    if (i >= p.n) {
        return;
    }
    x[p.offset + i] += bias[i % p.width];
}

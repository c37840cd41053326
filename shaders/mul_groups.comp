#version 450
// x[t, j * n + c] *= s[t, j]: each group of n elements scaled by its own
// factor (the expert weights), one invocation per element of x.
// Bindings: 0 = x (read and written), 1 = s (read). Push: GroupsPush.

#include "moe.glsl"
#include "index.glsl"

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) buffer X { float x[]; };
layout(set = 0, binding = 1, std430) readonly buffer S { float s[]; };

layout(push_constant) uniform Push { GroupsPush p; };

void main() {
    uint i = global_index_1d();
    if (i >= p.rows * p.g * p.n) {
        return;
    }
    // x and s are contiguous: element i is in group i / n of all rows.
    x[p.x_offset + i] = x[p.x_offset + i] * s[p.s_offset + i / p.n];
}

#version 450
// out[t, c] = x[t, c] + x[t, n + c] + ... + x[t, (g - 1) n + c], added left
// to right in f32 as the CPU does (the same value bit for bit), one
// invocation per output element.
// Bindings: 0 = x (read), 1 = out (written). Push: GroupsPush.

#include "moe.glsl"
#include "index.glsl"

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) readonly buffer X { float x[]; };
layout(set = 0, binding = 1, std430) writeonly buffer Out { float o[]; };

layout(push_constant) uniform Push { GroupsPush p; };

void main() {
    uint i = global_index_1d();
    if (i >= p.rows * p.n) {
        return;
    }
    uint t = i / p.n;
    uint c = i % p.n;
    uint base = p.x_offset + t * p.g * p.n + c;
    precise float acc = x[base];
    for (uint j = 1u; j < p.g; j++) {
        acc = acc + x[base + j * p.n];
    }
    o[p.out_offset + i] = acc;
}

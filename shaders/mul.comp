#version 450
// Elementwise f32 multiply: out[i] = a[i] * b[i] (x *= y with out = a = x).
// Bindings: 0 = a (read), 1 = b (read), 2 = out (written). Push: BinaryPush.

#include "push.glsl"
#include "index.glsl"

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) readonly buffer A { float a[]; };
layout(set = 0, binding = 1, std430) readonly buffer B { float b[]; };
layout(set = 0, binding = 2, std430) writeonly buffer Out { float o[]; };

layout(push_constant) uniform Push { BinaryPush p; };

void main() {
    uint i = global_index_1d();
    if (i >= p.n) {
        return;
    }
    o[p.out_offset + i] = a[p.a_offset + i] * b[p.b_offset + i];
}

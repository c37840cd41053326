#version 450
// Unary f32 ops in place, the op chosen by the push constant UnaryPush.op
// (engine/src/vulkan/backend/op_elementwise.rs sets it and the parameters
// from the op of engine/src/ops.rs UnaryOp):
// UNARY_SCALE:   x = x * a
// UNARY_SOFTCAP: x = tanh(x * a) * b   (a = 1 / cap, b = cap; ggml's scale, tanh, scale)
// Binding: 0 = x (read and written). Push: UnaryPush.

#include "elementwise.glsl"
#include "index.glsl"
#include "math.glsl"
#include "op_codes.glsl"

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) buffer X { float x[]; };

layout(push_constant) uniform Push { UnaryPush p; };

void main() {
    uint i = global_index_1d();
    if (i >= p.n) {
        return;
    }
    float v = x[p.offset + i];
    if (p.op == UNARY_SCALE) {
        v = v * p.a;
    } else if (p.op == UNARY_SOFTCAP) {
        v = tanh_accurate(v * p.a) * p.b;
    }
    x[p.offset + i] = v;
}

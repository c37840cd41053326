#version 450
// Unary f32 ops in place, one variant per op (engine/build.rs VARIANTS):
// OP_SCALE:   x = x * a
// OP_SOFTCAP: x = tanh(x * a) * b   (a = 1 / cap, b = cap; ggml's scale, tanh, scale)
// Binding: 0 = x (read and written). Push: UnaryPush.

#include "elementwise.glsl"
#include "index.glsl"
#include "math.glsl"

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) buffer X { float x[]; };

layout(push_constant) uniform Push { UnaryPush p; };

void main() {
    uint i = global_index_1d();
    if (i >= p.n) {
        return;
    }
    float v = x[p.offset + i];
#if defined(OP_SCALE)
    v = v * p.a;
#elif defined(OP_SOFTCAP)
    v = tanh_accurate(v * p.a) * p.b;
#else
#error "unary.comp: define OP_SCALE or OP_SOFTCAP"
#endif
    x[p.offset + i] = v;
}

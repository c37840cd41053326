#version 450
// Gated activations: out[i] = act(gate[i]) * up[i] (the backend binds the gate
// as both `a` and `out`: gate = act(gate) * up in place). One variant per kind
// (engine/build.rs VARIANTS):
// GLU_SWIGLU: silu(g) = g / (1 + exp(-g))
// GLU_GEGLU:  gelu_tanh as ggml's CPU computes it: 0 for g <= -10, g for
//             g >= 10, otherwise g rounded to f16, gelu_tanh in f32 (with
//             the FMA of engine/src/cpu/elementwise.rs), the result rounded
//             to f16 (ggml's table of f16 values, without the table).
// Bindings: 0 = a = gate (read), 1 = b = up (read), 2 = out (written).
// Push: BinaryPush.

#include "push.glsl"
#include "index.glsl"
#include "math.glsl"

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) readonly buffer A { float a[]; };
layout(set = 0, binding = 1, std430) readonly buffer B { float b[]; };
layout(set = 0, binding = 2, std430) writeonly buffer Out { float o[]; };

layout(push_constant) uniform Push { BinaryPush p; };

float act(float g) {
#if defined(GLU_SWIGLU)
    precise float y = g / (1.0 + exp(-g));
    return y;
#elif defined(GLU_GEGLU)
    if (g <= -10.0) {
        return 0.0;
    }
    if (g >= 10.0) {
        return g;
    }
    const float SQRT_2_OVER_PI = 0.7978845608028654;
    const float GELU_COEF_A = 0.044715;
    float h = round_f16(g);
    precise float inner = (SQRT_2_OVER_PI * h) * fma(GELU_COEF_A * h, h, 1.0);
    precise float y = (0.5 * h) * (1.0 + tanh_accurate(inner));
    return round_f16(y);
#else
#error "glu.comp: define GLU_SWIGLU or GLU_GEGLU"
#endif
}

void main() {
    uint i = global_index_1d();
    if (i >= p.n) {
        return;
    }
    precise float y = act(a[p.a_offset + i]) * b[p.b_offset + i];
    o[p.out_offset + i] = y;
}

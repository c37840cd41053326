// The gated units of binary.comp and glu_quant.comp: SwiGLU silu(g) * u,
// silu(g) = g / (1 + exp(-g)); GeGLU gelu_tanh(g) * u as ggml's CPU computes
// it (see binary.comp). The codes that choose between them (GLU_*, BINARY_*)
// are in the generated op_codes.glsl (engine/src/op_codes.rs).
#ifndef SHARPI_GLU_GLSL
#define SHARPI_GLU_GLSL

#include "math.glsl"
#include "op_codes.glsl"

float silu(float g) {
    precise float y = g / (1.0 + exp(-g));
    return y;
}

// gelu_tanh(g) for -10 < g < 10 (geglu handles the two clamps).
float gelu_tanh_f16(float g) {
    const float SQRT_2_OVER_PI = 0.7978845608028654;
    const float GELU_COEF_A = 0.044715;
    float h = round_f16(g);
    precise float inner = (SQRT_2_OVER_PI * h) * fma(GELU_COEF_A * h, h, 1.0);
    precise float y = (0.5 * h) * (1.0 + tanh_accurate(inner));
    return round_f16(y);
}

float swiglu(float x, float y) {
    precise float r = silu(x) * y;
    return r;
}

float geglu(float x, float y) {
    precise float r = x <= -10.0 ? 0.0 : (x >= 10.0 ? x : gelu_tanh_f16(x)) * y;
    return r;
}

#endif

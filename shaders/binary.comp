#version 450
// Elementwise binary f32 ops: out[i] = f(a[i], b[i]), the op chosen by the
// push constant BinaryPush.op (engine/src/vulkan/backend/op_elementwise.rs
// sets it from the op of engine/src/ops.rs BinaryOp). The backend binds x as
// both `a` and `out` (x = f(x, y) in place: each invocation reads and writes
// its own element).
// BINARY_ADD:    a + b (the residual add of the forward pass)
// BINARY_MUL:    a * b
// BINARY_SWIGLU: silu(a) * b, silu(g) = g / (1 + exp(-g))
// BINARY_GEGLU:  gelu_tanh(a) * b as ggml's CPU computes it: 0 for a <= -10
//                (0 itself, whatever b is: not 0 * b), a * b for a >= 10,
//                otherwise a rounded to f16, gelu_tanh in f32 (with the FMA
//                of engine/src/cpu/elementwise.rs), the result rounded to
//                f16 (ggml's table of f16 values, without the table), times b.
// Bindings: 0 = a (read), 1 = b (read), 2 = out (written). Push: BinaryPush.

#include "push.glsl"
#include "index.glsl"
#include "math.glsl"
#include "glu.glsl"
#include "op_codes.glsl"

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
    float x = a[p.a_offset + i];
    float y = b[p.b_offset + i];
    if (p.op == BINARY_ADD) {
        o[p.out_offset + i] = x + y;
    } else if (p.op == BINARY_MUL) {
        o[p.out_offset + i] = x * y;
    } else if (p.op == BINARY_SWIGLU) {
        o[p.out_offset + i] = swiglu(x, y);
    } else if (p.op == BINARY_GEGLU) {
        o[p.out_offset + i] = geglu(x, y);
    }
}

#version 450
// Activations to the weight type's dot format, bit for bit as the CPU's
// quantizer (engine/src/cpu/act.rs: ggml's x86 quantize_row_q8_0 / _q8_1,
// and quantize_row_q8_K_ref compiled with FMA): ACT_Q8_0, ACT_Q8_1 or
// ACT_Q8_K. Block layouts and the integer arithmetic: common/act.glsl.
//
// Q8_0 / Q8_1: eight invocations per block of 32 elements (a segment),
// each writing one word of four quants (common/quant_row.glsl). Q8_K: one
// invocation per segment, an eighth of a block (common/quant_row_k.glsl).
// Bindings: 0 = x (f32 elements), 1 = out (u32 words). Push: n_seg
// segments from element x_offset of x, blocks written from word out_offset.
// FAULT_F16_TRUNCATE (fault `gpu-act-f16-truncate`, fault-injection builds
// only): the f16 scale d truncated towards zero instead of rounded.

#include "act.glsl"

layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) readonly buffer Xt { float X[]; };
layout(set = 0, binding = 1, std430) writeonly buffer Ot { uint O[]; };

layout(push_constant) uniform Push {
    uint n_seg;
    uint x_offset;
    uint out_offset;
} p;

// A workgroup quantizes 64 segments: eight blocks of 32 (the row quantizer
// of common/quant_row.glsl, eight invocations per block) or eight eighths
// of Q8_K blocks (common/quant_row_k.glsl, one invocation per segment).
#define QUANT_WG 64u
#define QV(i) X[x0 + (i)]
#define QSTORE(w, v) O[w] = (v)
uint x0;

#if defined(ACT_Q8_0) || defined(ACT_Q8_1)

#include "quant_row.glsl"

void main() {
    uint g = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    uint seg0 = 8u * g;
    uint segs = seg0 < p.n_seg ? min(8u, p.n_seg - seg0) : 0u;
    x0 = p.x_offset + 32u * seg0;
    quant_row(gl_LocalInvocationID.x, 32u * segs, p.out_offset + 9u * seg0);
}

#elif defined(ACT_Q8_K)

#include "quant_row_k.glsl"

void main() {
    uint g = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    uint seg0 = 64u * g;
    // n_seg % 8 == 0: whole blocks.
    uint segs = seg0 < p.n_seg ? min(64u, p.n_seg - seg0) : 0u;
    x0 = p.x_offset + 32u * seg0;
    quant_row_k(gl_LocalInvocationID.x, 32u * segs, p.out_offset + Q8_K_WORDS * (seg0 / 8u));
}

#else
#error "quantize_act.comp: no ACT_* define"
#endif

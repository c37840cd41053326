#version 450
// A gated unit (SwiGLU or GeGLU, as binary.comp computes it: BinaryPush.op)
// whose result is also written quantized to the next matmul's input format
// (ACT_Q8_0 or ACT_Q8_1), as quantize_act.comp would write it from `out`.
// Eight invocations per block of 32 results (aligned in the workgroup),
// four results each: they go to `out` and to shared memory, where every
// invocation of the block finds the block's amax and scale, then quantizes
// its own four into one word. n is a multiple of 32 (checked on the host).
// Bindings: 0 = a (read), 1 = b (read), 2 = out (written; may be a: each
// invocation reads and writes only its own elements), 3 = quantized out
// (u32 words, written, blocks from word q_offset).
// Push: BinaryPush, then q_offset.
// FAULT_F16_TRUNCATE: as in quantize_act.comp.

#include "push.glsl"
#include "index.glsl"
#include "glu.glsl"
#include "act.glsl"
#include "op_codes.glsl"

layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) readonly buffer A { float a[]; };
layout(set = 0, binding = 1, std430) readonly buffer B { float b[]; };
layout(set = 0, binding = 2, std430) writeonly buffer Out { float o[]; };
layout(set = 0, binding = 3, std430) writeonly buffer Q { uint qo[]; };

layout(push_constant) uniform Push {
    BinaryPush p;
    uint q_offset;
};

shared float sv[256]; // the workgroup's results, four per invocation
#ifdef ACT_Q8_1
shared int part_sum[64];
#endif

void main() {
    uint inv = global_index_1d();
    uint tid = gl_LocalInvocationID.x;
    uint seg = inv / 8u;
    uint wi = inv % 8u;
    bool live = 4u * inv < p.n; // a whole block is live or not
    if (live) {
        for (uint j = 0u; j < 4u; j++) {
            uint i = 4u * inv + j;
            float x = a[p.a_offset + i];
            float y = b[p.b_offset + i];
            float r = p.op == BINARY_SWIGLU ? swiglu(x, y) : geglu(x, y);
            o[p.out_offset + i] = r;
            sv[4u * tid + j] = r;
        }
    }
    barrier();
    uint d = 0u;
    int sum = 0;
    if (live) {
        uint s0 = 4u * (tid & ~7u); // the block's first result in sv
        uint amax = 0u;
        for (uint i = 0u; i < 32u; i++) {
            amax = q8_amax_step(amax, floatBitsToUint(sv[s0 + i]));
        }
        uint id;
        q8_scales(amax, d, id);
        uint word = 0u;
        for (uint j = 0u; j < 4u; j++) {
            int q = q8_quant(floatBitsToUint(sv[4u * tid + j]), id);
            sum += q; // wraps, as ggml's epi32 sums
            word |= (uint(clamp(q, -128, 127)) & 0xffu) << (8u * j);
        }
        qo[q_offset + 9u * seg + 1u + wi] = word;
    }
#ifdef ACT_Q8_1
    part_sum[tid] = sum;
    barrier();
    for (uint k = 1u; k < 8u; k++) {
        sum += part_sum[(tid & ~7u) + (wi + k) % 8u];
    }
#endif
    if (live && wi == 0u) {
        qo[q_offset + 9u * seg] = q8_head(d, sum);
    }
}

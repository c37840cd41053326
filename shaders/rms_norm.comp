#version 450
// RMS norm, one workgroup per group of `group` contiguous elements:
// out = (x * scale) * w, scale = 1 / sqrt(mean(x²) + eps), as
// engine/src/cpu/norm.rs computes it, bit for bit (the scale: common/rms.glsl).
// `out` may be `x` (in place):
// every invocation writes only the elements it read itself, after the
// reduction's barriers.
// Variants (engine/build/variants.rs): HAS_WEIGHT multiplies by w (length group).
// QUANT with ACT_Q8_0 or ACT_Q8_1 (and HAS_WEIGHT): the normed groups are
// also written quantized, as quantize_act.comp would write them from
// `out` (the next matmul's input), each group's blocks from word
// q_offset + 9 * (g * group / 32); the normed values are kept in shared
// memory for it (groups of at most MAX_QUANT_GROUP), the same bits as
// `out`'s.
// ADD (with HAS_WEIGHT): the residual add before the norm, fused: x = x + b
// first (b from element b_offset), then the norm of that sum. Every
// element of the sum is computed again where it is needed (x is written
// last, after a barrier), so no invocation reads another's writes.
// ADD_TO (with HAS_WEIGHT, without ADD and QUANT): a post-norm and the
// residual add after it, fused: out as above, and r = r + out (one
// rounding, as binary.comp adds; r from element b_offset).
// Bindings: 0 = x (read; with ADD read and written), 1 = out (written),
// 2 = w (read; HAS_WEIGHT only), 3 = quantized out (u32 words, written;
// QUANT only), then b (read; ADD only: binding 4 with QUANT, else 3);
// ADD_TO: 3 = r (read and written). FAULT_ADD_UNWEIGHTED (fault
// `gpu-post-norm-add` only): r + v * scale, the weight left out.
// Push: RmsNormPush; with QUANT, ADD or ADD_TO also q_offset and b_offset.

#include "elementwise.glsl"
#ifdef QUANT
#include "act.glsl"
#endif

#define WG 128
layout(local_size_x = WG, local_size_y = 1, local_size_z = 1) in;

#ifdef ADD
layout(set = 0, binding = 0, std430) buffer X { float x[]; };
#ifdef QUANT
layout(set = 0, binding = 4, std430) readonly buffer B { float bv[]; };
#else
layout(set = 0, binding = 3, std430) readonly buffer B { float bv[]; };
#endif
#else
layout(set = 0, binding = 0, std430) readonly buffer X { float x[]; };
#endif
layout(set = 0, binding = 1, std430) writeonly buffer Out { float o[]; };
#ifdef HAS_WEIGHT
layout(set = 0, binding = 2, std430) readonly buffer W { float w[]; };
#endif

#ifdef ADD_TO
layout(set = 0, binding = 3, std430) buffer R { float r[]; };
#endif
#ifdef QUANT
layout(set = 0, binding = 3, std430) writeonly buffer Q { uint qo[]; };
// The group's normed values, for the quantization (groups of at most
// MAX_QUANT_GROUP: op_elementwise.rs MAX_FUSED_QUANT_GROUP).
#define MAX_QUANT_GROUP 3072
shared float sy[MAX_QUANT_GROUP];
#endif
#if defined(QUANT) || defined(ADD) || defined(ADD_TO)
layout(push_constant) uniform Push {
    RmsNormPush p;
    uint q_offset;
    uint b_offset;
};
#else
layout(push_constant) uniform Push { RmsNormPush p; };
#endif

// Element c of the group starting at xb: x, or with ADD the sum x + b (as
// binary.comp adds: one rounding).
float val(uint xb, uint g, uint c) {
#ifdef ADD
    return x[xb + c] + bv[b_offset + g * p.group + c];
#else
    return x[xb + c];
#endif
}

#define RMS_WG WG
#define RMS_VAL(a, b, c) val(a, b, c)
#include "rms.glsl"

#ifdef QUANT
#define QUANT_WG WG
#define QV(i) sy[i]
#define QSTORE(w, v) qo[w] = (v)
#include "quant_row.glsl"
#endif

void main() {
    // Workgroups may spill into y (groups_1d on the host); flat group index.
    uint g = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (g >= p.n_groups) {
        return; // uniform over the workgroup: no barrier is skipped by part of it
    }
    uint tid = gl_LocalInvocationID.x;
    uint xb = p.x_offset + g * p.group;
    uint ob = p.out_offset + g * p.group;

    precise float scale = rms_scale(xb, g, p.group, tid, p.eps);
#ifdef QUANT
    // Eight invocations per block of 32, one word of four quants each (as
    // quantize_act.comp); every round of WG invocations is uniform.
    for (uint c = tid; c < p.group; c += WG) {
        precise float y = val(xb, g, c) * scale;
        y = y * w[c];
        sy[c] = y;
    }
    barrier();
    quant_row(tid, p.group, q_offset + 9u * (g * p.group / 32u));
#endif
#ifdef ADD
    barrier(); // every read of x (the sums above) before x is written
#endif
    for (uint c = tid; c < p.group; c += WG) {
        precise float v = val(xb, g, c); // before x is written (ADD)
#ifdef ADD
        x[xb + c] = v;
#endif
#ifdef QUANT
        o[ob + c] = sy[c]; // v * scale * w, computed above
#else
        precise float y = v * scale;
#ifdef HAS_WEIGHT
        y = y * w[c];
#endif
        o[ob + c] = y;
#ifdef ADD_TO
        uint rc = b_offset + g * p.group + c;
#ifdef FAULT_ADD_UNWEIGHTED
        r[rc] = r[rc] + v * scale;
#else
        r[rc] = r[rc] + y;
#endif
#endif
#endif
    }
}

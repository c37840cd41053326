#version 450
// attention.comp for CPU Vulkan implementations (lavapipe / llvmpipe) where a
// batch has too few query rows for attention_cpu.comp (decode: one row): the
// same causal grouped-query attention with no shared memory and no barrier.
// One workgroup of SG lanes (one subgroup) per (head h = x, row t = y); the
// lanes split the visible keys (lane l takes keys first + l, first + l + SG,
// ...), each with an online softmax of its own over whole K and V rows, and
// the lanes' partial results are merged at the end by subgroup max and sums:
// out = sum_l f_l * acc_l / sum_l f_l * l_l, f_l = exp(m_l - max_l m_l).
//
// The work per key is written out with no loop over the head dims: llvmpipe
// (Mesa 22.3) stops every loop of an invocation once all of them together
// have run 65535 iterations (its loop limiter is one counter per
// invocation), so only the key loop is one (at most 65535 keys per lane).
//
// Variants: the cache's element type (kv.glsl: f32 or KV_F16).
// Bindings: 0 = q (read), 1 = K cache (read), 2 = V cache (read),
// 3 = out (written), 4 = step words (read: the first row's position).
// Push: AttnPush.
// The host uses it only where head_dim_k and head_dim_v are multiples of 4
// and at most MAX_D (op_attention.rs), on devices whose subgroups hold SG
// lanes or more, with arithmetic.

#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

#include "attention.glsl"
#include "step.glsl"

#define SG 8u
#define MAX_D 256u
#define NEG_INF uintBitsToFloat(0xff800000u)

layout(local_size_x = 8, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) readonly buffer Q { float q[]; };
layout(set = 0, binding = 1, std430) readonly buffer K { KV_WORD4 kc[]; };
layout(set = 0, binding = 2, std430) readonly buffer V { KV_WORD4 vc[]; };
KV_ELEMENT4_FN(k4, kc)
KV_ELEMENT4_FN(v4, vc)
layout(set = 0, binding = 3, std430) writeonly buffer Out { float o[]; };
STEP_WORDS(4)

layout(push_constant) uniform Push { AttnPush p; };

// The per-key steps over vec4s 0 .. MAX_D / 4 of a head row, unrolled; steps
// past the head dim are skipped by uniform branches.
#define DOT1(i) if ((i) < nk) { s += dot(qv[i], k4(krow + 4u * (i))); }
#define DOT8(i) DOT1(8u * (i)) DOT1(8u * (i) + 1u) DOT1(8u * (i) + 2u) DOT1(8u * (i) + 3u) \
    DOT1(8u * (i) + 4u) DOT1(8u * (i) + 5u) DOT1(8u * (i) + 6u) DOT1(8u * (i) + 7u)
#define ACC1(i) if ((i) < nv) { acc[i] = acc[i] * alpha + e * v4(vrow + 4u * (i)); }
#define ACC8(i) ACC1(8u * (i)) ACC1(8u * (i) + 1u) ACC1(8u * (i) + 2u) ACC1(8u * (i) + 3u) \
    ACC1(8u * (i) + 4u) ACC1(8u * (i) + 5u) ACC1(8u * (i) + 6u) ACC1(8u * (i) + 7u)

void main() {
    uint h = gl_WorkGroupID.x;
    uint t = gl_WorkGroupID.y;
    uint lane = gl_LocalInvocationID.x;
    uint g = h / p.group;
    uint pos = step_words[p.pos_at] + t;
    uint first = first_seen(pos, p.window);
    uint nk = p.head_dim_k / 4u; // vec4s of a K row
    uint nv = p.head_dim_v / 4u;

    // The query row (the same address in every lane: one load each).
    vec4 qv[MAX_D / 4u];
    uint qbase = p.q_offset + (t * p.n_head + h) * p.head_dim_k;
    for (uint c = 0u; c < nk; c++) {
        qv[c] = vec4(Q_IN(q[qbase + 4u * c]), Q_IN(q[qbase + 4u * c + 1u]),
                     Q_IN(q[qbase + 4u * c + 2u]), Q_IN(q[qbase + 4u * c + 3u]));
    }
    vec4 acc[MAX_D / 4u];
    for (uint c = 0u; c < nv; c++) {
        acc[c] = vec4(0.0);
    }
    float m = MAX_START; // this lane's running max
    float l = 0.0;     // this lane's running sum of exp(s - m)

    uint kbase = g * p.head_dim_k;
    uint vbase = g * p.head_dim_v;
    for (uint j = first + lane; j <= pos; j += SG) {
        uint krow = j * p.k_width + kbase;
        float s = 0.0;
        DOT8(0u) DOT8(1u) DOT8(2u) DOT8(3u) DOT8(4u) DOT8(5u) DOT8(6u) DOT8(7u)
        s *= p.scale;
        if (p.softcap > 0.0) {
            s = p.softcap * tanh_accurate(s / p.softcap);
        }
        float m_new = RUNNING_MAX(max(m, s));
        float alpha = m == NEG_INF ? 0.0 : exp(m - m_new);
        // A score of -inf weighs 0 (exp(-inf - -inf) would be NaN while
        // every score so far is -inf).
        float e = s == NEG_INF ? 0.0 : exp(s - m_new);
        l = l * alpha + e;
        m = m_new;
        uint vrow = j * p.v_width + vbase;
        ACC8(0u) ACC8(1u) ACC8(2u) ACC8(3u) ACC8(4u) ACC8(5u) ACC8(6u) ACC8(7u)
    }

    // Merge the lanes: a lane that saw no key (m = -inf) weighs 0.
    float mx = subgroupMax(m);
    float f = m == NEG_INF ? 0.0 : exp(m - mx);
    float inv = 1.0 / subgroupAdd(l * f);
    uint obase = p.out_offset + (t * p.n_head + h) * p.head_dim_v;
    for (uint c = 0u; c < nv; c++) {
        vec4 r = subgroupAdd(acc[c] * f) * inv;
        if (lane == 0u) {
            o[obase + 4u * c] = r.x;
            o[obase + 4u * c + 1u] = r.y;
            o[obase + 4u * c + 2u] = r.z;
            o[obase + 4u * c + 3u] = r.w;
        }
    }
}

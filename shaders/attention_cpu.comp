#version 450
// attention.comp for CPU Vulkan implementations (lavapipe / llvmpipe): the
// same causal grouped-query attention with no shared memory and no barrier.
// One invocation per (query row t = x, head h = y); the lanes of a subgroup
// are consecutive rows of one head, which read the same keys: each K and V
// row is loaded once per group of 8 lanes, one vec4 per lane, and shuffled
// to the lanes (on a CPU implementation every lane's load of a varying
// address is a scalar load of its own). Each invocation walks the keys the
// subgroup needs one at a time with an online softmax; keys outside its own
// causal (and sliding) window weigh 0.
//
// The work per key is written out with no loop: llvmpipe (Mesa 22.3) stops
// every loop of an invocation once all of them together have run 65535
// iterations (its loop limiter is one counter per invocation), so per-key
// loops over the head dims would cut long prompts short: with head dim 256,
// query rows past 495 came out wrong. The key loop alone stays.
//
// Variants: the cache's element type (kv.glsl: f32 or KV_F16).
// Bindings: 0 = q (read), 1 = K cache (read), 2 = V cache (read),
// 3 = out (written), 4 = step words (read: the first row's position).
// Push: AttnPush.
// The host uses it only where head_dim_k and head_dim_v are multiples of
// 32 and at most MAX_D (op_attention.rs), on devices with subgroups of a
// multiple of 8 lanes with shuffles and arithmetic.

#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_arithmetic : require

#include "attention.glsl"
#include "step.glsl"

#define SG 8u
#define MAX_D 256u
// vec4s of a head row per lane at most.
#define PER (MAX_D / 4u / SG)
#define NEG_INF uintBitsToFloat(0xff800000u)

layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) readonly buffer Q { float q[]; };
layout(set = 0, binding = 1, std430) readonly buffer K { KV_WORD4 kc[]; };
layout(set = 0, binding = 2, std430) readonly buffer V { KV_WORD4 vc[]; };
KV_ELEMENT4_FN(k4, kc)
KV_ELEMENT4_FN(v4, vc)
layout(set = 0, binding = 3, std430) writeonly buffer Out { float o[]; };
STEP_WORDS(4)

layout(push_constant) uniform Push { AttnPush p; };

// The per-key steps, unrolled (PER = 8 vec4s per lane at most; steps past
// the head dim n are skipped by uniform branches).
// arr[i] = this lane's vec4 i of the row at element `row` (of n vec4s).
#define LOAD1(arr, load, row, n, i) if ((i) * SG < (n)) { arr[i] = load((row) + 4u * ((i) * SG + lane)); }
#define LOAD8(arr, load, row, n) LOAD1(arr, load, row, n, 0u) LOAD1(arr, load, row, n, 1u) \
    LOAD1(arr, load, row, n, 2u) LOAD1(arr, load, row, n, 3u) LOAD1(arr, load, row, n, 4u) \
    LOAD1(arr, load, row, n, 5u) LOAD1(arr, load, row, n, 6u) LOAD1(arr, load, row, n, 7u)
// s += q . k over vec4s 8i .. 8i + 8 (vec4 8i + l is lane l's kl[i]).
#define DOT1(i, l) if ((i) * SG + (l) < nk) { s += dot(qv[(i) * SG + (l)], subgroupShuffle(kl[i], base + (l))); }
#define DOT8(i) DOT1(i, 0u) DOT1(i, 1u) DOT1(i, 2u) DOT1(i, 3u) DOT1(i, 4u) DOT1(i, 5u) DOT1(i, 6u) DOT1(i, 7u)
// acc = acc * alpha + e * v over vec4s 8i .. 8i + 8.
// Keys this row does not see leave acc alone: 0 * v would be NaN for a
// masked V row holding NaN or inf. (The shuffle runs in every lane.)
#define ACC1(i, l) if ((i) * SG + (l) < nv) { uint c_ = (i) * SG + (l); vec4 v_ = subgroupShuffle(vl[i], base + (l)); acc[c_] = visible ? acc[c_] * alpha + e * v_ : acc[c_]; }
#define ACC8(i) ACC1(i, 0u) ACC1(i, 1u) ACC1(i, 2u) ACC1(i, 3u) ACC1(i, 4u) ACC1(i, 5u) ACC1(i, 6u) ACC1(i, 7u)

void main() {
    uint t_raw = gl_GlobalInvocationID.x;
    uint h = gl_WorkGroupID.y;
    // Rows past the last stay to the end (their subgroup's shuffles need
    // every lane): they compute the last row again and write nothing.
    uint t = min(t_raw, p.n_rows - 1u);
    uint lane = gl_SubgroupInvocationID % SG;
    uint base = gl_SubgroupInvocationID - lane; // first lane of the 8
    uint g = h / p.group;
    uint pos = step_words[p.pos_at] + t;
    uint first = first_seen(pos, p.window);
    uint nk = p.head_dim_k / 4u; // vec4s of a K row
    uint nv = p.head_dim_v / 4u;

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
    float m = MAX_START; // running max
    float l = 0.0;     // running sum of exp(s - m)

    uint j0 = subgroupMin(first);
    uint j1 = subgroupMax(pos);
    uint kbase = g * p.head_dim_k;
    uint vbase = g * p.head_dim_v;
    for (uint j = j0; j <= j1; j++) {
        // This lane's vec4s of key j: lane, lane + SG, ...
        vec4 kl[PER];
        uint krow = j * p.k_width + kbase;
        LOAD8(kl, k4, krow, nk)
        float s = 0.0;
        DOT8(0u) DOT8(1u) DOT8(2u) DOT8(3u) DOT8(4u) DOT8(5u) DOT8(6u) DOT8(7u)
        s *= p.scale;
        if (p.softcap > 0.0) {
            s = p.softcap * tanh_accurate(s / p.softcap);
        }
        bool visible = j >= first && j <= pos;
        float m_new = RUNNING_MAX(visible ? max(m, s) : m);
        float alpha = m_new == NEG_INF ? 1.0 : exp(m - m_new);
        // A score of -inf weighs 0 (exp(-inf - -inf) would be NaN while
        // every score so far is -inf).
        float e = visible && s != NEG_INF ? exp(s - m_new) : 0.0;
        l = l * alpha + e;
        m = m_new;
        vec4 vl[PER];
        uint vrow = j * p.v_width + vbase;
        LOAD8(vl, v4, vrow, nv)
        ACC8(0u) ACC8(1u) ACC8(2u) ACC8(3u) ACC8(4u) ACC8(5u) ACC8(6u) ACC8(7u)
    }

    if (t_raw < p.n_rows) {
        float inv = 1.0 / l;
        uint obase = p.out_offset + (t * p.n_head + h) * p.head_dim_v;
        for (uint c = 0u; c < nv; c++) {
            vec4 r = acc[c] * inv;
            o[obase + 4u * c] = r.x;
            o[obase + 4u * c + 1u] = r.y;
            o[obase + 4u * c + 2u] = r.z;
            o[obase + 4u * c + 3u] = r.w;
        }
    }
}

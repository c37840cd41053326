#version 450
// Attention of a batch of query rows through an f16 KV cache with
// cooperative matrices (VK_NV_cooperative_matrix: 16 x 16 x 16 products of
// halves summed in f32), for devices that have them (op_attention.rs picks
// it for prefill on the GPU layout; the other kernels stay the fallback).
//
// The keys go in runs of `split_keys` positions (a multiple of BC from
// position 0): one workgroup per (head h = x, BR rows = y, run = z), NSG
// subgroups of 32, each subgroup 16 query rows; the last rows' workgroups
// first (they see the most keys). Per tile of BC keys of the run:
//   staging: the tile's keys and values, BC rows of head_dim halves each,
//            into shared memory (every load issued before any store);
//   scores:  S [16, BC] = Q [16, dk] . K^T, one 16 x 16 block of keys at a
//            time, in f32 accumulators, stored to the subgroup's scratch;
//   softmax: lanes 2r and 2r + 1 take row r (columns of their parity): the
//            scores scaled and soft-capped, -inf where the row does not
//            see the key, the running max m, e = exp(s - m), written as
//            halves (P), the running sum l = l * alpha + sum e (f32), the
//            row's output scaled by alpha;
//   values:  O_tile [16, dv] = P [16, BC] . V [BC, dv], stored to the
//            scratch and added to the lanes' output registers.
// Each workgroup writes its rows' O, m and l unnormalised to the partials
// (`attention_combine_rows.comp` weighs the runs together: out = O / l):
// far more workgroups in flight at long context than one per (head, rows)
// (op_attention.rs takes this kernel only where there are two runs or
// more). A tile whose values hold a NaN or an infinity takes the values
// step in scalar code over each row's visible keys instead: in the
// product a key a row does not see would add 0 * inf = NaN.
//
// Numerics against the other kernels: the query is rounded to f16 as
// there (Q_IN: llama.cpp's CPU rounds the operand of an F16 cache); q . k
// sums exact products of halves in f32 in the tensor unit's order, and
// each weight e is rounded to f16 before V . e (llama.cpp's CPU rounds its
// normalised probabilities likewise): at most 2^-11 relative per weight,
// so an output differs from the CPU's by at most (2^-10 + n 2^-24) max |v|
// plus the f32 sums' noise (engine/tests/vulkan_attention.rs).
//
// Variants: MAX_D (the largest head_dim_k / head_dim_v; both multiples of
// 16), BC (keys per tile), NSG (subgroups per workgroup).
// Bindings: 0 = q (read), 1 = K cache (read), 2 = V cache (read), 3 =
// partials (written), 4 = step words (read: the first row's position).
// Push: AttnPush, then split_keys and ml_at (the partials' first word of m
// and l). Partials, for run s of S, batch row t of T, head h of n_head:
// O [S, T, n_head, head_dim_v] from word 0, (m, l) [S, T, n_head, 2] from
// ml_at. Limits (checked on the host): subgroups of 32 invocations,
// head dims multiples of 16 up to MAX_D, cache widths multiples of 8.

#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require

#define KV_F16 1
#include "attention.glsl"
#include "step.glsl"

#ifndef MAX_D
#define MAX_D 64u
#endif
#ifndef BC
#define BC 64u
#endif
#ifndef NSG
#define NSG 2u
#endif
#define SG 32u
#define BR (16u * NSG)
#define WGS (SG * NSG)
// Row strides in shared memory (elements): halves of a key / value / query
// row (8 past the head dim: rows on 16-byte boundaries, in distinct
// banks), halves of a row of weights, floats of a scratch row.
#define KS (MAX_D + 8u)
#define PS (BC + 8u)
#define WS ((BC > MAX_D ? BC : MAX_D) + 4u)
#define NEG_INF uintBitsToFloat(0xff800000u)

layout(local_size_x = WGS, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) readonly buffer Q { float q[]; };
layout(set = 0, binding = 1, std430) readonly buffer K { uvec4 kc[]; };
layout(set = 0, binding = 2, std430) readonly buffer V { uvec4 vc[]; };
layout(set = 0, binding = 3, std430) writeonly buffer Part { float part[]; };
STEP_WORDS(4)

layout(push_constant) uniform Push {
    AttnPush p;
    uint split_keys;
    uint ml_at;
};

// Shared memory is two arrays, each a whole number of 16-byte units and
// nothing else: however the driver places them, every matrix row starts
// on a 16-byte boundary, as the matrix loads and stores require.
// Halves: [BC, KS] the tile's keys (before the loop: the rows' queries,
// BR <= BC) from SK; [BC, KS] the tile's values from SV; per subgroup
// [16, PS] the tile's weights e from SP.
#define SK 0u
#define SV (BC * KS)
#define SP (2u * BC * KS)
shared float16_t sh[2u * BC * KS + NSG * 16u * PS];
// Floats: per subgroup [16, WS] the scores, then the tile's weighted
// values; at SPECIAL, 1 + the last tile whose values held a NaN or an
// infinity (0: none yet), then 3 unused.
#define SPECIAL (NSG * 16u * WS)
shared float sw[NSG * 16u * WS + 4u];

// Float `c` of row `r` of the subgroup's scratch (`wbase`: its first vec4).
float sw_at(uint wbase, uint r, uint c) {
    return sw[wbase + r * WS + c];
}

#define FRAG_H fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define FRAG_F fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>

// uvec4s of a tile row of `d` halves; per invocation, at most:
#define PER (BC * MAX_D / 8u / WGS)

// Whether either half of `w` is a NaN or an infinity (all exponent bits).
bool special_halves(uint w) {
    return (w & 0x7c00u) == 0x7c00u || (w & 0x7c000000u) == 0x7c000000u;
}

// Keys (v: values) j0 .. j0 + BC of the cache (row `width` halves, this
// KV head's `d` from half `base`) into SK (SV) of `sh`; a key past the tile's
// n reads key n - 1 instead (its weight is 0). Values holding a NaN or an
// infinity set `sw[SPECIAL]` to `tile + 1`.
void stage(bool v, uint j0, uint n, uint base, uint width, uint d, uint tile) {
    uint per_row = d / 8u;
    uvec4 x[PER];
    for (uint u = 0u; u < PER; u++) {
        uint i = gl_LocalInvocationID.x + u * WGS;
        uint key = min(i / per_row, BC - 1u);
        uint at = ((j0 + min(key, n - 1u)) * width + base) / 8u + i % per_row;
        if (i < BC * per_row) {
            x[u] = v ? vc[at] : kc[at];
        }
    }
    bool special = false;
    for (uint u = 0u; u < PER; u++) {
        uint i = gl_LocalInvocationID.x + u * WGS;
        if (i < BC * per_row) {
            uvec4 w = x[u];
            special = special || special_halves(w.x) || special_halves(w.y)
                || special_halves(w.z) || special_halves(w.w);
            uint at = (v ? SV : SK) + (i / per_row) * KS + (i % per_row) * 8u;
            f16vec2 h[4] = f16vec2[4](unpackFloat2x16(x[u].x), unpackFloat2x16(x[u].y),
                                      unpackFloat2x16(x[u].z), unpackFloat2x16(x[u].w));
            for (uint k = 0u; k < 4u; k++) {
                sh[at + 2u * k] = h[k].x;
                sh[at + 2u * k + 1u] = h[k].y;
            }
        }
    }
    if (v && special) {
        sw[SPECIAL] = float(tile + 1u);
    }
}

void main() {
    uint h = gl_WorkGroupID.x;
    uint lid = gl_LocalInvocationID.x;
    uint sg = gl_SubgroupID;
    uint lane = gl_SubgroupInvocationID;
    uint t0 = (gl_NumWorkGroups.y - 1u - gl_WorkGroupID.y) * BR;
    uint nr = min(BR, p.n_rows - t0);
    uint g = h / p.group;
    uint pos0 = step_words[p.pos_at] + t0; // the first row's position
    uint dk = p.head_dim_k;
    uint dv = p.head_dim_v;

    // The rows' queries, rounded to f16 (zero past the rows), into SK.
    uint qbase = p.q_offset + t0 * p.n_head * dk + h * dk;
    uint qrow = p.n_head * dk;
    for (uint i = lid; i < BR * dk; i += WGS) {
        uint r = i / dk;
        uint e = i % dk;
        sh[SK + r * KS + e] = float16_t(r < nr ? Q_IN(q[qbase + r * qrow + e]) : 0.0);
    }
    barrier();
    FRAG_H qf[MAX_D / 16u];
    for (uint c = 0u; c < MAX_D / 16u; c++) {
        if (c * 16u < dk) {
            coopMatLoadNV(qf[c], sh, SK + sg * 16u * KS + c * 16u, KS, false);
        }
    }

    // Lanes 2r, 2r + 1: row r of the subgroup, columns / dimensions of
    // parity `par`.
    uint r = lane >> 1;
    uint par = lane & 1u;
    uint row = sg * 16u + r; // in the workgroup
    bool valid = row < nr;
    uint pos = pos0 + row;
    uint first = first_seen(pos, p.window);
    float acc[MAX_D / 2u];
    for (uint i = 0u; i < MAX_D / 2u; i++) {
        acc[i] = 0.0;
    }
    float m = MAX_START;
    float l = 0.0;
    if (lid == 0u) {
        sw[SPECIAL] = 0.0;
    }
    uint wbase = sg * 16u * WS;
    uint pbase = SP + sg * 16u * PS;

    uint lo = first_seen(pos0, p.window);
    uint hi = pos0 + nr;
    // This workgroup's run of keys (empty for the runs past its rows).
    uint s0 = gl_WorkGroupID.z * split_keys;
    lo = max(lo, s0);
    hi = min(hi, s0 + split_keys);
    for (uint j0 = lo, tile = 0u; j0 < hi; j0 += BC, tile++) {
        uint n = min(BC, hi - j0);
        barrier(); // the last readers of the keys and values are done
        stage(false, j0, n, g * dk, p.k_width, dk, tile);
        stage(true, j0, n, g * dv, p.v_width, dv, tile);
        barrier();

        // Scores, 16 keys at a time.
        for (uint b = 0u; b < BC / 16u; b++) {
            FRAG_F s = FRAG_F(0.0);
            for (uint c = 0u; c < MAX_D / 16u; c++) {
                if (c * 16u < dk) {
                    FRAG_H kf;
                    coopMatLoadNV(kf, sh, SK + b * 16u * KS + c * 16u, KS, true);
                    s = coopMatMulAddNV(qf[c], kf, s);
                }
            }
            coopMatStoreNV(s, sw, wbase + b * 16u, WS, false);
        }
        subgroupMemoryBarrierShared();
        subgroupBarrier();

        // The row's scores: max, weights, sum.
        float x[BC / 2u];
        float mx = NEG_INF;
        for (uint i = 0u; i < BC / 2u; i++) {
            uint c = 2u * i + par;
            uint j = j0 + c;
            float v = NEG_INF;
            if (valid && c < n && j >= first && j <= pos) {
                v = p.scale * sw_at(wbase, r, c);
                if (p.softcap > 0.0) {
                    v = p.softcap * tanh_accurate(v / p.softcap);
                }
            }
            x[i] = v;
            mx = max(mx, v);
        }
        mx = max(mx, subgroupShuffleXor(mx, 1u));
        float m_new = RUNNING_MAX(max(m, mx));
        float alpha = m == NEG_INF ? 0.0 : exp(m - m_new);
        float sum = 0.0;
        for (uint i = 0u; i < BC / 2u; i++) {
            float e = x[i] != NEG_INF ? exp(x[i] - m_new) : 0.0;
            sum += e;
            uint at = 2u * i + par;
            sh[pbase + r * PS + at] = float16_t(e);
        }
        sum += subgroupShuffleXor(sum, 1u);
        l = l * alpha + sum;
        m = m_new;
        for (uint i = 0u; i < MAX_D / 2u; i++) {
            acc[i] *= alpha;
        }
        subgroupMemoryBarrierShared();
        subgroupBarrier(); // the weights are written, the scores read

        if (sw[SPECIAL] == float(tile + 1u)) {
            // Each row's visible keys ka .. kb of the tile, in order.
            uint ka = first > j0 ? min(first - j0, n) : 0u;
            uint kb = valid && pos + 1u > j0 ? min(n, pos + 1u - j0) : 0u;
            for (uint i = 0u; i < MAX_D / 2u; i++) {
                uint d = 2u * i + par;
                if (d < dv) {
                    float a = 0.0;
                    for (uint c = ka; c < kb; c++) {
                        a += float(sh[pbase + r * PS + c]) * float(sh[SV + c * KS + d]);
                    }
                    acc[i] += a;
                }
            }
            continue;
        }

        // Weighted values, 16 dimensions at a time.
        FRAG_H pf[BC / 16u];
        for (uint b = 0u; b < BC / 16u; b++) {
            coopMatLoadNV(pf[b], sh, pbase + b * 16u, PS, false);
        }
        for (uint c = 0u; c < MAX_D / 16u; c++) {
            if (c * 16u < dv) {
                FRAG_F ov = FRAG_F(0.0);
                for (uint b = 0u; b < BC / 16u; b++) {
                    FRAG_H vf;
                    coopMatLoadNV(vf, sh, SV + b * 16u * KS + c * 16u, KS, false);
                    ov = coopMatMulAddNV(pf[b], vf, ov);
                }
                coopMatStoreNV(ov, sw, wbase + c * 16u, WS, false);
            }
        }
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        for (uint i = 0u; i < MAX_D / 2u; i++) {
            if (2u * i + par < dv) {
                acc[i] += sw_at(wbase, r, 2u * i + par);
            }
        }
        subgroupBarrier(); // the scratch is read before the next scores
    }

    if (valid) {
        uint th = (gl_WorkGroupID.z * p.n_rows + t0 + row) * p.n_head + h;
        for (uint i = 0u; i < MAX_D / 2u; i++) {
            uint d = 2u * i + par;
            if (d < dv) {
                part[th * dv + d] = acc[i];
            }
        }
        if (par == 0u) {
            part[ml_at + 2u * th] = m;
            part[ml_at + 2u * th + 1u] = l;
        }
    }
}

#version 450
// Causal grouped-query attention of a batch of query rows (prefill) against
// the KV cache (which already holds the batch's K and V rows): one
// workgroup per (head, BR consecutive rows), every tile of keys and values
// staged into shared memory once for all BR rows.
//
// The arithmetic of each row is the one-row kernel's (attention.comp), tile
// by tile, so each row's output has the same bits (while no sliding window
// cuts a later row off further than the workgroup's first row: the tiles
// then start where that row's do): tiles of TK keys from the first row's
// first visible position; a score q . k summed over the dimensions in
// order, scaled, soft-capped, -inf where the row does not see the key; the
// tile max; e = exp(s - m_new); the tile sum by the one-row kernel's tree
// (element i plus element i + w, w = TK / 2 .. 1); l = l * alpha + sum; an
// output dimension's acc * alpha plus p_j * v_j over the row's keys in
// order; out = acc * (1 / l). A tile with none of a row's keys leaves the
// row as it was.
//
// Invocation i is lane i % TK of row set i / TK; row set s holds rows
// s * RPI .. s * RPI + RPI - 1. Per tile:
//   scores:  lane j scores key j for the set's rows, the keys staged DC
//            dimensions at a time (the queries stay in shared memory);
//   max:     invocation r < BR takes row r's tile max and new running max;
//   weights: lane j writes e for key j of the set's rows, and the first DC
//            dimensions of the tile's values are staged;
//   values:  lane j accumulates output dimensions j, j + DC, ... of the
//            set's rows, DC dimensions of values staged at a time, while
//            invocation r < BR sums row r's weights (the tree) into l.
// Variants: the cache's element type (kv.glsl: f32 or KV_F16).
// Bindings: 0 = q (read), 1 = K cache (read), 2 = V cache (read),
// 3 = out (written), 4 = step words (read: the first row's position).
// Push: AttnPush. Limits (checked on the host): head_dim_k and head_dim_v
// <= MAX_D.
// The sums are `precise`: a driver that fuses a multiply and an add into
// one fma (NVIDIA's does) rounds differently from the CPU.

#include "attention.glsl"
#include "step.glsl"

// Keys per tile: the one-row kernel's WG (the same tiles, the same sums).
#define TK 64u
// Row sets, rows per invocation, rows per workgroup.
#ifndef RS
#define RS 4u
#endif
#ifndef RPI
#define RPI 4u
#endif
#define BR (RS * RPI)
#define MAX_D 256u
// Dimensions of keys or values staged at a time.
#define DC 64u
#define NCH (MAX_D / DC)
#define NEG_INF uintBitsToFloat(0xff800000u)

#define WGS (TK * RS)
layout(local_size_x = WGS, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) readonly buffer Q { float q[]; };
layout(set = 0, binding = 1, std430) readonly buffer K { KV_WORD kc[]; };
layout(set = 0, binding = 2, std430) readonly buffer V { KV_WORD vc[]; };
layout(set = 0, binding = 3, std430) writeonly buffer Out { float o[]; };
STEP_WORDS(4)

layout(push_constant) uniform Push { AttnPush p; };

// [BR, DC] the rows' queries (rounded as the cache needs), DC dimensions at
// a time (all of them where head_dim_k <= DC, else staged again with each
// chunk of keys), read four at a time.
shared vec4 sq[BR * DC / 4u];
// [TK, DC + 4] a tile's keys or values, DC dimensions of each (a row of
// DC + 4: 16-byte aligned, and the quarter subgroup that reads at once
// meets in distinct banks).
#define KV_ROW (DC + 4u)
shared vec4 skv[TK * KV_ROW / 4u];
// [BR, TK] the tile's scores, then its weights e.
shared vec4 sp[BR * TK / 4u];
// [BR] each row's new running max and the factor on what it had.
shared float row_m_new[BR];
shared float row_alpha[BR];
shared float row_inv[BR]; // 1 / l at the end

KV_ELEMENT_FN(k_at, kc)
KV_ELEMENT_FN(v_at, vc)

// Cache elements each invocation stages per chunk.
#define PER (TK * DC / WGS)

// Elements c0 .. c0 + w of keys j0 .. j0 + n of the K cache (V: the V cache)
// into skv, the rows from `base` of `width` elements. Every invocation's
// PER loads are issued before any of them is stored (a load then its store
// in turn waits out the memory latency PER times); a load past the tile
// or the chunk reads its last key or element instead, staged where nothing
// reads it.
void stage_cache(bool v, uint j0, uint n, uint base, uint width, uint c0, uint w) {
    float x[PER];
    for (uint u = 0u; u < PER; u++) {
        uint i = gl_LocalInvocationID.x + u * WGS;
        uint at = (j0 + min(i / DC, n - 1u)) * width + base + c0 + min(i % DC, w - 1u);
        if (v) {
            x[u] = v_at(at);
        } else {
            x[u] = k_at(at);
        }
    }
    for (uint u = 0u; u < PER; u++) {
        uint i = gl_LocalInvocationID.x + u * WGS;
        uint at = (i / DC) * KV_ROW + i % DC;
        skv[at >> 2][at & 3u] = x[u];
    }
}

// Elements c0 .. c0 + w of the rows' queries into sq (zero past the rows).
void stage_queries(uint c0, uint w, uint nr, uint qbase, uint qrow) {
    for (uint i = gl_LocalInvocationID.x; i < BR * DC; i += WGS) {
        uint r = i / DC;
        uint e = i % DC;
        if (e < w) {
            sq[i >> 2][i & 3u] = r < nr ? Q_IN(q[qbase + r * qrow + c0 + e]) : 0.0;
        }
    }
}

float sp_at(uint i) {
    return sp[i >> 2][i & 3u];
}

void main() {
    uint h = gl_WorkGroupID.x;
    uint lid = gl_LocalInvocationID.x;
    uint set = lid / TK;
    uint lane = lid % TK;
    // The last rows first: their workgroups see the most keys and run
    // longest, so that none of them waits for a second wave.
    uint t0 = (gl_NumWorkGroups.y - 1u - gl_WorkGroupID.y) * BR;
    uint nr = min(BR, p.n_rows - t0);
    uint g = h / p.group;
    uint pos0 = step_words[p.pos_at] + t0; // the first row's position
    uint dk = p.head_dim_k;
    uint dv = p.head_dim_v;
    uint kbase = g * dk;
    uint vbase = g * dv;

    uint qbase = p.q_offset + t0 * p.n_head * dk + h * dk;
    uint qrow = p.n_head * dk; // q elements from one row to the next
    if (dk <= DC) {
        stage_queries(0u, dk, nr, qbase, qrow);
    }

    // Row r0 + k of this invocation's set: its accumulators (dimension
    // lane + c * DC at k * NCH + c).
    uint r0 = set * RPI;
    precise float acc[RPI * NCH];
    for (uint i = 0u; i < RPI * NCH; i++) {
        acc[i] = 0.0;
    }
    // Invocation lid < BR: row lid's running max and sum.
    float m = MAX_START;
    precise float l = 0.0;

    uint lo = first_seen(pos0, p.window);
    uint hi = pos0 + nr;
    for (uint j0 = lo; j0 < hi; j0 += TK) {
        uint n = min(TK, hi - j0);

        // Scores: q . k over the dimensions in order, DC at a time.
        precise float s[RPI];
        for (uint k = 0u; k < RPI; k++) {
            s[k] = 0.0;
        }
        for (uint c = 0u; c < NCH; c++) {
            uint c0 = c * DC;
            if (c0 >= dk) {
                continue; // (not break: the loop stays unrolled)
            }
            uint w = min(DC, dk - c0);
            barrier(); // the last readers of skv (and sq) are done
            if (dk > DC) {
                stage_queries(c0, w, nr, qbase, qrow);
            }
            stage_cache(false, j0, n, kbase, p.k_width, c0, w);
            barrier();
            if (lane < n) {
                uint kr = (lane * KV_ROW) >> 2;
                uint u = 0u;
                for (; u + 4u <= w; u += 4u) {
                    vec4 y = skv[kr + (u >> 2)];
                    for (uint k = 0u; k < RPI; k++) {
                        vec4 x = sq[((r0 + k) * DC + u) >> 2];
                        s[k] += x.x * y.x;
                        s[k] += x.y * y.y;
                        s[k] += x.z * y.z;
                        s[k] += x.w * y.w;
                    }
                }
                for (; u < w; u++) {
                    float y = skv[kr + (u >> 2)][u & 3u];
                    for (uint k = 0u; k < RPI; k++) {
                        uint qa = (r0 + k) * DC + u;
                        s[k] += sq[qa >> 2][qa & 3u] * y;
                    }
                }
            }
        }
        uint j = j0 + lane;
        for (uint k = 0u; k < RPI; k++) {
            uint r = r0 + k;
            uint pos = pos0 + r;
            float x = NEG_INF;
            if (lane < n && r < nr && j >= first_seen(pos, p.window) && j <= pos) {
                x = p.scale * s[k];
                if (p.softcap > 0.0) {
                    x = p.softcap * tanh_accurate(x / p.softcap);
                }
            }
            uint at = r * TK + lane;
            sp[at >> 2][at & 3u] = x;
        }
        barrier();

        // Each row's tile max and new running max.
        if (lid < BR) {
            float mx = NEG_INF;
            for (uint i = 0u; i < TK / 4u; i++) {
                vec4 x = sp[lid * TK / 4u + i];
                mx = max(mx, max(max(x.x, x.y), max(x.z, x.w)));
            }
            float m_new = RUNNING_MAX(max(m, mx));
            row_m_new[lid] = m_new;
            row_alpha[lid] = m == NEG_INF ? 0.0 : exp(m - m_new);
        }
        barrier();

        // Weights (a score of -inf weighs 0: exp(-inf - -inf) would be NaN
        // while every score so far is -inf), and the first values.
        for (uint k = 0u; k < RPI; k++) {
            uint at = (r0 + k) * TK + lane;
            float x = sp_at(at);
            sp[at >> 2][at & 3u] = x != NEG_INF ? exp(x - row_m_new[r0 + k]) : 0.0;
        }
        // The keys each of the set's rows weighs: ka[k] .. kb[k] of the tile.
        uint ka[RPI];
        uint kb[RPI];
        float alpha[RPI];
        for (uint k = 0u; k < RPI; k++) {
            uint r = r0 + k;
            uint pos = pos0 + r;
            uint first = first_seen(pos, p.window);
            ka[k] = first > j0 ? min(first - j0, n) : 0u;
            kb[k] = r < nr && pos + 1u > j0 ? min(n, pos + 1u - j0) : 0u;
            alpha[k] = row_alpha[r];
        }
        bool full = n == TK;
        for (uint k = 0u; k < RPI; k++) {
            full = full && ka[k] == 0u && kb[k] == TK;
        }
        for (uint c = 0u; c < NCH; c++) {
            uint c0 = c * DC;
            if (c0 >= dv) {
                continue;
            }
            uint w = min(DC, dv - c0);
            if (c > 0u) {
                barrier(); // the last chunk's readers are done
            }
            stage_cache(true, j0, n, vbase, p.v_width, c0, w);
            barrier();
            if (c == 0u && lid < BR) {
                // Row lid's tile sum, the one-row kernel's tree: its first
                // two levels at once (element i of the second is
                // (e_i + e_{i+32}) + (e_{i+16} + e_{i+48})), then the rest.
                uint r = lid;
                uint first = first_seen(pos0 + r, p.window);
                uint a = first > j0 ? min(first - j0, n) : 0u;
                uint b = r < nr && pos0 + r + 1u > j0 ? min(n, pos0 + r + 1u - j0) : 0u;
                if (a < b) {
                    precise float x[TK / 4u];
                    uint base = r * TK;
                    for (uint i = 0u; i < TK / 4u; i++) {
                        precise float lo2 = sp_at(base + i) + sp_at(base + i + TK / 2u);
                        precise float hi2 = sp_at(base + i + TK / 4u) + sp_at(base + i + 3u * TK / 4u);
                        x[i] = lo2 + hi2;
                    }
                    for (uint wd = TK / 8u; wd > 0u; wd >>= 1) {
                        for (uint i = 0u; i < wd; i++) {
                            x[i] += x[i + wd];
                        }
                    }
                    l = l * row_alpha[r] + x[0];
                    m = row_m_new[r];
                }
            }
            if (lane < w) {
                // This chunk's accumulators, indexed by constants only (acc
                // itself is indexed by the chunk: in registers here, it
                // would otherwise be read and written at every key).
                precise float a[RPI];
                for (uint k = 0u; k < RPI; k++) {
                    a[k] = acc[k * NCH + c];
                    if (ka[k] < kb[k]) {
                        a[k] *= alpha[k];
                    }
                }
                uint vr = lane;
                if (full) {
                    // Every row of the set weighs every key of the tile.
                    for (uint jj = 0u; jj < TK; jj += 4u) {
                        float v0 = skv[(vr >> 2)][vr & 3u];
                        float v1 = skv[((vr + KV_ROW) >> 2)][(vr + KV_ROW) & 3u];
                        float v2 = skv[((vr + 2u * KV_ROW) >> 2)][(vr + 2u * KV_ROW) & 3u];
                        float v3 = skv[((vr + 3u * KV_ROW) >> 2)][(vr + 3u * KV_ROW) & 3u];
                        vr += 4u * KV_ROW;
                        for (uint k = 0u; k < RPI; k++) {
                            vec4 pr = sp[((r0 + k) * TK + jj) >> 2];
                            a[k] += pr.x * v0;
                            a[k] += pr.y * v1;
                            a[k] += pr.z * v2;
                            a[k] += pr.w * v3;
                        }
                    }
                } else {
                    for (uint jj = 0u; jj < n; jj += 4u) {
                        float v0 = skv[(vr >> 2)][vr & 3u];
                        float v1 = skv[((vr + KV_ROW) >> 2)][(vr + KV_ROW) & 3u];
                        float v2 = skv[((vr + 2u * KV_ROW) >> 2)][(vr + 2u * KV_ROW) & 3u];
                        float v3 = skv[((vr + 3u * KV_ROW) >> 2)][(vr + 3u * KV_ROW) & 3u];
                        vr += 4u * KV_ROW;
                        for (uint k = 0u; k < RPI; k++) {
                            vec4 pr = sp[((r0 + k) * TK + jj) >> 2];
                            if (jj >= ka[k] && jj < kb[k]) {
                                a[k] += pr.x * v0;
                            }
                            if (jj + 1u >= ka[k] && jj + 1u < kb[k]) {
                                a[k] += pr.y * v1;
                            }
                            if (jj + 2u >= ka[k] && jj + 2u < kb[k]) {
                                a[k] += pr.z * v2;
                            }
                            if (jj + 3u >= ka[k] && jj + 3u < kb[k]) {
                                a[k] += pr.w * v3;
                            }
                        }
                    }
                }
                for (uint k = 0u; k < RPI; k++) {
                    acc[k * NCH + c] = a[k];
                }
            }
        }
        // (The next tile's first barrier orders these reads of skv and sp
        // before its writes.)
    }

    if (lid < BR) {
        row_inv[lid] = 1.0 / l;
    }
    barrier();
    for (uint k = 0u; k < RPI; k++) {
        uint r = r0 + k;
        if (r < nr) {
            uint obase = p.out_offset + ((t0 + r) * p.n_head + h) * dv;
            for (uint c = 0u; c < NCH; c++) {
                uint d = c * DC + lane;
                if (d < dv) {
                    o[obase + d] = acc[k * NCH + c] * row_inv[r];
                }
            }
        }
    }
}

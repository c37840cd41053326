#version 450
// A decode step's feed-forward block in one dispatch (op_matvec_ffn.rs):
// for one activation row, the RMS norm of binding 1 with its weight
// (binding 3; workgroup 0 also writes the normed row to binding 4), the
// gate and up products of it (bindings 0 and 5, out at bindings 2 and 6),
// their gated unit (FusedPush.op: 0 SwiGLU, 1 GeGLU) written in place of
// the gate's result, the down projection of the unit (binding 7, out at
// binding 8) and its add into the residual (binding 9). That is
// matvec.comp's PAIR_GLU dispatch and the PRO_QUANT + EPI_ADD dispatch
// after it, with the same bits, as one dispatch and one dependent stage
// instead of two.
//
// Workgroup g takes the unit's elements [32 g, 32 g + 32): one block of
// the down projection's input. It sums the block terms of its 32 gate and
// 32 up rows in matvec.comp's order (the 16 lanes of a row striding over
// its blocks, then the tree over the lanes: here each row's 16 lane sums,
// then the tree's steps over them, one invocation a row), takes their
// unit, quantizes the unit's block as the down projection's prologue
// quantizes its row (common/quant_row.glsl: a block's bytes do not depend
// on its neighbours), and writes that block's term of every row of the
// down projection to binding 10 at [g][row]. The workgroup that counts
// itself done last on binding 11's word 0 (and puts it back to zero) sums
// each down row's terms in matvec.comp's order again, writes the row and
// adds it to the residual. Every other workgroup has read the residual
// (the norm's input, when it is the same row) before it counts itself.
//
// The 32-element block types whose activations are Q8_0 or Q8_1, gate, up
// and down of one type, one chunk each. Push: WeightPush (the gate and up
// products: rows is the unit's width, a multiple of 32), FusedPush (as
// matvec.comp's PAIR_GLU reads it: res_offset is the up product's output
// offset), FfnPush.
#include "weights.glsl"

#define WG 128u
layout(local_size_x = 128, local_size_y = 1, local_size_z = 1) in;

// Unit elements per workgroup: one activation block.
#define UB 32u

// matvec.comp's FusedPush.
struct FusedPush {
    uint src_offset;
    uint aux_offset;
    uint pro_out_offset;
    uint res_offset;
    float eps;
    uint op;
};
// The down projection: its weight row bytes and rows (the residual's
// width), the element offsets of its output and of the residual.
struct FfnPush {
    uint down_row_bytes;
    uint down_rows;
    uint down_out_offset;
    uint res_offset;
};
layout(push_constant) uniform Push { WeightPush p; FusedPush f; FfnPush d; };

layout(set = 0, binding = 0, std430) readonly buffer Wt { uint W[]; };
layout(set = 0, binding = 1, std430) readonly buffer Xt { float XS[]; };
layout(set = 0, binding = 2, std430) writeonly buffer Ot { float O[]; };
layout(set = 0, binding = 3, std430) readonly buffer Aux { float AUX[]; };
layout(set = 0, binding = 4, std430) writeonly buffer Po { float PO[]; };
layout(set = 0, binding = 5, std430) readonly buffer Wt2 { uint W2[]; };
layout(set = 0, binding = 6, std430) writeonly buffer Ot2 { float O2[]; };
layout(set = 0, binding = 7, std430) readonly buffer Wt3 { uint W3[]; };
layout(set = 0, binding = 8, std430) writeonly buffer Ot3 { float O3[]; };
layout(set = 0, binding = 9, std430) buffer Rt { float R[]; };
// The down projection's block terms, [block][row] (the last workgroup
// reads the others').
layout(set = 0, binding = 10, std430) coherent buffer Pt { float PART[]; };
// The count of workgroups done (word 0; zero between dispatches).
layout(set = 0, binding = 11, std430) coherent buffer Ct { uint CNT[]; };
#include "terms.glsl"
// Lanes per row of matvec.comp's 32-element block types.
#define TPR TERM_LANES

// The weight the blocks are read from: 0 gate, 1 up, 2 down.
uint wsel = 0u;
#define WORD(i) (wsel == 0u ? W[i] : (wsel == 1u ? W2[i] : W3[i]))
#include "blocks.glsl"

// The normed row's values (padded as matvec.comp pads them), later the
// unit's block; the normed row's blocks, then the unit's (9 words per 32
// elements).
#define MAX_K 3072u
#define RV(c) ((c) + ((c) >> 5))
shared float row_vals[MAX_K + MAX_K / 32u];
shared uint SA[(MAX_K / 32u + 1u) * 9u];
#define ACT(ab, t, k) SA[(ab) + (k)]
#define QT 1u
#include "qdot.glsl"
#define QUANT_WG WG
#define QV(i) row_vals[RV(i)]
#define QSTORE(w, v) SA[w] = (v)
#include "quant_row.glsl"
#define RMS_WG WG
#define RMS_VAL(a, b, c) XS[(a) + (c)]
// The norm's weight into row_vals while the squares are summed.
#define RMS_EXTRA(c) row_vals[RV(c)] = AUX[f.aux_offset + (c)]
#include "rms.glsl"
#include "glu.glsl"

// Per (row, lane) of the workgroup's 32 gate rows, then its 32 up rows:
// the lane's sum over its blocks; then each row's sum.
shared float lane_sums[2u * UB * TPR];
shared float row_sums[2u * UB];
shared bool last_wg;

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint g = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    uint n_groups = p.rows / UB;
    if (g >= n_groups) {
        return; // the whole workgroup, uncounted
    }
    uint n = p.n_in;
    uint nb = n / BLOCK_ELEMS;

    // The normed row into SA (matvec.comp's PRO_NORM prologue).
    precise float scale = rms_scale(f.src_offset, 0u, n, tid, f.eps);
    for (uint c = tid; c < n; c += WG) {
        precise float y = XS[f.src_offset + c] * scale;
        y = y * row_vals[RV(c)]; // the weight, stored there by this invocation
        row_vals[RV(c)] = y;
        if (g == 0u) {
            PO[f.pro_out_offset + c] = y;
        }
    }
    barrier();
    quant_row(tid, n, 0u);
    barrier();

    // The gate and up rows' lane sums.
    uint row0 = g * UB;
    for (uint i = tid; i < 2u * UB * TPR; i += WG) {
        uint r = i / TPR;
        uint lane = i % TPR;
        wsel = r < UB ? 0u : 1u;
        uint rb = (row0 + r % UB) * p.row_bytes;
        float acc[1];
        acc[0] = 0.0;
        uint ab[1];
        for (uint blk = lane; blk < nb; blk += TPR) {
            ab[0] = blk * ACT_WORDS;
            qdot_block(rb + blk * BLOCK_BYTES, ab, acc);
        }
        lane_sums[i] = acc[0];
    }
    barrier();
    if (tid < 2u * UB) {
        float v[TPR];
        for (uint l = 0u; l < TPR; l++) {
            v[l] = lane_sums[tid * TPR + l];
        }
        row_sums[tid] = lane_tree(v);
    }
    barrier();
    // The unit (as PAIR_GLU writes it), into row_vals for its block.
    if (tid < UB) {
        float gv = row_sums[tid];
        float uv = row_sums[UB + tid];
        float y = f.op == GLU_SWIGLU ? swiglu(gv, uv) : geglu(gv, uv);
        O[p.out_offset + row0 + tid] = y;
        O2[f.res_offset + row0 + tid] = uv;
        row_vals[RV(tid)] = y;
    }
    barrier();
    uint qb = nb * ACT_WORDS;
    quant_row(tid, UB, qb);
    barrier();

    // This block's term of every down row (common/terms.glsl).
    wsel = 2u;
    uint ab[1];
    ab[0] = qb;
    for (uint row = tid; row < d.down_rows; row += WG) {
        float acc[1];
        acc[0] = 0.0;
        qdot_block(row * d.down_row_bytes + g * BLOCK_BYTES, ab, acc);
        PART[g * d.down_rows + row] = acc[0];
    }

    // The last workgroup sums the terms (made visible before each count,
    // read after the last) in matvec.comp's order (common/terms.glsl).
    memoryBarrierBuffer();
    barrier();
    if (tid == 0u) {
        last_wg = atomicAdd(CNT[0], 1u) == n_groups - 1u;
    }
    barrier();
    if (last_wg) {
        memoryBarrierBuffer();
        for (uint row = tid; row < d.down_rows; row += WG) {
            float y = terms_sum(row, d.down_rows, n_groups);
            O3[d.down_out_offset + row] = y;
            uint ri = d.res_offset + row;
            R[ri] = R[ri] + y;
        }
        if (tid == 0u) {
            CNT[0] = 0u; // for the next dispatch
        }
    }
}

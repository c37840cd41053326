// One row's values quantized to Q8_0 or Q8_1 blocks (ACT_Q8_0 / ACT_Q8_1;
// layout in act.glsl) by one workgroup of QUANT_WG invocations, the bytes
// quantize_act.comp writes (rms_norm.comp's fused quantization, and the
// decode matvec's prologues in matvec.comp). A row's blocks are taken in as
// few rounds as the workgroup allows: ipb invocations per block (8, 4, 2
// or 1: the most that still fit every block into one round, else 1 and
// rounds of QUANT_WG blocks), each with 32 / ipb elements. Each finds the
// amax of its elements, the block's ipb partial results are folded in
// order through shared memory (the fold of q8_amax_step, NaN included: a
// partial result that saw a NaN restarts the fold), then each quantizes
// its own elements into whole words.
//
// The includer includes act.glsl, defines QUANT_WG (a power of two, at
// least 8), QV(i) (the value of element i, an f32, typically from shared
// memory the whole workgroup wrote before a barrier) and QSTORE(w, v)
// (stores word v at word w of the blocks). It may define QUANT_SG (a
// uniform bool; the includer enables subgroup shuffles): where true, tid
// counts subgroup by subgroup in subgroups of at least 8, so a block's
// invocations are lanes of one subgroup, and the folds read the partials
// by shuffles, in the same order, with no shared memory or barrier.
#ifndef SHARPI_QUANT_ROW_GLSL
#define SHARPI_QUANT_ROW_GLSL

// Each invocation's partial amax (bits of |v|; bit 31: its elements held a
// NaN) and, for Q8_1, its quants' sum.
shared uint part_amax[QUANT_WG];
#ifdef ACT_Q8_1
shared int part_sum[QUANT_WG];
#endif

// Quantizes elements 0..n (n a multiple of 32) into blocks from word qb.
// Every invocation of the workgroup calls it (it has barriers).
void quant_row(uint tid, uint n, uint qb) {
    uint nblk = n / 32u;
    uint ipb = nblk <= QUANT_WG / 8u ? 8u
             : nblk <= QUANT_WG / 4u ? 4u
             : nblk <= QUANT_WG / 2u ? 2u
             : 1u;
    uint epi = 32u / ipb;         // elements per invocation
    uint per_round = QUANT_WG / ipb; // blocks per round
    uint sub = tid % ipb;
    uint first = tid - sub;       // the block's first invocation
    // Every round is uniform over the workgroup.
    for (uint b0 = 0u; b0 < nblk; b0 += per_round) {
#ifdef QUANT_SG
        bool shuffled = QUANT_SG;
#else
        bool shuffled = false;
#endif
        if (b0 > 0u && !shuffled) {
            barrier(); // the shared partials of the previous round are read
        }
        uint blk = b0 + tid / ipb;
        bool live = blk < nblk;
        uint c0 = 32u * blk + sub * epi;
        uint m = 0u;
        bool nan_seen = false;
        if (live) {
            for (uint i = 0u; i < epi; i++) {
                uint v = floatBitsToUint(QV(c0 + i));
                m = q8_amax_step(m, v);
                nan_seen = nan_seen || is_nan_bits(v & 0x7fffffffu);
            }
        }
        uint mine = m | (nan_seen ? 0x80000000u : 0u);
        uint amax = 0u;
#ifdef QUANT_SG
        // The block's first lane in the subgroup.
        uint lane0 = gl_SubgroupInvocationID - sub;
        if (shuffled) {
            for (uint j = 0u; j < ipb; j++) {
                uint e = subgroupShuffle(mine, lane0 + j);
                amax = (e & 0x80000000u) != 0u ? (e & 0x7fffffffu) : q8_amax_step(amax, e);
            }
        } else
#endif
        {
            part_amax[tid] = mine;
            barrier();
            for (uint j = 0u; j < ipb; j++) {
                uint e = part_amax[first + j];
                amax = (e & 0x80000000u) != 0u ? (e & 0x7fffffffu) : q8_amax_step(amax, e);
            }
        }
        uint d;
        uint id;
        q8_scales(amax, d, id);
        int sum = 0;
        if (live) {
            for (uint w = 0u; w < epi / 4u; w++) {
                uint word = 0u;
                for (uint j = 0u; j < 4u; j++) {
                    int q = q8_quant(floatBitsToUint(QV(c0 + 4u * w + j)), id);
                    sum += q; // wraps, as ggml's epi32 sums
                    word |= (uint(clamp(q, -128, 127)) & 0xffu) << (8u * j);
                }
                QSTORE(qb + 9u * blk + 1u + sub * (epi / 4u) + w, word);
            }
        }
#ifdef ACT_Q8_1
#ifdef QUANT_SG
        if (shuffled) {
            int total = sum;
            for (uint j = 1u; j < ipb; j++) {
                total += subgroupShuffle(sum, lane0 + j);
            }
            sum = total; // the block's at its first lane
        } else
#endif
        {
            part_sum[tid] = sum;
            barrier();
            if (sub == 0u) {
                for (uint j = 1u; j < ipb; j++) {
                    sum += part_sum[tid + j];
                }
            }
        }
#endif
        if (live && sub == 0u) {
            QSTORE(qb + 9u * blk, q8_head(d, sum));
        }
    }
}

#endif

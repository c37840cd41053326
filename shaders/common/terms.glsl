// A product's row summed from its block terms in the order matvec.comp
// adds them for the 32-element block types (ROWS_PER_WG 8: 16 lanes a
// row, lane l adding blocks l, l + 16, ... from 0, then the tree over the
// lanes), so that a dispatch which gathers the terms from many workgroups
// (ffn_decode.comp, attention.comp OUT_PROJ) writes that dispatch's bits.
// A term stored alone is 0 + term, as a lane's first block is added: the
// same value (a lane's sum is never -0, so a -0 term adds as +0 does).
//
// The includer declares PART (the terms, f32, [block][row]) before it
// includes this file.
#ifndef SHARPI_TERMS_GLSL
#define SHARPI_TERMS_GLSL

#define TERM_LANES 16u

// The tree's steps over a row's lane sums, in place; the row's sum.
float lane_tree(inout float v[TERM_LANES]) {
    for (uint s = TERM_LANES / 2u; s > 0u; s >>= 1) {
        for (uint l = 0u; l < s; l++) {
            v[l] += v[l + s];
        }
    }
    return v[0];
}

// Row `row` of a product of `rows` rows from its n_blocks terms.
float terms_sum(uint row, uint rows, uint n_blocks) {
    float v[TERM_LANES];
    for (uint l = 0u; l < TERM_LANES; l++) {
        float x = 0.0;
        for (uint blk = l; blk < n_blocks; blk += TERM_LANES) {
            x += PART[blk * rows + row];
        }
        v[l] = x;
    }
    return lane_tree(v);
}

#endif

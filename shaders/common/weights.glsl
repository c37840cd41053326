// What the weight-reading shaders (matvec, matmul, get_rows) share: their
// push block, mirrored by `WeightPush` in engine/src/vulkan/backend/op_matmul.rs,
// and the expert-routing part the MATMUL_ID variants add after it (`IdPush`
// in engine/src/vulkan/backend/op_matmul_id.rs).
#ifndef SHARPI_WEIGHTS_GLSL
#define SHARPI_WEIGHTS_GLSL

// One chunk of a weight (rows col0..col0 + rows of the whole weight, each
// row_bytes long, n_in elements) against activations. Offsets count elements
// (f32) of the activation buffers; for get_rows, x_offset counts u32 words of
// the token-id buffer.
struct WeightPush {
    uint n_in;       // elements per weight row (= activation width for matmul)
    uint row_bytes;  // bytes per weight row
    uint rows;       // weight rows in this chunk
    uint col0;       // first weight row of this chunk (an output column)
    uint x_offset;   // first element of x (or token id)
    uint out_offset; // first element of out
    uint n_out;      // out row stride (elements)
    uint n_tok;      // activation rows (tokens)
    uint units;      // get_rows: invocations per token
};

// MATMUL_ID variants (ggml mul_mat_id): the chunk holds experts e0..e0 + n_e,
// `rows` weight rows each (WeightPush.rows is then the rows of one expert,
// n_out the output row stride, n_tok the number of (token, slot) pairs).
// Pair s = t * k + j reads expert ids[ids_offset + s] (an f32), input row
// x_per_slot != 0 ? s : t, and writes output row s.
struct IdPush {
    uint ids_offset; // first element of ids
    uint k;          // slots per token
    uint x_per_slot; // 1: x has a row per pair; 0: per token
    uint e0;         // first expert in this chunk
    uint n_e;        // experts in this chunk
};

#endif

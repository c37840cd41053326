// Push-constant blocks of the mixture-of-experts routing ops, mirrored field
// for field by #[repr(C)] structs in engine/src/vulkan/backend/op_moe.rs
// (sizes checked against the reflected block sizes at compile time). Offsets
// count f32 elements from the start of the bound buffer.
#ifndef SHARPI_MOE_GLSL
#define SHARPI_MOE_GLSL

// softmax, normalize_rows: `rows` rows of `width` elements from `offset`, in
// place, one workgroup per row.
struct RowsPush {
    uint rows;
    uint width;
    uint offset;
};

// top_k: for each of `rows` rows of `n` probabilities, the k largest (ids as
// f32 and values, k per row), one invocation per row.
struct TopKPush {
    uint rows;
    uint n;
    uint k;
    uint probs_offset;
    uint ids_offset;
    uint weights_offset;
};

// mul_groups, sum_groups: x is `rows` rows of `g` groups of `n` elements; s
// (mul_groups) is [rows, g], out (sum_groups) [rows, n].
struct GroupsPush {
    uint rows;
    uint g;
    uint n;
    uint x_offset;
    uint s_offset;
    uint out_offset;
};

#endif

// Push-constant blocks of the unary elementwise ops, norms and RoPE (the
// binary ops use BinaryPush of push.glsl). Each is mirrored field for field by a
// #[repr(C)] struct in engine/src/vulkan/backend/op_elementwise.rs, whose
// size is checked against the reflected block size at compile time.
// Offsets count f32 elements from the start of the bound buffer.
#ifndef SHARPI_ELEMENTWISE_GLSL
#define SHARPI_ELEMENTWISE_GLSL

// x[offset + i] = f(x[offset + i]) for i < n, f chosen by `op` (listed in
// unary.comp); scale: x * a; softcap: tanh(x * a) * b with a = 1 / cap,
// b = cap.
struct UnaryPush {
    uint n;
    uint offset;
    float a;
    float b;
    uint op;
};

// x[offset + i] += bias[i % width] for i < n: a bias of `width` elements
// added to every row of a [n / width, width] view (add_bias.comp).
struct BiasPush {
    uint n;
    uint offset;
    uint width;
};

// RMS norm of n_groups contiguous groups of `group` elements (a view of
// [rows, width] rows with width a multiple of group is exactly that).
struct RmsNormPush {
    uint n_groups;
    uint group;
    uint x_offset;
    uint out_offset;
    float eps;
};

// RoPE in place of a [rows, n_heads * head_dim] view; one invocation per
// (row, pair i < n_rot / 2), looping over the heads.
struct RopePush {
    uint rows;
    uint width;
    uint head_dim;
    uint half_rot;
    uint offset;
    uint pos_at;     // the first row's position: step_words[pos_at]
    uint neox;
    float theta_scale;
    float freq_scale;
};

#endif

// Push-constant blocks, one struct per op family. Each is mirrored field for
// field by a #[repr(C)] struct in engine/src/vulkan/push.rs; build.rs reflects the
// block size from the SPIR-V and a Rust test checks the two agree.
// Use in a shader as:  layout(push_constant) uniform Push { BinaryPush p; };
#ifndef SHARPI_PUSH_GLSL
#define SHARPI_PUSH_GLSL

// Elementwise binary ops over f32 (shaders/binary.comp):
// out[out_offset + i] = f(a[a_offset + i], b[b_offset + i]) for i < n, f
// chosen by `op` (0: add; the others are listed in binary.comp).
// Offsets count elements, so one buffer can hold several tensors.
struct BinaryPush {
    uint n;
    uint a_offset;
    uint b_offset;
    uint out_offset;
    uint op;
};

#endif

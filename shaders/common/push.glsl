// Push-constant blocks, one struct per op family. Each is mirrored field for
// field by a #[repr(C)] struct in engine/src/vulkan/push.rs; build.rs reflects the
// block size from the SPIR-V and a Rust test checks the two agree.
// Use in a shader as:  layout(push_constant) uniform Push { BinaryPush p; };
#ifndef SHARPI_PUSH_GLSL
#define SHARPI_PUSH_GLSL

// Elementwise binary ops over f32 (add; later mul):
// out[out_offset + i] = a[a_offset + i] OP b[b_offset + i] for i < n.
// Offsets count elements, so one buffer can hold several tensors.
struct BinaryPush {
    uint n;
    uint a_offset;
    uint b_offset;
    uint out_offset;
};

#endif

// The push-constant block of the binary elementwise ops (the other op
// families' blocks: elementwise.glsl, weights.glsl, attention.glsl, moe.glsl).
// Mirrored field for field by the #[repr(C)] BinaryPush in
// engine/src/vulkan/push.rs; build.rs reflects the block size from the SPIR-V
// and a compile-time assert there checks the two agree.
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

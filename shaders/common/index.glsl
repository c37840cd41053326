// Invocation indexing shared by the compute shaders.
#ifndef SHARPI_INDEX_GLSL
#define SHARPI_INDEX_GLSL

// Flat index of this invocation over a 1-D problem that the host may have split
// over the y dimension of the dispatch, because one dimension holds at most
// maxComputeWorkGroupCount[0] groups (Pipeline::groups_for on the Rust side).
uint global_index_1d() {
    return gl_GlobalInvocationID.y * (gl_NumWorkGroups.x * gl_WorkGroupSize.x) + gl_GlobalInvocationID.x;
}

#endif

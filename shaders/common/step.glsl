// The words the host stages for one submission (the backend's inbox:
// engine/src/vulkan/backend/buffers.rs `stage_u32`): token ids and the
// positions of RoPE, the KV writes and attention. A shader reads its
// position from here, not from its push constants, so that a recorded
// decode step replays unchanged at the next position with only the inbox
// rewritten (engine/src/vulkan/backend/replay.rs).
#ifndef SHARPI_STEP_GLSL
#define SHARPI_STEP_GLSL

#define STEP_WORDS(b) layout(set = 0, binding = b, std430) readonly buffer Step { uint step_words[]; };

#endif

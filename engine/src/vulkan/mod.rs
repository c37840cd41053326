//! (filled in by the vulkan work)

//! (filled in by the gguf work)

//! GGUF files (valid, defective, fuzzed, written), quantization recipes, the generated models and model loading and forward passes.
//! One test binary for these files (each file a module, as it was one
//! binary): fewer binaries to compile and link.

#[path = "gguf_support/mod.rs"]
mod gguf_support;
#[path = "model_support/mod.rs"]
mod model_support;

#[path = "generated_models.rs"]
mod generated_models;
#[path = "gguf_defects.rs"]
mod gguf_defects;
#[path = "gguf_fuzz_props.rs"]
mod gguf_fuzz_props;
#[path = "gguf_models.rs"]
mod gguf_models;
#[path = "gguf_valid.rs"]
mod gguf_valid;
#[path = "gguf_writer.rs"]
mod gguf_writer;
#[path = "model_forward.rs"]
mod model_forward;
#[path = "model_load.rs"]
mod model_load;
#[path = "model_real.rs"]
mod model_real;
#[path = "model_speed.rs"]
mod model_speed;
#[path = "perplexity_run.rs"]
mod perplexity_run;
#[path = "quantize_recipe.rs"]
mod quantize_recipe;
#[path = "test_binaries.rs"]
mod test_binaries;

//! The sharpi command line: generate, inspect, perplexity, quantize.
//! One test binary for these files (each file a module, as it was one
//! binary): fewer binaries to compile and link.

#[path = "cli_support/mod.rs"]
mod cli_support;
#[path = "gguf_support/mod.rs"]
mod gguf_support;
/// The binary's llama-cli option table (free of the parser), read on its
/// own: the binary's other modules are not a library.
#[path = "../src/bin/sharpi/llama_flags/options.rs"]
#[allow(dead_code)]
mod llama_options;

#[path = "cli_broken_pipe.rs"]
mod cli_broken_pipe;
#[path = "cli_chat.rs"]
mod cli_chat;
#[path = "cli_generate.rs"]
mod cli_generate;
#[path = "cli_generate_flags.rs"]
mod cli_generate_flags;
#[path = "cli_inspect.rs"]
mod cli_inspect;
#[path = "cli_llama_flags.rs"]
mod cli_llama_flags;
#[path = "cli_perplexity.rs"]
mod cli_perplexity;
#[path = "cli_quantize.rs"]
mod cli_quantize;
#[path = "cli_tokenize.rs"]
mod cli_tokenize;
#[path = "hostile_input.rs"]
mod hostile_input;

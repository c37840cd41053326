//! Tokenizers (against references, properties) and chat templates.
//! One test binary for these files (each file a module, as it was one
//! binary): fewer binaries to compile and link.

#[path = "gguf_support/mod.rs"]
mod gguf_support;
#[path = "tokenizer_support/mod.rs"]
mod tokenizer_support;

#[path = "chat_templates.rs"]
mod chat_templates;
#[path = "tokenizer_gemma3.rs"]
mod tokenizer_gemma3;
#[path = "tokenizer_props.rs"]
mod tokenizer_props;
#[path = "tokenizer_reference.rs"]
mod tokenizer_reference;
#[path = "tokenizer_smollm2.rs"]
mod tokenizer_smollm2;
#[path = "tokenizer_synthetic.rs"]
mod tokenizer_synthetic;

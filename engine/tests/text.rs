//! Tokenizers (against references, properties) and chat templates.
//! One test binary for these files (each file a module, as it was one
//! binary): fewer binaries to compile and link.

/// The budgeted allocator, as in sharpi: the hostile-template tests need
/// the render's memory budget.
#[global_allocator]
static ALLOC: engine::bounded::BudgetAlloc = engine::bounded::BudgetAlloc;

#[path = "gguf_support/mod.rs"]
mod gguf_support;
#[path = "tokenizer_support/mod.rs"]
mod tokenizer_support;

#[path = "bounded_run.rs"]
mod bounded_run;
#[path = "chat_templates.rs"]
mod chat_templates;
#[path = "fuzz_corpus.rs"]
mod fuzz_corpus;
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

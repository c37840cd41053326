//! Feeds arbitrary bytes as a chat template's source: it must render or
//! fail with a one-line error within its limits (checks/chat_template.rs).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../checks/chat_template.rs"]
mod checks;

/// The budgeted allocator, as in sharpi: the render's memory budget.
#[global_allocator]
static ALLOC: engine::bounded::BudgetAlloc = engine::bounded::BudgetAlloc;

fuzz_target!(|data: &[u8]| checks::check(data));

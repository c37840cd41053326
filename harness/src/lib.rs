//! Differential-testing harness: runs the engine's paths and compares them
//! with each other and with llama.cpp references.
//!
//! - [`compare`]: sharpi against the references (`harness compare`).
//! - [`metrics`]: pure comparison metrics.
//! - [`reference`]: the reference-data format, writer and loader (no
//!   llama.cpp needed).
//! - `mutants` (feature `fault-injection`): every engine fault, detected
//!   where expected (`harness mutants`).
//! - [`structure`]: the repository's structure checks (module cycles, file
//!   sizes, README length, doc links; `harness structure`).
//! - `capture` (feature `llama-cpp`): produces reference data with llama.cpp.

#[cfg(feature = "llama-cpp")]
pub mod capture;
pub mod compare;
pub mod metrics;
#[cfg(feature = "fault-injection")]
pub mod mutants;
mod nan;
pub mod reference;
pub mod structure;

//! Differential-testing harness: runs the engine's paths and compares them
//! with each other and with llama.cpp references.

pub mod metrics;

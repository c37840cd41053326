//! The checks of a comparison, each a measure of one prompt on one path (or
//! of one model) against llama.cpp's capture or another path, held to the
//! limits of `ci/thresholds.toml` ([`thresholds`]).

pub mod corpus;
pub mod cross;
pub mod greedy;
pub mod logits;
pub mod profile;
pub mod routing;
pub mod sampling;
pub mod sink;
pub mod split;
pub mod taps;
pub mod thresholds;
pub mod tokens;

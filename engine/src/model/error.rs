//! Why a GGUF file cannot be run. Every message is one line and names what
//! is wrong.

use crate::ggml_type::GgmlType;
use crate::gguf::{GgufError, MetadataError};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    #[error("{0}")]
    File(#[from] GgufError),

    #[error("unsupported architecture {name:?} (supported: {supported})")]
    UnsupportedArch { name: String, supported: String },

    #[error("{arch}: missing metadata key {key}")]
    MissingKey { arch: &'static str, key: String },

    #[error("{arch}: {source}")]
    Metadata {
        arch: &'static str,
        #[source]
        source: MetadataError,
    },

    #[error("{arch}: {key} = {value}: {why}")]
    BadValue {
        arch: &'static str,
        key: String,
        value: String,
        why: String,
    },

    #[error("{arch}: {what} is not supported")]
    Unsupported { arch: &'static str, what: String },

    #[error("{arch}: missing tensor {name}")]
    MissingTensor { arch: &'static str, name: String },

    #[error("{arch}: tensor {name} has shape {found:?}, expected {expected:?}")]
    WrongShape {
        arch: &'static str,
        name: String,
        expected: Vec<u64>,
        found: Vec<u64>,
    },

    #[error("{arch}: tensor {name} has type {ty}, which cannot be {why}")]
    WrongType {
        arch: &'static str,
        name: String,
        ty: GgmlType,
        why: &'static str,
    },

    #[error("{arch}: unexpected tensor {name} (not part of this architecture: running without it would be wrong)")]
    UnexpectedTensor { arch: &'static str, name: String },
}

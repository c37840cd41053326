//! Models: what a GGUF file describes ([`Model`], checked against its
//! architecture's table in [`spec`]) and the forward passes over
//! [`crate::ops::Ops`] ([`arch`]).

pub mod arch;
mod error;
mod head;
pub mod hparams;
mod load;
mod scratch;
pub mod spec;
mod step;
mod weights;

use std::path::Path;
use std::sync::Arc;

use crate::gguf::GgufFile;

pub use error::ModelError;
pub use head::{HeadOut, HEAD_BLOCK};
pub use hparams::{AttnKind, Hparams, LayerDesc};
pub use load::TensorTable;
pub use scratch::Scratch;
pub use spec::{Arch, ArchSpec, Role};
pub use step::{Cx, Step};
pub use weights::RoleMap;

/// A checked model description: hyperparameters, per-layer table, and the
/// tensors of the mapped file by role. Holds the file; weights are not
/// prepared for any backend yet (that is [`crate::session::Session`]'s job).
pub struct Model {
    file: Arc<GgufFile>,
    spec: &'static ArchSpec,
    hp: Hparams,
    layers: Vec<LayerDesc>,
    tensors: TensorTable,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("arch", &self.spec.name)
            .field("hparams", &self.hp)
            .finish_non_exhaustive()
    }
}

impl Model {
    /// Maps and checks the GGUF file at `path`.
    pub fn load(path: &Path) -> Result<Model, ModelError> {
        Model::from_gguf(Arc::new(GgufFile::open(path)?))
    }

    /// Checks a parsed GGUF file: architecture supported, required metadata
    /// present and sane, every tensor of the architecture present with the
    /// right shape and a supported type, no tensor left over.
    pub fn from_gguf(file: Arc<GgufFile>) -> Result<Model, ModelError> {
        let name = file
            .architecture()
            .map_err(|source| ModelError::Metadata { arch: "?", source })?;
        let spec = spec::lookup(name).ok_or_else(|| ModelError::UnsupportedArch {
            name: name.to_string(),
            supported: spec::ARCHS
                .iter()
                .map(|s| s.name)
                .collect::<Vec<_>>()
                .join(", "),
        })?;
        let (mut hp, layers) = hparams::read(&file, spec)?;
        let tensors = load::check_tensors(&file, spec, &mut hp)?;
        Ok(Model {
            file,
            spec,
            hp,
            layers,
            tensors,
        })
    }

    pub fn file(&self) -> &Arc<GgufFile> {
        &self.file
    }

    pub fn spec(&self) -> &'static ArchSpec {
        self.spec
    }

    pub fn arch(&self) -> Arch {
        self.spec.arch
    }

    pub fn hparams(&self) -> &Hparams {
        &self.hp
    }

    /// The per-layer table.
    pub fn layers(&self) -> &[LayerDesc] {
        &self.layers
    }

    pub fn tensors(&self) -> &TensorTable {
        &self.tensors
    }
}

//! Models: what a GGUF file describes ([`Model`], checked against its
//! architecture's table in [`spec`]) and the one forward pass over
//! [`crate::ops::Ops`] that every architecture runs ([`forward`]).

mod error;
pub mod forward;
mod head;
pub mod hparams;
mod load;
pub mod moe;
mod scratch;
pub mod spec;
mod step;
mod weights;

use std::path::Path;
use std::sync::Arc;

use crate::gguf::GgufFile;

pub use error::ModelError;
pub use forward::ModelWeights;
pub use head::{HeadOut, HEAD_BLOCK};
pub use hparams::{AttnKind, Hparams, LayerDesc, MoeParams};
pub use load::TensorTable;
pub use moe::ExpertRunner;
pub use scratch::{MoeScratch, Scratch};
pub use spec::{Arch, ArchSpec, Role};
pub use step::{Cx, Step};
pub use weights::RoleMap;

/// A checked model description: hyperparameters, per-layer table, and the
/// tensors of the mapped file by role. Holds the file; weights are not
/// prepared for any backend yet (that is [`crate::session::Session`]'s job).
pub struct Model {
    file: Arc<GgufFile>,
    /// The architecture's table, as [`ModelOptions::spec_edit`] left it.
    spec: ArchSpec,
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

/// What the caller of [`Model::load_with`] changes about how a file is
/// loaded. The default changes nothing: the file runs as its
/// architecture's table ([`spec`]) says.
#[derive(Clone, Copy, Debug, Default)]
pub struct ModelOptions {
    /// Edits a copy of the architecture's table before the file is checked
    /// against it, e.g. to run a model with a deliberately wrong RoPE style
    /// and see that a comparison with llama.cpp catches it. Model code only
    /// ever reads the (edited) table; nothing else knows about the edit.
    pub spec_edit: Option<fn(&mut ArchSpec)>,
}

impl Model {
    /// Maps and checks the GGUF file at `path`.
    pub fn load(path: &Path) -> Result<Model, ModelError> {
        Model::load_with(path, &ModelOptions::default())
    }

    /// [`Model::load`] with `opts` applied.
    pub fn load_with(path: &Path, opts: &ModelOptions) -> Result<Model, ModelError> {
        Model::from_gguf_with(Arc::new(GgufFile::open(path)?), opts)
    }

    /// Checks a parsed GGUF file: architecture supported, required metadata
    /// present and sane, every tensor of the architecture present with the
    /// right shape and a supported type, no tensor left over.
    pub fn from_gguf(file: Arc<GgufFile>) -> Result<Model, ModelError> {
        Model::from_gguf_with(file, &ModelOptions::default())
    }

    /// [`Model::from_gguf`] with `opts` applied.
    pub fn from_gguf_with(file: Arc<GgufFile>, opts: &ModelOptions) -> Result<Model, ModelError> {
        let name = file
            .architecture()
            .map_err(|source| ModelError::Metadata { arch: "?", source })?;
        let mut spec = spec::lookup(name)
            .ok_or_else(|| ModelError::UnsupportedArch {
                name: name.to_string(),
                supported: spec::ARCHS
                    .iter()
                    .map(|s| s.name)
                    .collect::<Vec<_>>()
                    .join(", "),
            })?
            .clone();
        if let Some(edit) = opts.spec_edit {
            edit(&mut spec);
        }
        let (mut hp, layers) = hparams::read(&file, &spec)?;
        let tensors = load::check_tensors(&file, &spec, &mut hp)?;
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

    pub fn spec(&self) -> &ArchSpec {
        &self.spec
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

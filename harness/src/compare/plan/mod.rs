//! The plan of a comparison: what to run ([`options`]), the items it
//! selects and their slices over CI runners ([`matrix`]: `--quick`,
//! `--shard K/N`), and models and prompts named on the command line
//! ([`names`]).

pub mod matrix;
pub mod names;
pub mod options;

pub use options::{Options, CHUNK};

use matrix::{model_paths, Item, ModelPlan};

use crate::reference::ReferenceData;

/// Every item of the run `opts` asks for, in run order: per model (the
/// manifest's order) its text checks, then per prompt (the capture's order)
/// each path, then its corpus (when the reference data has a base for it)
/// on each path.
pub fn plan(opts: &Options, data: &ReferenceData) -> (Vec<ModelPlan>, Vec<Item>) {
    let mut models = Vec::new();
    let mut items = Vec::new();
    for entry in &data.manifest().models {
        if !opts.models.is_empty() && !opts.models.contains(&entry.id) {
            continue;
        }
        items.push(Item::text(&entry.id));
        let paths = match data.model(&entry.id) {
            Some(_) => model_paths(&opts.paths, &opts.repo.join(&entry.file)),
            None => Vec::new(),
        };
        if let Some(m) = data.model(&entry.id) {
            let corpus = data.corpus_item(&entry.id);
            let ids = m.prompts().map(|p| p.id.clone()).chain(corpus);
            for id in ids {
                if opts.prompts.is_empty() || opts.prompts.contains(&id) {
                    for &path in &paths {
                        items.push(Item::prompt(&entry.id, &id, path));
                    }
                }
            }
        }
        models.push(ModelPlan {
            id: entry.id.clone(),
            paths,
        });
    }
    (models, items)
}

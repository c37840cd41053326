//! The subcommands of the `harness` binary that have files of their own.

pub mod calibrate;
pub mod capture;
pub mod corpus;

use harness::compare::{names, Options, Paths};

/// What `compare` and `calibrate` both take to pick the items and run the
/// engine: models and prompts by id or path, the paths, the device.
pub struct Selection<'a> {
    pub models: &'a [String],
    pub prompts: &'a [String],
    pub paths: &'a [String],
    pub greedy_steps: usize,
    pub threads: usize,
    pub device: Option<&'a str>,
    pub no_validation: bool,
}

impl Selection<'_> {
    /// Sets `opts` (whose `reference_dir` is set) from the selection; the
    /// error is one line naming the argument.
    pub fn apply(&self, opts: &mut Options) -> Result<(), String> {
        let models = names::resolve_models(&opts.reference_dir, self.models)?;
        opts.prompts = names::resolve_prompts(&opts.reference_dir, self.prompts)?;
        opts.models = models.ids;
        opts.model_files = models.files;
        opts.paths = Paths::parse(self.paths).map_err(|e| format!("--paths: {e}"))?;
        opts.greedy_steps = self.greedy_steps;
        opts.threads = self.threads;
        opts.progress = true;
        if let Some(d) = self.device {
            opts.device = d.parse().expect("infallible");
        }
        opts.validation &= !self.no_validation;
        Ok(())
    }
}

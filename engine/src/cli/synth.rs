//! `sharpi synth --arch ARCH --seed N --tokenizer-from MODEL OUT`: a small
//! synthetic model, the same bytes for the same arguments on every machine.

use std::io::Write;
use std::path::Path;

use super::CliError;
use crate::synth::{self, Config};

/// Builds the model `cfg` describes with the tokenizer of `tokenizer_from`,
/// writes it to `output` (atomically) and a one-line summary to `out`.
pub fn run(
    cfg: &Config,
    tokenizer_from: &Path,
    output: &Path,
    threads: Option<usize>,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let tok = super::open_model(tokenizer_from)?;
    let pool = super::thread_pool(threads)?;
    let w = pool.install(|| synth::synthesize(cfg, &tok))?;
    let layout = w.write_file(output)?;
    writeln!(
        out,
        "{}: synthetic {} (seed {}, {} layers, {} tensors, {}), {} bytes",
        output.display(),
        cfg.arch,
        cfg.seed,
        cfg.n_layer,
        w.tensors().len(),
        cfg.ftype,
        layout.file_size
    )?;
    Ok(())
}

//! Loading a model for `sharpi` generation and benchmarks: the checked
//! model, its tokenizer, its chat template, and the weights paged in, with
//! a progress bar on a terminal.

use std::io::IsTerminal;
use std::path::Path;
use std::sync::Arc;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::CliError;
use engine::chat::{ChatError, ChatTemplate};
use engine::model::Model;
use engine::tokenizer::Tokenizer;

/// What generation needs from a model file.
pub struct Loaded {
    pub model: Arc<Model>,
    pub tokenizer: Tokenizer,
    /// The model's chat template (`None` when it has none).
    pub template: Option<ChatTemplate>,
}

/// Bytes paged in between two updates of the progress bar.
const PAGE_IN_STEP: usize = 4 << 20;

/// Opens and checks `path`, builds its tokenizer and (when `template`) its
/// chat template, and reads every page of the file once so that the first
/// token does not pay for the disk: into memory backed by huge pages when
/// the file fits half of the memory available, else through the map. A
/// bar on stderr shows the progress when stderr is a terminal.
pub fn load(path: &Path, template: bool) -> Result<Loaded, CliError> {
    let bar = progress_bar();
    bar.set_message("reading the header");
    let mut file = super::open_model(path)?;
    bar.set_length(file.file_size());
    // A model that fits half of the memory available is read into huge
    // pages (GgufFile::make_resident); a larger one, or one the kernel
    // would not give the memory for, stays mapped and is paged in below.
    let mut resident =
        engine::host_memory::available_bytes().is_some_and(|avail| file.file_size() <= avail / 2);
    if resident {
        bar.set_message("reading the weights");
        resident = file
            .make_resident(PAGE_IN_STEP, |n| bar.inc(n as u64))
            .is_ok();
        if !resident {
            bar.set_position(0);
        }
    }
    let file = Arc::new(file);
    let model = Model::from_gguf(Arc::clone(&file)).map_err(|source| CliError::Model {
        path: path.display().to_string(),
        source,
    })?;
    bar.set_message("building the tokenizer");
    let tokenizer = Tokenizer::from_gguf(&file)?;
    let template = if template {
        match ChatTemplate::from_gguf(&file, &tokenizer) {
            Ok(t) => Some(t),
            Err(ChatError::NoTemplate) => None,
            Err(e) => return Err(e.into()),
        }
    } else {
        None
    };
    if !resident {
        bar.set_message("paging in the weights");
        page_in(file.bytes(), &bar);
    }
    bar.finish_and_clear();
    Ok(Loaded {
        model: Arc::new(model),
        tokenizer,
        template,
    })
}

/// Refuses a context longer than the model was trained for (and so a
/// KV cache sized by a typo).
pub fn check_context(model: &Model, n_ctx: usize, flag: &str) -> Result<(), CliError> {
    let train = model.hparams().n_ctx_train;
    if n_ctx > train {
        return Err(CliError::Usage(format!(
            "{flag} {n_ctx} is longer than the model's training context ({train} tokens)"
        )));
    }
    Ok(())
}

fn progress_bar() -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("loading {bar:40} {bytes}/{total_bytes} {wide_msg}")
            .expect("valid template"),
    );
    bar
}

/// Touches one byte of every 4 KiB page of `bytes`.
fn page_in(bytes: &[u8], bar: &ProgressBar) {
    let mut sum = 0u8;
    for chunk in bytes.chunks(PAGE_IN_STEP) {
        for page in chunk.iter().step_by(4096) {
            sum = sum.wrapping_add(*page);
        }
        bar.inc(chunk.len() as u64);
    }
    std::hint::black_box(sum);
}

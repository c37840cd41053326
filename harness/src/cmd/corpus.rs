//! `harness corpus-import`: a model's corpus base from a llama-perplexity
//! `--kl-divergence-base` file ([`harness::reference::corpus`]).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

#[derive(Args)]
pub struct CorpusImportArgs {
    /// The logits file llama-perplexity wrote with
    /// `-f TEXT --kl-divergence-base FILE` (any llama.cpp build).
    #[arg(long = "kl-divergence-base", value_name = "FILE")]
    base: PathBuf,
    /// The model of the reference directory the base is of (its id).
    #[arg(long, value_name = "ID")]
    model: String,
    /// The text the base was computed over (`-f` of llama-perplexity): its
    /// path and SHA-256 are recorded, and the model's tokenization of it
    /// must be the base's tokens.
    #[arg(long, value_name = "FILE")]
    text: PathBuf,
    /// The corpus's name (an id; the item is `corpus:NAME`). Default: the
    /// text's file name, lowercased.
    #[arg(long)]
    name: Option<String>,
    /// Keep the first N chunks of the base (each costs one forward pass of
    /// the base's context per path in every compare).
    #[arg(long, default_value_t = 1)]
    chunks: usize,
    /// What made the base (recorded), e.g. "llama-perplexity b6000 CPU".
    #[arg(long, default_value = "llama-perplexity")]
    source: String,
    /// The reference directory (relative to --repo); its manifest is
    /// rebuilt.
    #[arg(long, value_name = "DIR", default_value = "reference-data")]
    reference: PathBuf,
    /// Repository root (model files are relative to it) (default: the nearest directory from the
    /// current one up holding ci/thresholds.toml and reference-data/).
    #[arg(long, value_name = "DIR")]
    repo: Option<PathBuf>,
}

pub fn corpus_import(args: CorpusImportArgs) -> ExitCode {
    match import(&args) {
        Ok(msg) => {
            eprintln!("harness corpus-import: {msg}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("harness corpus-import: {e}");
            ExitCode::FAILURE
        }
    }
}

fn import(args: &CorpusImportArgs) -> Result<String, String> {
    use engine::perplexity::LogitsReader;
    use harness::reference::corpus::{CorpusBase, CORPUS_FILE};
    use harness::reference::{inputs, writer};

    let repo = super::repo_root(args.repo.as_deref())?;
    let dir = repo.join(&args.reference);
    let models = inputs::load_models_file(&dir).map_err(|e| e.to_string())?;
    let entry = models
        .models
        .iter()
        .find(|m| m.id == args.model)
        .ok_or_else(|| {
            let known: Vec<&str> = models.models.iter().map(|m| m.id.as_str()).collect();
            format!(
                "--model {}: not in {}; known: {}",
                args.model,
                dir.join(inputs::MODELS_FILE).display(),
                known.join(", ")
            )
        })?;
    if args.chunks == 0 {
        return Err("--chunks 0: keep at least one chunk".into());
    }
    let name = match &args.name {
        Some(n) => n.clone(),
        None => args
            .text
            .file_name()
            .map(|n| n.to_string_lossy().to_lowercase())
            .unwrap_or_default(),
    };
    if !inputs::valid_id(&name) {
        return Err(format!(
            "corpus name {name:?}: use lowercase letters, digits, '-', '_' and '.' (--name)"
        ));
    }
    let text_bytes =
        std::fs::read(&args.text).map_err(|e| format!("--text {}: {e}", args.text.display()))?;
    let text_sha = writer::sha256_hex(&text_bytes);
    let text_path = std::fs::canonicalize(&args.text)
        .unwrap_or_else(|_| args.text.clone())
        .display()
        .to_string();
    let mut reader = LogitsReader::open(&args.base)
        .map_err(|e| format!("--kl-divergence-base {}: {e}", args.base.display()))?;
    let file_sha = writer::sha256_file(&args.base).map_err(|e| e.to_string())?;
    let source = format!(
        "{} --kl-divergence-base {} (SHA-256 {file_sha})",
        args.source,
        args.base
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    );
    let base = CorpusBase::from_logits_file(
        &mut reader,
        Some(args.chunks),
        &name,
        &text_path,
        &text_sha,
        &source,
    )
    .map_err(|e| format!("--kl-divergence-base {}: {e}", args.base.display()))?;
    check_tokens(&repo.join(&entry.file), &text_bytes, &base)?;
    let out = dir.join(&entry.id).join(CORPUS_FILE);
    let bytes = base.to_safetensors().map_err(|e| e.to_string())?;
    writer::write_file(&out, &bytes).map_err(|e| e.to_string())?;
    writer::write_manifest(&dir, &models).map_err(|e| e.to_string())?;
    Ok(format!(
        "{}: {} chunk(s) of {} tokens, {} scored positions, {} bytes; the item is {}",
        out.display(),
        base.n_chunk(),
        base.meta.n_ctx,
        base.top.rows(),
        bytes.len(),
        base.item_id()
    ))
}

/// The model's tokenization of the text (as llama-perplexity reads `-f`)
/// must start with the base's tokens: the base is of this model and text.
fn check_tokens(
    gguf: &Path,
    text: &[u8],
    base: &harness::reference::corpus::CorpusBase,
) -> Result<(), String> {
    let g = engine::gguf::GgufFile::open(gguf).map_err(|e| format!("{}: {e}", gguf.display()))?;
    let tok = engine::tokenizer::Tokenizer::from_gguf(&g)
        .map_err(|e| format!("{}: tokenizer: {e}", gguf.display()))?;
    let mut text = std::str::from_utf8(text)
        .map_err(|e| format!("--text: not UTF-8 ({e})"))?
        .to_string();
    if text.ends_with('\n') {
        text.pop();
    }
    let ours = tok
        .encode(&text, true, false)
        .map_err(|e| format!("--text: {e}"))?;
    match (0..base.tokens.len()).find(|&i| ours.get(i) != Some(&base.tokens[i])) {
        None => Ok(()),
        Some(i) => Err(format!(
            "the base's tokens are not {}'s tokenization of the text (first difference at token {i}: base {}, ours {:?})",
            gguf.display(),
            base.tokens[i],
            ours.get(i)
        )),
    }
}

//! `sharpi perplexity -m MODEL -f TEXT [-c 512] [--chunks N]
//! [--kl-divergence-base FILE [--kl-divergence]]`: llama-perplexity's
//! perplexity and KL-divergence modes ([`engine::perplexity`]). Results go to
//! stdout in llama-perplexity's layout; progress and timings to stderr.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;

use super::args::{positive, threads, KvTypeArg};
use super::device::DeviceArgs;
use super::CliError;
use engine::perplexity::{
    self, print, ChunkPlan, KldSummary, LogitsReader, LogitsWriter, PerplexityError,
};
use engine::session::{Session, SessionConfig};

/// llama-perplexity's default context.
const DEFAULT_CTX: usize = 512;

#[derive(Args, Clone, Debug)]
pub struct PerplexityArgs {
    /// The GGUF model.
    #[arg(short = 'm', long = "model", value_name = "MODEL")]
    pub model: PathBuf,
    /// The text to score (not needed with --kl-divergence: the base file
    /// holds the tokens). One trailing newline is dropped, as llama.cpp's
    /// -f does.
    #[arg(short = 'f', long = "file", value_name = "TEXT")]
    pub file: Option<PathBuf>,
    /// Tokens per chunk (default 512; with --kl-divergence the base file's).
    #[arg(short = 'c', long = "ctx-size", value_name = "N", value_parser = positive)]
    pub ctx_size: Option<usize>,
    /// Score at most N chunks (default: all). With --kl-divergence, the
    /// first N chunks of the base file (llama-perplexity runs all of them).
    #[arg(long = "chunks", value_name = "N", value_parser = positive)]
    pub chunks: Option<usize>,
    /// Worker threads (default: all cores).
    #[arg(short = 't', long = "threads", value_name = "N", value_parser = threads)]
    pub threads: Option<usize>,
    /// KV cache element type (llama-perplexity's default is f16).
    #[arg(long, value_enum, default_value = "f16")]
    pub kv_type: KvTypeArg,
    /// Without --kl-divergence: write the log-probabilities of every scored
    /// position to FILE in llama-perplexity's format. With it: the base to
    /// compare against.
    #[arg(long = "kl-divergence-base", value_name = "FILE")]
    pub kl_divergence_base: Option<PathBuf>,
    /// Compare with the base file (KL divergence, Δp, top-1 agreement).
    #[arg(long = "kl-divergence")]
    pub kl_divergence: bool,
    #[command(flatten)]
    pub devices: DeviceArgs,
}

/// Runs the perplexity or KL-divergence mode `args` asks for.
pub fn run(args: &PerplexityArgs, out: &mut dyn Write) -> Result<(), CliError> {
    // The scoring of positions runs on rayon's global pool: -t sizes it
    // too (once per process; a second run in one process keeps the first).
    if let Some(n) = args.threads {
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global();
    }
    match (&args.kl_divergence_base, args.kl_divergence) {
        (Some(base), true) => run_kld(args, base, out),
        (None, true) => Err(CliError::Usage(
            "--kl-divergence needs the base: give --kl-divergence-base FILE".into(),
        )),
        (base, false) => run_ppl(args, base.as_ref(), out),
    }
}

fn session(
    args: &PerplexityArgs,
    n_ctx: usize,
    loaded: &super::load::Loaded,
) -> Result<Session, CliError> {
    super::load::check_context(&loaded.model, n_ctx, "-c")?;
    let cfg = SessionConfig {
        n_ctx,
        kv_type: args.kv_type.kv_type(),
        threads: args.threads.unwrap_or(0),
        ..SessionConfig::default()
    };
    args.devices.session(loaded.model.clone(), &cfg)
}

/// The BOS that replaces each chunk's first token, when the model adds one.
fn chunk_bos(loaded: &super::load::Loaded) -> Option<u32> {
    let t = &loaded.tokenizer;
    t.add_bos().then(|| t.bos()).flatten()
}

fn run_ppl(
    args: &PerplexityArgs,
    base: Option<&PathBuf>,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let file = args
        .file
        .as_ref()
        .ok_or_else(|| CliError::Usage("no text: give -f TEXT".into()))?;
    let bytes =
        std::fs::read(file).map_err(|e| CliError::Usage(format!("{}: {e}", file.display())))?;
    let mut text = String::from_utf8(bytes)
        .map_err(|e| CliError::Usage(format!("{}: not UTF-8 ({e})", file.display())))?;
    if text.ends_with('\n') {
        text.pop();
    }
    let n_ctx = args.ctx_size.unwrap_or(DEFAULT_CTX);
    let loaded = super::load::load(&args.model, false)?;
    let t0 = Instant::now();
    let tokens = loaded.tokenizer.encode(&text, true, false)?;
    let tokenize_ms = t0.elapsed().as_secs_f64() * 1e3;
    let plan = ChunkPlan::new(tokens.len(), n_ctx, args.chunks).map_err(perplexity_error)?;
    eprintln!(
        "perplexity: {} tokens, tokenization took {tokenize_ms:.1} ms",
        tokens.len()
    );
    let mut session = session(args, n_ctx, &loaded)?;
    let n_vocab = loaded.model.hparams().n_vocab;
    let mut writer = match base {
        Some(path) => {
            eprintln!("perplexity: saving all logits to {}", path.display());
            let all = &tokens[..plan.n_chunk * plan.n_ctx];
            Some(LogitsWriter::create(path, n_ctx, n_vocab, all).map_err(|e| file_error(path, e))?)
        }
        None => None,
    };
    eprintln!(
        "perplexity: calculating perplexity over {} chunks, n_ctx={}, batch_size={}, n_seq=1",
        plan.n_chunk,
        n_ctx,
        session.n_batch()
    );
    let start = Instant::now();
    let sums = perplexity::perplexity(
        &mut session,
        &tokens,
        &plan,
        chunk_bos(&loaded),
        writer.as_mut(),
        |c, sums| {
            if c == 0 {
                eta("perplexity", start, plan.n_chunk);
            }
            write!(out, "{}", print::ppl_chunk(c, sums))?;
            out.flush()?;
            Ok(())
        },
    )
    .map_err(perplexity_error)?;
    writeln!(out)?;
    if let (Some(w), Some(path)) = (writer, base) {
        w.finish().map_err(|e| file_error(path, e))?;
    }
    writeln!(out, "{}", print::ppl_final(&sums))?;
    out.flush()?;
    finish(args, &session, plan.n_chunk, start)
}

fn run_kld(args: &PerplexityArgs, base: &Path, out: &mut dyn Write) -> Result<(), CliError> {
    let mut reader = LogitsReader::open(base).map_err(|e| file_error(base, e))?;
    let h = *reader.header();
    if let Some(c) = args.ctx_size.filter(|&c| c != h.n_ctx) {
        return Err(CliError::Usage(format!(
            "-c {c}: {} was computed with a context of {}",
            base.display(),
            h.n_ctx
        )));
    }
    let loaded = super::load::load(&args.model, false)?;
    let n_vocab = loaded.model.hparams().n_vocab;
    if h.n_vocab != n_vocab {
        return Err(CliError::Usage(format!(
            "{}: the logits file has a vocabulary of {} tokens, the model {n_vocab}",
            base.display(),
            h.n_vocab
        )));
    }
    let mut session = session(args, h.n_ctx, &loaded)?;
    let n_chunk = args.chunks.map_or(h.n_chunk, |m| m.min(h.n_chunk));
    eprintln!(
        "kl_divergence: computing over {n_chunk} chunks, n_ctx={}, batch_size={}, n_seq=1",
        h.n_ctx,
        session.n_batch()
    );
    let start = Instant::now();
    let run = perplexity::kl_divergence(
        &mut session,
        &mut reader,
        chunk_bos(&loaded),
        args.chunks,
        |c, sums| {
            if c == 0 {
                eta("kl_divergence", start, n_chunk);
                writeln!(out)?;
                writeln!(out, "{}", print::KLD_TABLE_HEAD)?;
            }
            writeln!(out, "{}", print::kld_chunk(c, sums))?;
            out.flush()?;
            Ok(())
        },
    )
    .map_err(|e| match e {
        PerplexityError::File(f) => file_error(base, f),
        e => perplexity_error(e),
    })?;
    writeln!(out)?;
    match KldSummary::new(&run.sums, &run.positions) {
        Some(s) => write!(out, "{}", print::kld_summary(&s))?,
        None => eprintln!(
            "kl_divergence: {} positions: too few for statistics (llama-perplexity prints none under {})",
            run.sums.count,
            perplexity::stats::MIN_POSITIONS_FOR_STATISTICS
        ),
    }
    out.flush()?;
    finish(args, &session, n_chunk, start)
}

/// After the first chunk: its time and the estimate for all, as
/// llama-perplexity prints them.
fn eta(what: &str, start: Instant, n_chunk: usize) {
    let t = start.elapsed().as_secs_f64();
    eprintln!(
        "{what}: {t:.2} seconds per pass - ETA {:.2} minutes",
        t * n_chunk as f64 / 60.0
    );
}

fn finish(
    args: &PerplexityArgs,
    session: &Session,
    n_chunk: usize,
    start: Instant,
) -> Result<(), CliError> {
    args.devices.report_experts(session);
    args.devices.check_validation(session)?;
    eprintln!(
        "perplexity: {n_chunk} chunks in {:.2} s",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

fn file_error(path: &Path, e: perplexity::LogitsFileError) -> CliError {
    CliError::Usage(format!("{}: {e}", path.display()))
}

fn perplexity_error(e: PerplexityError) -> CliError {
    match e {
        PerplexityError::Session(s) => CliError::Session(s),
        PerplexityError::Io(e) => CliError::Output(e),
        e => CliError::Usage(e.to_string()),
    }
}

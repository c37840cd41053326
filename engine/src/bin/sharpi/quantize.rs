//! `sharpi quantize IN OUT --type TYPE [--threads N]`: llama.cpp's
//! quantization recipe for TYPE applied to IN, written to OUT. Progress goes
//! to stderr; a summary (tensors per type, sizes before and after) to `out`.

use std::io::Write;
use std::path::Path;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::CliError;
use engine::quantize::{quantize_model, FileType, Summary};

/// Quantizes `input` to `ftype`, writes `output` (atomically) and the
/// summary to `out`. `threads` sizes the rayon pool (default: all cores);
/// the output bytes do not depend on it.
pub fn run(
    input: &Path,
    output: &Path,
    ftype: FileType,
    threads: Option<usize>,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let src = super::open_model(input)?;
    let pool = super::thread_pool(threads)?;
    let bar = progress_bar(src.tensors().len() as u64);
    let (writer, summary) = pool.install(|| {
        quantize_model(&src, ftype, &mut |_, _, t| {
            bar.set_message(t.name.clone());
            bar.inc(1);
        })
    })?;
    bar.set_message("writing");
    let layout = writer.write_file(output)?;
    bar.finish_and_clear();
    write_summary(&summary, ftype, layout.file_size, out)?;
    Ok(())
}

fn progress_bar(len: u64) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} tensors {wide_msg}")
            .expect("valid template"),
    );
    bar
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Tensors per type before and after, sizes, and fallbacks.
pub fn write_summary(
    s: &Summary,
    ftype: FileType,
    file_size: u64,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let (before, after) = s.counts();
    let (b, a) = s.bytes();
    writeln!(out, "quantized to {ftype} (file type {})", ftype.id())?;
    let list = |m: &std::collections::BTreeMap<engine::GgmlType, usize>| {
        m.iter()
            .map(|(t, n)| format!("{n} {t}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    writeln!(out, "  tensors before: {}", list(&before))?;
    writeln!(out, "  tensors after:  {}", list(&after))?;
    writeln!(
        out,
        "  tensor data: {:.2} MiB -> {:.2} MiB; file {} bytes",
        mib(b),
        mib(a),
        file_size
    )?;
    let fallbacks = s.fallbacks();
    if fallbacks > 0 {
        writeln!(
            out,
            "  {fallbacks} of {} tensors used a fallback type (rows not a whole number of blocks)",
            s.tensors.len()
        )?;
    }
    Ok(())
}

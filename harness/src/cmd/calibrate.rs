//! `harness calibrate`: limits drawn from what the paths measure
//! ([`harness::compare::calibrate`]).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

#[derive(Args)]
pub struct CalibrateArgs {
    /// The reference data (relative to --repo).
    #[arg(long, value_name = "DIR", default_value = "reference-data")]
    reference: PathBuf,
    /// The model (repeatable; default every model of DIR): id or GGUF path.
    #[arg(long = "model", value_name = "ID|PATH")]
    models: Vec<String>,
    /// Only this prompt (repeatable): id or file.
    #[arg(long = "prompt", value_name = "ID|PATH")]
    prompts: Vec<String>,
    /// The paths, as for compare (the first is the others' reference).
    #[arg(long, value_delimiter = ',', default_value = "cpu")]
    paths: Vec<String>,
    /// The limits file to write.
    #[arg(long, value_name = "LIMITS.toml")]
    out: PathBuf,
    /// Each limit is the worst measurement times this (then rounded up to
    /// 1, 2 or 5 times a power of ten).
    #[arg(long, default_value_t = 4.0)]
    headroom: f64,
    /// Also write the run's report (what the limits were drawn from).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Repository root (default: the nearest directory from the
    /// current one up holding ci/thresholds.toml and reference-data/).
    #[arg(long, value_name = "DIR")]
    repo: Option<PathBuf>,
    /// Greedy tokens compared at most per prompt.
    #[arg(long, default_value_t = 32)]
    greedy_steps: usize,
    /// CPU threads (0: one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// The Vulkan device of the GPU paths: an index or part of its name.
    #[arg(long, value_name = "INDEX|NAME")]
    device: Option<String>,
    /// Run the GPU paths without the Vulkan validation layer.
    #[arg(long)]
    no_validation: bool,
}

pub fn calibrate(args: CalibrateArgs) -> ExitCode {
    use harness::compare::{self, calibrate, Options, Thresholds};
    let fail = |e: String| {
        eprintln!("harness calibrate: {e}");
        ExitCode::from(2)
    };
    if !(args.headroom.is_finite() && args.headroom >= 1.0) {
        return fail(format!(
            "--headroom {}: a factor of at least 1",
            args.headroom
        ));
    }
    let repo = match super::repo_root(args.repo.as_deref()) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let mut opts = Options::new(
        &repo,
        Thresholds {
            source: "(none: calibrating)".into(),
            models: Default::default(),
        },
    );
    opts.reference_dir = repo.join(&args.reference);
    let selection = super::Selection {
        models: &args.models,
        prompts: &args.prompts,
        paths: &args.paths,
        greedy_steps: args.greedy_steps,
        threads: args.threads,
        device: args.device.as_deref(),
        no_validation: args.no_validation,
    };
    if let Err(e) = selection.apply(&mut opts) {
        return fail(e);
    }
    let report = match compare::run(&opts) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    if let Some(path) = &args.json {
        if let Err(e) = std::fs::write(path, report.to_json()) {
            return fail(format!("{}: {e}", path.display()));
        }
    }
    // Only the missing limits may fail: anything else (a tokenizer or
    // template mismatch, an engine error, a validation message) would be
    // calibrated into the limits.
    let other: Vec<String> = report
        .failures()
        .into_iter()
        .filter(|(_, f)| f.check != "thresholds")
        .map(|(at, f)| format!("{at}: {}: {}", f.check, f.detail))
        .collect();
    if !other.is_empty() {
        eprintln!(
            "harness calibrate: {} checks failed that limits do not cover; fix them first:",
            other.len()
        );
        for o in other.iter().take(20) {
            eprintln!("  {o}");
        }
        return ExitCode::FAILURE;
    }
    let rules = calibrate::Rules {
        headroom: args.headroom,
        ..Default::default()
    };
    let body = match calibrate::draft(&report, &rules) {
        Ok(b) => b,
        Err(e) => return fail(e),
    };
    if body.is_empty() {
        return fail("nothing was measured (no model or prompt ran)".into());
    }
    let text =
        format!(
        "# Limits for `harness compare --thresholds`, drawn by `harness calibrate` from one run:\n\
         #   reference {} (manifest SHA-256 {}), commit {}\n\
         #   paths {}, prompts {}, {} items in {:.0} s\n\
         # Each limit: the worst measurement times {} rounded up to 1, 2 or 5 x 10^k\n\
         # (floors 1e-12 for an NMSE, 1e-9 for a KLD); on the cpu path layer 0's taps\n\
         # follow the rules of ci/thresholds.toml (1e-10 before any requantization,\n\
         # 1e-3 after) unless measured above them. Read the comments before use.\n\n{body}",
        opts.reference_dir.display(),
        report.provenance.reference_sha256,
        report.provenance.commit,
        args.paths.join(","),
        if args.prompts.is_empty() { "all".to_string() } else { args.prompts.join(",") },
        report.ran.len(),
        report.seconds,
        args.headroom,
    );
    if let Err(e) = Thresholds::parse(&text, &args.out.display().to_string()) {
        return fail(format!("the drafted limits do not parse: {e}"));
    }
    if let Err(e) = std::fs::write(&args.out, &text) {
        return fail(format!("{}: {e}", args.out.display()));
    }
    eprintln!(
        "harness calibrate: limits of {} written to {}",
        report
            .models
            .iter()
            .filter(|m| !m.prompts.is_empty())
            .map(|m| m.id.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        args.out.display()
    );
    ExitCode::SUCCESS
}

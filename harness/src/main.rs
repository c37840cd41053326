//! `harness`: the differential-testing command line.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

mod cmd;

use cmd::calibrate::{calibrate, CalibrateArgs};
use cmd::capture::{capture, capture_sampling, CaptureArgs, CaptureSamplingArgs};
use cmd::corpus::{corpus_import, CorpusImportArgs};
use cmd::structure::{structure, StructureArgs};

/// Every allocation goes through the budgeted allocator, so that a chat
/// template from a model file renders within a memory budget
/// (`engine::bounded`).
#[global_allocator]
static ALLOC: engine::bounded::BudgetAlloc = engine::bounded::BudgetAlloc;

#[derive(Parser)]
#[command(
    name = "harness",
    about = "Differential testing of sharpi against llama.cpp"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run sharpi on every captured model and prompt and compare tokens,
    /// per-layer tensors, logits, KL divergence and greedy continuations
    /// with llama.cpp's capture. Exits 1 on any violation of the limits.
    Compare(Box<CompareArgs>),
    /// Capture llama.cpp's outputs for every model and prompt into
    /// reference-data/ (needs a build with `--features llama-cpp`).
    Capture(CaptureArgs),
    /// Run llama.cpp's sampler chain (penalties, top-k, typical, top-p,
    /// min-p, temperature, dist) on the last logits already captured, for a
    /// grid of settings and seeds, into DIR/<model>/sampling.json (needs a
    /// build with `--features llama-cpp`; `harness capture` does it too).
    CaptureSampling(CaptureSamplingArgs),
    /// Run compare once clean and once per injected engine fault, on a
    /// small selection, and print where each fault was caught. Exits 1
    /// unless the clean run passes and every fault is detected by its
    /// expected check (tap faults: at their expected layer and tap).
    /// Needs a build with `--features fault-injection`.
    Mutants(MutantsArgs),
    /// Join the reports of the shards of one run (`compare --shard K/N`)
    /// into one report, JSON, JUnit and HTML, with one verdict. Refuses
    /// shards of different commits, reference data, limits or options, and
    /// a shard missing or twice. Exits 1 when a check failed.
    Merge(MergeArgs),
    /// Write the wall time of every item of REPORT.json... as a costs file
    /// (what `compare --costs` balances shards and estimates the ETA with).
    Costs {
        /// Reports written by `compare --json` (or `merge --json`).
        #[arg(required = true)]
        reports: Vec<PathBuf>,
        /// The costs file to write.
        #[arg(long, default_value = "ci/compare-costs.json")]
        out: PathBuf,
    },
    /// Run the paths on a reference directory without limits, take the
    /// worst figure of each kind per path (and per path against the
    /// first), multiply by the headroom and write a commented limits file
    /// for `compare --thresholds` (rules: docs/harness.md).
    Calibrate(CalibrateArgs),
    /// Make a model's corpus base (DIR/<model>/corpus.safetensors: the
    /// top-64 log-probabilities of the first chunks) from llama-perplexity's
    /// `--kl-divergence-base` file, and rebuild DIR/manifest.json; compare
    /// then runs the corpus as an item per path. No llama.cpp needed.
    CorpusImport(CorpusImportArgs),
    /// Check the repository's structure from its source text: no module
    /// cycle in a crate, no source file over 600 lines of code, README.md
    /// at most 200 lines, every relative link of README.md and docs/*.md
    /// resolving. Exits 1 naming each offending cycle, file or link.
    Structure(StructureArgs),
    /// Rebuild DIR/manifest.json (file sizes and SHA-256) from what DIR
    /// holds, e.g. after re-rendering the chat templates. No llama.cpp.
    Manifest {
        /// The reference-data directory (default: the repository's).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

#[derive(Args)]
struct CompareArgs {
    /// Compare only this model (repeatable): its id, or its GGUF file (a
    /// path: matched to the reference's model by SHA-256 and run from
    /// there). A model named here fails when it cannot be compared
    /// (unsupported architecture, not captured).
    #[arg(long = "model", value_name = "ID|PATH")]
    models: Vec<String>,
    /// Only this prompt (repeatable): its id, or its file (<id>.txt or
    /// <id>.chat.json, the bytes captured).
    #[arg(long = "prompt", value_name = "ID|PATH")]
    prompts: Vec<String>,
    /// Engine paths: cpu, gpu, hybrid:N (comma-separated or repeated), or
    /// `all`: per model cpu, gpu, hybrid:1, hybrid:2 and, for an expert
    /// model of E experts, gpu+cache:0, gpu+cache:E/2, hybrid:1+cache:E/2.
    /// The first is the reference of the others.
    #[arg(long, value_delimiter = ',', default_value = "cpu")]
    paths: Vec<String>,
    #[command(flatten)]
    files: ReportFiles,
    /// The limits, per model and path (relative to --repo).
    #[arg(long, default_value = "ci/thresholds.toml")]
    thresholds: PathBuf,
    /// The reference data (relative to --repo): reference-data/ or a
    /// directory written by `harness capture --model PATH --out DIR`.
    #[arg(long, value_name = "DIR", default_value = "reference-data")]
    reference: PathBuf,
    /// Repository root (model paths are relative to it too; default: the
    /// nearest directory from the current one up holding
    /// ci/thresholds.toml and reference-data/).
    #[arg(long, value_name = "DIR")]
    repo: Option<PathBuf>,
    /// Greedy tokens compared at most per prompt (the capture has 32).
    #[arg(long, default_value_t = 32)]
    greedy_steps: usize,
    /// Skip the tokenizer corpus, the chat-template renders and the sampler
    /// chain (the text checks that take longest).
    #[arg(long)]
    no_corpus: bool,
    /// CPU threads (0: one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Prompt tokens per forward pass (each pass's logits are held at once;
    /// the CPU path under the exact profile takes the capture's batch).
    #[arg(long, default_value_t = harness::compare::plan::CHUNK)]
    chunk: usize,
    /// The CPU path's limits: exact (every tap, the logits and the greedy
    /// steps bit-identical), calibrated (ci/thresholds.toml), or auto:
    /// exact for a model marked `exact = true` whose capture's llama.cpp
    /// configuration sharpi reproduces (AVX2+FMA, no AVX-512, llamafile,
    /// no flash attention, F32 KV), calibrated otherwise, the reason in
    /// the report.
    #[arg(long, default_value = "auto", value_name = "auto|exact|calibrated")]
    profile: harness::compare::checks::profile::Profile,
    /// The Vulkan device of the GPU paths: an index or part of its name
    /// (default: a discrete GPU first).
    #[arg(long, value_name = "INDEX|NAME")]
    device: Option<String>,
    /// Run the GPU paths without the Vulkan validation layer (on by default
    /// when the layer is installed; any message it reports is a failure).
    #[arg(long)]
    no_validation: bool,
    /// The GPU paths' matrix kernels: `gpu` (a discrete GPU's: the fused
    /// decode matvecs) or `cpu` (a CPU implementation's, lavapipe's
    /// default); default: the device's own.
    #[arg(long, value_name = "gpu|cpu", value_parser = parse_layout)]
    kernel_layout: Option<engine::vulkan::KernelLayout>,
    /// Run only slice K of N of the items (model x prompt x path, and each
    /// model's text checks), balanced by the measured costs of --costs:
    /// N jobs with K = 1..N run every item once; `harness merge` joins
    /// their reports.
    #[arg(long, value_name = "K/N")]
    shard: Option<String>,
    /// Only a representative selection, picked by measured cost: every
    /// model's text checks and fault-prone prompts (long, chat,
    /// multilingual) on the CPU, every model's cheapest item of each path
    /// kind (gpu, hybrid, expert cache), and each fault-prone prompt on the
    /// GPU once (`scripts/run` without --full).
    #[arg(long)]
    quick: bool,
    /// Print the items this run would take (after --quick and --shard),
    /// each with its estimated seconds from --costs, and the total; run
    /// nothing.
    #[arg(long)]
    dry_run: bool,
    /// Measured seconds per item (`harness costs` writes it), relative to
    /// --repo: the shard balance and the ETA. Items it lacks are
    /// estimated from those it has.
    #[arg(long, default_value = "ci/compare-costs.json")]
    costs: PathBuf,
    /// An earlier report (`compare --json`): each figure worse than that
    /// item's there beyond its tolerance (docs/harness.md) is reported.
    #[arg(long, value_name = "OLD.json")]
    baseline: Option<PathBuf>,
    /// With --baseline: every figure worse than the baseline's fails.
    #[arg(long, requires = "baseline")]
    fail_on_regression: bool,
    /// Inject this engine fault (see `harness mutants`) for the run.
    #[cfg(feature = "fault-injection")]
    #[arg(long, value_name = "FAULT")]
    inject: Option<String>,
}

#[derive(Args)]
struct MergeArgs {
    /// The shards' reports (`compare --shard K/N --json FILE`).
    #[arg(required = true)]
    reports: Vec<PathBuf>,
    #[command(flatten)]
    files: ReportFiles,
}

/// Where a comparison's report goes besides its table on stdout (`compare`
/// and `merge`).
#[derive(Args)]
struct ReportFiles {
    /// Write the whole report as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write JUnit XML: one test case per model × prompt × path × check.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// Write one self-contained HTML page: the table and, per model, plots
    /// of tap NMSE by layer and of KLD and top-1 per position.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
}

#[cfg(feature = "fault-injection")]
#[derive(Args)]
struct MutantsArgs {
    /// Only this fault (repeatable; the clean run always runs).
    #[arg(long = "fault", value_name = "NAME")]
    faults: Vec<String>,
    /// The limits (relative to --repo).
    #[arg(long, default_value = "ci/thresholds.toml")]
    thresholds: PathBuf,
    /// Repository root (default: the nearest directory from the current
    /// one up holding ci/thresholds.toml and reference-data/).
    #[arg(long, value_name = "DIR")]
    repo: Option<PathBuf>,
    /// Greedy tokens compared per prompt.
    #[arg(long, default_value_t = 2)]
    greedy_steps: usize,
    /// CPU threads (0: one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// The Vulkan device of the GPU paths: an index or part of its name.
    #[arg(long, value_name = "INDEX|NAME")]
    device: Option<String>,
    /// Write the outcomes as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Fresh activation buffers zeroed instead of poisoned with NaN (the
    /// engine's `poison`, on in this build): shows which faults only the
    /// poison catches (handoff-stale is then expected to go unseen).
    #[arg(long)]
    no_poison: bool,
}

/// `mutants` in a build without the fault-injection feature: whatever
/// follows, the answer is the feature to build with.
#[cfg(not(feature = "fault-injection"))]
#[derive(Args)]
struct MutantsArgs {
    #[arg(hide = true, trailing_var_arg = true, allow_hyphen_values = true)]
    _ignored: Vec<std::ffi::OsString>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Compare(args) => compare(*args),
        Command::Mutants(args) => mutants(args),
        Command::Capture(args) => capture(args),
        Command::CaptureSampling(args) => capture_sampling(args),
        Command::Merge(args) => merge(args),
        Command::Costs { reports, out } => costs(&reports, &out),
        Command::Manifest { dir } => manifest(dir),
        Command::Calibrate(args) => calibrate(args),
        Command::CorpusImport(args) => corpus_import(args),
        Command::Structure(args) => structure(args),
    }
}

/// Reads `compare --json` reports.
fn read_reports(files: &[PathBuf]) -> Result<Vec<harness::compare::Report>, String> {
    files
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
            harness::compare::Report::from_json(&text).map_err(|e| format!("{}: {e}", f.display()))
        })
        .collect()
}

/// Writes the report's table to stdout and its JSON, JUnit and HTML where
/// asked; the exit code is its verdict (2: a file could not be written).
fn publish(report: &harness::compare::Report, files: &ReportFiles, tool: &str) -> ExitCode {
    use harness::compare::{self, Report};
    print!("{}", report.table());
    let outputs = [
        (
            &files.json,
            "report",
            Report::to_json as fn(&Report) -> String,
        ),
        (&files.junit, "JUnit XML", compare::report::junit::to_junit),
        (&files.html, "HTML report", compare::report::html::to_html),
    ];
    for (path, what, render) in outputs {
        let Some(path) = path else { continue };
        if let Err(e) = std::fs::write(path, render(report)) {
            eprintln!("{tool}: {}: {e}", path.display());
            return ExitCode::from(2);
        }
        eprintln!("{tool}: {what} written to {}", path.display());
    }
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn merge(args: MergeArgs) -> ExitCode {
    let merged = read_reports(&args.reports).and_then(harness::compare::report::merge::merge);
    match merged {
        Ok(r) => publish(&r, &args.files, "harness merge"),
        Err(e) => {
            eprintln!("harness merge: {e}");
            ExitCode::from(2)
        }
    }
}

fn costs(reports: &[PathBuf], out: &std::path::Path) -> ExitCode {
    use harness::compare::plan::matrix::Costs;
    let reports = match read_reports(reports) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("harness costs: {e}");
            return ExitCode::from(2);
        }
    };
    let mut c = Costs::default();
    for r in &reports {
        for (k, s) in r.item_seconds() {
            // Rounded to 0.1 s: the file changes only when a cost does.
            c.seconds.insert(k, (s * 10.0).round() / 10.0);
        }
    }
    let json = serde_json::to_string_pretty(&c).expect("serializes") + "\n";
    match std::fs::write(out, json) {
        Ok(()) => {
            eprintln!(
                "harness costs: {} items, {:.0} s in all, written to {}",
                c.seconds.len(),
                c.seconds.values().sum::<f64>(),
                out.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("harness costs: {}: {e}", out.display());
            ExitCode::from(2)
        }
    }
}

fn compare(mut args: CompareArgs) -> ExitCode {
    use harness::compare::{self, Options, Thresholds};
    let repo = match cmd::repo_root(args.repo.take().as_deref()) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("harness compare: {e}");
            return ExitCode::from(2);
        }
    };
    let thresholds = match Thresholds::load(&repo.join(&args.thresholds)) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("harness compare: {e}");
            return ExitCode::from(2);
        }
    };
    // Read before the run, so that a wrong path costs nothing.
    let baseline = match args
        .baseline
        .as_deref()
        .map(compare::report::baseline::load)
    {
        None => None,
        Some(Ok(r)) => Some(r),
        Some(Err(e)) => {
            eprintln!("harness compare: --baseline {e}");
            return ExitCode::from(2);
        }
    };
    let mut opts = Options::new(&repo, thresholds);
    opts.reference_dir = repo.join(&args.reference);
    let selection = cmd::Selection {
        models: &args.models,
        prompts: &args.prompts,
        paths: &args.paths,
        greedy_steps: args.greedy_steps,
        threads: args.threads,
        device: args.device.as_deref(),
        no_validation: args.no_validation,
    };
    if let Err(e) = selection.apply(&mut opts) {
        eprintln!("harness compare: {e}");
        return ExitCode::from(2);
    }
    opts.corpus = !args.no_corpus;
    opts.kernel_layout = args.kernel_layout;
    opts.chunk = args.chunk;
    opts.profile = args.profile;
    opts.quick = args.quick;
    if let Some(s) = &args.shard {
        match s.parse() {
            Ok(s) => opts.shard = Some(s),
            Err(e) => {
                eprintln!("harness compare: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let costs = repo.join(&args.costs);
    if costs.is_file() {
        match harness::compare::plan::matrix::Costs::load(&costs) {
            Ok(c) => opts.costs = c,
            Err(e) => {
                eprintln!("harness compare: --costs: {e}");
                return ExitCode::from(2);
            }
        }
    }
    if args.dry_run {
        return match harness::compare::run::selection(&opts) {
            Ok(items) => {
                for (it, s) in &items {
                    println!("{:>8.1} s  {}", s, it.key());
                }
                let total: f64 = items.iter().map(|(_, s)| s).sum();
                println!("{} items, {:.0} s estimated", items.len(), total);
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("harness compare: {e}");
                ExitCode::from(2)
            }
        };
    }
    #[cfg(feature = "fault-injection")]
    let report = harness::mutants::compare_with(&opts, args.inject.as_deref());
    #[cfg(not(feature = "fault-injection"))]
    let report = harness::compare::run(&opts);
    let mut report = match report {
        Ok(r) => r,
        Err(e) => {
            eprintln!("harness compare: {e}");
            return ExitCode::from(2);
        }
    };
    if let (Some(old), Some(file)) = (&baseline, &args.baseline) {
        let file = file.display().to_string();
        let fail = args.fail_on_regression;
        for w in compare::report::baseline::apply(&mut report, old, &file, fail) {
            eprintln!("harness compare: warning: {w}");
        }
    }
    if let Some(table) = engine::vulkan::profile::report() {
        eprintln!("harness compare: device time per shader (SHARPI_VK_PROFILE)\n{table}");
    }
    publish(&report, &args.files, "harness compare")
}

#[cfg(feature = "fault-injection")]
fn mutants(args: MutantsArgs) -> ExitCode {
    use harness::compare::Thresholds;
    use harness::mutants::{self, Setup};
    let repo = match cmd::repo_root(args.repo.as_deref()) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("harness mutants: {e}");
            return ExitCode::from(2);
        }
    };
    let thresholds = match Thresholds::load(&repo.join(&args.thresholds)) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("harness mutants: {e}");
            return ExitCode::from(2);
        }
    };
    let mut setup = Setup::new(&repo, thresholds);
    setup.only = args.faults;
    setup.greedy_steps = args.greedy_steps;
    setup.threads = args.threads;
    setup.poison = !args.no_poison;
    setup.progress = true;
    if let Some(d) = &args.device {
        setup.device = d.parse().expect("infallible");
    }
    let report = match mutants::run(&setup) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("harness mutants: {e}");
            return ExitCode::from(2);
        }
    };
    print!("{}", report.table());
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(&report).expect("serializes");
        if let Err(e) = std::fs::write(path, json) {
            eprintln!("harness mutants: {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(not(feature = "fault-injection"))]
fn mutants(_: MutantsArgs) -> ExitCode {
    cmd::feature_missing("mutants", "fault-injection")
}

fn manifest(dir: Option<PathBuf>) -> ExitCode {
    use harness::reference::{inputs, writer};
    let dir = match dir.map_or_else(
        || cmd::repo_root(None).map(|r| r.join("reference-data")),
        Ok,
    ) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("harness manifest: {e}");
            return ExitCode::from(2);
        }
    };
    let dir = dir.as_path();
    let result =
        inputs::load_models_file(dir).and_then(|models| writer::write_manifest(dir, &models));
    match result {
        Ok(m) => {
            eprintln!(
                "harness manifest: {} files, {:.2} MiB",
                m.files.len(),
                m.total_bytes as f64 / (1024.0 * 1024.0)
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("harness manifest: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `--kernel-layout`'s value.
fn parse_layout(s: &str) -> Result<engine::vulkan::KernelLayout, String> {
    match s {
        "gpu" => Ok(engine::vulkan::KernelLayout::Gpu),
        "cpu" => Ok(engine::vulkan::KernelLayout::Cpu),
        _ => Err(format!("`{s}` is not a kernel layout (gpu or cpu)")),
    }
}

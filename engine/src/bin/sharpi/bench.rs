//! `sharpi bench -m MODEL [-p 512] [-n 128] [-d 0] [-t N] [-r 5] [-o md]`:
//! prefill and decode speed, measured as llama.cpp's llama-bench measures
//! them, with its list syntax (`-p 128,512 -n 128 -t 2,16 -d 0,2048`) and
//! its output formats, so that the two line up:
//!
//! - `ppP`: a prefill of P tokens in one batch; `tgN`: N single-token
//!   decode steps; `@ dD` (depth): after a prefill of D tokens that is not
//!   timed. Every test of every thread count, from a reset context.
//! - One warm-up run, then `-r` repetitions; tokens per second of each,
//!   reported as the mean and the sample standard deviation (llama-bench's
//!   `avg_ts` and `stddev_ts`).
//! - The KV cache in f16 unless `--kv-type f32` (llama-bench's default,
//!   its `-ctk`/`-ctv`).
//! - `-o md` (llama-bench's table), `json` (an array of llama-bench's
//!   fields: `n_prompt`, `n_gen`, `n_depth`, `n_threads`, `type_k`, `avg_ts`,
//!   `stddev_ts`, `samples_ts`, ...), `csv` (the same fields but the
//!   samples).
//!
//! Tokens are pseudo-random ids (BOS first when the model adds one), as
//! llama-bench's are: speed does not depend on which tokens they are.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use clap::{Args, ValueEnum};

use super::args::{positive, threads, KvTypeArg};
use super::device::DeviceArgs;
use super::CliError;
use engine::model::Model;
use engine::session::{Session, SessionConfig};
use engine::synth::rng::Xoshiro256StarStar;

#[derive(Args, Clone, Debug)]
pub struct BenchArgs {
    /// The GGUF model.
    #[arg(short = 'm', long = "model", value_name = "MODEL")]
    pub model: PathBuf,
    /// Prompt tokens of the prefill tests, comma-separated (0: none).
    #[arg(short = 'p', long = "n-prompt", value_name = "N,...", default_value = "512", value_parser = list)]
    pub n_prompt: Counts,
    /// Decode steps of the decode tests, comma-separated (0: none).
    #[arg(short = 'n', long = "n-gen", value_name = "N,...", default_value = "128", value_parser = list)]
    pub n_gen: Counts,
    /// Tokens in the context before each test (not timed), comma-separated.
    #[arg(short = 'd', long = "n-depth", value_name = "N,...", default_value = "0", value_parser = list)]
    pub n_depth: Counts,
    /// Worker threads, comma-separated (default: all cores).
    #[arg(short = 't', long = "threads", value_name = "N,...", value_parser = thread_list)]
    pub threads: Option<Counts>,
    /// Repetitions of each test, after one warm-up run.
    #[arg(short = 'r', long = "repetitions", value_name = "N", default_value_t = 5, value_parser = positive)]
    pub reps: usize,
    /// Output format: md (a table), json or csv.
    #[arg(
        short = 'o',
        long = "output",
        value_name = "FORMAT",
        default_value = "md"
    )]
    pub output: Format,
    /// KV cache element type (llama-bench's default, -ctk/-ctv, is f16).
    #[arg(long, value_enum, default_value = "f16")]
    pub kv_type: KvTypeArg,
    #[command(flatten)]
    pub devices: DeviceArgs,
}

/// A comma-separated list of counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counts(pub Vec<usize>);

fn list(s: &str) -> Result<Counts, String> {
    let v = s
        .split(',')
        .map(|x| {
            x.trim()
                .parse::<usize>()
                .map_err(|_| format!("{x:?} in {s:?} is not a whole number >= 0"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Counts(v))
}

fn thread_list(s: &str) -> Result<Counts, String> {
    Ok(Counts(
        s.split(',')
            .map(|x| threads(x.trim()))
            .collect::<Result<Vec<_>, _>>()?,
    ))
}

/// What `-o` takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Md,
    Json,
    Csv,
}

/// One test: `ppP` (prefill) or `tgN` (decode), at a depth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Test {
    pub n_prompt: usize,
    pub n_gen: usize,
    pub n_depth: usize,
}

impl Test {
    /// llama-bench's name: `pp512`, `tg128`, `tg128 @ d2048`.
    pub fn name(&self) -> String {
        let base = if self.n_prompt > 0 {
            format!("pp{}", self.n_prompt)
        } else {
            format!("tg{}", self.n_gen)
        };
        if self.n_depth > 0 {
            format!("{base} @ d{}", self.n_depth)
        } else {
            base
        }
    }

    fn tokens(&self) -> usize {
        self.n_prompt + self.n_gen
    }
}

/// The tests of `-p`, `-n` and `-d`, in llama-bench's order: the prefills,
/// then the decodes, each at every depth.
pub fn tests(args: &BenchArgs) -> Vec<Test> {
    let mut out = Vec::new();
    for &p in args.n_prompt.0.iter().filter(|&&p| p > 0) {
        for &d in &args.n_depth.0 {
            out.push(Test {
                n_prompt: p,
                n_gen: 0,
                n_depth: d,
            });
        }
    }
    for &n in args.n_gen.0.iter().filter(|&&n| n > 0) {
        for &d in &args.n_depth.0 {
            out.push(Test {
                n_prompt: 0,
                n_gen: n,
                n_depth: d,
            });
        }
    }
    out
}

/// Tokens per second of each repetition: mean and sample standard
/// deviation.
#[derive(Clone, Debug, PartialEq)]
pub struct Rates(pub Vec<f64>);

impl Rates {
    pub fn mean(&self) -> f64 {
        if self.0.is_empty() {
            return 0.0;
        }
        self.0.iter().sum::<f64>() / self.0.len() as f64
    }

    /// The sample standard deviation (0 for fewer than two).
    pub fn stddev(&self) -> f64 {
        let n = self.0.len();
        if n < 2 {
            return 0.0;
        }
        let m = self.mean();
        (self.0.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1) as f64).sqrt()
    }
}

/// One row of the report.
struct Row {
    threads: usize,
    test: Test,
    rates: Rates,
}

/// Runs the benchmark and prints the report to `out`.
pub fn run(args: &BenchArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let loaded = super::load::load(&args.model, false)?;
    let model = loaded.model;
    let tests = tests(args);
    if tests.is_empty() {
        return Err(CliError::Usage(
            "-p and -n are all 0: there is no test to run".into(),
        ));
    }
    let n_ctx = tests
        .iter()
        .map(|t| t.n_depth + t.tokens())
        .max()
        .unwrap_or(1);
    super::load::check_context(&model, n_ctx, "-d plus -p/-n")?;
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let thread_counts = args.threads.clone().unwrap_or(Counts(vec![cores]));
    let n_vocab = model.hparams().n_vocab as u64;
    let bos = loaded
        .tokenizer
        .add_bos()
        .then(|| loaded.tokenizer.bos())
        .flatten();
    let mut rng = Xoshiro256StarStar::seed_from(1);
    let mut tokens = |n: usize| -> Vec<u32> {
        (0..n)
            .map(|i| match (i, bos) {
                (0, Some(b)) => b,
                _ => (rng.next_u64() % n_vocab) as u32,
            })
            .collect()
    };
    let name = args.model.file_name().map_or_else(
        || args.model.display().to_string(),
        |f| f.to_string_lossy().into_owned(),
    );
    let mut rows = Vec::new();
    let mut backend = String::new();
    if args.output == Format::Md {
        md_header(out)?;
    }
    for &threads in &thread_counts.0 {
        let cfg = SessionConfig {
            n_ctx,
            threads,
            kv_type: args.kv_type.kv_type(),
            ..SessionConfig::default()
        };
        let mut session = args.devices.session(Arc::clone(&model), &cfg)?;
        backend = backend_name(&session);
        for &test in &tests {
            let depth = tokens(test.n_depth);
            let batch = tokens(test.tokens());
            let rates = measure(&mut session, test, &depth, &batch, args.reps)?;
            let row = Row {
                threads,
                test,
                rates,
            };
            if args.output == Format::Md {
                md_row(out, &name, &backend, &row)?;
            }
            rows.push(row);
        }
        args.devices.report_experts(&session);
        args.devices.check_validation(&session)?;
    }
    match args.output {
        Format::Md => {
            writeln!(
                out,
                "\nsharpi {}: {} ({} layers), {:?} kernels, {} KV cache",
                env!("CARGO_PKG_VERSION"),
                model.spec().name,
                model.hparams().n_layer,
                engine::cpu::SimdLevel::detected(),
                args.kv_type.name()
            )?;
        }
        Format::Json => json(out, &name, &backend, &model, args.kv_type, &rows)?,
        Format::Csv => csv(out, &name, &backend, &rows)?,
    }
    out.flush()?;
    Ok(())
}

/// The devices of a session, as llama-bench's `backend` column names them.
fn backend_name(session: &Session) -> String {
    let d = session.devices();
    (0..d.n_devices())
        .map(|i| d.name(i))
        .collect::<Vec<_>>()
        .join(" + ")
}

/// One warm-up run, then `reps` timed ones, each from a reset context
/// holding `depth` (not timed).
fn measure(
    session: &mut Session,
    test: Test,
    depth: &[u32],
    batch: &[u32],
    reps: usize,
) -> Result<Rates, CliError> {
    let mut rates = Vec::with_capacity(reps);
    for rep in 0..=reps {
        session.reset();
        if !depth.is_empty() {
            session.prefill(depth)?;
        }
        let start = Instant::now();
        if test.n_prompt > 0 {
            session.prefill(batch)?;
        } else {
            for &t in batch {
                session.decode(t)?;
            }
        }
        let secs = start.elapsed().as_secs_f64();
        if rep > 0 {
            rates.push(test.tokens() as f64 / secs);
        }
    }
    Ok(Rates(rates))
}

fn md_header(out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(out, "| model | backend | threads | test | t/s |")?;
    writeln!(out, "| --- | --- | ---: | ---: | ---: |")
}

fn md_row(out: &mut dyn Write, model: &str, backend: &str, r: &Row) -> std::io::Result<()> {
    writeln!(
        out,
        "| {model} | {backend} | {} | {} | {:.2} ± {:.2} |",
        r.threads,
        r.test.name(),
        r.rates.mean(),
        r.rates.stddev()
    )?;
    out.flush()
}

fn json(
    out: &mut dyn Write,
    name: &str,
    backend: &str,
    model: &Model,
    kv: KvTypeArg,
    rows: &[Row],
) -> std::io::Result<()> {
    let v: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "model_filename": name,
                "model_type": model.spec().name,
                "backends": backend,
                "n_threads": r.threads,
                "type_k": kv.name(),
                "type_v": kv.name(),
                "n_prompt": r.test.n_prompt,
                "n_gen": r.test.n_gen,
                "n_depth": r.test.n_depth,
                "test": r.test.name(),
                "avg_ts": r.rates.mean(),
                "stddev_ts": r.rates.stddev(),
                "samples_ts": r.rates.0,
            })
        })
        .collect();
    let text = serde_json::to_string_pretty(&v).map_err(std::io::Error::other)?;
    writeln!(out, "{text}")
}

fn csv(out: &mut dyn Write, name: &str, backend: &str, rows: &[Row]) -> std::io::Result<()> {
    writeln!(
        out,
        "model_filename,backends,n_threads,n_prompt,n_gen,n_depth,avg_ts,stddev_ts"
    )?;
    let quote = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    for r in rows {
        writeln!(
            out,
            "{},{},{},{},{},{},{:.6},{:.6}",
            quote(name),
            quote(backend),
            r.threads,
            r.test.n_prompt,
            r.test.n_gen,
            r.test.n_depth,
            r.rates.mean(),
            r.rates.stddev()
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn parse(args: &[&str]) -> Result<BenchArgs, clap::Error> {
        let mut all = vec!["bench", "-m", "x.gguf"];
        all.extend_from_slice(args);
        Cli::try_parse_from(all).map(|c| c.bench)
    }

    #[test]
    fn mean_and_sample_stddev() {
        let r = Rates(vec![2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert_eq!(r.mean(), 5.0);
        assert!((r.stddev() - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
        assert_eq!(Rates(vec![3.0]).stddev(), 0.0);
        assert_eq!(Rates(vec![]).mean(), 0.0);
    }

    #[test]
    fn lists_expand_as_llama_bench_expands_them() {
        let a = parse(&["-p", "128,512", "-n", "0,64", "-d", "0,2048", "-t", "1"]).unwrap();
        let names: Vec<String> = tests(&a).iter().map(Test::name).collect();
        assert_eq!(
            names,
            [
                "pp128",
                "pp128 @ d2048",
                "pp512",
                "pp512 @ d2048",
                "tg64",
                "tg64 @ d2048"
            ]
        );
        assert_eq!(a.threads, Some(Counts(vec![1])));
        let d = parse(&[]).unwrap();
        let names: Vec<String> = tests(&d).iter().map(Test::name).collect();
        assert_eq!(names, ["pp512", "tg128"]);
        assert_eq!((d.reps, d.output), (5, Format::Md));
    }

    #[test]
    fn bad_lists_are_usage_errors() {
        for bad in [
            &["-p", "12,x"][..],
            &["-n", "-1"],
            &["-d", "1,,2"],
            &["-t", "0"],
            &["-o", "xml"],
        ] {
            let e = parse(bad).expect_err("refused").to_string();
            assert!(!e.is_empty(), "{bad:?}");
        }
    }
}

//! `sharpi bench -m MODEL [-p 512] [-n 64] [-t N] [-r 3]`: prefill and
//! decode speed, measured as llama.cpp's llama-bench measures `pp512` and
//! `tg64`: a prefill of `-p` tokens into an empty context, and `-n`
//! single-token decode steps from an empty context, each repeated `-r`
//! times after one warm-up; the median of the repetitions is printed.
//! Tokens are pseudo-random ids (BOS first when the model adds one), as
//! llama-bench's are: speed does not depend on which tokens they are.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;

use super::device::DeviceArgs;
use super::generate::{positive, threads};
use super::CliError;
use crate::session::SessionConfig;
use crate::synth::rng::Xoshiro256StarStar;

#[derive(Args, Clone, Debug)]
pub struct BenchArgs {
    /// The GGUF model.
    #[arg(short = 'm', long = "model", value_name = "MODEL")]
    pub model: PathBuf,
    /// Prompt tokens of the prefill test (0: skip it).
    #[arg(
        short = 'p',
        long = "n-prompt",
        value_name = "N",
        default_value_t = 512
    )]
    pub n_prompt: usize,
    /// Decode steps of the decode test (0: skip it).
    #[arg(short = 'n', long = "n-gen", value_name = "N", default_value_t = 64)]
    pub n_gen: usize,
    /// Worker threads (default: all cores).
    #[arg(short = 't', long = "threads", value_name = "N", value_parser = threads)]
    pub threads: Option<usize>,
    /// Repetitions of each test (the median is reported).
    #[arg(short = 'r', long = "repetitions", value_name = "N", default_value_t = 3, value_parser = positive)]
    pub reps: usize,
    #[command(flatten)]
    pub devices: DeviceArgs,
}

/// One test's repetitions, as tokens per second.
#[derive(Clone, Debug, PartialEq)]
pub struct Rates(pub Vec<f64>);

impl Rates {
    pub fn median(&self) -> f64 {
        let mut v = self.0.clone();
        v.sort_by(f64::total_cmp);
        match v.len() {
            0 => 0.0,
            n if n % 2 == 1 => v[n / 2],
            n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        }
    }
}

/// Runs the benchmark and prints one line per test to `out`.
pub fn run(args: &BenchArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let loaded = super::load::load(&args.model, false)?;
    let model = loaded.model;
    let n_vocab = model.hparams().n_vocab as u64;
    let n_ctx = args.n_prompt.max(args.n_gen).max(1);
    super::load::check_context(&model, n_ctx, "-p/-n")?;
    let cfg = SessionConfig {
        n_ctx,
        threads: args.threads.unwrap_or(0),
        ..SessionConfig::default()
    };
    let mut session = args.devices.session(model.clone(), &cfg)?;
    let mut rng = Xoshiro256StarStar::seed_from(1);
    let bos = loaded
        .tokenizer
        .add_bos()
        .then(|| loaded.tokenizer.bos())
        .flatten();
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
    writeln!(
        out,
        "{name}: {} ({} layers), {}, {:?} kernels",
        model.spec().name,
        model.hparams().n_layer,
        session.devices().name(0),
        crate::cpu::SimdLevel::detected()
    )?;
    for d in 1..session.devices().n_devices() {
        writeln!(out, "  and {}", session.devices().name(d))?;
    }
    if args.n_prompt > 0 {
        let prompt = tokens(args.n_prompt);
        let mut rates = Vec::with_capacity(args.reps);
        for rep in 0..=args.reps {
            session.reset();
            let t = Instant::now();
            session.prefill(&prompt)?;
            let d = t.elapsed();
            if rep > 0 {
                rates.push(args.n_prompt as f64 / d.as_secs_f64());
            }
        }
        report(out, &format!("prefill {}", args.n_prompt), &Rates(rates))?;
    }
    if args.n_gen > 0 {
        let toks = tokens(args.n_gen);
        let mut rates = Vec::with_capacity(args.reps);
        for rep in 0..=args.reps {
            session.reset();
            let mut total = Duration::ZERO;
            for &t in &toks {
                let start = Instant::now();
                session.decode(t)?;
                total += start.elapsed();
            }
            if rep > 0 {
                rates.push(args.n_gen as f64 / total.as_secs_f64());
            }
        }
        report(out, &format!("decode {}", args.n_gen), &Rates(rates))?;
    }
    args.devices.report_experts(&session);
    args.devices.check_validation(&session)?;
    Ok(())
}

fn report(out: &mut dyn Write, test: &str, r: &Rates) -> std::io::Result<()> {
    let min = r.0.iter().copied().fold(f64::INFINITY, f64::min);
    let max = r.0.iter().copied().fold(0.0, f64::max);
    writeln!(
        out,
        "{test:<12} {:>9.1} tokens/s  (median of {}; {min:.1} .. {max:.1})",
        r.median(),
        r.0.len()
    )?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::Rates;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(Rates(vec![3.0, 1.0, 2.0]).median(), 2.0);
        assert_eq!(Rates(vec![4.0, 1.0, 2.0, 3.0]).median(), 2.5);
        assert_eq!(Rates(vec![]).median(), 0.0);
    }
}

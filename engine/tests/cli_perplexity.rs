//! `sharpi perplexity` as a process on SmolLM2: the running estimate and
//! final line, a base file written and read back (the model against itself
//! diverges only by the file's rounding), and one-line errors with a
//! non-zero exit code for a malformed, truncated or foreign base file and
//! for flags that do not fit together.

use crate::gguf_support;

use std::path::PathBuf;
use std::process::Output;

use crate::cli_support::{path, sharpi, stdout};
use gguf_support::{GEMMA3, SMOLLM2};

/// The repository's README: text long enough for a few chunks of 64.
fn text() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md").to_string()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sharpi-ppl-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// One stderr line starting "sharpi: error: " that contains `needle`,
/// exit code `code`, nothing on stdout.
fn assert_one_line_error(o: &Output, code: i32, needle: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{err}");
    assert_eq!(err.lines().count(), 1, "{err:?}");
    assert!(err.starts_with("sharpi: error: "), "{err:?}");
    assert!(err.contains(needle), "{err:?} lacks {needle:?}");
    assert!(o.stdout.is_empty(), "stdout: {:?}", o.stdout);
}

/// The number after `label` on the line that starts with it.
fn value_after(out: &str, label: &str) -> f64 {
    let line = out
        .lines()
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no {label:?} in {out}"));
    line[label.len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .trim_end_matches('%')
        .parse()
        .unwrap()
}

#[test]
fn smollm2_perplexity_and_its_own_base() {
    let (m, base) = (path(SMOLLM2), scratch("smol.kld"));
    let b = base.to_str().unwrap();
    let o = sharpi(&[
        "perplexity",
        "-m",
        &m,
        "-f",
        &text(),
        "-c",
        "64",
        "--chunks",
        "4",
        "--kl-divergence-base",
        b,
    ]);
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    let chunks: Vec<&str> = lines[0].trim_end_matches(',').split(',').collect();
    assert_eq!(chunks.len(), 4, "{out}");
    for (i, c) in chunks.iter().enumerate() {
        let ppl: f64 = c
            .strip_prefix(&format!("[{}]", i + 1))
            .unwrap()
            .parse()
            .unwrap();
        assert!(ppl > 1.0 && ppl < 1000.0, "{c}");
    }
    assert!(lines[1].starts_with("Final estimate: PPL = "), "{out}");
    // 20 header bytes, 4·64 tokens, 4 chunks of 31 rows of 49156 u16.
    let len = std::fs::metadata(&base).unwrap().len();
    assert_eq!(len, 20 + 4 * 256 + 4 * 31 * 49156 * 2);

    let o = sharpi(&[
        "perplexity",
        "-m",
        &m,
        "--kl-divergence-base",
        b,
        "--kl-divergence",
    ]);
    let out = stdout(&o);
    assert!(out.contains("chunk             PPL"), "{out}");
    let ppl_q = value_after(&out, "Mean PPL(Q)                   :");
    let final_ppl = value_after(lines[1], "Final estimate: PPL =");
    assert!(
        (ppl_q - final_ppl).abs() < 1e-3 * final_ppl,
        "{ppl_q} {final_ppl}"
    );
    // Against itself: only the stored rows' rounding (half a step of
    // 16/65535 nats at most) separates the two.
    assert!(value_after(&out, "Mean    KLD:").abs() < 1e-4, "{out}");
    assert!(value_after(&out, "RMS Δp    :") < 0.05, "{out}");
    assert!(value_after(&out, "Same top p:") > 99.0, "{out}");

    // -c must be the file's.
    let o = sharpi(&[
        "perplexity",
        "-m",
        &m,
        "--kl-divergence-base",
        b,
        "--kl-divergence",
        "-c",
        "128",
    ]);
    assert_one_line_error(&o, 1, "was computed with a context of 64");
    // Gemma's vocabulary is not SmolLM2's.
    let o = sharpi(&[
        "perplexity",
        "-m",
        &path(GEMMA3),
        "--kl-divergence-base",
        b,
        "--kl-divergence",
    ]);
    assert_one_line_error(&o, 1, "vocabulary of 49152 tokens, the model 262144");
    let _ = std::fs::remove_file(&base);
}

#[test]
fn malformed_base_files_give_one_line() {
    let m = path(SMOLLM2);
    let mut good = b"_logits_".to_vec();
    for v in [8u32, 49152, 1] {
        good.extend_from_slice(&v.to_le_bytes());
    }
    good.extend(std::iter::repeat_n(0u8, 8 * 4 + 3 * 49156 * 2));
    let cases: [(&str, Vec<u8>, &str); 4] = [
        (
            "short.kld",
            good[..12].to_vec(),
            "shorter than the 20-byte header",
        ),
        ("cut.kld", good[..good.len() - 2].to_vec(), "wrong length"),
        (
            "magic.kld",
            [b"_logitz_", &good[8..]].concat(),
            "not a logits file",
        ),
        (
            "ctx.kld",
            [&good[..8], &1u32.to_le_bytes()[..], &good[12..]].concat(),
            "no scored position",
        ),
    ];
    for (name, bytes, needle) in cases {
        let p = scratch(name);
        std::fs::write(&p, bytes).unwrap();
        let o = sharpi(&[
            "perplexity",
            "-m",
            &m,
            "--kl-divergence-base",
            p.to_str().unwrap(),
            "--kl-divergence",
        ]);
        assert_one_line_error(&o, 1, needle);
        let _ = std::fs::remove_file(&p);
    }
    let o = sharpi(&[
        "perplexity",
        "-m",
        &m,
        "--kl-divergence-base",
        "/nonexistent.kld",
        "--kl-divergence",
    ]);
    assert_one_line_error(&o, 1, "/nonexistent.kld");
}

#[test]
fn flags_that_do_not_fit_give_one_line() {
    let m = path(SMOLLM2);
    let o = sharpi(&["perplexity", "-m", &m, "--kl-divergence"]);
    assert_one_line_error(&o, 1, "give --kl-divergence-base FILE");
    let o = sharpi(&["perplexity", "-m", &m]);
    assert_one_line_error(&o, 1, "give -f TEXT");
    // The README is far shorter than two chunks of 4096.
    let o = sharpi(&[
        "perplexity",
        "-m",
        &m,
        "-f",
        &text(),
        "-c",
        "4096",
        "--chunks",
        "1",
    ]);
    assert_one_line_error(&o, 1, "needs at least 8192");
}

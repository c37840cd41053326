//! Encode speed on a 10 KB text, for each model given (default: the two
//! test models). Run with `cargo run --release -p engine --example
//! tokenize_bench [MODEL.gguf ...]`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use engine::gguf::GgufFile;
use engine::tokenizer::Tokenizer;

/// About 10 KB of mixed text: prose, code, numbers, CJK, emoji, whitespace.
fn text() -> String {
    let parts = [
        "The capital of France is Paris. It has been the country's capital since 987, ",
        "when Hugh Capet made it the seat of his court. Today 2,102,650 people live there.\n",
        "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n",
        "東京は日本の首都です。人口は約1400万人です。 ",
        "Emoji: 😀 👍🏽 🇫🇷 ❤️ — and “quotes”, «guillemets», naïve café.\n",
        "    indented\tline with\ttabs   and   spaces\r\n",
    ];
    let mut s = String::new();
    let mut i = 0;
    while s.len() < 10 * 1024 {
        s.push_str(parts[i % parts.len()]);
        i += 1;
    }
    s
}

fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> Duration {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(f());
            t.elapsed()
        })
        .collect();
    times.sort();
    times[runs / 2]
}

fn main() {
    let models: Vec<PathBuf> = match std::env::args().skip(1).collect::<Vec<_>>() {
        v if v.is_empty() => [
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            "gemma-3-270m-q4_k_m.gguf",
        ]
        .iter()
        .map(|m| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../models")
                .join(m)
        })
        .collect(),
        v => v.into_iter().map(PathBuf::from).collect(),
    };
    let text = text();
    for path in models {
        let file = GgufFile::open(&path).expect("model file");
        let t = Instant::now();
        let tok = Tokenizer::from_gguf(&file).expect("tokenizer");
        let load = t.elapsed();
        println!(
            "{} (load {:.0} ms)",
            path.display(),
            load.as_secs_f64() * 1e3
        );
        for parse_special in [false, true] {
            let n = tok.encode(&text, true, parse_special).unwrap().len();
            let d = time(21, || tok.encode(&text, true, parse_special).unwrap());
            println!(
                "  encode {} bytes, parse_special={parse_special}: {n} tokens, median {:.2} ms ({:.1} MB/s, {:.0} k tokens/s)",
                text.len(),
                d.as_secs_f64() * 1e3,
                text.len() as f64 / d.as_secs_f64() / 1e6,
                n as f64 / d.as_secs_f64() / 1e3,
            );
        }
        let ids = tok.encode(&text, true, false).unwrap();
        let d = time(21, || tok.decode(&ids, false).unwrap());
        println!(
            "  decode {} tokens: median {:.2} ms",
            ids.len(),
            d.as_secs_f64() * 1e3
        );
    }
}

//! The HTML report of a real comparison, as a person sees it: headless
//! Chromium (Debian's `chromium`, installed by scripts/setup) renders the
//! page of a small in-process `compare` (SmolLM2, one short prompt, the CPU
//! and GPU paths, 2 greedy steps) and the screenshot must show something:
//! a fair share of non-white pixels in more than a few colours.

use harness::compare::checks::taps::TapsResult;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use harness::compare::{self, report::html, Options, Thresholds};

const SMOLLM2: &str = "smollm2-135m-instruct-q4_1";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The Chromium binary, or a failure saying how to install it.
fn chromium() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in ["chromium", "chromium-browser"] {
        for dir in std::env::split_paths(&path) {
            let p = dir.join(name);
            if p.is_file() {
                return p;
            }
        }
    }
    panic!(
        "chromium is not installed: run scripts/setup (it installs Debian's chromium; CI does too)"
    );
}

/// Screenshots `page` at 1280×900 into `png`.
fn screenshot(page: &Path, png: &Path, profile: &Path) {
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--window-size=1280,900",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", page.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("chromium starts");
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                use std::io::Read;
                let _ = e.read_to_string(&mut err);
            }
            assert!(
                status.success() && png.is_file(),
                "chromium: {status}\n{err}"
            );
            return;
        }
        if start.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!(
                "chromium took more than 120 s to screenshot {}",
                page.display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The fraction of pixels that are not near-white, and how many distinct
/// colours the image has.
fn ink(png_file: &Path) -> (f64, usize) {
    let decoder = png::Decoder::new(std::fs::File::open(png_file).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.color_type.samples();
    assert_eq!(info.bit_depth, png::BitDepth::Eight);
    let px = &buf[..info.buffer_size()];
    let mut colours = std::collections::HashSet::new();
    let mut inked = 0usize;
    let mut total = 0usize;
    for p in px.chunks_exact(channels) {
        let rgb = match channels {
            1 | 2 => [p[0]; 3],
            _ => [p[0], p[1], p[2]],
        };
        colours.insert(rgb);
        if rgb.iter().any(|&c| c < 240) {
            inked += 1;
        }
        total += 1;
    }
    (inked as f64 / total as f64, colours.len())
}

#[test]
fn the_html_report_of_a_small_comparison_renders_in_chromium() {
    let chromium = chromium(); // fail first, and fast, without it
    let repo = repo();
    let thresholds = Thresholds::load(&repo.join("ci/thresholds.toml")).unwrap();
    let mut o = Options::new(&repo, thresholds);
    o.models = vec![SMOLLM2.into()];
    o.prompts = vec!["capital-france".into()];
    o.paths = compare::Paths::List(vec![compare::Path::Cpu, compare::Path::Gpu]);
    o.corpus = false;
    o.verify_files = false;
    o.greedy_steps = 2;
    let report = compare::run(&o).unwrap();
    let page = html::to_html(&report);
    // A chart per tap name against llama.cpp and against the CPU, and a
    // KLD chart, under the verdict.
    let mut names: Vec<&str> = Vec::new();
    for p in &report.models[0].prompts {
        for r in &p.checks.get::<TapsResult>().unwrap().rows {
            if !names.contains(&r.name.as_str()) {
                names.push(&r.name);
            }
        }
    }
    assert_eq!(
        page.matches("<svg").count(),
        2 * names.len() + 1,
        "{}",
        report.table()
    );
    assert!(page.contains("gpu~cpu"));
    assert!(page.contains("PASS: all checks passed"));

    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("compare_html");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("compare.html");
    std::fs::write(&file, &page).unwrap();
    let png = dir.join("compare.png");
    eprintln!("{} renders {}", chromium.display(), file.display());
    screenshot(&file, &png, &dir.join("profile"));
    let (fraction, colours) = ink(&png);
    eprintln!(
        "screenshot {}: {:.1}% non-white pixels, {colours} colours",
        png.display(),
        100.0 * fraction
    );
    assert!(
        fraction > 0.03,
        "the screenshot {} is nearly blank: {:.2}% non-white pixels",
        png.display(),
        100.0 * fraction
    );
    assert!(
        colours > 16,
        "the screenshot {} has {colours} colours",
        png.display()
    );
}

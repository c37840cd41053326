//! The hostile-input corpus (engine/tests/hostile/): every case run as a
//! `sharpi` process under a 4 GiB address-space limit (RLIMIT_AS) and a
//! 20 s timeout. Each must end with exit code 0 (it ran), or 1 or 2 with
//! one stderr line `sharpi: error: ...`: never a signal (abort, segfault),
//! a timeout, or a multi-line message.
//!
//! Categories:
//! - templates: every `templates/*.jinja` as `--chat-template-file`;
//! - GGUF metadata: `gguf.json`, each a set of keys set or removed in a
//!   copy of SmolLM2 (chat templates among them, so the file's own
//!   template path is covered too);
//! - prompt files: `prompts.json` (sizes up to a sparse 4 GiB file,
//!   invalid UTF-8, control texts, devices);
//! - flags: `flags.json`, each a whole argument list.
//!
//! The table of outcomes per category (clean ends, aborts, worst time and
//! peak RSS) is printed and written to `hostile-report.md` in cargo's
//! test temp directory.

use crate::gguf_support::{self, model_path, Image, Kv, SMOLLM2, T_I32, T_STRING, V};

use std::fs::File;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const ADDRESS_SPACE: u64 = 4 << 30;
const TIMEOUT: Duration = Duration::from_secs(20);

struct Case {
    category: &'static str,
    name: String,
    args: Vec<String>,
}

struct Outcome {
    code: Option<i32>,
    signal: Option<i32>,
    timed_out: bool,
    stderr: String,
    seconds: f64,
    max_rss_kib: i64,
}

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile")
}

fn json(name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(corpus().join(name)).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// A normal chat run of `model` (one token, greedy) with `extra` after it.
fn run_args(model: &Path, extra: &[String]) -> Vec<String> {
    let mut a: Vec<String> = ["-m", model.to_str().unwrap(), "-n", "1", "--temp", "0"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    a.extend_from_slice(extra);
    a
}

fn strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

/// A metadata value from its JSON form: `{"u32": 5}`, `{"str": "x"}`,
/// `{"f32": "nan"}`, `{"arr_str": [...]}`, `{"arr_i32": [...]}`.
fn value(v: &serde_json::Value) -> V {
    let (kind, x) = v.as_object().unwrap().iter().next().unwrap();
    match kind.as_str() {
        "u32" => V::U32(x.as_u64().unwrap() as u32),
        "f32" => V::F32(match x.as_str() {
            Some("nan") => f32::NAN,
            _ => x.as_f64().unwrap() as f32,
        }),
        "str" => V::Str(x.as_str().unwrap().as_bytes().to_vec()),
        "arr_str" => V::Arr(
            T_STRING,
            strings(x)
                .into_iter()
                .map(|s| V::Str(s.into_bytes()))
                .collect(),
        ),
        "arr_i32" => V::Arr(
            T_I32,
            x.as_array()
                .unwrap()
                .iter()
                .map(|n| V::I32(n.as_i64().unwrap() as i32))
                .collect(),
        ),
        other => panic!("gguf.json: value kind {other}"),
    }
}

fn template_cases(model: &Path) -> Vec<Case> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(corpus().join("templates"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jinja"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| Case {
            category: "templates",
            name: p.file_stem().unwrap().to_string_lossy().into_owned(),
            args: run_args(
                model,
                &[
                    "--chat-template-file".into(),
                    p.to_str().unwrap().into(),
                    "-p".into(),
                    "hi".into(),
                ],
            ),
        })
        .collect()
}

fn gguf_cases(model: &Path, dir: &Path) -> Vec<Case> {
    let base = gguf_support::decode(&std::fs::read(model).unwrap());
    let mut cases = Vec::new();
    for case in json("gguf.json").as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let mut img: Image = base.clone();
        for key in strings(&case["remove"]) {
            img.kvs.retain(|kv| kv.key != key.as_bytes());
        }
        if let Some(set) = case["set"].as_object() {
            for (key, v) in set {
                let v = value(v);
                match img.kvs.iter_mut().find(|kv| kv.key == key.as_bytes()) {
                    Some(kv) => kv.value = v,
                    None => img.kvs.push(Kv {
                        key: key.as_bytes().to_vec(),
                        value: v,
                    }),
                }
            }
        }
        let path = dir.join(format!("{name}.gguf"));
        std::fs::write(&path, img.encode()).unwrap();
        let mut extra = vec!["-p".to_string(), "hi".to_string()];
        extra.extend(strings(&case["args"]));
        cases.push(Case {
            category: "GGUF metadata",
            name: name.to_string(),
            args: run_args(&path, &extra),
        });
    }
    cases
}

fn prompt_cases(model: &Path, dir: &Path) -> Vec<Case> {
    let mut cases = Vec::new();
    for case in json("prompts.json").as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let path = match case["path"].as_str() {
            Some(p) => PathBuf::from(p),
            None => {
                let path = dir.join(format!("{name}.txt"));
                if let Some(n) = case["sparse"].as_u64() {
                    File::create(&path).unwrap().set_len(n).unwrap();
                } else if let Some(unit) = case["repeat"].as_str() {
                    let n = case["bytes"].as_u64().unwrap() as usize;
                    let text: Vec<u8> = unit.bytes().cycle().take(n).collect();
                    std::fs::write(&path, text).unwrap();
                } else if let Some(hex) = case["hex"].as_str() {
                    let hex: String = hex.split_whitespace().collect();
                    let bytes: Vec<u8> = (0..hex.len())
                        .step_by(2)
                        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                        .collect();
                    std::fs::write(&path, bytes).unwrap();
                } else {
                    std::fs::write(&path, case["text"].as_str().unwrap()).unwrap();
                }
                path
            }
        };
        let mut extra = vec!["-f".to_string(), path.to_str().unwrap().to_string()];
        extra.extend(strings(&case["args"]));
        cases.push(Case {
            category: "prompt files",
            name: name.to_string(),
            args: run_args(model, &extra),
        });
    }
    cases
}

/// Each an argument list, `{model}` standing for SmolLM2's path.
fn flag_cases(model: &Path) -> Vec<Case> {
    json("flags.json")
        .as_array()
        .unwrap()
        .iter()
        .map(|flags| {
            let flags = strings(flags);
            Case {
                category: "flags",
                name: flags.join(" "),
                args: flags
                    .iter()
                    .map(|a| a.replace("{model}", model.to_str().unwrap()))
                    .collect(),
            }
        })
        .collect()
}

/// Runs sharpi with `args` under the address-space limit and the timeout.
fn run(args: &[String], dir: &Path, tag: usize) -> Outcome {
    let err_path = dir.join(format!("stderr-{tag}"));
    let stderr = File::create(&err_path).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sharpi"));
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr);
    // SAFETY: between fork and exec the closure calls only setrlimit, which
    // is async-signal-safe, on a stack value.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: ADDRESS_SPACE,
                rlim_max: ADDRESS_SPACE,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let start = Instant::now();
    // Reaped below with wait4 (for its rusage), not through `Child`.
    #[allow(clippy::zombie_processes)]
    let child = cmd.spawn().expect("start sharpi");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: rusage is plain data; zeroed is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let mut timed_out = false;
    loop {
        // SAFETY: `pid` is our child, not yet reaped; the pointers are to
        // live locals.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            break;
        }
        assert_eq!(r, 0, "wait4: {}", std::io::Error::last_os_error());
        if start.elapsed() > TIMEOUT && !timed_out {
            timed_out = true;
            // SAFETY: signalling our own unreaped child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let seconds = start.elapsed().as_secs_f64();
    let mut text = String::new();
    File::open(&err_path)
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    let exited = libc::WIFEXITED(status);
    Outcome {
        code: exited.then(|| libc::WEXITSTATUS(status)),
        signal: libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status)),
        timed_out,
        stderr: text,
        seconds,
        max_rss_kib: usage.ru_maxrss,
    }
}

/// Why an outcome is not clean, if it is not.
fn fault(o: &Outcome) -> Option<String> {
    if o.timed_out {
        return Some(format!("timed out after {TIMEOUT:?}"));
    }
    if let Some(sig) = o.signal {
        return Some(format!("killed by signal {sig}: {}", o.stderr));
    }
    match o.code {
        Some(0) => None,
        Some(1 | 2) => {
            let lines = o.stderr.lines().count();
            (lines != 1 || !o.stderr.starts_with("sharpi: error: "))
                .then(|| format!("not one error line: {:?}", o.stderr))
        }
        other => Some(format!("exit {other:?}: {}", o.stderr)),
    }
}

#[test]
fn every_hostile_input_ends_cleanly_within_4_gib_and_20_s() {
    let model = model_path(SMOLLM2);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("hostile");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut cases = template_cases(&model);
    cases.extend(gguf_cases(&model, &dir));
    cases.extend(prompt_cases(&model, &dir));
    cases.extend(flag_cases(&model));

    // Two at a time: the machine CI runs on has two cores.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let outcomes: Vec<(usize, Outcome)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(case) = cases.get(i) else { break };
                        mine.push((i, run(&case.args, &dir, i)));
                    }
                    mine
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });

    let mut report = String::from(
        "| category | cases | ran (exit 0) | one-line errors | aborts, signals, timeouts | worst time | worst peak RSS |\n|---|---|---|---|---|---|---|\n",
    );
    let mut faults = Vec::new();
    let mut detail = String::new();
    for category in ["templates", "GGUF metadata", "prompt files", "flags"] {
        let mine: Vec<&(usize, Outcome)> = outcomes
            .iter()
            .filter(|(i, _)| cases[*i].category == category)
            .collect();
        let ran = mine.iter().filter(|(_, o)| o.code == Some(0)).count();
        let mut clean_errors = 0;
        let mut bad = 0;
        for (i, o) in &mine {
            let case = &cases[*i];
            match fault(o) {
                Some(why) => {
                    bad += 1;
                    faults.push(format!("{category} / {}: {why}", case.name));
                }
                None if o.code != Some(0) => clean_errors += 1,
                None => {}
            }
            detail.push_str(&format!(
                "{category} / {}: exit {:?}, {:.2} s, {} MiB: {}\n",
                case.name,
                o.code,
                o.seconds,
                o.max_rss_kib / 1024,
                o.stderr.trim_end()
            ));
        }
        let worst_t = mine.iter().map(|(_, o)| o.seconds).fold(0.0, f64::max);
        let worst_rss = mine.iter().map(|(_, o)| o.max_rss_kib).max().unwrap_or(0);
        report.push_str(&format!(
            "| {category} | {} | {ran} | {clean_errors} | {bad} | {worst_t:.2} s | {} MiB |\n",
            mine.len(),
            worst_rss / 1024
        ));
    }
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("hostile-report.md");
    std::fs::write(&out, format!("{report}\n```\n{detail}```\n")).unwrap();
    eprintln!("{report}\n{detail}");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(faults.is_empty(), "{}", faults.join("\n"));
}

//! A conversation through a pseudo-terminal, as a person has it: sharpi
//! started with no prompt on a terminal chats; two turns, the second
//! answered from the first and prefilling only its new tokens, Ctrl-C
//! stopping an answer without ending the program, `/save`, end of input.
//! Then, through pipes, the same second turn from a fresh process that
//! `/load`s the first: the same answer, its whole conversation prefilled.

use crate::gguf_support;

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gguf_support::{model_path, SMOLLM2};

const FIRST: &str = "My favourite colour is green and my cat is called Tom.";
const SECOND: &str = "What is my cat called?";
/// Tokens per answer at most: turn 3 is stopped by Ctrl-C well before.
const N: &str = "64";
/// The cached and the fresh second turn are compared bit for bit, so both
/// run in the reference CPU numerics: ggml's (the default) sums attention
/// by other kernels for one decoded row than for a batch, as llama.cpp
/// does, and a turn's prefix is decoded row by row in one run and
/// prefilled as a batch in the other.
const NUMERICS: [&str; 2] = ["--cpu-numerics", "reference"];
/// A long answer, to be stopped by Ctrl-C.
const THIRD: &str = "Write a long story about the sea.";

/// A pseudo-terminal: the master side, read by a thread into `output`.
struct Pty {
    master: std::fs::File,
    output: Arc<Mutex<Vec<u8>>>,
}

impl Pty {
    /// Opens a pseudo-terminal; returns it and the slave side.
    fn open() -> (Pty, OwnedFd) {
        let (mut master, mut slave) = (-1, -1);
        // SAFETY: openpty writes two descriptors into the two ints; the
        // name, termios and window-size pointers may be null.
        let rc = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
        // SAFETY: both descriptors were just opened and are owned here.
        let (master, slave) =
            unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
        let master = std::fs::File::from(master);
        let output = Arc::new(Mutex::new(Vec::new()));
        let mut reader = master.try_clone().unwrap();
        let sink = Arc::clone(&output);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // EIO once every slave descriptor is closed: the end.
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        (Pty { master, output }, slave)
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.output.lock().unwrap()).into_owned()
    }

    /// Waits until the output holds `needle` `count` times.
    fn wait_for(&self, needle: &str, count: usize) {
        let start = Instant::now();
        while self.text().matches(needle).count() < count {
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "no {needle:?} (x{count}) in:\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.master.write_all(bytes).unwrap();
        self.master.flush().unwrap();
    }
}

/// `[turn N: prefill P tokens (R reused ...` of turn `n`: (P, R).
fn prefill_of(transcript: &str, n: usize) -> (usize, usize) {
    let tag = format!("[turn {n}: prefill ");
    let at = transcript
        .find(&tag)
        .unwrap_or_else(|| panic!("no {tag:?} in:\n{transcript}"));
    let rest = &transcript[at + tag.len()..];
    let words: Vec<&str> = rest.split_whitespace().take(3).collect();
    let prefill = words[0].parse().unwrap();
    let reused = words[2].trim_start_matches('(').parse().unwrap();
    (prefill, reused)
}

fn saved(path: &std::path::Path) -> Vec<(String, String)> {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_string(),
                m["content"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// A conversation over pipes (`--conversation`): stdin given whole, the
/// saved conversation and stderr returned.
fn piped(model: &str, input: &str, save: &std::path::Path) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sharpi"))
        .args(["-m", model, "--conversation", "--temp", "0", "-n", N])
        .args(NUMERICS)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let input = format!("{input}/save {}\n", save.display());
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    err
}

#[test]
fn a_two_turn_conversation_through_a_terminal() {
    let model = model_path(SMOLLM2).to_str().unwrap().to_string();
    let dir = std::env::temp_dir().join(format!("sharpi-chat-pty-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let save = dir.join("conversation.json");

    let (mut pty, slave) = Pty::open();
    let stdio = |fd: &OwnedFd| Stdio::from(fd.try_clone().unwrap());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sharpi"));
    cmd.args(["-m", &model, "--temp", "0", "-n", N, "--color"])
        .args(NUMERICS)
        .stdin(stdio(&slave))
        .stdout(stdio(&slave))
        .stderr(stdio(&slave));
    // SAFETY: between fork and exec only async-signal-safe calls: a new
    // session, with the terminal on stdin as its controlling terminal (so
    // that ^C sends SIGINT).
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    drop(slave);

    // No -p and stdin a terminal: a conversation, with its input marker.
    pty.wait_for("> ", 1);
    pty.send(format!("{FIRST}\n").as_bytes());
    pty.wait_for("[turn 1:", 1);
    pty.send(format!("{SECOND}\n").as_bytes());
    pty.wait_for("[turn 2:", 1);
    // A long answer, stopped by ^C once it streams; the program goes on.
    pty.send(format!("{THIRD}\n").as_bytes());
    pty.wait_for(THIRD, 1);
    let before = pty.text().len();
    let start = Instant::now();
    while pty.text().len() < before + 16 {
        assert!(start.elapsed() < Duration::from_secs(60), "{}", pty.text());
        std::thread::sleep(Duration::from_millis(5));
    }
    pty.send(b"\x03");
    pty.wait_for("[turn 3:", 1);
    pty.send(format!("/save {}\n", save.display()).as_bytes());
    pty.wait_for("messages saved to", 1);
    // ^D: the end of input ends the conversation, exit status 0.
    pty.send(b"\x04");
    let status = child.wait().unwrap();
    let transcript = pty.text();
    println!("{transcript}");
    assert!(status.success(), "{status:?}\n{transcript}");
    assert!(
        transcript.contains("\x1b[32m> "),
        "--color colours the marker"
    );
    let turn3 = &transcript[transcript.find("[turn 3:").unwrap()..];
    assert!(
        turn3.lines().next().unwrap().contains("interrupted"),
        "{turn3}"
    );

    let conversation = saved(&save);
    let roles: Vec<&str> = conversation.iter().map(|(r, _)| r.as_str()).collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "user",
            "assistant",
            "user",
            "assistant"
        ]
    );
    assert_eq!(conversation[0].1, FIRST);
    assert_eq!(conversation[2].1, SECOND);
    let second_answer = &conversation[3].1;
    assert!(!second_answer.is_empty());

    // Turn 2 prefilled only its new tokens: the rest came from the cache.
    let (prefill2, reused2) = prefill_of(&transcript, 2);
    assert!(reused2 > 0 && prefill2 > 0, "{transcript}");
    // Turn 1's render and answer are turn 2's prefix, all but the
    // end-of-turn text the template writes after the answer.
    let (prefill1, _) = prefill_of(&transcript, 1);
    assert!(
        reused2 >= prefill1,
        "turn 2 reused {reused2} of turn 1's {prefill1}"
    );

    // The same second turn in a fresh process, the first loaded: the
    // whole conversation prefilled, and the same answer as with the cache.
    let first = dir.join("first.json");
    let json = serde_json::json!([
        {"role": "user", "content": FIRST},
        {"role": "assistant", "content": conversation[1].1},
    ]);
    std::fs::write(&first, json.to_string()).unwrap();
    let fresh_save = dir.join("fresh.json");
    let err = piped(
        &model,
        &format!("/load {}\n{SECOND}\n", first.display()),
        &fresh_save,
    );
    println!("{err}");
    let (prefill, reused) = prefill_of(&err, 1);
    assert_eq!(reused, 0, "{err}");
    assert_eq!(
        prefill,
        prefill2 + reused2,
        "a fresh prefill covers what turn 2 reused and prefilled: {err}"
    );
    assert_eq!(&saved(&fresh_save)[3].1, second_answer);

    // Without the first turn the same question gets another answer: the
    // second answer depends on the first.
    let alone_save = dir.join("alone.json");
    piped(&model, &format!("{SECOND}\n"), &alone_save);
    let alone = &saved(&alone_save)[1].1;
    assert_ne!(alone, second_answer);
    std::fs::remove_dir_all(&dir).unwrap();
}

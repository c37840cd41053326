use std::collections::HashSet;
use std::ffi::OsString;

use clap::Args;

use super::*;

/// `translate` of `sharpi ARGS`, as strings (the program name dropped).
fn tr(args: &[&str]) -> Result<Vec<String>, String> {
    let argv = std::iter::once("sharpi")
        .chain(args.iter().copied())
        .map(OsString::from)
        .collect();
    let out = translate(argv)?;
    assert_eq!(out[0], "sharpi");
    Ok(out[1..]
        .iter()
        .map(|a| a.to_str().unwrap().to_owned())
        .collect())
}

fn ok(args: &[&str]) -> Vec<String> {
    tr(args).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

#[test]
fn ngl_becomes_gpu_layers() {
    assert_eq!(
        ok(&["-m", "M", "-ngl", "99"]),
        ["-m", "M", "--gpu-layers", "99"]
    );
    assert_eq!(ok(&["--n-gpu-layers", "all"]), ["--gpu-layers", "-1"]);
    assert_eq!(ok(&["-ngl=all"]), ["--gpu-layers", "-1"]);
    assert_eq!(ok(&["-ngl", "auto"]), ["--gpu-layers", "auto"]);
    assert_eq!(ok(&["--gpu-layers=7"]), ["--gpu-layers", "7"]);
}

#[test]
fn renames_keep_their_values() {
    assert_eq!(
        ok(&["-sys", "be brief", "-cnv", "-ub", "64", "--predict", "5"]),
        [
            "--system-prompt",
            "be brief",
            "--conversation",
            "--ubatch-size",
            "64",
            "--n-predict",
            "5"
        ]
    );
    assert_eq!(
        ok(&["-no-cnv", "--temperature", "0"]),
        ["--no-conversation", "--temp", "0"]
    );
    assert_eq!(
        ok(&["-sys=hi", "-n=3"]),
        ["--system-prompt=hi", "--n-predict=3"]
    );
    assert_eq!(ok(&["--usage"]), ["--help"]);
}

#[test]
fn same_flags_pass_untouched() {
    let args = [
        "-m", "M", "-p", "hi", "-c", "128", "--top-k", "5", "-e", "-r", "User:",
    ];
    assert_eq!(ok(&args), args);
}

#[test]
fn values_are_never_rewritten() {
    // The prompt is "-sys", the reverse prompt "-fa": values, not flags.
    assert_eq!(
        ok(&["-p", "-sys", "-r", "-fa"]),
        ["-p", "-sys", "-r", "-fa"]
    );
    // sharpi's own value-taking flags too.
    assert_eq!(
        ok(&["--kv-type", "f16", "-g", "-1", "--device", "-ngl"]),
        ["--kv-type", "f16", "-g", "-1", "--device", "-ngl"]
    );
    // A hint flag as the value of a renamed one.
    assert_eq!(ok(&["-sys", "-fa"]), ["--system-prompt", "-fa"]);
    // ... and `=` values are left alone.
    assert_eq!(
        ok(&["--prompt=-cnv", "-cnv"]),
        ["--prompt=-cnv", "--conversation"]
    );
}

#[test]
fn hint_names_the_flag_as_given() {
    let e = tr(&["-m", "M", "-fa"]).unwrap_err();
    assert!(e.starts_with("-fa: llama.cpp's option to "), "{e}");
    assert!(e.contains("attention kernels"), "{e}");
    let e = tr(&["--flash-attn=on"]).unwrap_err();
    assert!(e.starts_with("--flash-attn: "), "{e}");
    let e = tr(&["-ctk", "q8_0"]).unwrap_err();
    assert!(e.contains("--kv-type f32|f16"), "{e}");
    let e = tr(&["--mlock"]).unwrap_err();
    assert!(e.contains("read-only"), "{e}");
    // The first hint wins.
    let e = tr(&["-hf", "x/y", "-fa"]).unwrap_err();
    assert!(e.starts_with("-hf: "), "{e}");
    assert!(!e.contains('\n'));
}

#[test]
fn after_a_subcommand_nothing_changes() {
    for &sub in SUBCOMMANDS.iter().filter(|&&s| s != "run") {
        let args = [sub, "-ngl", "99", "-fa", "-sys", "x"];
        assert_eq!(ok(&args), args, "{sub}");
    }
    // `run` takes the generation flags, so they are translated.
    assert_eq!(ok(&["run", "-ngl", "all"]), ["run", "--gpu-layers", "-1"]);
    assert!(tr(&["run", "-m", "M", "-fa"]).is_err());
    // After `--`, nothing is a flag.
    assert_eq!(ok(&["--", "-fa"]), ["--", "-fa"]);
    // A subcommand name as a value is a value.
    assert_eq!(
        ok(&["-p", "bench", "-cnv"]),
        ["-p", "bench", "--conversation"]
    );
}

#[test]
fn llama_default_seed_and_threads_give_sharpi_defaults() {
    assert_eq!(
        ok(&["-s", "-1", "-t", "-1", "-n", "4"]),
        ["--n-predict", "4"]
    );
    assert_eq!(ok(&["-s=-1", "--threads=0"]), Vec::<String>::new());
    assert_eq!(ok(&["--seed", "4294967295"]), Vec::<String>::new());
    assert_eq!(
        ok(&["--seed", "42", "-t", "2"]),
        ["--seed", "42", "--threads", "2"]
    );
    // llama.cpp's stoul wraps other negative seeds to 32 bits.
    assert_eq!(ok(&["-s", "-2"]), ["--seed", "4294967294"]);
    // Not a number: clap's to refuse.
    assert_eq!(ok(&["-s", "x"]), ["--seed", "x"]);
}

#[test]
fn color_takes_an_optional_toggle() {
    assert_eq!(ok(&["-co", "on"]), ["--color"]);
    assert_eq!(ok(&["--color", "auto", "-p", "x"]), ["--color", "-p", "x"]);
    assert_eq!(ok(&["--color", "off"]), Vec::<String>::new());
    assert_eq!(ok(&["--color=false"]), Vec::<String>::new());
    // Older llama.cpp: a plain switch; the next flag stays a flag.
    assert_eq!(ok(&["--color", "-p", "x"]), ["--color", "-p", "x"]);
    let e = tr(&["--color=sometimes"]).unwrap_err();
    assert!(e.starts_with("--color: "), "{e}");
}

#[test]
fn unknown_and_non_utf8_arguments_pass() {
    assert_eq!(ok(&["--raw", "-x", "stray"]), ["--raw", "-x", "stray"]);
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStringExt;
        let bad = OsString::from_vec(vec![b'-', 0xff]);
        let out = translate(vec!["sharpi".into(), bad.clone(), "-cnv".into()]).unwrap();
        assert_eq!(
            out,
            [OsString::from("sharpi"), bad, "--conversation".into()]
        );
    }
    assert_eq!(translate(vec![]).unwrap(), Vec::<OsString>::new());
}

#[test]
fn every_spelling_is_in_one_option() {
    let mut seen = HashSet::new();
    for o in OPTIONS {
        assert!(!o.spellings.is_empty());
        assert!(o.values <= 2, "{:?}", o.spellings);
        for s in o.spellings {
            assert!(seen.insert(*s), "{s} twice");
            assert!(s.starts_with('-') && !s.contains('='), "{s}");
        }
    }
}

/// The sharpi flag `name`, and whether it takes a value; None when sharpi
/// has no such flag. Top-level flags of the binary (`--version`,
/// `--list-devices`) are checked by the binary's test.
fn sharpi_flag(name: &str) -> Option<bool> {
    let cmd = GenerateArgs::augment_args(clap::Command::new("sharpi"));
    if name == "--help" || name == "-h" {
        return Some(false);
    }
    let found = cmd
        .get_arguments()
        .find(|a| {
            let long = name
                .strip_prefix("--")
                .is_some_and(|l| a.get_long() == Some(l));
            let short = name.len() == 2 && a.get_short() == name.chars().nth(1);
            long || short
        })
        .map(|a| a.get_action().takes_values());
    found
}

#[test]
fn same_and_rewritten_flags_exist_in_sharpi() {
    const TOP_LEVEL: &[&str] = &["--version", "--list-devices"];
    for o in OPTIONS {
        let takes = o.values > 0;
        match o.status {
            Status::Same => {
                for s in o.spellings.iter().filter(|s| !TOP_LEVEL.contains(s)) {
                    assert_eq!(sharpi_flag(s), Some(takes), "{s}");
                }
            }
            Status::Rename(to) => assert_eq!(sharpi_flag(to), Some(takes), "{to}"),
            Status::Convert { to, value } => {
                let takes = value != Value::Toggle;
                assert_eq!(sharpi_flag(to), Some(takes), "{to}");
            }
            Status::Hint { does, instead } => {
                assert!(!does.is_empty() && !instead.is_empty());
                assert!(!does.contains('\n') && !instead.contains('\n'));
            }
        }
    }
}

#[test]
fn every_hint_says_what_its_option_does() {
    let mut seen = HashSet::new();
    for o in OPTIONS {
        if let Status::Hint { does, .. } = o.status {
            assert!(seen.insert(does), "{:?}: {does:?} twice", o.spellings);
        }
    }
}

#[test]
fn markdown_lists_every_option() {
    let md = markdown();
    for o in OPTIONS {
        assert!(
            md.contains(&format!("`{}`", o.spellings[0])),
            "{:?}",
            o.spellings
        );
    }
    assert!(md.contains(
        "| `-ngl`, `--gpu-layers`, `--n-gpu-layers` | a value | rewritten to `--gpu-layers`"
    ));
    assert!(md.contains("--kv-type f32\\|f16"));
}

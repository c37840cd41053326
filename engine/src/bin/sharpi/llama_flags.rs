//! llama.cpp's llama-cli (and llama-completion) flags on sharpi's command
//! line: each is accepted as it is, rewritten to sharpi's spelling before
//! clap parses, or answered with one line saying what sharpi offers
//! instead.
//!
//! [`OPTIONS`] lists every option of the llama.cpp that llama-cpp-sys-2
//! vendors (engine/tests/data/llama-cli-flags.txt, made by
//! scripts/llama-cli-flags, is the list the tests hold it to) and a few
//! older spellings; [`translate`] applies it to an argv; [`markdown`]
//! renders it as docs/llama-cli-flags.md.

mod options;

use std::ffi::OsString;

use clap::Args;

use options::{lookup, Status, Value, SUBCOMMANDS};
#[cfg(test)]
use options::{markdown, OPTIONS};

use super::args::GenerateArgs;

/// Whether sharpi's own generation flag `name` takes a value (from clap's
/// definition of [`GenerateArgs`], so new flags are known here at once).
fn sharpi_takes_value(cmd: &clap::Command, name: &str) -> bool {
    cmd.get_arguments().any(|a| {
        let short = name.len() == 2
            && name.starts_with('-')
            && a.get_short().map(String::from).as_deref() == Some(&name[1..]);
        let long = name
            .strip_prefix("--")
            .is_some_and(|l| a.get_long() == Some(l));
        (short || long) && a.get_action().takes_values()
    })
}

/// llama.cpp's truthy, falsey and auto words (`is_truthy` & co.).
fn toggle_word(s: &str) -> Option<bool> {
    match s {
        "on" | "enabled" | "true" | "1" | "auto" | "-1" => Some(true),
        "off" | "disabled" | "false" | "0" => Some(false),
        _ => None,
    }
}

/// Rewrites llama.cpp flags in `args` (argv, program name first) to
/// sharpi's, or returns the one-line hint (without the `sharpi: error: `
/// prefix) for the first flag sharpi does not accept. Values of
/// value-taking flags (sharpi's or llama.cpp's) are skipped, never
/// rewritten; `--flag=value` and `-x=value` are split at `=`; everything
/// after a subcommand other than `run` is left as it is.
pub fn translate(args: Vec<OsString>) -> Result<Vec<OsString>, String> {
    let cmd = GenerateArgs::augment_args(clap::Command::new("sharpi"));
    let mut rest = args.into_iter().peekable();
    let mut out: Vec<OsString> = rest.next().into_iter().collect();
    let mut positional_seen = false;
    while let Some(arg) = rest.next() {
        let Some(s) = arg.to_str().map(str::to_owned) else {
            out.push(arg);
            continue;
        };
        if s == "--" {
            out.push(arg);
            out.extend(rest);
            break;
        }
        if !s.starts_with('-') || s == "-" {
            let first = !positional_seen;
            positional_seen = true;
            out.push(arg);
            if first && s != "run" && SUBCOMMANDS.contains(&s.as_str()) {
                out.extend(rest);
                break;
            }
            continue;
        }
        let (name, inline) = match s.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (s.as_str(), None),
        };
        let Some(opt) = lookup(name) else {
            out.push(arg);
            if inline.is_none() && sharpi_takes_value(&cmd, name) {
                out.extend(rest.next());
            }
            continue;
        };
        let values = if inline.is_some() {
            0
        } else {
            usize::from(opt.values)
        };
        match opt.status {
            Status::Hint { does, instead } => {
                return Err(format!("{name}: llama.cpp's option to {does}; {instead}"));
            }
            Status::Same => {
                out.push(arg);
                out.extend(rest.by_ref().take(values));
            }
            Status::Rename(to) => {
                out.push(match inline {
                    Some(v) => format!("{to}={v}").into(),
                    None => to.into(),
                });
                out.extend(rest.by_ref().take(values));
            }
            Status::Convert { to, value } => {
                convert(name, inline, to, value, &mut rest, &mut out)?;
            }
        }
    }
    Ok(out)
}

/// Appends the sharpi form of `name` (value `inline`, or taken from
/// `rest`) as [`Value`] says.
fn convert(
    name: &str,
    inline: Option<&str>,
    to: &str,
    value: Value,
    rest: &mut std::iter::Peekable<impl Iterator<Item = OsString>>,
    out: &mut Vec<OsString>,
) -> Result<(), String> {
    if value == Value::Toggle {
        let word = match inline {
            Some(v) => Some(v.to_owned()),
            // Older llama.cpp: a plain switch, so a value is taken only
            // when it is one of the words.
            None => rest
                .next_if(|a| a.to_str().and_then(toggle_word).is_some())
                .and_then(|a| a.into_string().ok()),
        };
        match word.as_deref().map(|w| (w, toggle_word(w))) {
            None | Some((_, Some(true))) => out.push(to.into()),
            Some((_, Some(false))) => {}
            Some((w, None)) => {
                return Err(format!("{name}: expected on, off or auto, not {w:?}"));
            }
        }
        return Ok(());
    }
    let v: Option<OsString> = match inline {
        Some(v) => Some(v.into()),
        None => rest.next(),
    };
    let Some(v) = v else {
        out.push(to.into()); // clap says the value is missing
        return Ok(());
    };
    let number = v.to_str().and_then(|t| t.parse::<i64>().ok());
    match (value, number) {
        (Value::GpuLayers, _) if v == "all" => out.extend([to.into(), "-1".into()]),
        (Value::Threads, Some(n)) if n <= 0 => {}
        (Value::Seed, Some(n)) if n < 0 || n == i64::from(u32::MAX) => {
            // Two's complement truncation, as llama.cpp's stoul then uint32_t.
            let seed = n as u32;
            if seed != u32::MAX {
                out.extend([to.into(), seed.to_string().into()]);
            }
        }
        _ => out.extend([to.into(), v]),
    }
    Ok(())
}

#[cfg(test)]
mod tests;

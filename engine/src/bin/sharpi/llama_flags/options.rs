//! The llama-cli option table and its types, free of the parser: every
//! option with what sharpi does with it ([`OPTIONS`]), sharpi's
//! subcommands, and the table rendered as docs/llama-cli-flags.md
//! ([`markdown`]). The tests read this module on its own (by path), so
//! its submodules are named by path too. The rendering, and the marks it
//! alone reads, serve the tests (a test writes and checks the doc): the
//! binary itself leaves them unused.
#![cfg_attr(not(test), allow(dead_code, unused_imports))]

#[path = "doc.rs"]
mod doc;
#[path = "table.rs"]
mod table;

pub use doc::markdown;
pub use table::OPTIONS;

/// One llama.cpp option: its spellings (as llama.cpp's help lists them, the
/// negated form of a bool option being an option of its own) and what
/// sharpi does with them.
#[derive(Clone, Copy, Debug)]
pub struct LlamaOption {
    /// Every spelling llama.cpp accepts, `-x` and `--long` alike.
    pub spellings: &'static [&'static str],
    /// Values the option takes on llama.cpp's command line (0, 1 or 2).
    pub values: u8,
    /// Accepted, rewritten or refused.
    pub status: Status,
    /// A spelling an older llama.cpp had and the vendored one dropped.
    pub retired: bool,
}

/// What sharpi does with a llama.cpp option.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// sharpi's parser accepts every spelling, with the same meaning.
    Same,
    /// Rewritten to this sharpi flag; a value passes on unchanged.
    Rename(&'static str),
    /// Rewritten to this sharpi flag, the value translated.
    Convert {
        /// The sharpi flag.
        to: &'static str,
        /// How the value changes.
        value: Value,
    },
    /// Not accepted: sharpi exits with code 2 and the line
    /// `FLAG: llama.cpp's option to DOES; INSTEAD`.
    Hint {
        /// What the option does in llama.cpp ("set the ...").
        does: &'static str,
        /// What sharpi offers instead.
        instead: &'static str,
    },
}

/// How a [`Status::Convert`] rewrites a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    /// llama.cpp's layer count: `all` becomes `-1`, the rest stays.
    GpuLayers,
    /// llama.cpp's seed: `-1` (its "random", 0xFFFFFFFF) drops the flag, so
    /// that sharpi draws one; another negative number wraps to 32 bits as
    /// llama.cpp's `stoul` does.
    Seed,
    /// llama.cpp's thread count: 0 or less (its "all cores") drops the
    /// flag, leaving sharpi's default, all cores.
    Threads,
    /// llama.cpp's optional `on|off|auto` (older versions: a plain switch):
    /// on or auto give the sharpi switch, off drops it.
    Toggle,
}

impl Status {
    /// The docs' wording: `same`, `rewritten to X`, `not supported (...); ...`.
    pub fn describe(&self) -> String {
        match *self {
            Status::Same => "same".into(),
            Status::Rename(to) => format!("rewritten to `{to}`"),
            Status::Convert { to, value } => {
                let how = match value {
                    Value::GpuLayers => "`all` becomes `-1`",
                    Value::Seed => "`-1` is dropped: sharpi draws a seed; another negative value wraps to 32 bits",
                    Value::Threads => "0 or less is dropped: sharpi's default, all cores",
                    Value::Toggle => "`on`/`auto`/none give the switch, `off` drops it",
                };
                format!("rewritten to `{to}` ({how})")
            }
            Status::Hint { does, instead } => {
                format!("not supported (llama.cpp's option to {does}); {instead}")
            }
        }
    }
}

/// sharpi's subcommands (and clap's `help`). After one of them the rest of
/// the command line is left alone, except after `run`, which takes the
/// generation flags.
pub const SUBCOMMANDS: &[&str] = &[
    "run",
    "bench",
    "perplexity",
    "inspect",
    "quantize",
    "synth",
    "tokenize",
    "help",
];

/// The option spelled `name` (without `=value`), if any.
pub fn lookup(name: &str) -> Option<&'static LlamaOption> {
    OPTIONS.iter().find(|o| o.spellings.contains(&name))
}

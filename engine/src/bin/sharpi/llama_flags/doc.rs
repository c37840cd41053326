//! docs/llama-cli-flags.md, rendered from the table so that it cannot drift
//! (a test compares the file with [`markdown`]).

use super::{LlamaOption, Status, OPTIONS};

/// The text of docs/llama-cli-flags.md.
pub fn markdown() -> String {
    let count = |f: fn(&Status) -> bool| {
        OPTIONS
            .iter()
            .filter(|o| !o.retired && f(&o.status))
            .count()
    };
    let current = OPTIONS.iter().filter(|o| !o.retired).count();
    let same = count(|s| matches!(s, Status::Same));
    let rewritten = count(|s| matches!(s, Status::Rename(_) | Status::Convert { .. }));
    let hints = count(|s| matches!(s, Status::Hint { .. }));
    let mut md = format!(
        "# llama.cpp's flags on sharpi's command line

<!-- Generated from engine/src/bin/sharpi/llama_flags/ (`llama_flags::markdown` of the sharpi binary);
the test cli_llama_flags::doc_matches_the_table fails when this file differs. -->

A command line written for llama.cpp's `llama-cli` or `llama-completion`
(the old `llama-cli`) runs with `sharpi` as far as sharpi can do what it
asks. Before parsing, sharpi walks the command line: a llama.cpp flag
that sharpi spells the same is left alone, one it spells otherwise is
rewritten (`-ngl 99` becomes `--gpu-layers 99`, `-sys TEXT`
`--system-prompt TEXT`, `-cnv` `--conversation`), and one it does not
support stops the run with exit code 2 and one line naming the flag and
what sharpi offers instead:

```text
$ sharpi -m model.gguf -fa on -p Hello
sharpi: error: -fa: llama.cpp's option to turn Flash Attention on, off or auto; sharpi chooses its attention kernels itself
```

Values are never rewritten as flags (`-p -sys` keeps the prompt `-sys`),
`--flag=value` works for every flag, and the command lines of `sharpi
bench`, `perplexity`, `inspect`, `quantize`, `synth` and `tokenize` are
left as they are (`sharpi run` takes the generation flags, so it is
walked too). The code: `engine/src/bin/sharpi/llama_flags.rs` and its table,
`engine/src/bin/sharpi/llama_flags/table.rs`.

The options are those of the llama.cpp that llama-cpp-sys-2 vendors
([engine/tests/data/llama-cli-flags.txt](../engine/tests/data/llama-cli-flags.txt),
made by [scripts/llama-cli-flags](../scripts/llama-cli-flags) from its
`common/arg.cpp`; a test holds the table to that list): {current}
options, {same} the same in sharpi, {rewritten} rewritten, {hints} not
supported. A few spellings that older llama.cpp versions had follow at
the end.

| llama.cpp flag | takes | sharpi |
|---|---|---|
"
    );
    for o in OPTIONS.iter().filter(|o| !o.retired) {
        md.push_str(&row(o));
    }
    md.push_str("\nSpellings of older llama.cpp versions:\n\n| llama.cpp flag | takes | sharpi |\n|---|---|---|\n");
    for o in OPTIONS.iter().filter(|o| o.retired) {
        md.push_str(&row(o));
    }
    md
}

/// One table row.
fn row(o: &LlamaOption) -> String {
    let flags: Vec<String> = o.spellings.iter().map(|s| format!("`{s}`")).collect();
    let takes = ["", "a value", "two values"][usize::from(o.values.min(2))];
    let status = o.status.describe().replace('|', "\\|");
    format!("| {} | {takes} | {status} |\n", flags.join(", "))
}

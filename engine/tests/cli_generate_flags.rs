//! Generation flags a llama-cli user brings: the chat template said on
//! stderr, `-r`, `--ignore-eos`, `-e`, `-b`/`-ub`, `--chat-template`, and
//! what runs without a prompt.

use crate::gguf_support;

use crate::cli_support::sharpi;
use gguf_support::{model_path, GEMMA3, SMOLLM2};

fn smollm2() -> String {
    model_path(SMOLLM2).to_str().unwrap().to_string()
}

/// A greedy `--json` run of SmolLM2 with `extra` flags.
fn json(prompt: &str, extra: &[&str]) -> (serde_json::Value, String) {
    let model = smollm2();
    let mut args = vec!["-m", &model, "-p", prompt, "--temp", "0", "--json"];
    args.extend_from_slice(extra);
    let o = sharpi(&args);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{err}");
    (serde_json::from_slice(&o.stdout).unwrap(), err)
}

fn ids(v: &serde_json::Value, key: &str) -> Vec<u64> {
    v[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

#[test]
fn the_chat_template_is_said_on_stderr_once() {
    let (v, err) = json("Hi", &["-n", "1"]);
    let n = ids(&v, "prompt_tokens").len();
    let said: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("chat template"))
        .collect();
    assert_eq!(
        said,
        [format!(
            "sharpi: prompt in the chat template (the model's tokenizer.chat_template): \
             {n} tokens; --raw sends it as it is"
        )]
    );
    let (_, err) = json("Hi", &["-n", "1", "--raw"]);
    assert!(!err.contains("chat template"), "{err}");
}

#[test]
fn a_reverse_prompt_stops_generation() {
    let (v, _) = json("The capital of France is", &["--raw", "-n", "12"]);
    let top5 = v["top5"].as_array().unwrap();
    // The greedy text of the first two tokens.
    let r: String = (0..2)
        .map(|i| top5[i][0]["piece"].as_str().unwrap())
        .collect();
    let (w, _) = json(
        "The capital of France is",
        &["--raw", "-n", "12", "-r", "no such text", "-r", &r],
    );
    assert_eq!(w["stop"], "reverse_prompt");
    assert_eq!(ids(&w, "generated"), ids(&v, "generated")[..2]);
}

#[test]
fn ignore_eos_generates_past_the_end_of_turn() {
    let (v, _) = json("What is 2 + 2?", &["-n", "200"]);
    assert_eq!(v["stop"], "eog", "{v}");
    let answered = ids(&v, "generated").len();
    let (w, _) = json("What is 2 + 2?", &["-n", "200", "--ignore-eos"]);
    assert_eq!(w["stop"], "length");
    let generated = ids(&w, "generated");
    assert_eq!(generated.len(), 200);
    assert_eq!(generated[..answered], ids(&v, "generated")[..]);
    // No end-of-generation token among them (<|endoftext|> 0, <|im_end|> 2).
    assert!(!generated.contains(&0) && !generated.contains(&2));
}

#[test]
fn escapes_are_processed_with_e_only() {
    let (newline, _) = json("one\ntwo\t\"3\"", &["--raw", "-n", "0"]);
    let (escaped, _) = json(r#"one\ntwo\t\"3\""#, &["--raw", "-n", "0", "-e"]);
    let (kept, _) = json(r#"one\ntwo\t\"3\""#, &["--raw", "-n", "0"]);
    assert_eq!(
        ids(&escaped, "prompt_tokens"),
        ids(&newline, "prompt_tokens")
    );
    assert_ne!(ids(&kept, "prompt_tokens"), ids(&newline, "prompt_tokens"));
}

#[test]
fn batch_sizes_change_speed_not_tokens() {
    let prompt = "The capital of France is a city that";
    let (v, _) = json(prompt, &["--raw", "-n", "8"]);
    for flags in [["-b", "3"], ["--ubatch-size", "2"]] {
        let (w, _) = json(prompt, &["--raw", "-n", "8", flags[0], flags[1]]);
        assert_eq!(ids(&w, "generated"), ids(&v, "generated"), "{flags:?}");
    }
}

#[test]
fn chat_template_by_name_or_text() {
    // SmolLM2's own template adds a default system message; chatml does not.
    let (own, _) = json("Hi", &["-n", "0"]);
    let (chatml, err) = json("Hi", &["-n", "0", "--chat-template", "chatml"]);
    assert!(err.contains("(built-in chatml)"), "{err}");
    let chatml_ids = ids(&chatml, "prompt_tokens");
    assert!(chatml_ids.len() < ids(&own, "prompt_tokens").len());
    let own_ids = ids(&own, "prompt_tokens");
    assert_eq!(chatml_ids[..], own_ids[own_ids.len() - chatml_ids.len()..]);
    // Jinja text: only the user's text.
    let (text, err) = json(
        "Hi",
        &[
            "-n",
            "0",
            "--chat-template",
            "{{ messages[-1]['content'] }}",
        ],
    );
    assert!(err.contains("(--chat-template text)"), "{err}");
    let (raw, _) = json("Hi", &["-n", "0", "--raw"]);
    assert_eq!(ids(&text, "prompt_tokens"), ids(&raw, "prompt_tokens"));

    let model = smollm2();
    let o = sharpi(&["-m", &model, "-p", "Hi", "--chat-template", "nosuch"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("not a built-in template (chatml, gemma"),
        "{err}"
    );
}

#[test]
fn without_a_prompt_or_a_terminal_there_is_nothing_to_do() {
    let model = smollm2();
    let o = sharpi(&["-m", &model]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.starts_with("sharpi: error: no prompt"), "{err}");
    // A conversation needs a template: Gemma-3-270M (a base model) has none.
    let gemma = model_path(GEMMA3).to_str().unwrap().to_string();
    let o = sharpi(&["-m", &gemma, "--conversation"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("a conversation needs a chat template"),
        "{err}"
    );
    // With a built-in one it runs (stdin is empty: no turn).
    let o = sharpi(&["-m", &gemma, "--conversation", "--chat-template", "gemma"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = sharpi(&["-m", &model, "--conversation", "--raw"]);
    assert_eq!(o.status.code(), Some(2));
}

//! Chat templates rendered as transformers renders them.
//!
//! Expected outputs of the hand-written templates below are Jinja2 3.1.6's,
//! set up as transformers sets it up (ImmutableSandboxedEnvironment with
//! trim_blocks, lstrip_blocks, loopcontrols; its tojson, raise_exception
//! and strftime_now), rendered with bos_token "<s>", eos_token "</s>" and
//! the clock at 2024-07-23 14:05:09. SmolLM2's ChatML renders are written
//! out by hand from its template.

use crate::tokenizer_support;

use engine::chat::{ChatError, ChatTemplate, Message};
use tokenizer_support::*;

/// 2024-07-23 14:05:09 UTC.
const NOW: i64 = 1_721_743_509;

fn template(source: &str) -> ChatTemplate {
    ChatTemplate::new(source, "<s>", "</s>")
        .unwrap()
        .with_fixed_time(NOW)
}

fn render(source: &str, messages: &str, add_generation_prompt: bool) -> Result<String, ChatError> {
    template(source).render_json(messages, add_generation_prompt)
}

fn smollm2_template() -> ChatTemplate {
    ChatTemplate::from_gguf(&open(SMOLLM2), smollm2()).unwrap()
}

const DEFAULT_SYSTEM: &str =
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n";

#[test]
fn smollm2_chatml_adds_its_default_system_prompt() {
    let t = smollm2_template();
    let msgs = [Message::new("user", "Hello!")];
    let want = format!("{DEFAULT_SYSTEM}<|im_start|>user\nHello!<|im_end|>\n");
    assert_eq!(t.render(&msgs, false).unwrap(), want);
    assert_eq!(
        t.render(&msgs, true).unwrap(),
        format!("{want}<|im_start|>assistant\n")
    );
}

#[test]
fn smollm2_chatml_keeps_a_given_system_prompt() {
    let t = smollm2_template();
    let msgs = [
        Message::new("system", "Be brief."),
        Message::new("user", "2+2?"),
        Message::new("assistant", "4"),
        Message::new("user", "And 3+3?"),
    ];
    let want = "<|im_start|>system\nBe brief.<|im_end|>\n\
                <|im_start|>user\n2+2?<|im_end|>\n\
                <|im_start|>assistant\n4<|im_end|>\n\
                <|im_start|>user\nAnd 3+3?<|im_end|>\n";
    assert_eq!(t.render(&msgs, false).unwrap(), want);
    assert_eq!(
        t.render(&msgs, true).unwrap(),
        format!("{want}<|im_start|>assistant\n")
    );
    assert_eq!(t.render(&[], true).unwrap(), "<|im_start|>assistant\n");
}

#[test]
fn rendered_chat_tokenizes_with_control_tokens() {
    let t = smollm2_template();
    let text = t.render(&[Message::new("user", "Hi!")], true).unwrap();
    let ids = smollm2().encode(&text, false, true).unwrap();
    assert_eq!(ids[0], 1, "<|im_start|>");
    assert_eq!(
        ids.iter().filter(|&&i| i == 2).count(),
        2,
        "<|im_end|> twice"
    );
}

#[test]
fn gemma3_has_no_template() {
    let err = ChatTemplate::from_gguf(&open(GEMMA3), gemma3()).unwrap_err();
    assert!(matches!(err, ChatError::NoTemplate), "{err}");
}

#[test]
fn tojson_is_pythons_json_dumps() {
    let msgs = r#"[{"role": "user", "content": "héllo 😀 \"q\" \\ \n \u0001 \u2028"}]"#;
    assert_eq!(
        render("{{ messages[0]['content'] | tojson }}", msgs, false).unwrap(),
        "\"héllo 😀 \\\"q\\\" \\\\ \\n \\u0001 \u{2028}\""
    );
    let msgs = r#"[{"role": "user", "content": "é"}, {"role": "assistant", "content": ""}]"#;
    assert_eq!(
        render("{{ messages | tojson(indent=2) }}", msgs, false).unwrap(),
        "[\n  {\n    \"role\": \"user\",\n    \"content\": \"é\"\n  },\n  {\n    \"role\": \"assistant\",\n    \"content\": \"\"\n  }\n]"
    );
    let msgs = r#"[{"role": "user", "content": "é😀"}]"#;
    assert_eq!(
        render(
            "{{ messages[0] | tojson(ensure_ascii=True, sort_keys=True, separators=(',', ':')) }}",
            msgs,
            false
        )
        .unwrap(),
        r#"{"content":"\u00e9\ud83d\ude00","role":"user"}"#
    );
}

#[test]
fn values_print_as_python_prints_them() {
    let msgs = r#"[{"role": "user", "content": "it's"}]"#;
    let src = "{{ none }}|{{ true }}|{{ false }}|{{ 1.0 }}|{{ 2 }}|{{ 0.1 + 0.2 }}|{{ [1, 'a', none] }}|{{ messages[0] }}|{{ undefined_name }}|";
    assert_eq!(
        render(src, msgs, false).unwrap(),
        "None|True|False|1.0|2|0.30000000000000004|[1, 'a', None]|{'role': 'user', 'content': \"it's\"}||"
    );
}

#[test]
fn python_string_and_dict_methods() {
    let msgs = r#"[{"role": "user", "content": "Hey!"}]"#;
    let src = "{{ '  x  '.strip() }}|{{ 'a,b'.split(',') }}|{{ 'Hi'.upper() }}|{{ 'abc'.startswith('a') }}|{{ 'a-b'.replace('-', '+') }}|{{ 'x'.title() }}|{{ messages[0].content.endswith('!') }}";
    assert_eq!(
        render(src, msgs, false).unwrap(),
        "x|['a', 'b']|HI|True|a+b|X|True"
    );
    let msgs = r#"[{"role": "user", "content": "c"}]"#;
    let src = "{% for k, v in messages[0].items() %}{{ k }}={{ v }};{% endfor %}{{ messages[0].get('missing', 'dflt') }}|{{ messages[0].keys() | list }}";
    assert_eq!(
        render(src, msgs, false).unwrap(),
        "role=user;content=c;dflt|['role', 'content']"
    );
}

#[test]
fn blocks_trim_and_lstrip_and_the_last_newline_goes() {
    let msgs = r#"[{"role": "user", "content": "1"}, {"role": "assistant", "content": "2"}]"#;
    let src = "{% for m in messages %}\n  {% if m.role == 'user' %}\n    U: {{ m.content }}\n  {% else %}\n    A: {{ m.content }}\n  {% endif %}\n{% endfor %}\n{%- if add_generation_prompt %}\nA:\n{% endif %}\n";
    assert_eq!(render(src, msgs, true).unwrap(), "    U: 1\n    A: 2\nA:\n");
    assert_eq!(render("x\n", "[]", false).unwrap(), "x");
}

#[test]
fn loop_controls_namespace_macros_and_globals() {
    let msgs = r#"[{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, {"role": "user", "content": "v"}]"#;
    let src = "{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}{% if m.role == 'system' %}{% continue %}{% endif %}{{ loop.index0 }}{{ m.content }}{% endfor %}";
    assert_eq!(render(src, msgs, false).unwrap(), "1u");

    let msgs = r#"[{"role": "user", "content": "abc"}, {"role": "user", "content": "de"}]"#;
    let src = "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + m.content|length %}{% endfor %}{{ ns.n }}|{{ bos_token }}{{ eos_token }}|{{ tools is none }}";
    assert_eq!(render(src, msgs, false).unwrap(), "5|<s></s>|True");

    let msgs = r#"[{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]"#;
    let src = "{% macro fmt(m) %}[{{ m.role }}]{% endmacro %}{% for m in messages %}{{ fmt(m) }}{% endfor %}";
    assert_eq!(render(src, msgs, false).unwrap(), "[user][assistant]");

    let src = "Today: {{ strftime_now('%d %b %Y') }}";
    assert_eq!(render(src, "[]", false).unwrap(), "Today: 23 Jul 2024");
}

#[test]
fn raise_exception_fails_the_render_with_its_message() {
    let src = "{% if messages[0].role != 'system' %}{{ raise_exception('System message required, got ' + messages[0].role) }}{% endif %}ok";
    let err = render(src, r#"[{"role": "user", "content": "x"}]"#, false).unwrap_err();
    match &err {
        ChatError::Raised(m) => assert_eq!(m, "System message required, got user"),
        other => panic!("expected Raised, got {other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "chat template raised: System message required, got user"
    );
    let ok = render(src, r#"[{"role": "system", "content": "x"}]"#, false);
    assert_eq!(ok.unwrap(), "ok");
}

#[test]
fn a_template_that_loops_forever_runs_out_of_fuel() {
    let src =
        "{% for i in range(100000) %}{% for j in range(100000) %}{{ i }}{% endfor %}{% endfor %}";
    let err = render(src, "[]", false).unwrap_err();
    assert!(matches!(err, ChatError::OutOfFuel { .. }), "{err:?}");
    // Recursion ends at minijinja's recursion limit instead.
    let src = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}";
    let err = render(src, "[]", false).unwrap_err();
    assert!(!err.to_string().contains('\n'), "{err}");
    // A small budget stops even a short loop.
    let t = template("{% for i in range(1000) %}{{ i }}{% endfor %}").with_fuel(100);
    assert!(matches!(
        t.render(&[], false),
        Err(ChatError::OutOfFuel { fuel: 100 })
    ));
}

#[test]
fn templates_cannot_reach_files() {
    for src in [
        "{% include 'README.md' %}",
        "{% import '/etc/passwd' as x %}",
        "{% extends 'base.html' %}",
    ] {
        let err = render(src, "[]", false).unwrap_err();
        assert!(matches!(err, ChatError::Render(_)), "{src}: {err:?}");
    }
}

#[test]
fn errors_are_one_line() {
    let err = ChatTemplate::new("{% for %}\n\n{{", "", "").unwrap_err();
    assert!(matches!(err, ChatError::Syntax(_)), "{err:?}");
    assert!(!err.to_string().contains('\n'), "{err}");
    let err = render(
        "{{ messages[0].content.nope() }}",
        r#"[{"content": "a\nb"}]"#,
        false,
    )
    .unwrap_err();
    assert!(!err.to_string().contains('\n'), "{err}");
    let err = render("{{ x }}", "not json", false).unwrap_err();
    assert!(!err.to_string().contains('\n'), "{err}");
}

/// A render past its memory budget leaves its thread parked with what it
/// held: the template then refuses further renders instead of leaving one
/// more behind each time.
#[test]
fn a_template_past_its_budget_refuses_later_renders() {
    let src = "{% set ns = namespace(s='x') %}{% for i in range(40) %}\
               {% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}";
    let t = template(src).with_limits(engine::chat::RenderLimits {
        memory: 8 << 20,
        ..engine::chat::RenderLimits::default()
    });
    let msgs = [Message::new("user", "hi")];
    let err = t.render(&msgs, true).unwrap_err();
    assert!(
        matches!(err, ChatError::Exceeded(engine::bounded::Exceeded::Bytes { limit }) if limit == 8 << 20),
        "{err:?}"
    );
    assert!(matches!(t.render(&msgs, true), Err(ChatError::Spent)));
}

/// A conversation with a system message and two user turns.
fn two_turns() -> [Message; 4] {
    [
        Message::new("system", "Be brief."),
        Message::new("user", " 2+2? "),
        Message::new("assistant", "4"),
        Message::new("user", "And 3+3?"),
    ]
}

/// The built-in chatml renders what SmolLM2's own template renders (with
/// a system message: SmolLM2's adds a default one when there is none).
#[test]
fn builtin_chatml_renders_as_smollm2s_own() {
    use engine::chat::builtin;
    let tok = smollm2();
    let own = ChatTemplate::from_gguf(&open(SMOLLM2), tok).unwrap();
    let built = ChatTemplate::for_tokenizer(builtin::source("chatml").unwrap(), tok).unwrap();
    let all = two_turns();
    for msgs in [&all[..], &all[..2], &all[..3]] {
        for gen in [false, true] {
            assert_eq!(
                built.render(msgs, gen).unwrap(),
                own.render(msgs, gen).unwrap(),
                "{} messages, add_generation_prompt {gen}",
                msgs.len()
            );
        }
    }
}

/// The built-in gemma: Gemma's turns (the system message in front of the
/// first user turn, the assistant as `model`, contents trimmed), written
/// out by hand from Gemma 3's template.
#[test]
fn builtin_gemma_writes_gemma_turns() {
    use engine::chat::builtin;
    let t = ChatTemplate::new(builtin::source("gemma").unwrap(), "<bos>", "<eos>").unwrap();
    let want = "<bos><start_of_turn>user\nBe brief.\n\n2+2?<end_of_turn>\n\
                <start_of_turn>model\n4<end_of_turn>\n\
                <start_of_turn>user\nAnd 3+3?<end_of_turn>\n\
                <start_of_turn>model\n";
    assert_eq!(t.render(&two_turns(), true).unwrap(), want);
    let want = "<bos><start_of_turn>user\n2+2?<end_of_turn>\n";
    assert_eq!(t.render(&two_turns()[1..2], false).unwrap(), want);
}

/// Every built-in compiles and renders a conversation with its markup
/// around each message's text; names are not Jinja, sources are.
#[test]
fn every_builtin_template_renders() {
    use engine::chat::builtin;
    for name in builtin::names() {
        let source = builtin::source(name).unwrap();
        let t = ChatTemplate::new(source, "<s>", "</s>").unwrap();
        let text = t.render(&two_turns(), true).unwrap();
        for needle in ["Be brief.", "2+2?", "4", "And 3+3?"] {
            assert!(text.contains(needle), "{name}: {text:?} lacks {needle:?}");
        }
        assert!(builtin::is_jinja(source));
        assert!(!builtin::is_jinja(name));
    }
    assert!(builtin::source("no-such").is_none());
}

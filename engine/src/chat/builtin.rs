//! Chat templates by name (`--chat-template chatml`), for a model whose
//! file has no template or a wrong one. Each is the Jinja text of the
//! format as its model family's own template writes it: the same markup,
//! the same handling of a system message, `add_generation_prompt` opening
//! the assistant's turn.

/// The built-in templates: name and Jinja source.
const BUILTIN: [(&str, &str); 6] = [
    (
        "chatml",
        "{%- for m in messages -%}\
         {{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}\
         {%- endfor -%}\
         {%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}",
    ),
    (
        // A system message goes in front of the first user turn; the
        // assistant's role is `model`.
        "gemma",
        "{{ bos_token }}\
         {%- if messages[0]['role'] == 'system' -%}\
         {%- set sys = messages[0]['content'] + '\\n\\n' -%}{%- set rest = messages[1:] -%}\
         {%- else -%}{%- set sys = '' -%}{%- set rest = messages -%}{%- endif -%}\
         {%- for m in rest -%}\
         {%- set role = 'model' if m['role'] == 'assistant' else m['role'] -%}\
         {{ '<start_of_turn>' + role + '\\n' + (sys if loop.first else '') \
         + m['content'] | trim + '<end_of_turn>\\n' }}\
         {%- endfor -%}\
         {%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}",
    ),
    (
        // `[INST]` turns, the system message inside the first one.
        "llama2",
        "{%- if messages[0]['role'] == 'system' -%}\
         {%- set sys = '<<SYS>>\\n' + messages[0]['content'] + '\\n<</SYS>>\\n\\n' -%}\
         {%- set rest = messages[1:] -%}\
         {%- else -%}{%- set sys = '' -%}{%- set rest = messages -%}{%- endif -%}\
         {%- for m in rest -%}\
         {%- if m['role'] == 'user' -%}\
         {{ bos_token + '[INST] ' + (sys if loop.first else '') + m['content'] | trim + ' [/INST]' }}\
         {%- elif m['role'] == 'assistant' -%}\
         {{ ' ' + m['content'] | trim + ' ' + eos_token }}\
         {%- endif -%}\
         {%- endfor -%}",
    ),
    (
        "llama3",
        "{{ bos_token }}\
         {%- for m in messages -%}\
         {{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' \
         + m['content'] | trim + '<|eot_id|>' }}\
         {%- endfor -%}\
         {%- if add_generation_prompt -%}\
         {{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\
         {%- endif -%}",
    ),
    (
        "phi3",
        "{%- for m in messages -%}\
         {{ '<|' + m['role'] + '|>\\n' + m['content'] + '<|end|>\\n' }}\
         {%- endfor -%}\
         {%- if add_generation_prompt -%}{{ '<|assistant|>\\n' }}{%- endif -%}",
    ),
    (
        "zephyr",
        "{%- for m in messages -%}\
         {{ '<|' + m['role'] + '|>\\n' + m['content'] + eos_token + '\\n' }}\
         {%- endfor -%}\
         {%- if add_generation_prompt -%}{{ '<|assistant|>\\n' }}{%- endif -%}",
    ),
];

/// The names of the built-in templates.
pub fn names() -> impl Iterator<Item = &'static str> {
    BUILTIN.iter().map(|&(name, _)| name)
}

/// The Jinja source of the built-in template `name`.
pub fn source(name: &str) -> Option<&'static str> {
    BUILTIN
        .iter()
        .find(|&&(n, _)| n == name)
        .map(|&(_, source)| source)
}

/// Whether a `--chat-template` value is Jinja text rather than a name.
pub fn is_jinja(value: &str) -> bool {
    value.contains("{{") || value.contains("{%")
}

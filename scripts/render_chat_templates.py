"""Chat-template renders for reference-data/chat/ (see render-chat-templates).

The jinja2 environment mirrors transformers' `_compile_jinja_template`
(transformers/utils/chat_template_utils.py): an ImmutableSandboxedEnvironment
with trim_blocks and lstrip_blocks, the loopcontrols extension and the
`{% generation %}` tag (rendered as its body), the `tojson` filter redefined
as json.dumps(x, ensure_ascii=False, indent=None, separators=None,
sort_keys=False) (jinja2's own escapes HTML), and the globals raise_exception,
strftime_now, and (transformers 5) a `dict` without attribute access and a
`namespace` that refuses underscore-prefixed names. The render call passes messages, tools=None,
documents=None, add_generation_prompt and the special tokens (bos_token,
eos_token, unk_token, pad_token: their text, from the GGUF's token list).

strftime_now formats a fixed instant (--now, default 2026-01-01T00:00:00)
instead of the clock, so that renders are reproducible.
"""

import argparse
import datetime
import hashlib
import json
import pathlib
import sys
from importlib.metadata import version

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.utils
from jinja2.sandbox import ImmutableSandboxedEnvironment
from gguf import GGUFReader

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = ROOT / "reference-data"


def compile_template(template: str, now: datetime.datetime):
    class AssistantTracker(jinja2.ext.Extension):
        # transformers tracks {% generation %} blocks to build assistant masks;
        # for rendering text the block is its body.
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            call = self.call_method("_generation_support")
            return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

        def _generation_support(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return now.strftime(format)

    class TemplateDict:
        # dict() without attribute access to the dict type
        def __call__(self, *args, **kwargs):
            return dict(*args, **kwargs)

        def fromkeys(self, *args, **kwargs):
            return dict.fromkeys(*args, **kwargs)

    class TemplateNamespace(jinja2.utils.Namespace):
        # namespaces refuse underscore-prefixed (dunder) attributes
        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check_name(name):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(f"namespace attribute {name!r} starts with an underscore")

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = TemplateNamespace
    return env.from_string(template)


def shown(path: pathlib.Path) -> str:
    """A path relative to the repository when it is inside it."""
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def field_value(reader: GGUFReader, key: str):
    f = reader.fields.get(key)
    return None if f is None else f.contents()


def special_tokens(reader: GGUFReader) -> dict:
    tokens = reader.fields["tokenizer.ggml.tokens"]
    out = {}
    for name, key in [("bos_token", "bos"), ("eos_token", "eos"), ("unk_token", "unknown"), ("pad_token", "padding")]:
        tid = field_value(reader, f"tokenizer.ggml.{key}_token_id")
        if tid is not None:
            out[name] = tokens.contents(int(tid))
    return out


def render(compiled, specials, messages, add_generation_prompt):
    return compiled.render(
        messages=messages,
        tools=None,
        documents=None,
        add_generation_prompt=add_generation_prompt,
        **specials,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--now", default="2026-01-01T00:00:00", help="instant strftime_now formats (ISO 8601)")
    ap.add_argument("--data", default=str(DATA),
                    help="the reference directory (default reference-data/; `harness capture --model` passes its --out)")
    args = ap.parse_args()
    now = datetime.datetime.fromisoformat(args.now)
    data = pathlib.Path(args.data).resolve()

    models = json.loads((data / "models.json").read_text(encoding="utf-8"))["models"]
    conversations = json.loads((data / "prompts" / "conversations.json").read_text(encoding="utf-8"))
    chat_prompts = sorted((data / "prompts").glob("*.chat.json"))
    out_dir = data / "chat"
    out_dir.mkdir(exist_ok=True)

    for m in models:
        out = out_dir / f"{m['id']}.json"
        if not m["has_chat_template"]:
            if out.exists():
                out.unlink()
                print(f"[render-chat-templates] {m['id']}: no chat template, removed {shown(out)}")
            continue
        path = ROOT / m["file"]
        if not path.is_file():
            print(f"render-chat-templates: {path} is missing (scripts/fetch-models?)", file=sys.stderr)
            return 1
        reader = GGUFReader(path)
        template = field_value(reader, "tokenizer.chat_template")
        if template is None:
            print(f"render-chat-templates: {path} has no tokenizer.chat_template", file=sys.stderr)
            return 1
        compiled = compile_template(template, now)
        specials = special_tokens(reader)
        renders = []
        for c in conversations:
            for agp in (False, True):
                renders.append({"id": c["id"], "add_generation_prompt": agp, "text": render(compiled, specials, c["messages"], agp)})
        prompts = []
        for p in chat_prompts:
            spec = json.loads(p.read_text(encoding="utf-8"))
            pid = p.name[: -len(".chat.json")]
            agp = spec["add_generation_prompt"]
            prompts.append({"id": pid, "add_generation_prompt": agp, "text": render(compiled, specials, spec["messages"], agp)})
        doc = {
            "model": m["id"],
            "template_sha256": hashlib.sha256(template.encode("utf-8")).hexdigest(),
            "renderer": {
                "engine": "jinja2 ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, generation tag, "
                "restricted dict and namespace (as transformers 5 compiles templates)",
                "filters": "tojson = json.dumps(ensure_ascii=False) as transformers defines it",
                "globals": "raise_exception, strftime_now, bos_token eos_token unk_token pad_token = "
                + ", ".join(f"{k}={v!r}" for k, v in sorted(specials.items())),
                "gguf": version("gguf"),
                "jinja2": jinja2.__version__,
                "strftime_now": now.isoformat(),
            },
            "conversations": renders,
            "prompts": prompts,
        }
        out.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"[render-chat-templates] {m['id']}: {len(renders)} conversation renders, {len(prompts)} chat prompts -> {shown(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

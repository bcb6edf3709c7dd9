#!/usr/bin/python3
"""Reference renderings of chat templates, made with Python's jinja2.

Renders every chat template of the test material (llama.cpp's
models/templates/*.jinja and the chat_template of each
tokenizers/<name>/tokenizer_config.json, see scripts/fetch_test_material.sh)
for every conversation in tests/template/conversations.json. The jinja2
environment is configured exactly as Hugging Face transformers configures it
for apply_chat_template (transformers/utils/chat_template_utils.py):

  ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                extensions=[AssistantTracker, loopcontrols])
  filters["tojson"]          json.dumps(x, ensure_ascii=False, indent=None,
                                        separators=None, sort_keys=False)
  globals["raise_exception"] raises TemplateError(message)
  globals["strftime_now"]    datetime.now().strftime(format); here "now" is the
                             fixed time in conversations.json so the output is
                             reproducible.

AssistantTracker only adds the {% generation %}...{% endgeneration %} tag,
which renders its body unchanged.

Writes <out>/<template>/<conversation>.txt with the rendered text, or
<out>/<template>/<conversation>.error holding "error: <Type>: <message>" when
jinja2 itself fails (then tessera must fail too). tessera's
template_material_test compares against these files.

Needs Debian's python3-jinja2 (run with /usr/bin/python3).
Usage: render.py [--material DIR] [--conversations FILE] [--out DIR]
"""

import argparse
import datetime
import json
import os
import pathlib
import shutil
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

REPO = pathlib.Path(__file__).resolve().parents[2]


class AssistantTracker(Extension):
    """transformers' {% generation %} tag, without the token-mask bookkeeping."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    def _generation_support(self, caller):
        return caller()


def make_environment(now):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return now.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def token_text(token):
    """A special token from tokenizer_config.json: a string or an AddedToken dict."""
    if isinstance(token, dict):
        return token.get("content")
    return token


def template_sources(material):
    """(name, source, special tokens or None for the conversation set's defaults)."""
    templates_dir = material / "llama.cpp" / "models" / "templates"
    for path in sorted(templates_dir.glob("*.jinja")):
        yield path.stem, path.read_bytes().decode("utf-8"), None
    for config in sorted((material / "tokenizers").glob("*/tokenizer_config.json")):
        data = json.loads(config.read_text(encoding="utf-8"))
        template = data.get("chat_template")
        if isinstance(template, list):  # named templates: use "default"
            template = next((t["template"] for t in template if t.get("name") == "default"), None)
        if not isinstance(template, str):
            continue
        tokens = {}
        for key in ("bos_token", "eos_token", "unk_token", "pad_token"):
            text = token_text(data.get(key))
            if isinstance(text, str):
                tokens[key] = text
        yield "tokenizer-" + config.parent.name, template, tokens


def main():
    default_material = os.environ.get("TESSERA_TEST_MATERIAL", str(pathlib.Path.home() / ".cache/tessera-test-material"))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--material", default=default_material)
    parser.add_argument("--conversations", default=str(REPO / "tests/template/conversations.json"))
    parser.add_argument("--out", default=str(REPO / "tests/template/expected"))
    args = parser.parse_args()

    material = pathlib.Path(args.material)
    conversations = json.loads(pathlib.Path(args.conversations).read_text(encoding="utf-8"))
    now = datetime.datetime.fromisoformat(conversations["now"])
    env = make_environment(now)
    out = pathlib.Path(args.out)
    if out.exists():
        shutil.rmtree(out)

    counts = {"ok": 0, "error": 0}
    for name, source, tokens in template_sources(material):
        directory = out / name
        directory.mkdir(parents=True)
        try:
            template = env.from_string(source)
            compile_error = None
        except Exception as e:  # jinja2 refuses the template itself
            template, compile_error = None, e
        for conversation in conversations["conversations"]:
            context = dict(conversation["context"])
            context.update(tokens if tokens is not None else conversations["special_tokens"])
            error = compile_error
            if error is None:
                try:
                    text = template.render(**context)
                except Exception as e:
                    error = e
            stem = directory / conversation["name"]
            if error is None:
                stem.with_suffix(".txt").write_bytes(text.encode("utf-8"))
                counts["ok"] += 1
            else:
                message = f"error: {type(error).__name__}: {error}\n"
                stem.with_suffix(".error").write_bytes(message.encode("utf-8"))
                counts["error"] += 1
    (out / "README").write_text(
        f"Generated by tools/template_reference/render.py with jinja2 {jinja2.__version__} "
        f"(Python {sys.version.split()[0]}). Do not edit; rerun the script.\n")
    print(f"render.py: {counts['ok']} renderings, {counts['error']} jinja2 errors -> {out}")


if __name__ == "__main__":
    main()

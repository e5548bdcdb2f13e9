#!/usr/bin/python3
"""Renders a tokenizer_config.json's chat template with Jinja2 (the engine Hugging Face uses) for
the cases in a JSON file, and prints the results as a JSON array: the reference etch's native
rendering is compared with.
usage: chat_template.py tokenizer_config.json cases.json
cases: [{"system": null | "...", "user": "...", "think": null | true | false}, ...]"""
import json
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


cfg = json.load(open(sys.argv[1], encoding="utf-8"))
cases = json.load(open(sys.argv[2], encoding="utf-8"))
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
env.globals["raise_exception"] = raise_exception
env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False, **kw)
template = env.from_string(cfg["chat_template"])
out = []
for c in cases:
    messages = ([{"role": "system", "content": c["system"]}] if c.get("system") is not None else []) + [
        {"role": "user", "content": c["user"]}]
    kw = {}
    if c.get("think") is not None:
        kw["enable_thinking"] = c["think"]
    bos = cfg.get("bos_token") or ""
    out.append(template.render(messages=messages, add_generation_prompt=True, bos_token=bos if isinstance(bos, str) else "", **kw))
print(json.dumps(out, ensure_ascii=False))

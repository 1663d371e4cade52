"""MkDocs hooks: reference pages generated from the code at build time, so they cannot drift.

* ``<!-- cli -->`` becomes the help of every command of the typer app, rendered by typer's own
  ``typer utils docs`` generator (mkdocs-click lists no options for typer >= 0.2x, whose click is
  vendored and fails mkdocs-click's ``isinstance(param, click.Option)``).
* ``<!-- schema: dotted.path.Model -->`` becomes that pydantic model's JSON schema, one table
  per section (each field's description is the model's own), each followed by its YAML example
  from ``docs/hooks/plan_examples.yaml``.
* Sphinx roles in docstrings (``:class:`~x.Y```), which mkdocstrings leaves as text, become code.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[2]
_MARK = "<!-- schema: "
_EXAMPLES = Path(__file__).with_name("plan_examples.yaml")
_CLI = "<!-- cli -->"


def on_config(config: Any) -> Any:
    """The checkout's ``scaling`` first (MkDocs restores sys.path after loading a hook)."""
    if str(_ROOT) not in sys.path:
        sys.path.insert(0, str(_ROOT))
    return config


def cli_markdown() -> str:
    """Every command's usage, arguments and options, as ``scaling COMMAND --help`` gives them."""
    import typer
    import typer.cli
    import typer.main

    from scaling.cli import app

    command = typer.main.get_command(app)
    text = typer.cli.get_docs_for_click(obj=command, ctx=typer.Context(command), name="scaling", title="scaling")
    return text.split("\n", 1)[1]  # drop the generator's own page title


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace each marker line with what it names."""
    if _MARK not in markdown and _CLI not in markdown:
        return markdown
    out = []
    for line in markdown.splitlines():
        if line.strip() == _CLI:
            out.append(cli_markdown())
        elif line.startswith(_MARK) and line.rstrip().endswith("-->"):
            dotted = line[len(_MARK):].rstrip()[:-3].strip()
            module, _, name = dotted.rpartition(".")
            model = getattr(importlib.import_module(module), name)
            out.append(render_schema(model.model_json_schema(), name.lower(), examples()))
        else:
            out.append(line)
    return "\n".join(out) + "\n"


_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):<code>~?")


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    """``:class:`~scaling.errors.UserError``` rendered as text plus code becomes the code alone."""
    return _ROLE.sub("<code>", html)


def examples() -> dict[str, str]:
    """Each section's YAML example, by model name."""
    import yaml

    return yaml.safe_load(_EXAMPLES.read_text())


def sections(schema: dict) -> list[tuple[str, dict]]:
    """(name, body) of each model of ``schema``: the root first, then the others in the order they are reached."""
    defs = schema.get("$defs", {})
    order = [schema.get("title", "root")]
    bodies = {order[0]: schema}
    queue = [schema]
    while queue:
        for ref in _refs(queue.pop(0)):
            if ref not in bodies and ref in defs:
                bodies[ref] = defs[ref]
                order.append(ref)
                queue.append(defs[ref])
    return [(name, bodies[name]) for name in order]


def render_schema(schema: dict, prefix: str, examples: dict[str, str] | None = None) -> str:
    """One section per model, the root first: a table of its fields, then its YAML example."""
    examples = examples or {}
    parts = []
    for name, body in sections(schema):
        parts.append(f"### `{name}` {{ #{prefix}-{name.lower()} }}\n")
        if body.get("description"):
            parts.append(_cell(body["description"]) + "\n")
        props = body.get("properties", {})
        required = set(body.get("required", ()))
        parts.append("| field | type | default | constraints | description |")
        parts.append("|---|---|---|---|---|")
        for field, spec in props.items():
            if field in required:
                default = "*required*"
            elif "default" not in spec:
                default = "*computed*"
            elif isinstance(spec["default"], dict):
                default = "its section's defaults"
            else:
                default = _code(spec["default"])
            parts.append(
                f"| `{field}` | {_type(spec, prefix)} | {default} | {_constraints(spec)} | "
                f"{_cell(spec.get('description', ''))} |")
        parts.append("")
        if name in examples:
            parts.append(f"Example:\n\n```yaml\n{examples[name].rstrip()}\n```\n")
    return "\n".join(parts)


def _refs(node: Any) -> list[str]:
    found: list[str] = []
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            found.append(ref.rsplit("/", 1)[-1])
        for key, value in node.items():
            if key != "$defs":
                found.extend(_refs(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(_refs(value))
    return found


def _type(spec: dict, prefix: str) -> str:
    if "$ref" in spec:
        name = spec["$ref"].rsplit("/", 1)[-1]
        return f"[`{name}`](#{prefix}-{name.lower()})"
    if "enum" in spec:
        return " \\| ".join(_code(v) for v in spec["enum"])
    if "const" in spec:
        return _code(spec["const"])
    for key in ("anyOf", "oneOf", "allOf"):
        if key in spec:
            return " or ".join(_type(s, prefix) for s in spec[key])
    kind = spec.get("type")
    if kind == "array":
        return f"list of {_type(spec.get('items', {}), prefix)}"
    if kind == "object" and "additionalProperties" in spec and isinstance(spec["additionalProperties"], dict):
        return f"mapping to {_type(spec['additionalProperties'], prefix)}"
    return kind or "any"


def _constraints(spec: dict) -> str:
    words = {"exclusiveMinimum": ">", "minimum": "≥", "exclusiveMaximum": "<", "maximum": "≤",
             "minLength": "length ≥", "maxLength": "length ≤", "minItems": "items ≥", "maxItems": "items ≤",
             "pattern": "matches"}
    found = [f"{word} {_code(spec[key])}" for key, word in words.items() if key in spec]
    for key in ("anyOf", "items"):
        inner = spec.get(key)
        for sub in inner if isinstance(inner, list) else [inner] if isinstance(inner, dict) else []:
            text = _constraints(sub)
            if text:
                found.append(text)
    return ", ".join(found)


def _code(value: Any) -> str:
    text = json.dumps(value, separators=(", ", ": "))
    if len(text) > 60:
        text = text[:57] + "..."
    return "`" + text.replace("|", "\\|").replace("`", "'") + "`"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")

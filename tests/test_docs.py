"""The documentation's generated reference: every plan and run-spec field is described, and each
section of the plan schema page has a YAML example that its model accepts."""

from __future__ import annotations

import importlib.util
import typing
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from scaling.orchestrator.plan import Plan
from scaling.trainer.spec import RunSpec

HOOKS = Path(__file__).resolve().parents[1] / "docs" / "hooks"


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", HOOKS / "docs_hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def models(root: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """Every model reachable from ``root``'s fields, by class name (as the JSON schema names them)."""
    found: dict[str, type[BaseModel]] = {}
    stack = [root]
    while stack:
        model = stack.pop()
        if model.__name__ in found:
            continue
        found[model.__name__] = model
        for field in model.model_fields.values():
            kinds = [field.annotation]
            while kinds:
                kind = kinds.pop()
                if isinstance(kind, type) and issubclass(kind, BaseModel):
                    stack.append(kind)
                kinds.extend(typing.get_args(kind))
    return found


@pytest.mark.parametrize("root", [Plan, RunSpec])
def test_every_field_is_described(root: type[BaseModel]) -> None:
    undescribed = [f"{name}.{field}" for name, model in models(root).items()
                   for field, info in model.model_fields.items() if not (info.description or "").strip()]
    assert undescribed == [], f"fields without a description (add description= to their Field): {undescribed}"


@pytest.mark.parametrize("root", [Plan, RunSpec])
def test_schema_page_has_a_valid_example_per_section(root: type[BaseModel]) -> None:
    hooks = _hooks()
    examples = hooks.examples()
    known = models(root)
    schema = root.model_json_schema()
    names = [name for name, _ in hooks.sections(schema)]
    assert set(names) <= set(known), set(names) - set(known)
    assert [n for n in names if n not in examples] == [], "sections without an example in docs/hooks/plan_examples.yaml"
    for name in names:
        doc = yaml.safe_load(examples[name])
        if name == root.__name__:
            root.model_validate(doc)
            continue
        assert isinstance(doc, dict) and len(doc) == 1, f"{name}: an example is one section (one top-level key)"
        (value,) = doc.values()
        for item in value if isinstance(value, list) else [value]:
            known[name].model_validate(item)
    page = hooks.render_schema(schema, root.__name__.lower(), examples)
    assert page.count("```yaml") == len(names)
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    assert rows and all(not line.rstrip().endswith("|  |") for line in rows), "a row without a description"

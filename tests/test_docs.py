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


def _check_site():
    spec = importlib.util.spec_from_file_location("check_site", HOOKS / "check_site.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_site_check_wants_math_pages_to_load_the_vendored_katex(tmp_path: Path) -> None:
    check = _check_site()
    page = tmp_path / "fitting" / "index.html"
    page.parent.mkdir(parents=True)
    math = '<span class="arithmatex">\\(L = E\\)</span>'
    page.write_text(f"<html><head></head><body>{math}</body></html>")
    assert len(check.math_problems(tmp_path)) == 3  # none of the three assets loaded
    for asset in check.MATH_ASSETS:
        (tmp_path / asset).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / asset).write_text("")
    tags = ('<link rel="stylesheet" href="../assets/katex/katex.min.css">'
            '<script src="../assets/katex/katex.min.js"></script><script src="../js/katex-render.js"></script>')
    page.write_text(f"<html><head>{tags}</head><body>{math}</body></html>")
    assert check.math_problems(tmp_path) == []
    (tmp_path / "assets/katex/katex.min.css").write_text("@font-face{src:url(fonts/KaTeX_Main-Regular.woff2)}")
    assert check.math_problems(tmp_path) == ["KaTeX's style sheet names a font the site lacks: fonts/KaTeX_Main-Regular.woff2"]
    page.write_text(f"<html><head>{tags.replace('../assets', 'https://cdn.example/assets')}</head><body>{math}</body></html>")
    assert "does not load assets/katex/katex.min.js" in " ".join(check.math_problems(tmp_path))


API_PAGE = HOOKS.parent / "reference" / "api.md"


def api_entries() -> list[tuple[str, str]]:
    """(object path, the page's text since the previous entry) for each ``::: path`` of the API page."""
    entries, before = [], []
    for line in API_PAGE.read_text().splitlines():
        if line.startswith("::: "):
            entries.append((line[4:].strip(), "\n".join(before)))
            before = []
        else:
            before.append(line)
    return entries


def resolve(path: str) -> object:
    import importlib

    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(path)


def test_the_api_page_is_the_public_surface_and_all_of_it() -> None:
    import scaling

    public = {id(getattr(scaling, name)) for name in scaling.__all__ if name != "__version__"}
    public |= {id(getattr(scaling.figures, name)) for name in dir(scaling.figures) if not name.startswith("_")}
    entries = api_entries()
    internal = [path for path, _ in entries if id(resolve(path)) not in public]
    assert internal == [], f"the API page documents names that `scaling` does not export: {internal}"
    shown = {id(resolve(path)) for path, _ in entries}
    missing = [name for name in scaling.api_names() if id(getattr(scaling, name)) not in shown]
    assert missing == [], f"names of scaling.__all__ missing from the API page: {missing}"
    assert id(scaling.vocab) in shown


def test_each_api_entry_has_an_example() -> None:
    without = [path for path, before in api_entries()
               if "Example" not in (getattr(resolve(path), "__doc__", None) or "") and "```python" not in before]
    assert without == [], f"API entries without an example (in the docstring or just above): {without}"

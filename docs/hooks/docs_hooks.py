"""MkDocs hooks: reference pages generated from the code at build time, so they cannot drift.

* ``<!-- cli -->`` becomes the help of every command of the typer app, rendered by typer's own
  ``typer utils docs`` generator (mkdocs-click lists no options for typer >= 0.2x, whose click is
  vendored and fails mkdocs-click's ``isinstance(param, click.Option)``).
* ``<!-- schema: dotted.path.Model -->`` becomes that pydantic model's JSON schema, one table
  per section (each field's description is the model's own), each followed by its YAML example
  from ``docs/hooks/plan_examples.yaml``.
* ``<!-- gallery -->`` becomes a gallery of report figures: the docs build runs the simulated sweep
  of ``docs/hooks/gallery_plan.yaml`` (the real ``run_sweep``: a local Ray, SQLite, the fits),
  writes its report, and shows chosen figures from it, each as a small interactive page (its JSON
  and one plotly.js file copied into the site: no static image exporter is installed, and no
  network is needed to view them). The full report is linked as well.
* Sphinx roles in docstrings (``:class:`~x.Y```), which mkdocstrings leaves as text, become code.
* A page with plotly figures drawn in place (the executed notebook's outputs) loads the site's own
  plotly.js, ``assets/plotly.min.js``, before them.
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
_GALLERY = "<!-- gallery -->"
_GALLERY_PLAN = Path(__file__).with_name("gallery_plan.yaml")
#: The gallery's figures: (the report's div id, caption), in page order.
GALLERY = (
    ("fig-isoflop", "IsoFLOP profiles: loss against N at each compute budget, a parabola fitted to each "
                    "(approach 2), its minimum marked"),
    ("fig-frontiers", "Frontiers: N* and D* against compute from every law, with 95% bands, the next budget marked"),
    ("fig-loss-flops", "Training curves against FLOPs, smoothed, with approach 1's lower envelope"),
    ("fig-contour", "The parametric fit L(N, D) (approach 3) as a contour, with the runs on it"),
    ("fig-hparam-loss-lr", "Hyperparameter bowls: each group's loss against learning rate, its fitted optimum"),
    ("fig-task-0-compute", "A downstream task's chain: accuracy against compute along the frontier"),
    ("fig-task-0-loss", "The same task: accuracy against its task loss (the sigmoid of step 2)"),
)


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
    if _MARK not in markdown and _CLI not in markdown and _GALLERY not in markdown:
        return markdown
    out = []
    for line in markdown.splitlines():
        if line.strip() == _CLI:
            out.append(cli_markdown())
        elif line.strip() == _GALLERY:
            out.append(gallery_markdown(page.url))
        elif line.startswith(_MARK) and line.rstrip().endswith("-->"):
            dotted = line[len(_MARK):].rstrip()[:-3].strip()
            module, _, name = dotted.rpartition(".")
            model = getattr(importlib.import_module(module), name)
            out.append(render_schema(model.model_json_schema(), name.lower(), examples()))
        else:
            out.append(line)
    return "\n".join(out) + "\n"


_built: dict[str, str] = {}  # file name in the site -> its text, written by on_post_build


def gallery_markdown(page_url: str) -> str:
    """Run the gallery's simulated sweep, write its report, and lay out the chosen figures (their files
    go into the site next to the page, ``<page>/gallery/``, in :func:`on_post_build`)."""
    import tempfile

    from plotly.offline import get_plotlyjs

    from scaling.orchestrator.sweep import run_sweep
    from scaling.reports import write_report

    with tempfile.TemporaryDirectory(prefix="scaling-gallery-") as tmp:
        folder = Path(tmp)
        plan = folder / "plan.yaml"
        plan.write_text(_GALLERY_PLAN.read_text().replace("./runs", str(folder / "runs")))
        url = f"sqlite:///{folder / 'gallery.db'}"
        result = run_sweep(plan, db=url, fit=True, report=False, echo=lambda line: None)
        if result.outcome is None or not result.outcome.ok:
            raise RuntimeError(f"the gallery's simulated sweep failed: {result.outcome}")
        report = write_report(url, "gallery", folder / "report.html").read_text()
    figures = report_figures(report)
    missing = [fig_id for fig_id, _ in GALLERY if fig_id not in figures]
    if missing:
        raise RuntimeError(f"the gallery's report has no {', '.join(missing)} (figures: {', '.join(figures)})")
    base = page_url.rstrip("/") + "/gallery" if page_url.strip("/") else "gallery"
    for name in [n for n in _built if n != PLOTLY_JS]:
        del _built[name]
    _built[f"{base}/plotly.min.js"] = get_plotlyjs()
    _built[f"{base}/report.html"] = report
    cells = []
    for fig_id, caption in GALLERY:
        _built[f"{base}/{fig_id}.html"] = _embed(fig_id, figures[fig_id])
        cells.append(f'<figure><iframe src="gallery/{fig_id}.html" title="{caption}" loading="lazy"></iframe>'
                     f"<figcaption>{caption}</figcaption></figure>")
    runs = len(result.outcome.completed)
    plan_text = _GALLERY_PLAN.read_text().rstrip()
    return (f'The sweep behind these figures: {runs} simulated runs (its plan is at the bottom of the page); '
            '<a href="gallery/report.html">its whole report</a> is one file.\n\n'
            '<div class="gallery">\n' + "\n".join(cells) + "\n</div>\n\n"
            '??? note "The gallery\'s plan (`docs/hooks/gallery_plan.yaml`)"\n\n    ```yaml\n'
            + "\n".join("    " + line for line in plan_text.splitlines()) + "\n    ```\n")


def report_figures(report: str) -> dict[str, str]:
    """Each figure of a report, by div id, as its JSON text (from the report's figure-data block)."""
    m = re.search(r'<script type="application/json" id="figure-data">(.*?)</script>', report, re.S)
    if not m:
        raise RuntimeError("the report has no figure-data block")
    return {key: json.dumps(value) for key, value in json.loads(m.group(1)).items()}


def _embed(fig_id: str, fig_json: str) -> str:
    """A page drawing one figure with the site's own plotly.js (no network)."""
    from scaling.reports.blocks import script_json

    return ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>' + fig_id + "</title>"
            '<style>html,body{margin:0;height:100%}#f{width:100%;height:100%}</style></head><body><div id="f"></div>'
            '<script src="plotly.min.js"></script><script type="application/json" id="d">' + script_json(fig_json)
            + '</script><script>var f=JSON.parse(document.getElementById("d").textContent);f.layout=f.layout||{};'
            "f.layout.height=undefined;f.layout.autosize=true;"
            'Plotly.newPlot("f",f.data,f.layout,{responsive:true,displaylogo:false});</script></body></html>')


def on_post_build(config: Any) -> None:
    """Write the gallery's files (plotly.js, each figure's page, the report) into the site."""
    site = Path(config["site_dir"])
    for name, text in _built.items():
        path = site / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):<code>~?")


#: Where the site keeps the plotly.js that pages drawing figures in place load.
PLOTLY_JS = "assets/plotly.min.js"


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    """``:class:`~scaling.errors.UserError``` rendered as text plus code becomes the code alone; a page
    with plotly figures loads :data:`PLOTLY_JS` first (the figures' scripts call it as they are read)."""
    html = _ROLE.sub("<code>", html)
    if 'class="plotly-graph-div"' in html:
        from plotly.offline import get_plotlyjs

        _built.setdefault(PLOTLY_JS, get_plotlyjs())
        up = "../" * len([p for p in page.url.split("/") if p])
        html = f'<script src="{up}{PLOTLY_JS}"></script>\n' + html
    return html


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

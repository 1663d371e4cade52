"""A small simulated sweep with hyperparameter groups and downstream tasks, and what its results say.

The golden comparison (tests/test_sweep_golden.py) and the sweep-end benchmark
(benchmarks/bench_sweep_end.py) both build it: the simulated trainer's runs, trained in this process
through the sweep's own lifecycle (:mod:`in_process_sweep`); then the fits, the recommendation,
the closing answer and the report's text are read back, numbers rounded so that the comparison is
about what the results say, not the last bits of a float.
"""

from __future__ import annotations

import html
import math
import re
from pathlib import Path
from typing import Any

import yaml

from in_process_sweep import train_plan

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
TASKS = [dict(name="sim_easy", E=0.5, A=5.0, B=20.0, alpha=0.3, beta=0.3, chance=0.25, slope=10.0, midpoint=0.95,
              items=4000),
         dict(name="sim_hard", E=0.7, A=8.0, B=30.0, alpha=0.28, beta=0.32, chance=0.25, slope=8.0, midpoint=0.9,
              items=2000)]


#: Four sizes around the simulated law's optimum at four budgets over 30x.
MODELS = [{"n_layer": 2, "d_model": d, "n_head": h} for d, h in ((16, 2), (24, 3), (32, 2), (48, 3))]
BUDGETS = (1.0e11, 3.0e11, 1.0e12, 3.0e12)


def plan_dict(folder: Path, *, budgets: tuple[float, ...] = BUDGETS, models: list[dict] = MODELS,
              lr_factors: tuple[float, ...] = (0.33, 1.0, 3.0), batches: tuple[int, ...] = (256, 512, 1024),
              tasks: list[dict] = TASKS, name: str = "golden") -> dict[str, Any]:
    """examples/sim-hparams.yaml's simulated law and rules on ``models`` x ``budgets``, each point a
    group of ``lr_factors`` x ``batches``, every run scored on ``tasks``."""
    plan = yaml.safe_load((EXAMPLES / "sim-hparams.yaml").read_text())
    plan["name"] = name
    plan["runs_dir"] = str(folder / "runs")
    plan["simulate"]["tasks"] = tasks
    plan["grid"] = [{"compute": list(budgets), "models": models,
                     "hparams": {"lr": {"from": "rule", "factors": list(lr_factors)}, "batch_tokens": list(batches)}}]
    return plan


def build(folder: Path, **kw: Any) -> tuple[str, str, Path]:
    """The sweep trained into a SQLite file under ``folder``: (url, sweep, plan path)."""
    plan = plan_dict(folder, **kw)
    path = folder / "plan.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    url = f"sqlite:///{folder / 'results.db'}"
    train_plan(path, url, folder)
    return url, plan["name"], path


def rounded(value: Any, digits: int = 6) -> Any:
    """``value`` with every float at ``digits`` significant figures (NaN and inf as text), so that the
    stored golden reads easily; the comparison itself is :func:`differences`, with a tolerance."""
    if isinstance(value, dict):
        return {str(k): rounded(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v, digits) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    try:
        f = float(value)
    except (TypeError, ValueError):
        return str(value)
    if not math.isfinite(f):
        return str(f)
    return float(f"{f:.{digits}g}")


#: How far a number may move between machines (BLAS kernels, thread counts, CPUs) and still be the
#: golden one: relative, on top of one unit in the last digit a text printed it with.
RTOL = 2e-3
#: Below this, two numbers are both zero (a residual or a slope at machine precision).
ATOL = 1e-12

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[+-]\d+)?")
_RULE = re.compile(r"([─━═┄┅╌╍])\1+")


def masked(text: str) -> str:
    """``text`` with every number as ``#`` and its layout (runs of spaces, table rules, line breaks)
    collapsed: what a text says once the numbers, and the widths they set, are taken out."""
    return " ".join(_RULE.sub(r"\1", _NUMBER.sub("#", text)).split())


def _last_digit(token: str) -> float:
    """One unit in the last digit of a number as printed (0 for an integer: counts are exact)."""
    mantissa, _, exponent = token.lower().partition("e")
    if "." not in mantissa and not exponent:
        return 0.0
    decimals = len(mantissa.partition(".")[2])
    return float(f"1e{int(exponent or 0) - decimals}")


def _close(got: float, want: float, slack: float = 0.0) -> bool:
    if math.isnan(got) or math.isnan(want):
        return math.isnan(got) and math.isnan(want)
    return abs(got - want) <= RTOL * max(abs(got), abs(want)) + slack + ATOL


def _first_change(got: str, want: str) -> str:
    """Where two masked texts part, with a little of each around it."""
    i = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    return f"...{got[max(0, i - 60):i + 60]!r}, golden ...{want[max(0, i - 60):i + 60]!r}"


def _text_differences(got: str, want: str, where: str) -> list[str]:
    """A text is the golden one if it says the same once its numbers are masked, and each of its
    numbers is within the tolerance of the golden's (plus one unit in the digit it was printed to).
    A line cut short with "…" is compared as far as the shorter of the two goes."""
    cut = got.endswith("…") or want.endswith("…")
    if cut:  # where a line is cut depends on how wide its numbers printed
        got, want = got.rstrip("…").rsplit(" ", 1)[0], want.rstrip("…").rsplit(" ", 1)[0]
    shape_got, shape_want = masked(got), masked(want)
    if cut:
        n = min(len(shape_got), len(shape_want))
        shape_got, shape_want = shape_got[:n], shape_want[:n]
    if shape_got != shape_want:
        return [f"{where}: the text changed: {_first_change(shape_got, shape_want)}"]
    out = []
    for a, b in zip(_NUMBER.findall(got), _NUMBER.findall(want)):
        if not _close(float(a), float(b), max(_last_digit(a), _last_digit(b))):
            out.append(f"{where}: {a}, golden {b}, in {want[:160]!r}")
    return out


def differences(got: Any, want: Any, where: str = "") -> list[str]:
    """Where ``got`` (a snapshot) is not the golden ``want``: numbers compared with a relative
    tolerance (:data:`RTOL`), texts with their numbers masked and then compared as numbers, never
    as formatted digits. A list of texts (a table, a page) is compared as one text, so that a wider
    number moving a column or a line break is not a change."""
    if isinstance(want, dict) and isinstance(got, dict):
        out = [f"{where}/{k}: missing" for k in want if k not in got]
        out += [f"{where}/{k}: not in the golden" for k in got if k not in want]
        for k in want:
            if k in got:
                out += differences(got[k], want[k], f"{where}/{k}")
        return out
    if isinstance(want, list) and isinstance(got, list):
        if want and all(isinstance(v, str) for v in want + got):
            line_by_line = [d for i, (a, b) in enumerate(zip(got, want))
                            for d in _text_differences(a, b, f"{where}[{i}]")]
            if len(got) == len(want) and not line_by_line:
                return []
            as_one = _text_differences("\n".join(got), "\n".join(want), where)
            return as_one and (line_by_line if len(got) == len(want) else as_one)
        if len(got) != len(want):
            return [f"{where}: {len(got)} items, golden {len(want)}"]
        return [d for i, (a, b) in enumerate(zip(got, want)) for d in differences(a, b, f"{where}[{i}]")]
    numbers = (int, float)
    if isinstance(got, numbers) and isinstance(want, numbers) and not isinstance(got, bool) \
            and not isinstance(want, bool):
        if isinstance(got, int) and isinstance(want, int):
            return [] if got == want else [f"{where}: {got}, golden {want}"]
        return [] if _close(float(got), float(want)) else [f"{where}: {got}, golden {want}"]
    if isinstance(got, str) and isinstance(want, str):
        return _text_differences(got, want, where)
    return [] if got == want else [f"{where}: {got!r}, golden {want!r}"]


def page_text(page: str) -> list[str]:
    """The report's visible text, one line per block, without scripts, styles, dates or versions."""
    page = re.sub(r"<(script|style|pre)\b.*?</\1>", " ", page, flags=re.S | re.I)
    page = re.sub(r"<(br|p|div|tr|li|h\d|table|section|caption|figcaption|summary)\b[^>]*>", "\n", page, flags=re.I)
    text = html.unescape(re.sub(r"<[^>]+>", " ", page))
    lines = [" ".join(line.split()) for line in text.splitlines()]
    out = []
    for line in lines:
        if not line:
            continue
        line = re.sub(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d(:\d\d)?( UTC)?", "<time>", line)
        line = re.sub(r"scaling \d+\.\d+\S*", "scaling <version>", line)
        line = re.sub(r"sqlite:///\S+", "<db>", line)
        line = re.sub(r"(/tmp|/private)\S+", "<path>", line)
        line = re.sub(r"\b\d+(\.\d+)? ?(s|ms|MB|KB|kB|MiB|KiB)\b", "<size-or-time>", line)
        out.append(line)
    return out


def _law_view(d: dict[str, Any]) -> dict[str, Any]:
    """What a stored law says: parameters, intervals, verdict, notes (no figure data or replicates)."""
    keep = ("class", "params", "intervals", "reliable", "notes", "pinned", "residual_sd", "extrapolation")
    out = {k: d.get(k) for k in keep if k in d}
    boot = d.get("bootstrap") or {}
    out["bootstrap"] = {k: boot.get(k) for k in ("n", "failed", "unavailable") if k in boot}
    return out


#: Bootstrap replicates of every fit of the golden sweep (few: the comparison is about what is said).
BOOTSTRAP = 20


def snapshot(url: str, sweep: str, plan: dict[str, Any], folder: Path, n_bootstrap: int = BOOTSTRAP) -> dict[str, Any]:
    """The sweep's fits (loss laws, hyperparameter laws, task laws), recommendation, closing answer
    and report text, rounded, as one JSON-ready dict."""
    from scaling.fitting import fit_sweep
    from scaling.fitting.brief import brief
    from scaling.orchestrator.expand import size_recommendation
    from scaling.reports import write_report

    analysis = fit_sweep(url, sweep, n_bootstrap=n_bootstrap)  # the sweep's analysis, once: loss, hparams, tasks
    tasks = analysis.tasks
    rec = size_recommendation(analysis.recommendation, plan)  # the run sized by the plan's rules
    report = write_report(url, sweep, str(folder / "report.html"), analysis=analysis, recommendation=rec)
    summary = analysis.laws_fit()
    fits = summary.to_dict()
    task_laws = tasks.to_dict()
    return rounded({
        "laws": {kind: _law_view(d) for kind, d in fits["laws"].items()},
        "skipped": fits["skipped"],
        "notes": fits["notes"],
        "hparams": fits.get("hparams"),
        "tasks": {name: {"step1": _law_view(t["step1"]), "reliable": t["reliable"], "skipped": t["skipped"],
                         "step2": {form: {k: c.get(k) for k in ("params", "intervals", "notes", "pinned")}
                                   for form, c in t["step2"].items()}}
                  for name, t in task_laws["laws"].items()},
        "recommendation": {k: v for k, v in rec.to_dict().items() if k != "source"},
        "brief": brief(rec, budget_why="10x the largest run", skipped=summary.skipped),
        "fit_table": summary.table().splitlines(),
        "recommend_table": rec.table().splitlines(),
        "tasks_table": tasks.table().splitlines(),
        "report": page_text(report.read_text()),
    })


if __name__ == "__main__":  # `sweep_golden.py FOLDER OUT`: the snapshot of the sweep trained in FOLDER, as JSON
    import json
    import sys

    where, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.write_text(json.dumps(snapshot(f"sqlite:///{where / 'results.db'}", "golden", plan_dict(where), where)))

"""The run to train, for a report's first screen: its shape, N, D, lr, batch and memory per worker, and the
plan that trains it, ready to copy.

Built from the sized recommendation (a :class:`~scaling.fitting.recommend.Recommendation` whose run the
orchestrator sized by the sweep's plan), the same value the closing answer of `scaling sweep` and
`scaling recommend` prints, so the page and the terminal cannot disagree. The plan's text comes from
the orchestrator (:func:`scaling.orchestrator.next_plan.plan_yaml`): this module only shows it.
A run from a flagged law is shown de-emphasised and without a plan: nothing is recommended from it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Optional

from scaling.fmt import escape as e
from scaling.fmt import bounds, num, size
from scaling.reports.blocks import Answer

if TYPE_CHECKING:  # pragma: no cover - names for type hints only
    from scaling.fitting.recommend import Recommendation

#: The element id of the plan's text (the copy button copies it).
PLAN_ID = "next-plan-yaml"


def run_answers(rec: Recommendation, href: str = "#next-run") -> list[Answer]:
    """The run's cells for the first screen's grid of answers: run (shape), N, D, lr, batch, memory per worker.
    Empty without a sized run."""
    run, target = rec.run, rec.target
    if not run or target is None:
        return []
    shape = run.get("shape") or {}
    dims = ", ".join(f"{k} {shape[k]}" for k in ("n_layer", "d_model", "n_head") if k in shape)
    source = rec.run_source or "the plan"
    cells = [Answer("run to train", f"{e(dims)} <span class=\"ci\">(shape from {e(source)})</span>", href),
             Answer("N (parameters)", e(size(run.get("n_params"))), href),
             Answer("D (tokens)", e(size(target.D)), href)]
    for label, key, law, write in (("learning rate", "lr", "lr*", num), ("batch (tokens)", "batch_tokens", "B*", size)):
        if run.get(key) is None:
            continue
        ends = run.get(f"{key}_interval")
        if ends is not None and all(math.isfinite(float(b)) for b in ends):
            value = f"{e(write(run[key]))} {e(bounds(*(float(b) for b in ends), fmt=write))} <span class=\"ci\">(fitted {law} law)</span>"
        else:
            value = f"{e(write(run[key]))} <span class=\"ci\">(from {e(source)})</span>"
        cells.append(Answer(label, value, href))
    memory = run.get("memory_gib")
    if memory is not None and math.isfinite(float(memory)):
        strategy = run.get("strategy") or "does not fit"
        cells.append(Answer("memory per worker", f"{e(num(memory))} GiB <span class=\"ci\">({e(strategy)})</span>", href))
    return cells


def copy_as_plan(plan_text: str) -> str:
    """The next plan's YAML in a block with a button that copies it (HTML; the text is escaped)."""
    return (f'<details class="next-plan"><summary>Copy as plan <button type="button" data-copy="{PLAN_ID}">'
            f'copy</button></summary><pre id="{PLAN_ID}">{e(plan_text)}</pre>'
            '<p class="ci">Save it as next.yaml; <code>scaling plan next.yaml</code> shows its run, '
            "<code>scaling sweep next.yaml</code> trains it (or <code>scaling recommend --emit-plan next.yaml</code>).</p>"
            "</details>")


def next_run_block(rec: Recommendation, plan_text: Optional[str] = None) -> str:
    """The run to train as one block (HTML, id ``next-run``): its cells, then the plan that trains it.

    ``plan_text``: the plan's YAML, given only where a reliable law recommends the run. A run from a
    flagged law is shown greyed, saying it is not recommended, with no plan.
    """
    cells = run_answers(rec)
    if not cells:
        return ""
    flagged = rec.target is None or rec.target.flagged or rec.chosen is None or rec.chosen in rec.unreliable
    grid = '<dl class="answer-grid">' + "".join(
        f'<div class="cell"><dt>{e(a.label)}</dt><dd>{a.value}</dd></div>' for a in cells) + "</dl>"
    if flagged:
        return (f'<div id="next-run" class="next-run unrecommended"><p class="ci">The run the best-determined law would '
                f"size, not recommended: that law is flagged unreliable.</p>{grid}</div>")
    plan = copy_as_plan(plan_text) if plan_text else ""
    from scaling.reports.figures_curves import schedule_block

    return (f'<div id="next-run" class="next-run"><strong>The run to train</strong>{grid}{schedule_block(rec)}'
            f"{plan}</div>")

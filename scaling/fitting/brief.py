"""The few lines that answer a sweep: what to train next, the laws it rests on, the laws left out.

A sweep ends with this instead of every law's full table (``scaling fit`` and ``scaling
recommend`` print those), so the answer is the first thing read. It follows the same honesty
rules as the tables: a law whose fit notes say the data cannot pin it down shows no interval and
is never the one recommended; each such law gets one line with its reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from scaling.fitting.sweep_fit import SHORT
from scaling.fmt import Interval, bounds, flops, size
from scaling.fitting.recommend import Recommendation
from scaling.fitting.core.notes import NoteKind, as_note
from scaling.fitting.core.wording import run_line, short_reason
from scaling.fmt import num

if TYPE_CHECKING:
    from scaling.fitting.moe.moe_fit import MoEFit

#: The family of the laws the recommendation comes from, when a sweep also has laws of sparsity.
DENSE_FAMILY = "dense law"

#: Notes the brief leaves out: what its other lines already say (each law left out has its line, the run
#: line names where its lr and batch come from, and without a run line there is no run to speak of), and
#: what it does not show (the runs worth adding: ``scaling recommend`` lists them with their note).
SAID_ELSEWHERE = frozenset({NoteKind.NO_OPTIMUM, NoteKind.LEFT_OUT, NoteKind.NO_CONSENSUS, NoteKind.RUN_HPARAMS,
                            NoteKind.NEXT_RUNS})


def brief(rec: Recommendation, *, budget_why: str = "", skipped: dict[str, str] | None = None,
          moe: "MoEFit | None" = None) -> list[str]:
    """The answer in a few lines: the recommendation, the laws it rests on, one line per law left out.

    ``budget_why`` says where the budget came from (e.g. "10x the largest run"); ``skipped`` maps
    a law that could not be fitted at all to its reason. ``moe``: the sweep's laws of sparsity, whose
    recommendation at the same budget follows the dense one's (each said to be of its family).
    """
    budget = f"C = {flops(rec.compute)} FLOPs" + (f" ({budget_why})" if budget_why else "")
    chosen = rec.chosen if rec.chosen is not None and rec.chosen not in rec.unreliable else None
    lines: list[str] = []
    if chosen is None:
        why = ("no fitted law is reliable: their fit notes say the data cannot pin them down" if rec.unreliable
               else "no fitted law gives a compute-optimal point with an interval")
        lines.append(f"no recommendation at {budget}: {why}")
    else:
        best = rec.per_law[chosen]
        family = f" ({DENSE_FAMILY})" if moe is not None else ""
        lines.append(f"recommended next run at {budget}, from {_name(chosen)}{family}:")
        lines.append(f"  N* = {_iv(best['N'], size)}, D* = {_iv(best['D'], size)} tokens, loss {_iv(best['loss'], digits=4)}")
        has_interval = [q for q in ("N", "D", "loss") if _ends(best[q]) is not None]
        if has_interval:
            widened = any(best[q].widened for q in has_interval)
            lines.append("  (95% intervals" + ("; widened for extrapolating past the largest fitted budget by the "
                                               "law's own backtest error)" if widened else ")"))
        if rec.run:
            lines.append(f"  as a run: {run_line(rec.run, rec.run_source, rec.hparams)}")
        if rec.schedule is not None:
            from scaling.fitting.curves.advice import advice_lines

            lines.extend(advice_lines(rec.schedule))
        lines.append(f"  why this law: {rec.chosen_why or rec.chosen_reason}")
        if rec.agreement:
            a = rec.agreement
            span = (f"; their 95% intervals together reach {bounds(rec.across_laws.lo, rec.across_laws.hi, fmt=size)}"
                    if rec.across_laws else "")
            lines.append(f"  the {int(a['n_methods'])} reliable laws agree on N* within a factor {a['N_ratio']:.3g}{span}")
        lines.extend(_task_line(task, p) for task, p in rec.tasks.items())
    if moe is not None:
        lines.extend(moe_lines(moe, rec.compute))
    for kind, why in rec.unreliable.items():
        lines.append(f"left out: {_name(kind)}: unreliable: {short_reason(why)}")
    for kind, why in (skipped or {}).items():
        lines.append(f"left out: {_name(kind)}: not fitted: {short_reason(why)}")
    for kind, why in rec.no_optimum.items():
        lines.append(f"left out: {_name(kind)}: {short_reason(why)}")
    lines.extend(f"note: {note}" for note in map(as_note, rec.notes) if note.kind not in SAID_ELSEWHERE)
    return lines


def moe_lines(moe: "MoEFit", compute: float | None = None) -> list[str]:
    """The mixture of experts' answer at ``compute`` (default: 10x its largest measured budget): its law
    (of sparsity, N active) and N_active*, the experts' cut and D*, or why it gives none."""
    best, why = moe.headline(compute)
    if best is None:
        return [f"mixture of experts: no recommendation: {short_reason(why)}"]
    return [f"mixture of experts at C = {flops(best.compute)} FLOPs, from the {best.law} law (law of sparsity; N = active "
            "parameters):", f"  {best.headline()}"]


def _task_line(task: str, prediction: dict[str, Any]) -> str:
    """A task's predicted accuracy at the recommended run by the headline form of step 2, with its
    95% interval or why it has none (the full table, every form with its notes: ``scaling recommend``)."""
    from scaling.fitting.tasks.task_laws import FORMS

    form = next((f for f in FORMS if f in prediction), None)
    if form is None:
        return f"  {task}: no accuracy predicted"
    iv = prediction[form]
    value = iv.value
    if not 0.0 <= value <= 1.0:  # an accuracy outside [0, 1] is no prediction
        return f"  {task}: no accuracy predicted: the {form} chain gives a value outside [0, 1], not an accuracy"
    head = f"  {task} accuracy {num(value)}, by the {form} chain"
    ends = _ends(iv)
    if ends is not None:
        return f"{head}: 95% interval {bounds(max(ends[0], 0.0), min(ends[1], 1.0))}"
    if iv.kind == "unreliable":
        return f"{head}, no interval: {short_reason(iv.withheld or 'its law is unreliable')}"
    return f"{head}{_iv(iv).removeprefix(num(value))}"


def _name(kind: str) -> str:
    return SHORT.get(kind, kind)


def _ends(iv: Interval) -> tuple[float, float] | None:
    return iv.interval


def _iv(iv: Interval, write: Callable[..., str] = num, digits: int = 3) -> str:
    """The value, then its 95% interval or what stands in its place, each number by ``write``."""
    return iv.text(digits, write)

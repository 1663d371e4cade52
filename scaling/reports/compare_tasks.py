"""Downstream task laws across sweeps: the difference of each task's fitted parameters, with intervals.

For every task two sweeps both evaluated, the comparison adds the difference (second minus first)
of step 1's exponents (alpha, beta of the task loss in N and D) and of step 2's shape (the
sigmoid's slope k and transition L0, the exponential error's gamma), with the percentile interval
over all pairs of the two fits' bootstrap replicates, as for the loss laws
(:func:`scaling.reports.compare.exponent_difference`). The task laws are each sweep's analysis'
(:attr:`scaling.fitting.analysis.Analysis.tasks`): nothing is fitted here. A step flagged unreliable
gets no difference. Bounded: at most :data:`MAX_COMPARED_TASKS` tasks; the rest are named in a note.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

if TYPE_CHECKING:  # pragma: no cover - names for type hints only
    from scaling.fitting.tasks.task_laws import TaskFits

#: The parameters compared for each step of a task law.
TASK_PARAMS: dict[str, tuple[str, ...]] = {"step1": ("alpha", "beta"), "sigmoid": ("k", "L0"), "exp": ("gamma",)}
#: Tasks compared at most (the page lists every pair of sweeps for each).
MAX_COMPARED_TASKS = 8


def task_differences(fits: Mapping[str, Optional["TaskFits"]],
                     difference: Callable[..., dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """(rows in the form of :attr:`scaling.reports.compare.Comparison.differences`, notes); empty without tasks.

    ``fits``: each sweep's task laws in comparison order (None: not fitted). ``difference(first, second,
    name, first_name, second_name)`` is the comparison's own (:func:`scaling.reports.compare.exponent_difference`),
    passed in so this module need not import it back.
    """
    fitted = {s: f for s, f in fits.items() if f}
    tried = {s: set(f.laws) | set(f.skipped) for s, f in fitted.items()}  # each sweep's tasks, fitted or not
    shared = sorted(t for t in set().union(*tried.values()) if sum(t in ts for ts in tried.values()) >= 2)
    if not shared:
        return [], []
    notes = []
    if len(shared) > MAX_COMPARED_TASKS:
        notes.append(f"downstream tasks compared: the first {MAX_COMPARED_TASKS} of {len(shared)} shared by two "
                     f"sweeps or more (not compared: {', '.join(shared[MAX_COMPARED_TASKS:][:20])})")
        shared = shared[:MAX_COMPARED_TASKS]
    compared = {s: f for s, f in fitted.items() if any(t in tried[s] for t in shared)}
    for s, f in compared.items():
        notes += [f"{s}: task {t} not fitted: {why}" for t, why in f.skipped.items() if t in shared]
    rows = []
    for a, b in itertools.combinations(list(compared), 2):
        for task in shared:
            la, lb = compared[a].laws.get(task), compared[b].laws.get(task)
            if la is None or lb is None:
                continue
            for step, names in TASK_PARAMS.items():
                first = la.step1 if step == "step1" else la.curves.get(step)
                second = lb.step1 if step == "step1" else lb.curves.get(step)
                if first is None or second is None:
                    continue
                label = f"task {task}: " + ("task loss (step 1)" if step == "step1" else f"{step} (step 2)")
                shared_names = [n for n in names if n in first.intervals() and n in second.intervals()]
                for name in shared_names:  # step 1 along the frontier has no alpha, beta
                    rows.append({"law": f"task:{task}:{step}", "label": label, "exponent": name, "first": a,
                                 "second": b, **difference(first, second, name, a, b)})
    return rows, notes

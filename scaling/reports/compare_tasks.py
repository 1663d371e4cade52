"""Downstream task laws across sweeps: the difference of each task's fitted parameters, with intervals.

For every task two sweeps both evaluated, the comparison adds the difference (second minus first)
of step 1's exponents (alpha, beta of the task loss in N and D) and of step 2's shape (the
sigmoid's slope k and transition L0, the exponential error's gamma), with the percentile interval
over all pairs of the two fits' bootstrap replicates, as for the loss laws
(:func:`scaling.reports.compare.exponent_difference`). A step flagged unreliable gets no
difference. Bounded: at most :data:`MAX_COMPARED_TASKS` tasks; the rest are named in a note.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Sequence

from scaling.fitting.tasks.task_laws import fit_tasks, tasks_from_db

#: The parameters compared for each step of a task law.
TASK_PARAMS: dict[str, tuple[str, ...]] = {"step1": ("alpha", "beta"), "sigmoid": ("k", "L0"), "exp": ("gamma",)}
#: Tasks compared at most (each is a fit with a bootstrap per sweep).
MAX_COMPARED_TASKS = 8
#: Bootstrap replicates of each task fit made for a comparison.
COMPARE_BOOTSTRAP = 100


def task_differences(url: str, sweeps: Sequence[str], difference: Callable[..., dict[str, Any]], *,
                     n_bootstrap: int = COMPARE_BOOTSTRAP, seed: int = 0) -> tuple[list[dict[str, Any]], list[str]]:
    """(rows in the form of :attr:`scaling.reports.compare.Comparison.differences`, notes); empty without tasks.

    ``difference(first, second, name, first_name, second_name)`` is the comparison's own
    (:func:`scaling.reports.compare.exponent_difference`), passed in so this module need not import it back.
    """
    evaluated = {s: tasks_from_db(url, s) for s in sweeps}
    shared = sorted(t for t in {t for td in evaluated.values() for t in td.tasks()}
                    if sum(t in td.tasks() for td in evaluated.values()) >= 2)
    if not shared:
        return [], []
    notes = []
    if len(shared) > MAX_COMPARED_TASKS:
        notes.append(f"downstream tasks compared: the first {MAX_COMPARED_TASKS} of {len(shared)} shared by two "
                     f"sweeps or more (not compared: {', '.join(shared[MAX_COMPARED_TASKS:][:20])})")
        shared = shared[:MAX_COMPARED_TASKS]
    fits = {s: fit_tasks(td.only([t for t in shared if t in td.tasks()]), n_bootstrap=n_bootstrap, seed=seed,
                         run_backtest=False) for s, td in evaluated.items() if any(t in td.tasks() for t in shared)}
    for s, f in fits.items():
        notes += [f"{s}: task {t} not fitted: {why}" for t, why in f.skipped.items()]
    rows = []
    for a, b in itertools.combinations(list(fits), 2):
        for task in shared:
            la, lb = fits[a].laws.get(task), fits[b].laws.get(task)
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

"""Downstream-task measurements as one tidy frame, from a sweep's database or a CSV's task columns.

``TaskData.evals`` has one row per (run, evaluation step, task): ``run_key, N, D, C, tokens,
final, task, acc, acc_norm, bpb, loss``. ``final`` marks a run's last evaluation (the (N, D)
point step 1 fits); every row is an evaluation step 2 fits. ``loss`` is the run's own loss at
that evaluation, the task loss of a task that reports no bits per byte (Gadre et al. relate
error to the validation loss, not to a task loss). ``D`` and ``C`` of an evaluation are the tokens
and compute spent up to it, the same from a sweep and from a CSV with intermediate evaluations
(:mod:`scaling.fitting.tasks.task_evaluations`). ``TaskData.chance`` holds each task's chance level
where it is known (the mean of 1 / choices over a task file's items, a CSV's ``chance_<task>``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from scaling.accounting import FLOPS_PER_PARAM_TOKEN
from scaling.errors import FitError
from scaling.fitting.core.measurements import ALIASES, FitData, read_rows
from scaling.fitting.core.sweep_data import fitted_runs
from scaling.fitting.core.tabular import parse_numbers
from scaling.fitting.tasks.task_columns import (MAX_TASKS, TASK_KINDS, TASK_PREFIX, chance_column, metric_name,
                                                parse_column, parse_metric, task_name_problem)
from scaling.quantities import RULES, broken
from scaling.fitting.tasks.task_evaluations import RUN_COLUMN, TOKENS_COLUMN, Evaluations, split_evaluations

COLUMNS = ("run_key", "N", "D", "C", "tokens", "final", "task", "acc", "acc_norm", "bpb", "loss")


@dataclass
class TaskData:
    """Every task evaluation of a sweep or file, and the conventions of its N and C."""

    evals: pd.DataFrame
    flops_per_param_token: float = FLOPS_PER_PARAM_TOKEN
    source: str = ""
    notes: list[str] = field(default_factory=list)
    chance: dict[str, float] = field(default_factory=dict)

    def tasks(self) -> list[str]:
        return sorted(self.evals["task"].unique().tolist()) if len(self.evals) else []

    def of(self, task: str) -> pd.DataFrame:
        return self.evals[self.evals["task"] == task]

    def only(self, tasks: list[str] | None) -> "TaskData":
        """The same data restricted to ``tasks`` (all when None); an unknown name is refused."""
        if not tasks:
            return self
        unknown = [t for t in tasks if t not in set(self.tasks())]
        if unknown:
            raise FitError(f"{self.source}: no task {unknown[0]!r} (tasks: {', '.join(self.tasks()[:20]) or 'none'})")
        return TaskData(self.evals[self.evals["task"].isin(tasks)].reset_index(drop=True),
                        self.flops_per_param_token, self.source, list(self.notes),
                        {t: c for t, c in self.chance.items() if t in tasks})


def empty() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object if c in ("run_key", "task") else float) for c in COLUMNS})


def best_of_groups(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` with each hyperparameter group (``hparam_group``) reduced to its lowest-loss run: a
    point's task law follows its tuned run, not the average of its learning rates and batches."""
    if "hparam_group" not in runs or runs["hparam_group"].isna().all():
        return runs
    grouped = runs["hparam_group"].notna()
    ranked = runs[grouped].assign(_order=pd.to_numeric(runs.loc[grouped, "loss"], errors="coerce").fillna(np.inf))
    best = ranked.sort_values("_order", kind="stable").drop_duplicates("hparam_group").drop(columns="_order")
    return pd.concat([runs[~grouped], best]).sort_index()


# -- from the database ------------------------------------------------------------------------------
def from_db(url: str, sweep: str, data: FitData | None = None) -> TaskData:
    """The task metrics of ``sweep``'s completed runs (every evaluation step); empty without any."""
    from scaling import db
    from scaling import vocab as names

    k = data.flops_per_param_token if data is not None else FLOPS_PER_PARAM_TOKEN
    with db.connect(url) as res:
        runs = best_of_groups(fitted_runs(res.runs(sweep=sweep, spec=False)))  # the runs the loss laws use
        if not len(runs):
            return TaskData(empty(), k, f"sweep {sweep!r}")
        summary = res.metric_summary(sweep=sweep, run_keys=list(runs["run_key"]))
        wanted = sorted(n for n in summary["name"].unique() if parse_metric(str(n)) is not None)
        if not wanted:
            return TaskData(empty(), k, f"sweep {sweep!r}")
        tasks = sorted({parse_metric(n)[0] for n in wanted})  # type: ignore[index]
        if len(tasks) > MAX_TASKS:
            raise FitError(f"sweep {sweep!r} has {len(tasks)} tasks, more than the {MAX_TASKS} fitted at once")
        m = res.metrics(run_keys=list(runs["run_key"]), names=wanted + [names.EVAL_LOSS], sweep=sweep)
        events = res.events(sweep=sweep, kinds=[names.DATA, names.SIMULATED])
        events = events[events["run_key"].isin(set(runs["run_key"]))]
    evals = _tidy(m, runs, k)
    check_stored(evals, f"sweep {sweep!r}")
    return TaskData(evals, k, f"sweep {sweep!r}", chance=chance_of_events(events, tasks))


def chance_of_events(events: pd.DataFrame, tasks: list[str]) -> dict[str, float]:
    """Each task's chance level as the runs recorded it: the ``data`` event's ``tasks`` (a task file's
    mean 1 / choices) or the ``simulated`` event's task laws; a task whose runs disagree gets none."""
    seen: dict[str, set[float]] = {}
    for detail in events["detail"] if len(events) else []:
        got = detail.get("tasks") if isinstance(detail, dict) else None
        if isinstance(got, dict):
            pairs = [(name, v.get("chance")) for name, v in got.items() if isinstance(v, dict)]
        elif isinstance(got, list):
            pairs = [(v.get("name"), v.get("chance")) for v in got if isinstance(v, dict)]
        else:
            continue
        for name, c in pairs:
            if name in tasks and isinstance(c, (int, float)) and RULES["chance"].allows(float(c)):
                seen.setdefault(str(name), set()).add(round(float(c), 9))
    return {t: next(iter(v)) for t, v in seen.items() if len(v) == 1}


def _tidy(m: pd.DataFrame, runs: pd.DataFrame, k: float = FLOPS_PER_PARAM_TOKEN) -> pd.DataFrame:
    """Long metric rows -> one row per (run, step, task) with acc, acc_norm, bpb and the run's eval loss;
    an evaluation's C is the compute spent up to it, k N tokens (k: the FLOP convention's C / (N D))."""
    if m is None or not len(m):
        return empty()
    m = m.drop_duplicates(["run_key", "step", "name"], keep="last")
    loss = m[~m["name"].str.startswith(TASK_PREFIX)][["run_key", "step", "value"]].rename(columns={"value": "loss"})
    t = m[m["name"].str.startswith(TASK_PREFIX)].copy()
    parsed = t["name"].map(parse_metric)
    t = t[parsed.notna()]
    t["task"] = [p[0] for p in parsed.dropna()]
    t["kind"] = [p[1] for p in parsed.dropna()]
    wide = t.pivot_table(index=["run_key", "step", "tokens", "task"], columns="kind", values="value",
                         aggfunc="last").reset_index()
    for kind in TASK_KINDS:
        if kind not in wide:
            wide[kind] = np.nan
    wide = wide.merge(loss, on=["run_key", "step"], how="left")
    info = runs[["run_key", "N"]].astype({"N": float})
    wide = wide.merge(info, on="run_key", how="inner")
    wide["D"] = wide["tokens"].astype(float)
    last = wide.groupby("run_key")["step"].transform("max")
    wide["final"] = wide["step"] == last
    wide["C"] = k * wide["N"] * wide["D"]
    return wide[list(COLUMNS)].reset_index(drop=True)


# -- from a CSV's columns ---------------------------------------------------------------------------
def from_frame(df: pd.DataFrame, data: FitData, *, source: str = "frame",
               row_label: Callable[[int], str] | None = None) -> TaskData:
    """The task columns of a measurements table (one row = one evaluation; by default a run's final one).

    Columns ``task/<task>/<kind>``, ``<kind>_<task>`` (kind acc, acc_norm, bpb) or ``err_<task>``
    (1 - accuracy). Accuracies and errors must lie in [0, 1], bits per byte be positive; an empty
    cell means the task was not measured on that row. ``chance_<task>``: the task's chance level,
    one value in [0, 1). With columns ``run`` and ``tokens`` a run's rows are its evaluations
    (:mod:`scaling.fitting.tasks.task_evaluations`): the one at ``tokens`` = ``D`` is final, the others
    are checkpoints, fitted by step 2 only. N, D, C and loss are read as
    :func:`scaling.fitting.core.measurements.from_frame` reads them (:func:`scaling.fitting.core.measurements.read_rows`: the same
    columns, checks, loss units and FLOP convention, those ``data`` was read with). ``row_label``
    names a row in messages (``data row <i + 1>`` by default).
    """
    where = f"{source}: " if source else ""
    cols = [str(c) for c in df.columns]
    df = df.set_axis(cols, axis=1)
    task_cols, chance_cols = _task_columns(cols, where)
    if not task_cols:
        return TaskData(empty(), data.flops_per_param_token, source)
    tasks = sorted({t for t, _ in task_cols})
    if len(tasks) > MAX_TASKS:
        raise FitError(f"{where}{len(tasks)} tasks, more than the {MAX_TASKS} fitted at once: keep the columns of "
                       "the tasks you want (or name them with --task)")
    unknown = sorted(set(chance_cols) - set(tasks))
    if unknown:
        raise FitError(f"{where}column {chance_cols[unknown[0]]!r} gives the chance level of {unknown[0]!r}, a task "
                       "with no accuracy column")
    chance = {t: _chance(df[c], c, where) for t, c in chance_cols.items()}
    label = row_label or (lambda i: f"data row {i + 1}")
    evaluations = split_evaluations(df, where, label, n_names=ALIASES["N"])
    if evaluations is not None:  # tokens is the evaluation's, not another name of the run's D
        cols = [c for c in cols if c.lower().strip() not in (RUN_COLUMN, TOKENS_COLUMN)]
    base = _base_columns(df, cols, data, where, label, evaluations)
    notes = []
    if evaluations is not None:
        k = data.flops_per_param_token
        base["run_key"] = evaluations.run
        base["tokens"] = evaluations.tokens
        base["final"] = evaluations.final
        base["C"] = np.where(evaluations.final, base["C"], k * base["N"] * evaluations.tokens)
        base["D"] = evaluations.tokens
        n_mid = int((~evaluations.final).sum())
        notes.append(f"{n_mid} intermediate evaluation(s) of {len(set(evaluations.run))} runs (column 'run'): "
                     "step 2 fits them, step 1 and the loss laws the final ones")
        if evaluations.runs_without_final:
            notes.append(f"{evaluations.runs_without_final} run(s) without a final evaluation (no row at tokens = D): "
                         "step 2 fits their checkpoints, step 1 and the loss laws do not see them")
    rows = []
    for task in tasks:
        frame = base.copy()
        frame["task"] = task
        for kind in TASK_KINDS:
            col = task_cols.get((task, kind))
            is_err = col is not None and col.lower().startswith("err_")
            frame[kind] = np.nan if col is None else _task_values(df[col], col, kind, where, err=is_err)
        frame = frame[frame["usable"] & frame[list(TASK_KINDS)].notna().any(axis=1)]
        if not len(frame):
            raise FitError(f"{where}task {task!r} has no measured value in any row")
        rows.append(frame)
    evals = pd.concat(rows, ignore_index=True)[list(COLUMNS)]
    return TaskData(evals, data.flops_per_param_token, source, notes, chance)


def _task_columns(cols: list[str], where: str) -> tuple[dict[tuple[str, str], str], dict[str, str]]:
    """The table's task columns, ``(task, kind) -> column``, and its chance columns, ``task -> column``."""
    task_cols: dict[tuple[str, str], str] = {}
    chance_cols: dict[str, str] = {}
    for c in cols:
        if (task := chance_column(c)) is not None:
            chance_cols[task] = c
            continue
        parsed = parse_column(c)
        if parsed is None:
            continue
        task, kind = parsed
        if kind not in TASK_KINDS + ("err",):
            raise FitError(f"{where}column {c!r}: unknown task measurement {kind!r} (use one of "
                           f"{', '.join(TASK_KINDS + ('err',))})")
        problem = task_name_problem(task)
        if problem:
            raise FitError(f"{where}column {c[:80]!r}: {problem}")
        key = (task, "acc" if kind == "err" else kind)
        if key in task_cols:
            raise FitError(f"{where}columns {task_cols[key]!r} and {c!r} both give {key[1]} of task {task!r}: keep one")
        task_cols[key] = c
    return task_cols, chance_cols


def _chance(col: pd.Series, name: str, where: str) -> float:
    """A task's chance level: one value in [0, 1) on every row that gives one."""
    parsed = parse_numbers(col)
    v = parsed.values
    bad = parsed.unreadable | broken("chance", v)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise FitError(f"{where}column {name!r}, data row {i + 1}: {str(col.iloc[i])[:40]!r}: {RULES['chance'].says}")
    given = np.flatnonzero(np.isfinite(v))
    if not given.size:
        raise FitError(f"{where}column {name!r} gives no chance level in any row")
    other = given[~np.isclose(v[given], v[given[0]], rtol=1e-9, atol=1e-12)]
    if other.size:
        raise FitError(f"{where}column {name!r}, data row {other[0] + 1}: {v[other[0]]:.6g} differs from "
                       f"{v[given[0]]:.6g} at data row {given[0] + 1}: a task has one chance level")
    return float(v[given[0]])


def _task_values(col: pd.Series, name: str, kind: str, where: str, *, err: bool) -> np.ndarray:
    parsed = parse_numbers(col)
    v = parsed.values
    if parsed.unreadable.any():
        i = int(np.flatnonzero(parsed.unreadable)[0])
        raise FitError(f"{where}column {name!r}, data row {i + 1}: cannot read {str(col.iloc[i])[:40]!r} as a number")
    rule = "err" if err else kind
    bad = broken(rule, v)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise FitError(f"{where}column {name!r}, data row {i + 1}: {float(v[i])!r}: {RULES[rule].says}")
    return 1.0 - v if err else v


def check_stored(evals: pd.DataFrame, source: str) -> None:
    """Refuse task values read back from the database that a CSV cell could not hold (the same
    rules, :mod:`scaling.quantities`), in one line naming the run, its step and the metric."""
    for kind in TASK_KINDS:
        bad = broken(kind, evals[kind].to_numpy(float))
        if bad.any():
            row = evals.iloc[int(np.flatnonzero(bad)[0])]
            raise FitError(f"{source}: run {row['run_key']} at {int(row['tokens']):,} tokens: "
                           f"{metric_name(str(row['task']), kind)} = {float(row[kind])!r} in the database: "
                           f"{RULES[kind].says}; {int(bad.sum())} such value(s), none fitted")


def _base_columns(df: pd.DataFrame, cols: list[str], data: FitData, where: str, label: Callable[[int], str],
                  evaluations: Evaluations | None) -> pd.DataFrame:
    """Per row: N, D, C and the loss in nats, read as the loss fit reads them (:func:`~scaling.fitting.core.measurements.read_rows`:
    the same columns, checks, units and FLOP convention, from ``data``); a row the loss fit drops
    (``--drop-invalid``) is not usable. An intermediate evaluation may leave its loss empty."""
    rows = read_rows(df[cols], flops_convention=data.flops_convention, params_convention=data.params_convention,
                     loss_units=data.loss_units, drop_invalid=data.drop_invalid, where=where, label=label,
                     blank_loss=None if evaluations is None else ~evaluations.final)

    def every_row(name: str) -> np.ndarray:
        out = np.full(len(df), np.nan)
        out[rows.keep] = rows.values[name].to_numpy(float)
        return out

    D = every_row("D")
    return pd.DataFrame({"run_key": [f"row {i + 1}" for i in range(len(df))], "N": every_row("N"), "D": D,
                         "C": every_row("C"), "tokens": D, "final": True, "loss": every_row("loss"),
                         "usable": rows.keep})

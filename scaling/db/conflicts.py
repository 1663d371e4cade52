"""A sweep holds one run per point: a changed plan may add points, never retrain one differently.

Runs are keyed by everything that shapes their result, so a plan edited between two
``scaling sweep`` calls of the same sweep (another lr, noise, corpus, schedule) gives new keys
for the same (shape, D, seed). Registered beside the old ones they would be fitted together as if
they were seeds of one point, and an adaptive sweep would spend past its budget on them: refused,
unless the old run never became a point (it failed, or never trained). A hyperparameter sweep
holds several runs per point on purpose: there a point is also the run's group and its learning
rate, batch and beta2, so a group may gain combinations but not retrain one differently.

The run a changed plan takes the place of (one that never became a point) is ``superseded``: no
plan trains it any more, so it is neither pending nor compute still to spend. A plan that names it
again (the change undone) claims it as it would a pending run.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

from sqlalchemy import Connection, select

from scaling.db.models import Run
from scaling.errors import PlanError
from scaling.vocab import COMPLETED, RUNNING

#: The run columns that make two runs the same point of a sweep (with whether it is a branch:
#: a branch, which has a parent, is not its trunk).
POINT_COLUMNS = ("n_layer", "d_model", "n_head", "vocab_size", "context", "tokens", "seed")
#: Runs that are (or are becoming) a point of the fits. A failed, interrupted or pending run of an
#: earlier plan is not one: a corrected plan (a lower lr after a divergence) may take its place.
HOLDS_A_POINT = (COMPLETED, RUNNING)
#: The same in a ``RunSpec.record()``.
_RECORD_FIELDS = ("n_layer", "d_model", "n_head", "vocab_size", "context", "D", "seed")


def _point(values: Iterable[Any], parent: Optional[str], group: Optional[str] = None, spec: object = None) -> tuple:
    return tuple(int(v) for v in values) + (parent is None,) + _combination(group, spec)


def _combination(group: Optional[str], spec: object) -> tuple:
    """A grouped run's place in its group: (group, lr, batch, beta2); () for a run of no group."""
    if group is None:
        return ()
    spec = spec if isinstance(spec, dict) else {}
    optimizer = spec.get("optimizer") or {}
    return (group, optimizer.get("lr"), spec.get("batch_tokens"), optimizer.get("beta2"))


def differences(old: object, new: object, prefix: str = "") -> list[str]:
    """Dotted paths at which two specs (plain JSON values) differ."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for k in sorted(set(old) | set(new), key=str):
            out += differences(old.get(k), new.get(k), f"{prefix}{k}.")
        return out
    return [] if old == new else [prefix.rstrip(".") or "(the spec)"]


def refuse_changed_points(conn: Connection, sweep_id: int, sweep: str, records: Iterable[dict[str, Any]]) -> None:
    """Raise PlanError when a new run (a ``RunSpec.record()``) sits on a point the sweep holds under another key."""
    wanted = {_point((r[f] for f in _RECORD_FIELDS), r.get("parent_key"), r.get("hparam_group"), r["spec"]): r
              for r in records}
    cols = [getattr(Run, c) for c in POINT_COLUMNS]
    live = select(Run.key, Run.parent_key, Run.hparam_group, *cols).where(
        Run.sweep_id == sweep_id, Run.status.in_(HOLDS_A_POINT))
    for row in conn.execute(live):
        values = row._asdict()
        spec = None
        if row.hparam_group is not None:  # its combination is in its spec
            spec = conn.scalar(select(Run.spec).where(Run.sweep_id == sweep_id, Run.key == row.key))
        new = wanted.get(_point((values[c] for c in POINT_COLUMNS), row.parent_key, row.hparam_group, spec))
        if new is None or new["key"] == row.key:
            continue
        old_spec = conn.scalar(select(Run.spec).where(Run.sweep_id == sweep_id, Run.key == row.key))
        changed = differences(old_spec, new["spec"]) or ["its key"]
        shown = ", ".join(changed[:4]) + (f" and {len(changed) - 4} more" if len(changed) > 4 else "")
        raise PlanError(
            f"sweep {sweep!r} already holds run {row.key} at this point (d_model {values['d_model']}, "
            f"{values['n_layer']} layers, D = {values['tokens']:,} tokens, seed {values['seed']}); this plan would "
            f"train it again as {new['key']}, differing in {shown}: use another sweep name, or undo the change"
        )


def replaced_runs(conn: Connection, sweep_id: int, records: Iterable[dict[str, Any]],
                  replaceable: Iterable[str]) -> list[str]:
    """The runs a plan's ``records`` replace: a run of the sweep in a ``replaceable`` status (one
    that never became a point) that the plan does not name, on a point one of its records trains
    under another key (its corpus or settings changed since it was registered)."""
    recs = {str(r["key"]): r for r in records}
    wanted = {_point((r[f] for f in _RECORD_FIELDS), r.get("parent_key"), r.get("hparam_group"), r["spec"]): key
              for key, r in recs.items()}
    cols = [getattr(Run, c) for c in POINT_COLUMNS]
    rows = conn.execute(select(Run.key, Run.parent_key, Run.hparam_group, *cols).where(
        Run.sweep_id == sweep_id, Run.status.in_(list(replaceable))))
    replaced = []
    for row in rows:
        if row.key in recs:
            continue
        values = row._asdict()
        spec = None
        if row.hparam_group is not None:  # its combination is in its spec
            spec = conn.scalar(select(Run.spec).where(Run.sweep_id == sweep_id, Run.key == row.key))
        if _point((values[c] for c in POINT_COLUMNS), row.parent_key, row.hparam_group, spec) in wanted:
            replaced.append(row.key)
    return replaced

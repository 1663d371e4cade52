"""The answer as the next plan: the recommended run, or the runs that would narrow it, as a plan file.

A recommendation ends in a run to train; this writes that run as a plan `scaling plan` and
`scaling sweep` accept unchanged, built on the plan stored with the sweep (its data, model
section, conventions, training recipe, resources, evaluations and simulator stay as they were).
``run``: one grid block with the recommended shape and D*, trained with the lr and batch the
recommendation gives it (the plan's lr and batch rules are dropped, so nothing resizes it).
``narrow``: one IsoFLOP block of the runs that would narrow approach 3's interval on N* most,
sized by the sweep's own rules. Nothing is written from a flagged law, and nothing half-written:
the plan is validated and expanded before the file is replaced in one step.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional

from scaling import fmt
from scaling.errors import UserError

if TYPE_CHECKING:  # pragma: no cover - names for type hints only
    from scaling.fitting.recommend import Recommendation

#: What a next plan holds: the recommended run, or the runs that would narrow its interval.
RUN, NARROW = "run", "narrow"
KINDS = (RUN, NARROW)
#: The fields of a model point a recommended shape gives (the rest of its shape is the plan's model section).
SHAPE_FIELDS = ("n_layer", "d_model", "n_head", "n_kv_head", "ffn")


def next_plan(rec: "Recommendation", plan: Optional[Mapping[str, Any]], kind: str = RUN) -> dict[str, Any]:
    """The plan (a mapping) training ``rec``'s run (``kind="run"``) or its suggested runs (``"narrow"``).

    ``plan``: the plan stored with the sweep the recommendation comes from. A :class:`UserError`
    says why there is nothing to write: no stored plan, no reliable law behind the run, no runs suggested.
    """
    if kind not in KINDS:
        raise UserError(f"the next plan holds {' or '.join(KINDS)}, not {kind!r}")
    if plan is None:
        raise UserError("the sweep has no stored plan to build the next one on (its data, model and recipe); "
                        "a recommendation from a CSV has none either")
    out = copy.deepcopy(dict(plan))
    out.pop("adaptive", None)  # the next plan trains what it lists, once
    out.pop("db", None)  # a stored URL may have its password masked: the next sweep is given --db
    base = str(out.get("name") or "sweep")
    if kind == RUN:
        out["name"] = f"{base}-next"
        out["grid"] = [_run_block(rec)]
        out["seeds"] = list(out.get("seeds") or [0])[:1]
        run = rec.run
        train = dict(out.get("train") or {})
        train["optimizer"] = {**dict(train.get("optimizer") or {}), "lr": float(run["lr"])}
        train["batch_tokens"] = int(run["batch_tokens"])
        out["train"] = train
        rules = {k: v for k, v in dict(out.get("rules") or {}).items() if k not in ("lr", "batch_tokens")}
        if rules:
            out["rules"] = rules
        else:
            out.pop("rules", None)
    else:
        out["name"] = f"{base}-narrow"
        out["grid"] = [_narrow_block(rec)]
    return out


def _run_block(rec: "Recommendation") -> dict[str, Any]:
    """The grid block of the recommended run: its shape and D*, refused when no reliable law recommends it."""
    target = getattr(rec, "target", None)
    if rec.run is None or target is None or rec.chosen is None:
        raise UserError(f"no law recommends a run at C = {fmt.flops(rec.compute)} FLOPs, so there is no run to plan"
                        + _first_note(rec))
    if target.flagged:
        raise UserError(f"the run at C = {fmt.flops(rec.compute)} FLOPs comes from a law flagged unreliable "
                        f"({rec.chosen}), so it is not planned{_first_note(rec)}; the runs that would narrow it "
                        "(`--emit-runs narrow`) can be, where some are suggested")
    shape = rec.run.get("shape") or {}
    point = {k: int(shape[k]) for k in SHAPE_FIELDS if shape.get(k) is not None}
    return {"tokens": [float(round(target.D))], "models": [point]}


def _narrow_block(rec: "Recommendation") -> dict[str, Any]:
    """One IsoFLOP block: the best suggested budget and its sizes (what narrows N*'s interval most)."""
    if not rec.next_runs:
        raise UserError(f"no runs that would narrow the recommendation at C = {fmt.flops(rec.compute)} FLOPs are "
                        f"suggested{_first_note(rec, 'runs to add')}")
    best = rec.next_runs[0]
    return {"compute": [float(best["C"])], "models": [{"N": float(n)} for n in best["sizes"]]}


def _first_note(rec: "Recommendation", about: str = "") -> str:
    """The recommendation's first note (about ``about`` where given), as a clause."""
    notes = [n for n in rec.notes if about in n] or list(rec.notes)
    return f" ({notes[0]})" if notes else ""


def plan_yaml(plan: Mapping[str, Any], rec: "Recommendation", kind: str,
              writer: str = "written by `scaling recommend --emit-plan`") -> str:
    """The plan as YAML, headed by what it is and where it comes from (``writer``: what wrote it)."""
    import yaml

    what = ("the recommended run" if kind == RUN
            else "the runs that would narrow approach 3's interval on N* most")
    head = [f"# {what} at C = {fmt.flops(rec.compute)} FLOPs ({rec.source}), {writer}",
            "# on the plan stored with the sweep; check it with `scaling plan`, train it with `scaling sweep --db ...`"]
    if kind == RUN and rec.run is not None:
        head.append(f"# lr and batch: {rec.run_source or 'the plan'} or the fitted lr* and B* laws, as the answer prints")
    return "\n".join(head) + "\n" + yaml.safe_dump(dict(plan), sort_keys=False, allow_unicode=True)


def run_plan_text(url: str, sweep: Optional[str], rec: Optional["Recommendation"]) -> Optional[str]:
    """The plan training ``rec``'s sized run, as the YAML ``scaling recommend --emit-plan`` writes (validated
    and expanded as `scaling plan` reads it), for a report's "copy as plan" block; None where nothing is
    planned: no sized run, a run from a flagged law, no stored plan."""
    if rec is None or rec.run is None:
        return None
    from scaling.orchestrator.expand import expand, stored_plan
    from scaling.orchestrator.plan import Plan

    try:
        mapping = next_plan(rec, stored_plan(url, sweep), RUN)
        expand(Plan.from_dict(mapping), resolve=False, db=url)
    except UserError:
        return None
    return plan_yaml(mapping, rec, RUN, writer="as `scaling recommend --emit-plan` writes it")


def check_plan_output(path: str | Path, db_url: Optional[str] = None, option: str = "--emit-plan") -> None:
    """Refuse a path the next plan could not or must not be written to, before any fit (one line, exit 2)."""
    from scaling.reports.output import check_output

    check_output(Path(path).expanduser(), option, db_url=db_url)


def write_next_plan(rec: "Recommendation", plan: Optional[Mapping[str, Any]], path: str | Path, kind: str = RUN, *,
                    db_url: Optional[str] = None, option: str = "--emit-plan") -> Path:
    """Write :func:`next_plan` to ``path`` (replaced in one step); returns the absolute path.

    The plan is validated and expanded as `scaling plan` does before anything is written, so a
    file that is written is one `scaling plan` accepts; ``db_url``: the results database, never overwritten.
    """
    from scaling.orchestrator.expand import expand
    from scaling.orchestrator.plan import Plan
    from scaling.reports.output import write_atomic

    out = Path(path).expanduser()
    check_plan_output(out, db_url, option)
    mapping = next_plan(rec, plan, kind)
    text = plan_yaml(mapping, rec, kind)
    expand(Plan.from_dict(mapping), resolve=False, db=db_url)  # as `scaling plan` reads it, before any write
    target = out.resolve()
    write_atomic(target, text)
    return target


def write_sweep_plan(url: str, sweep: Optional[str], rec: "Recommendation", path: str | Path, kind: str = RUN) -> Path:
    """:func:`write_next_plan` on the plan stored with ``sweep`` in ``url``: what `scaling recommend
    --emit-plan` and :func:`scaling.api.next_plan` write."""
    from scaling.orchestrator.expand import stored_plan

    return write_next_plan(rec, stored_plan(url, sweep), path, kind, db_url=url)

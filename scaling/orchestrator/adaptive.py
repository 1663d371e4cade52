"""Adaptive sweeps: add IsoFLOP slices until N* is known well enough, within a compute budget.

:func:`run_adaptive` trains the grid, then round after round refits the target law and
:func:`decide` stops (met, budget, rounds, no fit, no gain) or adds a slice; every decision is
an event, and a re-run replays them. The rules in full: docs/reference/modules.md.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Optional

import numpy as np

from scaling import vocab
from scaling import fmt
from scaling.errors import UserError
from scaling.fmt import Interval
from scaling.orchestrator.adaptive_spec import AdaptivePlan, AdaptiveTarget
from scaling.orchestrator.expand import PlannedRun, expand
from scaling.orchestrator.plan import GridBlock, ModelPoint, Plan

if TYPE_CHECKING:  # pragma: no cover - names for type hints only
    import pandas as pd

    from scaling.db import Store
    from scaling.fitting.core.base import Law

MET = "met"
BUDGET = "budget"
ROUNDS = "rounds"
NO_FIT = "no_fit"
NO_GAIN = "no_gain"
EXTEND = "extend"
RANKED = "ranked"
#: Budgets within this fraction are one IsoFLOP slice (as approach 2 groups them).
SAME_BUDGET = 0.05


@dataclass
class Decision:
    """One round of the loop: what the refit said and what was done about it."""

    round: int
    action: str  # "add" or "stop"
    reason: str  # MET, BUDGET, ROUNDS, NO_FIT, NO_GAIN (stop); EXTEND, RANKED (add)
    message: str
    fit: dict[str, Any]
    spent: float
    max_compute: float
    added: Optional[dict[str, Any]] = None  # {"C", "sizes", "cost", "keys", ...}
    candidates: list[dict[str, Any]] = field(default_factory=list)

    def detail(self) -> dict[str, Any]:
        """The event's JSON detail (non-finite numbers become None)."""
        return importlib.import_module("scaling.fitting.core.base").jsonable(asdict(self))

    @classmethod
    def from_detail(cls, d: dict[str, Any]) -> "Decision":
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in names})

    def same_as(self, other: "Decision") -> bool:
        """The same decision (what was done and why, under the same budget), whatever the wording or timing."""
        return ((self.action, self.reason, _slice_id(self.added), self.max_compute)
                == (other.action, other.reason, _slice_id(other.added), other.max_compute))


@dataclass
class AdaptiveOutcome:
    """How an adaptive sweep ended: ``status`` is the last decision's reason (MET, BUDGET, ...)."""

    status: str
    message: str
    decisions: list[Decision]
    outcome: Any  # the merged scheduler outcome over every round of this invocation
    replayed: int = 0  # stored decisions this invocation started from

    @property
    def spent(self) -> float:
        return self.decisions[-1].spent if self.decisions else 0.0


# -- one round's facts -----------------------------------------------------------------------------
def measure(law: Law, target: AdaptiveTarget) -> dict[str, Any]:
    """What a fitted law says about the target: N* at ``at_compute`` and its 95% interval."""
    iv = law.optimal_interval(float(target.at_compute))["N"]
    lo, hi = iv.lo, iv.hi
    if target.interval == "bootstrap" and iv.widened:
        lo, hi = iv.lo_param, iv.hi_param
    ok = lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi) and lo > 0
    return {
        "law": target.law,
        "value": float(iv.value),
        "lo": float(lo) if ok else None,
        "hi": float(hi) if ok else None,
        "ratio": float(hi / lo) if ok else None,
        "interval": target.interval,
        "kind": None if iv.kind == "none" else iv.kind,
        "reliable": not law.doubts(),
        "doubts": list(law.doubts())[:3],
        "reasons": [d.reason for d in law.doubts()[:3]],  # each without its verdict (the line says it)
    }


def edge_slices(points: pd.DataFrame, rel_tol: float = SAME_BUDGET) -> list[dict[str, Any]]:
    """IsoFLOP slices whose lowest loss is at the smallest or largest size, largest budget first.

    Each: ``C``, ``side`` ("smaller" or "larger": where the optimum lies), the slice's ``sizes``.
    """
    from scaling.fitting.core.measurements import group_budgets

    labels = group_budgets(points["C"].to_numpy(), rel_tol)
    out = []
    for lab in np.unique(labels):
        sub = points[labels == lab].sort_values("N")
        N = sub["N"].to_numpy()
        if np.unique(N).size < 3:
            continue
        i = int(np.argmin(sub["loss"].to_numpy()))
        if 0 < i < len(N) - 1:
            continue
        out.append({"C": float(np.exp(np.mean(np.log(sub["C"].to_numpy())))), "side": "smaller" if i == 0 else "larger",
                    "sizes": N.tolist()})
    return sorted(out, key=lambda e: -e["C"])


def extension(edge: dict[str, Any], count: int = 2) -> list[float]:
    """``count`` sizes beyond a slice's edge, at the slice's own (geometric mean) spacing."""
    logs = np.log(np.asarray(edge["sizes"], float))
    step = float(np.mean(np.diff(logs))) if logs.size > 1 else 0.5
    k = np.arange(1, count + 1)
    new = logs[0] - step * k if edge["side"] == "smaller" else logs[-1] + step * k
    return np.exp(new).tolist()


# -- the decision --------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Round:
    """What every decision of one round states: the round, the refit's measure, the FLOPs spent."""

    round: int
    fit: dict[str, Any]
    spent: float
    max_compute: float

    def stop(self, reason: str, message: str, candidates: Optional[list[dict[str, Any]]] = None) -> Decision:
        return Decision(self.round, "stop", reason, message, self.fit, self.spent, self.max_compute, None,
                        candidates or [])

    def add(self, reason: str, message: str, added: dict[str, Any],
            candidates: Optional[list[dict[str, Any]]] = None) -> Decision:
        return Decision(self.round, "add", reason, message, self.fit, self.spent, self.max_compute, added,
                        candidates or [])


def _measured(law: Optional[Law], fit_error: Optional[str], fit_info: dict[str, Any],
              target: AdaptiveTarget) -> tuple[Optional[Law], dict[str, Any], Optional[str]]:
    """(the law, or None where it says nothing of N*; its measure at the target; why it is not usable)."""
    fit = dict(fit_info)
    if law is None:
        fit.update({"law": target.law, "error": fit_error})
        return None, fit, fit_error
    fit.update(measure(law, target))
    if not (math.isfinite(fit["value"]) and fit["value"] > 0):  # fitted, but it says nothing of N*
        fit_error = f"it gives no finite N* at {fmt.flops(target.at_compute)} FLOPs"
        if fit["doubts"]:
            fit_error += f"; unreliable: {_reason(fit)}"
        fit["error"] = fit_error
        return None, fit, fit_error
    return law, fit, fit_error


def _now(law: Optional[Law], fit: dict[str, Any], fit_error: Optional[str], target: AdaptiveTarget) -> str:
    """Where the target stands after the refit, as the decision's message begins."""
    where = f"N* at {fmt.flops(target.at_compute)} FLOPs"
    ratio = fit.get("ratio")
    if ratio is not None:
        now = f"{where} in {Interval.of(fit).bounds_text(3, fmt.size)} (ratio {ratio:.3g} > {target.interval_ratio:g})"
    elif law is None:  # not fitted, or fitted without a finite N* (then ``fit`` holds its measure)
        now = f"{target.law} {'not usable' if 'value' in fit else 'not fitted'} ({fit_error})"
    else:
        now = f"{where} has no interval ({fit.get('kind')})"
    if law is not None and not fit["reliable"]:
        now += f"; unreliable: {_reason(fit) if fit['doubts'] else 'flagged'}"
    return now


def _extend_an_edge(step: _Round, points: Optional[pd.DataFrame], left: float, now: str,
                    cost_of: Callable[[float, list[float]], float]) -> tuple[Optional[Decision], list[float]]:
    """The first edge slice (lowest loss at its smallest or largest size) extended within ``left``
    FLOPs, or None; and the costs of those that were too dear."""
    too_dear = []
    for edge in edge_slices(points) if points is not None and len(points) else []:
        sizes = extension(edge)
        cost = cost_of(edge["C"], sizes)
        if not math.isfinite(cost):  # sizes this plan cannot train
            continue
        if cost <= left:
            return step.add(EXTEND, f"{now}; the slice at {fmt.flops(edge['C'])} FLOPs has its lowest loss at its "
                                    f"{'smallest' if edge['side'] == 'smaller' else 'largest'} size: added 2 "
                                    f"{edge['side']} sizes ({_flops(cost)} FLOPs)",
                            {"C": edge["C"], "sizes": sizes, "cost": cost, "why": f"extend {edge['side']}"}), too_dear
        too_dear.append(cost)
    return None, too_dear


def _ranked(law: Law, points: pd.DataFrame, spec: AdaptivePlan, round_: int, left: float,
            cost_of: Callable[[float, list[float]], float]) -> tuple[list[dict[str, Any]], int]:
    """The slices the law's ranking proposes that this plan can train, each with its cost and
    expected narrowing per FLOP; and how many it proposed that the plan cannot train."""
    ranking = importlib.import_module("scaling.fitting.recommend")
    offsets = np.linspace(-spec.span, spec.span, spec.batch)
    c_max = float(points["C"].max())
    ranked = ranking.candidate_runs(law, float(spec.target.at_compute), c_max, seed=round_, offsets=offsets.tolist(),
                                    n_bootstrap=min(ranking.CANDIDATE_BOOTSTRAP, spec.n_bootstrap))
    candidates = []
    untrainable = 0  # slices proposed at sizes the plan cannot train (or no finite size at all)
    for cand in ranked:
        cost = cost_of(cand["C"], cand["sizes"])
        if not math.isfinite(cost):
            untrainable += 1
            continue
        gain = -math.log(max(1e-12, 1.0 - cand["reduction"]))  # ln(width before / width after)
        candidates.append({"C": cand["C"], "sizes": cand["sizes"], "cost": cost, "reduction": cand["reduction"],
                           "gain_per_flop": gain / cost if cost > 0 else 0.0, "affordable": cost <= left})
    if candidates or untrainable:
        return candidates, untrainable
    # the ranking has no interval to narrow: the frontier extended by 2x
    C = 2.0 * c_max
    sizes = (float(np.asarray(law.optimal(C)[0])) * np.exp(offsets)).tolist()
    cost = cost_of(C, sizes)
    if not math.isfinite(cost):
        return [], 1
    return [{"C": C, "sizes": sizes, "cost": cost, "reduction": None, "gain_per_flop": None,
             "affordable": cost <= left}], 0


def _choose(step: _Round, candidates: list[dict[str, Any]], untrainable: int, spec: AdaptivePlan, left: float,
            now: str) -> Decision:
    """The slice with the largest expected narrowing per FLOP among the affordable ones, or why none."""
    fit, target = step.fit, spec.target
    if not candidates:  # every slice on offer lies at sizes this plan cannot train
        return step.stop(NO_GAIN if fit["reliable"] else NO_FIT,
                         f"cannot continue: none of the {untrainable} slice(s) the law proposes (around N* "
                         f"{fmt.count(fit['value'])} at {fmt.flops(target.at_compute)} FLOPs) can be trained by this plan; {now}")
    affordable = [c for c in candidates if c["affordable"]]
    if not affordable:
        cheapest = min(c["cost"] for c in candidates)
        return step.stop(BUDGET, f"budget spent: the cheapest slice costs {_flops(cheapest)} FLOPs, "
                                 f"{_flops(max(left, 0.0))} left of {_flops(spec.max_compute)}; {now}", candidates)
    if len(candidates) == 1 and candidates[0]["reduction"] is None:  # no ranking: twice the largest budget
        c = candidates[0]
        return step.add(RANKED, f"{now}; no ranking (no bootstrap interval to narrow): added the slice at "
                                f"{fmt.flops(c['C'])} FLOPs around N* ({_flops(c['cost'])} FLOPs)",
                        {"C": c["C"], "sizes": c["sizes"], "cost": c["cost"],
                         "why": "no ranking: twice the largest budget"}, candidates)
    useful = [c for c in affordable if c["cost"] > 0 and c["reduction"] is not None and c["reduction"] > 0]
    if not useful and not fit["reliable"]:  # nothing to gain from a law the data do not determine
        return step.stop(NO_FIT, f"cannot continue: {target.law} is unreliable on these data and none of the "
                                 f"{len(affordable)} affordable slice(s) it proposes is both untrained and expected to "
                                 f"narrow the interval; {now}", candidates)
    if not useful:  # every slice on offer is already trained, or expected to leave the interval no narrower
        return step.stop(NO_GAIN, f"cannot narrow further: none of the {len(affordable)} affordable slice(s) is "
                                  f"both untrained and expected to narrow the interval; {now}", candidates)
    best = max(useful, key=lambda c: c["gain_per_flop"])
    return step.add(RANKED, f"{now}; added the slice at {fmt.flops(best['C'])} FLOPs ({len(best['sizes'])} sizes around N* "
                            f"{fmt.count(float(np.exp(np.mean(np.log(best['sizes'])))))}): the ranking expects the bootstrap "
                            f"interval {100 * best['reduction']:.0f}% narrower, the most per FLOP among "
                            f"{len(affordable)} affordable slice(s) ({_flops(best['cost'])} FLOPs)",
                    {"C": best["C"], "sizes": best["sizes"], "cost": best["cost"], "why": "ranked",
                     "reduction": best["reduction"]}, candidates)


def decide(
    round_: int,
    spec: AdaptivePlan,
    *,
    law: Optional[Law],
    fit_error: Optional[str],
    points: Optional[pd.DataFrame],
    spent: float,
    fit_info: dict[str, Any],
    cost_of: Callable[[float, list[float]], float],
) -> Decision:
    """The next step of the loop (see the module docstring); pure apart from the ranking's bootstrap.

    ``law``: the fitted target law, or None with ``fit_error`` saying why; ``points``: the
    sweep's completed (N, D, C, loss); ``spent``: FLOPs of every run of the sweep so far;
    ``cost_of(C, sizes)``: the FLOPs a slice would add (its runs' actual compute, all seeds).
    """
    target, left = spec.target, spec.max_compute - spent
    law, fit, fit_error = _measured(law, fit_error, fit_info, target)
    step = _Round(round_, fit, spent, spec.max_compute)
    ratio = fit.get("ratio")
    if law is not None and ratio is not None and fit["reliable"] and ratio <= target.interval_ratio:
        return step.stop(MET, f"target met: N* at {fmt.flops(target.at_compute)} FLOPs in {Interval.of(fit).bounds_text(3, fmt.size)} "
                              f"(ratio {ratio:.3g} <= {target.interval_ratio:g}) after {_flops(spent)} FLOPs")
    now = _now(law, fit, fit_error, target)
    if round_ >= spec.max_rounds:
        return step.stop(ROUNDS, f"stopped after {round_} added slices (max_rounds); {now}")
    extended, too_dear = _extend_an_edge(step, points, left, now, cost_of)
    if extended is not None:
        return extended
    if law is None:
        if too_dear:
            return step.stop(BUDGET, f"budget spent: extending an edge slice costs {_flops(min(too_dear))} FLOPs, "
                                     f"{_flops(max(left, 0.0))} left of {_flops(spec.max_compute)}; {now}")
        return step.stop(NO_FIT, f"cannot continue: {now}")
    candidates, untrainable = _ranked(law, points, spec, round_, left, cost_of)
    return _choose(step, candidates, untrainable, spec, left, now)


def slice_runs(plan: Plan, C: float, sizes: list[float]) -> list[PlannedRun]:
    """The runs of one IsoFLOP slice (budget C, target sizes), expanded as a grid block would be.

    Expanded without the adaptive block: its budget check is the grid's (done on the plan file,
    where it names file and line); a slice is judged against what is left by :func:`decide`.
    """
    block = GridBlock(models=[ModelPoint(N=float(n)) for n in sizes], compute=[float(C)])
    runs = expand(plan.model_copy(update={"grid": [block], "adaptive": None})).runs
    rule = plan.adaptive.early_stop if plan.adaptive is not None else None
    if rule is None:
        return runs
    return [replace(r, spec=r.spec.model_copy(update={"early_stop": rule})) for r in runs]


def stored_decisions(url: str, sweep: str) -> dict[int, Decision]:
    """The sweep's stored decisions by round (the latest event of each round)."""
    from scaling.db import connect
    from scaling.db.jsonvalues import as_dict

    from scaling.errors import NotFoundError

    with connect(url) as res:
        try:
            events = res.events(sweep=sweep, kinds=[vocab.ADAPTIVE_DECISION])
        except NotFoundError:  # a sweep not registered yet has no decisions
            return {}
    out: dict[int, Decision] = {}
    for detail in events["detail"] if len(events) else []:
        d = as_dict(detail)
        if isinstance(d, dict) and isinstance(d.get("round"), int):
            out[d["round"]] = Decision.from_detail(d)
    return out


def run_adaptive(
    plan: Plan,
    grid: list[PlannedRun],
    *,
    url: str,
    store: Store,
    register: Callable[[list[PlannedRun]], Any],
    train: Callable[[list[PlannedRun]], Any],
    echo: Callable[[str], None] = print,
    seed: int = 0,
) -> AdaptiveOutcome:
    """Train ``grid``, then add slices as :func:`decide` says until it stops; see the module docstring.

    ``register(runs)`` records runs in the database (idempotent); ``train(runs)`` trains those not
    completed and returns the scheduler's outcome (`SweepOutcome`) or None.
    """
    spec = plan.adaptive
    if spec is None:
        raise UserError(f"plan {plan.name!r} has no adaptive block")
    if not grid:
        raise UserError(f"plan {plan.name!r}: an adaptive sweep needs a grid to start from")
    anchor = grid[0].key
    stored = stored_decisions(url, plan.name)
    runs = list(grid)
    known = {r.key for r in runs}
    round_ = 0
    while round_ in stored and stored[round_].action == "add" and stored[round_].added:
        added = stored[round_].added or {}
        for r in slice_runs(plan, added["C"], added["sizes"]):
            if r.key not in known:
                runs.append(r)
                known.add(r.key)
        round_ += 1
    replayed = round_
    if replayed:
        echo(f"adaptive: replayed {replayed} stored decision(s); continuing at round {round_}")
    register(runs)
    outcomes: list[Any] = []
    decisions = [stored[r] for r in range(replayed)]
    while True:
        outcomes.append(train(runs))
        law, error, points, info = _refit(url, plan.name, spec, seed)
        spent = float(sum(r.spec.flops for r in runs)) - _not_trained(url, plan.name)

        def cost_of(C: float, sizes: list[float]) -> float:
            try:
                new = slice_runs(plan, C, sizes)
            except (UserError, ValueError):  # a size that is no finite number is a ValueError
                return math.inf  # the plan cannot train this slice (too small a budget for its sizes)
            return float(sum(r.spec.flops for r in new if r.key not in known))

        decision = decide(round_, spec, law=law, fit_error=error, points=points, spent=spent, fit_info=info,
                          cost_of=cost_of)
        previous = stored.get(round_)
        if previous is not None and previous.same_as(decision):
            decision = previous  # the same decision as before: not logged twice
        else:
            if decision.added is not None:
                decision.added["keys"] = [r.key for r in slice_runs(plan, decision.added["C"], decision.added["sizes"])]
            store.log_event(anchor, None, vocab.ADAPTIVE_DECISION, decision.detail(), sweep=plan.name)
        decisions.append(decision)
        echo(f"adaptive round {round_}: {decision.action}: {decision.message}")
        if decision.action == "stop":
            return AdaptiveOutcome(decision.reason, decision.message, decisions, _merge(outcomes), replayed)
        new = [r for r in slice_runs(plan, decision.added["C"], decision.added["sizes"]) if r.key not in known]
        known.update(r.key for r in new)
        runs.extend(new)
        register(runs)
        round_ += 1


def _refit(url: str, sweep: str, spec: AdaptivePlan, seed: int) -> tuple[Any, Optional[str], Any, dict[str, Any]]:
    """(law or None, why not, the completed points, what was fitted) for this round."""
    fitting = importlib.import_module("scaling.fitting")
    data_mod = importlib.import_module("scaling.fitting.core.sweep_data")
    try:
        data, _ = data_mod.from_db(url, sweep)
        points = data.points[["N", "D", "C", "loss"]]
    except UserError as exc:
        return None, " ".join(str(exc).split()), None, {"n_points": 0}
    info: dict[str, Any] = {"n_points": int(len(points)), "c_max": float(points["C"].max()),
                            "fingerprint": data.fingerprint()}
    try:
        summary = fitting.analyse(fitting.SweepSource(url, sweep),
                                  fitting.Settings(law=spec.target.law, n_bootstrap=spec.n_bootstrap, seed=seed,
                                                   tasks=False, next_runs=False))
    except UserError as exc:
        return None, " ".join(str(exc).split()), points, info
    law = summary.laws.get(spec.target.law)
    info["fit_id"] = summary.stored_id
    if law is None:
        return None, summary.skipped.get(spec.target.law, "not fitted"), points, info
    return law, None, points, info


def _not_trained(url: str, sweep: str) -> float:
    """FLOPs the sweep's runs that stopped early did not train (not counted against the budget)."""
    from scaling.db import connect
    from scaling.orchestrator.status import early_savings

    with connect(url) as res:
        runs = res.runs(sweep=sweep, spec=False)
    return float(early_savings(runs).sum())


def _merge(outcomes: list[Any]) -> Any:
    """One SweepOutcome over the rounds: what this invocation trained, what was done before it."""
    from scaling.orchestrator.scheduler import SweepOutcome

    outs = [o for o in outcomes if o is not None]
    merged = SweepOutcome()
    if not outs:
        return merged
    trained: list[str] = []
    for o in outs:
        trained += [k for k in o.completed if k not in trained]
        merged.overhead_seconds.update(o.overhead_seconds)
        merged.wall_seconds += o.wall_seconds
    last = outs[-1]
    merged.completed = trained
    merged.skipped = [k for k in last.skipped if k not in trained]
    merged.failed = dict(last.failed)
    merged.interrupted = list(last.interrupted)
    return merged


def _slice_id(added: Optional[dict[str, Any]]) -> Any:
    if not added:
        return None
    return (round(math.log(float(added["C"])), 6), tuple(round(math.log(float(n)), 6) for n in added["sizes"]))


def _reason(fit: dict[str, Any]) -> str:
    """The first doubt's reason (without its verdict: the line adds one); a record without reasons gives its message."""
    return str((fit.get("reasons") or fit["doubts"])[0])


def _flops(x: float) -> str:
    return fmt.flops(x)

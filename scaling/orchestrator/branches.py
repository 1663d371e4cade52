"""Cooldown branches (Hägele et al. 2024): one constant-LR trunk per model, many token budgets.

A grid block ``{models: [...], branches: {tokens: [D_1, ...], cooldown_fraction: f, shape:
linear|1-sqrt}}`` expands, per model and seed, into

- one **trunk**: warmup then a constant LR (``schedule.kind: constant``), trained to the
  latest branch point, its checkpoint kept at every branch point (``execution.keep_steps``);
- one **branch** per D_i: a ``wsd`` run of D_i tokens whose decay covers its last fraction f of
  steps, starting from the trunk's checkpoint where that decay starts
  (``branch: {parent: <trunk key>, from_step}``). Its key hashes the parent's key and the
  branch point, so it names exactly the run it is.

With ``cooldowns: predicted`` a model gets its trunk only, a ``wsd`` run to the largest D_i that cools
down as a branch would (no checkpoints kept): the fits predict the other budgets' final losses from the
trunks' curves by the curve law across sizes (:mod:`scaling.fitting.curves.trunks`), marked as predicted.
Its tag ``predict_tokens`` lists the budgets.

Trunk and branches share the learning rate and batch (they share the trunk's steps): the plan's
rules are evaluated at the largest branch's D. Only the branches are (N, D) points of the fits;
the trunk is recorded as their parent, so compute is counted once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from scaling import fmt
from scaling.batching import steps_for
from scaling.errors import PlanError
from scaling.orchestrator.branches_spec import BranchesPlan
from scaling.orchestrator.yamlsource import where
from scaling.trainer.optim import decay_start, warmup_steps
from scaling.trainer.spec import RunSpec
from scaling.trainer.sections import ScheduleSpec
from scaling.vocab import PREDICT_TOKENS_TAG

if TYPE_CHECKING:
    from scaling.accounting import Shape
    from scaling.orchestrator.plan import Plan
    from scaling.orchestrator.yamlsource import YamlSource

TRUNK = "trunk"
BRANCH = "branch"


@dataclass(frozen=True)
class BranchRun:
    """One run of a model's trunk and branches, as the expansion turns it into a request: its
    tokens, where the plan lists it, and the fields that make it the trunk or a branch."""

    D: float
    loc: tuple[Any, ...]
    fields: dict[str, Any]  # schedule, keep_steps, name, tags
    from_step: Optional[int] = None  # a branch: the trunk's step it starts from (None: the trunk)

    def lineage(self, trunk_key: str) -> dict[str, Any]:
        """A branch's fields, naming its trunk by ``trunk_key``."""
        assert self.from_step is not None, "the trunk has no parent"
        tags = dict(self.fields["tags"])
        tags = {"role": tags.pop("role"), "parent": trunk_key, **tags}
        return {**self.fields, "tags": tags, "branch": {"parent": trunk_key, "from_step": self.from_step}}


def cooldown_schedule(plan: "Plan", branches: BranchesPlan) -> ScheduleSpec:
    return plan.train.schedule.with_kind("wsd", decay_fraction=branches.cooldown_fraction,
                                         decay_shape=branches.shape)


def trunk_schedule(plan: "Plan") -> ScheduleSpec:
    return plan.train.schedule.with_kind("constant")


def rules_point(plan: "Plan", block_index: int, shape: "Shape") -> tuple[float, float, float]:
    """(N, D, C) at which the plan's rules give a model's trunk and branches their learning rate and
    batch (they share the trunk's steps): the largest branch's D."""
    conv = plan.conventions
    largest = max(plan.grid[block_index].branches.tokens)  # type: ignore[union-attr]
    return shape.params(conv.params), largest, shape.flops_per_token(conv.flops, conv.params) * largest


def expand_model(
    plan: "Plan",
    block_index: int,
    shape: "Shape",
    seed: int,
    lr: float,
    batch: int,
    source: Optional["YamlSource"],
) -> list[BranchRun]:
    """The trunk and the branches of one model and seed (trunk first), at the ``lr`` and ``batch``
    the plan's rules give at :func:`rules_point`. The expansion builds the trunk's request first: a
    branch names it by its key (:meth:`BranchRun.lineage`)."""
    block = plan.grid[block_index]
    branches: BranchesPlan = block.branches  # type: ignore[assignment]
    N = shape.params(plan.conventions.params)
    cooldown = cooldown_schedule(plan, branches)
    points: list[tuple[int, float, int]] = []  # (index, D, branch point)
    for j, D in enumerate(branches.tokens):
        loc = ("grid", block_index, "branches", "tokens", j)
        if D < batch:
            d_text, batch_text = fmt.counts_apart(D, batch)
            raise PlanError(f"{where(source, loc)}: D={d_text} tokens for N={fmt.count(N)} is less than one batch "
                            f"({batch_text} tokens)")
        steps = steps_for(round(D), batch)
        start = decay_start(steps, cooldown)
        asked = max(1, int(round(cooldown.decay_fraction * steps)))
        if 1 <= start and steps - start < asked:  # the decay may not begin inside the warmup
            raise PlanError(
                f"{where(source, ('grid', block_index, 'branches', 'cooldown_fraction'))}: "
                f"{cooldown.decay_fraction:g} of the branch at D={fmt.count(D)} ({steps} steps) would start its cooldown "
                f"inside the warmup ({start} steps); at most {(steps - start) / steps:.3g} of it can cool down"
            )
        if start < 1:
            raise PlanError(
                f"{where(source, loc)}: D={fmt.count(D)} tokens is {steps} step(s) of {fmt.count(batch)} tokens: too few to leave a trunk "
                f"and cool down; use more tokens"
            )
        points.append((j, D, start))

    trunk_steps = max(p[2] for p in points)
    trunk_sched = trunk_schedule(plan)
    warm = warmup_steps(trunk_steps, trunk_sched)
    for j, D, start in points:
        if start < warm:
            raise PlanError(
                f"{where(source, ('grid', block_index, 'branches', 'tokens', j))}: the branch at D={fmt.count(D)} leaves the "
                f"trunk at step {start}, inside its warmup ({warm} steps of {trunk_steps}); drop it, use more tokens "
                f"or a smaller train.schedule.warmup_fraction"
            )
    if branches.cooldowns == "predicted":
        largest = max(branches.tokens)
        return [BranchRun(steps_for(round(largest), batch) * batch, ("grid", block_index, "branches"), {
            "schedule": cooldown, "keep_steps": (), "name": f"{plan.name}/N{N:.3g}/trunk{largest:.3g}/s{seed}",
            "tags": {"role": TRUNK, PREDICT_TOKENS_TAG: ",".join(f"{D:.6g}" for D in branches.tokens)},
        })]
    keep = tuple(sorted({p[2] for p in points}))
    trunk = BranchRun(trunk_steps * batch, ("grid", block_index, "branches"), {
        "schedule": trunk_sched, "keep_steps": keep,
        "name": f"{plan.name}/N{N:.3g}/trunk{trunk_steps * batch:.3g}/s{seed}",
        "tags": {"role": TRUNK, "branch_points": ",".join(str(k) for k in keep)},
    })
    return [trunk, *(BranchRun(D, ("grid", block_index, "branches", "tokens", j), {
        "schedule": cooldown, "name": f"{plan.name}/N{N:.3g}/D{D:.3g}/s{seed}",
        "tags": {"role": BRANCH, "branch_point": str(start)},
    }, from_step=start) for j, D, start in points)]


def role(spec: RunSpec) -> Optional[str]:
    """``trunk``, ``branch`` or None (a run trained from scratch)."""
    if spec.branch is not None:
        return BRANCH
    return TRUNK if spec.execution.keep_steps else None


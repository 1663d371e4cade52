"""Expand a plan into `RunSpec`s: models x tokens, tokens per parameter, IsoFLOP, seeds, rules.

Smallest runs (by compute) come first so that early results arrive early and a sweep cut short
still covers its low budgets.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Optional

from pydantic import ValidationError

from scaling.accounting import Shape, check_fits, micro_batch_size
from scaling.errors import PlanError, ResourceError, UserError
from scaling.layout import Decision, no_layout_problem
from scaling.orchestrator import branches
from scaling.orchestrator.plan import Plan, ResourcesPlan, RuleValueError
from scaling.orchestrator.yamlsource import where
from scaling.orchestrator.yamlsource import YamlSource
from scaling.trainer.spec import DataSpec, RunSpec


@dataclass(frozen=True)
class PlannedRun:
    """One run of the sweep with the planning facts `scaling plan` shows."""

    spec: RunSpec
    block: int
    kind: str  # "tokens" | "tokens_per_param" | "compute" | "branches"
    budget: Optional[float]  # the IsoFLOP budget C the run belongs to, if any
    memory_gib: float
    strategy: str
    layout: Optional[Decision] = None  # the chosen layout, its times and why (`scaling.layout`)
    ranks_per_node: Optional[int] = None  # from the plan's cluster: how the scheduler groups ranks

    @property
    def key(self) -> str:
        return self.spec.key


@dataclass
class Expansion:
    """The runs of a plan, smallest first, and notes on what was dropped and why."""

    plan: Plan
    runs: list[PlannedRun]
    notes: list[str] = field(default_factory=list)
    precision_reason: str = ""  # how the plan's precision was chosen (`scaling plan` shows it)

    @property
    def specs(self) -> list[RunSpec]:
        return [r.spec for r in self.runs]


def _resolve_data(spec: RunSpec) -> RunSpec:
    """Fill the corpus fingerprint (part of the key) and the corpus size."""
    from scaling.trainer.data import resolve_data

    return resolve_data(spec)


def _data_error(source: Optional[YamlSource], exc: UserError) -> PlanError:
    """The data section's error at its line, its field named once (the message may name it already)."""
    place, msg = where(source, ("data",)), str(exc)
    if msg.startswith("data"):
        place = place.removesuffix(": data")
    return PlanError(f"{place}: {msg}")


def _data_vocab(plan: Plan, source: Optional[YamlSource]) -> Optional[int]:
    """The tokenizer's vocabulary (its tokens prepared once), or None for byte-level or token-file data."""
    from scaling.trainer.data import tokenizer_vocab_size

    try:
        return tokenizer_vocab_size(plan.data)
    except UserError as exc:
        raise _data_error(source, exc) from None


def expand(plan: Plan, source: Optional[YamlSource] = None, *, resolve: bool = True) -> Expansion:
    """All runs of ``plan`` as `PlannedRun`s (smallest compute first), with notes on dropped ones.

    Each run is the plan's shared sections plus its shape, D, lr, batch and seed
    (:meth:`Plan.run_spec`). Raises PlanError for a grid that yields nothing usable (a budget too
    small for the smallest model, explicit D below one batch, a rule without a value, a value the
    run spec refuses) and ResourceError for a run that fits the device memory under no strategy.
    """
    plan, precision = _resolve_precision(plan) if plan.simulate is None else (plan, _Unresolved())
    if resolve and plan.simulate is None:
        plan = plan.with_data_vocab(_data_vocab(plan, source), source)
    data_resolved: Optional[DataSpec] = None
    conv = plan.conventions
    runs: dict[str, PlannedRun] = {}
    notes: list[str] = [precision.warning] if precision.warning else []
    rates: dict[int, float] = {}  # achieved FLOP/s per worker, by grid block

    def simulated(spec: RunSpec, b: int, kind: str, budget: Optional[float]) -> PlannedRun:
        """A simulated run: nothing is trained, so no layout, no memory and no corpus."""
        spec = spec.model_copy(update={"execution": spec.execution.model_copy(update={"strategy": "single"})})
        return PlannedRun(spec, b, kind, budget, 0.0, "single")

    def placed(spec: RunSpec, b: int, kind: str, budget: Optional[float], m: int) -> PlannedRun:
        """A trained run in the fastest layout that fits, with its data resolved."""
        nonlocal data_resolved
        shape = spec.shape
        resources = plan.block_resources(b)
        if b not in rates:
            rates[b] = resources.throughput(plan.train.precision, plan.train.threads, probe=resolve)
        choice = plan.choose_layout(spec, resources, rates[b])
        if not choice.options:
            raise PlanError(f"{where(source, _layout_loc(plan, b))}: run N={spec.n_params:,} "
                            f"({shape.n_layer}x{shape.d_model}, {shape.n_head} heads): "
                            f"{no_layout_problem(choice.request)}")
        if choice.best is None and resources.device_memory_gib is None:
            # still no device holds more than MAX_DEVICE_GIB: check_fits says so in its words
            check_fits(choice.smallest.memory, None,
                       what=f"{where(source, ('grid', b, 'models', m))}: run N={spec.n_params:.3g}")
        if choice.best is None:
            raise ResourceError(_does_not_fit(resources, spec, choice.smallest, b, m, source))
        best = choice.best
        try:  # the search keeps to the spec's rules; validating the placed spec makes sure of it
            spec = RunSpec.model_validate({**spec.model_dump(), "execution": _placed(spec, best).model_dump()})
        except ValidationError as exc:
            raise PlanError(f"{where(source, _layout_loc(plan, b))}: run N={spec.n_params:,} in layout "
                            f"{best.label()}: {exc.errors()[0]['msg'].removeprefix('Value error, ')}") from None
        if data_resolved is not None:
            spec = spec.model_copy(update={"data": data_resolved})
        elif resolve:
            try:
                spec = _resolve_data(spec)
            except UserError as exc:
                raise _data_error(source, exc) from None
            data_resolved = spec.data
        return PlannedRun(
            spec, b, kind, budget, best.memory.total_gib, best.strategy, choice.decision(),
            resources.machine().gpus_per_node,
        )

    def finish(b: int, kind: str, budget: Optional[float], shape: Shape, D: float, lr: float, batch: int, seed: int,
               loc: tuple[Any, ...], m: int, *, schedule: Any = None, keep_steps: tuple[int, ...] = (),
               branch: Optional[dict[str, Any]] = None, name: Optional[str] = None,
               tags: Optional[dict[str, str]] = None) -> RunSpec:
        """Build one run's spec, place it, resolve its data and add it (once) to the runs."""
        try:
            spec = plan.run_spec(
                shape, D, lr, batch, seed, plan.block_resources(b),
                faults=plan.grid[b].faults,
                name=name or f"{plan.name}/N{shape.params(conv.params):.3g}/D{D:.3g}/s{seed}",
                tags={**_tags(plan, kind, budget), **(tags or {})},
            )
            if schedule is not None or branch is not None or keep_steps:
                spec = _with_lineage(spec, schedule, branch, keep_steps)
        except ValidationError as exc:  # a value the trainer refuses
            err = exc.errors()[0]
            detail = str(err["msg"]).removeprefix("Value error, ")
            at = ("grid", b, "models", m) if err["loc"][:1] == ("model",) else loc
            raise PlanError(f"{where(source, at)}: {detail}") from None
        run = simulated(spec, b, kind, budget) if spec.simulate is not None else placed(spec, b, kind, budget, m)
        spec = run.spec
        if spec.key in runs:
            kept = runs[spec.key]
            steps = tuple(sorted(set(kept.spec.execution.keep_steps) | set(spec.execution.keep_steps)))
            if steps != kept.spec.execution.keep_steps:  # one trunk serves the branch points of two blocks
                execution = kept.spec.execution.model_copy(update={"keep_steps": steps})
                runs[spec.key] = replace(kept, spec=kept.spec.model_copy(update={"execution": execution}))
            else:
                notes.append(f"duplicate run {spec.key} (grid.{b}) listed once")
            return runs[spec.key].spec
        runs[spec.key] = run
        return spec

    for b, block in enumerate(plan.grid):
        points: list[tuple[Any, ...]] = []  # (model index, shape, D, budget, lr, batch, loc)
        kind = block.kind
        shapes = []
        for m, point in enumerate(block.models):
            try:
                shapes.append(((m,), point.shape(plan.model, conv.params)))
            except ValueError as exc:
                raise PlanError(f"{where(source, ('grid', b, 'models', m))}: {exc}") from None
        if kind == "branches":
            for (m,), shape in shapes:
                for seed in plan.seeds:
                    branches.expand_model(
                        plan, b, m, shape, seed, source,
                        lambda N, D, C: _hyper(plan, N, D, C, source),
                        lambda *args, _b=b, **kw: finish(_b, "branches", None, *args, **kw),
                    )
            continue
        if kind == "compute":
            smallest = min(shapes, key=lambda s: s[1].params(conv.params))[1]
            for c, C in enumerate(block.compute or ()):
                kept = 0
                for (m,), shape in sorted(shapes, key=lambda s: s[1].params(conv.params)):
                    N = shape.params(conv.params)
                    D = C / shape.flops_per_token(conv.flops, conv.params)
                    loc = ("grid", b, "compute", c)
                    lr, batch = _hyper(plan, N, D, C, source)
                    if D < batch:
                        reason = f"D={D:.3g} tokens is less than one batch ({batch} tokens)"
                        if shape is smallest:
                            raise PlanError(
                                f"{where(source, loc)}: C={C:.3g} FLOPs is too small for the smallest model "
                                f"(N={N:,}: {reason}; it needs at least "
                                f"{batch * shape.flops_per_token(conv.flops, conv.params):.3g} FLOPs)"
                            )
                        notes.append(f"dropped N={N:,} at C={C:.3g}: {reason}")
                        continue
                    why = block.bounds.violation(D, N)
                    if why:
                        notes.append(f"dropped N={N:,} at C={C:.3g}: {why} (grid.{b}.bounds)")
                        continue
                    kept += 1
                    points.append((m, shape, D, C, lr, batch, loc))
                if kept == 0:
                    raise PlanError(
                        f"{where(source, ('grid', b, 'compute', c))}: no model of grid.{b} has D within "
                        f"the bounds at C={C:.3g} FLOPs"
                    )
        else:
            values = block.tokens if kind == "tokens" else block.tokens_per_param
            for (m,), shape in shapes:
                N = shape.params(conv.params)
                for j, v in enumerate(values or ()):
                    D = v if kind == "tokens" else v * N
                    C = shape.flops_per_token(conv.flops, conv.params) * D
                    lr, batch = _hyper(plan, N, D, C, source)
                    loc = ("grid", b, kind, j)
                    if D < batch:
                        raise PlanError(
                            f"{where(source, loc)}: D={D:.3g} tokens for N={N:,} is less than one batch "
                            f"({batch} tokens)"
                        )
                    points.append((m, shape, D, None, lr, batch, loc))

        for m, shape, D, budget, lr, batch, loc in points:
            for seed in plan.seeds:
                finish(b, kind, budget, shape, D, lr, batch, seed, loc, m)

    # Smallest compute first; an IsoFLOP budget's runs together, smallest model first.
    ordered = sorted(
        runs.values(), key=lambda r: (r.budget or r.spec.flops, r.spec.n_params, r.spec.tokens, r.spec.seed)
    )
    _check_adaptive_budget(plan, ordered, source)
    return Expansion(plan, ordered, notes, precision.reason)


def _check_adaptive_budget(plan: Plan, runs: list[PlannedRun], source: Optional[YamlSource]) -> None:
    """An adaptive budget counts the grid: one the grid alone exceeds leaves the loop nothing to add."""
    if plan.adaptive is None or any(r.spec.branch is not None for r in runs):
        return  # a branch shares its trunk's compute: the loop's own accounting judges that
    grid = sum(r.spec.flops for r in runs)
    if grid > plan.adaptive.max_compute:
        raise PlanError(f"{where(source, ('adaptive', 'max_compute'))}: {plan.adaptive.max_compute:.3g} FLOPs is less "
                        f"than the grid's own {grid:.3g} (the budget includes the grid): raise it or shrink the grid")
    from scaling.fitting.base import MAX_EXTRAPOLATION  # as far from the data as any fit is asked about

    budgets = [r.budget or r.spec.flops for r in runs] or [plan.adaptive.target.at_compute]
    at, lo, hi = plan.adaptive.target.at_compute, min(budgets), max(budgets)
    if not lo / MAX_EXTRAPOLATION <= at <= hi * MAX_EXTRAPOLATION:
        raise PlanError(f"{where(source, ('adaptive', 'target', 'at_compute'))}: {at:.3g} FLOPs is more than "
                        f"{MAX_EXTRAPOLATION:.0e}x outside the grid's budgets ({lo:.3g} to {hi:.3g} FLOPs): a fit of "
                        f"them says nothing that far away (use {lo / MAX_EXTRAPOLATION:.3g} to "
                        f"{hi * MAX_EXTRAPOLATION:.3g})")


def _with_lineage(spec: RunSpec, schedule: Any, branch: Optional[dict[str, Any]], keep_steps: tuple[int, ...]) -> RunSpec:
    """A trunk's or branch's spec: its own schedule, parent and kept checkpoints (validated again)."""
    data = spec.model_dump()
    if schedule is not None:
        data["schedule"] = schedule.model_dump()
    data["branch"] = branch
    data["execution"] = {**data["execution"], "keep_steps": tuple(keep_steps)}
    return RunSpec.model_validate(data)


def _resolve_precision(plan: Plan) -> tuple[Plan, Any]:
    """The plan with ``auto`` resolved on this machine (the driver), before any key is computed."""
    from scaling.trainer.precision import resolve

    device = "cuda" if plan.resources.gpus_per_worker > 0 else "cpu"
    res = resolve(plan.train.precision, device)
    return plan.model_copy(update={"train": plan.train.model_copy(update={"precision": res.precision})}), res


class _Unresolved:
    """A simulated plan's precision: kept as the plan says (nothing is trained, no device is probed)."""

    warning = ""
    reason = "simulated runs: nothing is trained, precision is not resolved"


def _placed(spec: RunSpec, best: Any) -> Any:
    """The run's execution with the chosen layout: strategy, tp, pp, schedule and micro-batch.

    The micro-batch size is written only where it differs from what the spec would derive from
    its own setting (a data-parallel rank's whole share by default), so a plan that leaves it
    unset and fits keeps it unset.
    """
    ex, lay = spec.execution, best.layout
    update: dict[str, Any] = {"strategy": best.strategy, "tp": lay.tp, "pp": lay.pp, "pp_schedule": best.schedule}
    if micro_batch_size(spec.sequences_per_batch, lay.dp, ex.micro_batch_size) != lay.micro_batch:
        update["micro_batch_size"] = lay.micro_batch
    return ex.model_copy(update=update)


def _layout_loc(plan: Plan, block: int) -> tuple[Any, ...]:
    own = plan.grid[block].resources
    if own is not None and own.model_fields_set & {"tp", "pp", "pp_schedule", "workers"}:
        return ("grid", block, "resources")
    return ("resources",)


def _does_not_fit(
    r: ResourcesPlan, spec: RunSpec, least: Any, block: int, model: int, source: Optional[YamlSource]
) -> str:
    shape = spec.shape
    tried = (
        f"strategy {r.strategy}" if r.strategy != "auto"
        else ("one worker" if r.workers == 1 else f"any layout of {r.workers} workers (least: {least.label()})")
    )
    return (
        f"{where(source, ('resources', 'device_memory_gib'))}: run N={spec.n_params:,} "
        f"(grid.{block}.models.{model}, {shape.n_layer}x{shape.d_model}) needs {least.memory.total_gib:.3g} GiB per "
        f"worker with {tried} (micro-batch {least.layout.micro_batch}), more than the device's "
        f"{r.device_memory_gib:g} GiB; use more workers, a smaller micro_batch_size or "
        f"activation_checkpointing"
    )


def _hyper(plan: Plan, N: float, D: float, C: float, source: Optional[YamlSource]) -> tuple[float, int]:
    try:
        return plan.hyperparameters(N, D, C)
    except RuleValueError as exc:
        raise PlanError(f"{where(source, ('rules', exc.field))}: {exc}") from None


def _tags(plan: Plan, kind: str, budget: Optional[float]) -> dict[str, str]:
    """Free-form labels (not in the key): the grid form, the IsoFLOP budget and the rules used."""
    tags = {"sweep": plan.name, "grid": kind}
    if budget is not None:
        tags["budget"] = f"{budget:.6g}"
    if plan.rules.lr is not None:
        tags["rule.lr"] = str(plan.rules.lr)
    if plan.rules.batch_tokens is not None:
        tags["rule.batch_tokens"] = str(plan.rules.batch_tokens)
    return tags


"""Expand a plan into `RunSpec`s: models x tokens, tokens per parameter, IsoFLOP, seeds, rules.

Smallest runs (by compute) come first so that early results arrive early and a sweep cut short
still covers its low budgets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from pydantic import ValidationError

from scaling.accounting import check_fits
from scaling.errors import PlanError, ResourceError, UserError
from scaling.orchestrator.plan import Plan, RuleValueError, where
from scaling.orchestrator.yamlsource import YamlSource
from scaling.trainer.spec import DataSpec, RunSpec


@dataclass(frozen=True)
class PlannedRun:
    """One run of the sweep with the planning facts `scaling plan` shows."""

    spec: RunSpec
    block: int
    kind: str  # "tokens" | "tokens_per_param" | "compute"
    budget: Optional[float]  # the IsoFLOP budget C the run belongs to, if any
    memory_gib: float
    strategy: str

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


def _data_vocab(plan: Plan, source: Optional[YamlSource]) -> Optional[int]:
    """The tokenizer's vocabulary (its tokens prepared once), or None for byte-level or token-file data."""
    from scaling.trainer.data import tokenizer_vocab_size

    try:
        return tokenizer_vocab_size(plan.data)
    except UserError as exc:
        raise PlanError(f"{where(source, ('data',))}: {exc}") from None


def expand(plan: Plan, source: Optional[YamlSource] = None, *, resolve: bool = True) -> Expansion:
    """All runs of ``plan`` as `PlannedRun`s (smallest compute first), with notes on dropped ones.

    Each run is the plan's shared sections plus its shape, D, lr, batch and seed
    (:meth:`Plan.run_spec`). Raises PlanError for a grid that yields nothing usable (a budget too
    small for the smallest model, explicit D below one batch, a rule without a value, a value the
    run spec refuses) and ResourceError for a run that fits the device memory under no strategy.
    """
    plan, precision = _resolve_precision(plan)
    if resolve:
        plan = plan.with_data_vocab(_data_vocab(plan, source), source)
    data_resolved: Optional[DataSpec] = None
    conv = plan.conventions
    runs: dict[str, PlannedRun] = {}
    notes: list[str] = [precision.warning] if precision.warning else []

    for b, block in enumerate(plan.grid):
        points: list[tuple[Any, ...]] = []  # (model index, shape, D, budget, lr, batch, loc)
        kind = block.kind
        shapes = []
        for m, point in enumerate(block.models):
            try:
                shapes.append(((m,), point.shape(plan.model, conv.params)))
            except ValueError as exc:
                raise PlanError(f"{where(source, ('grid', b, 'models', m))}: {exc}") from None
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
                try:
                    spec = plan.run_spec(
                        shape, D, lr, batch, seed,
                        faults=block.faults,
                        name=f"{plan.name}/N{shape.params(conv.params):.3g}/D{D:.3g}/s{seed}",
                        tags=_tags(plan, kind, budget),
                    )
                except ValidationError as exc:  # a value the trainer refuses
                    err = exc.errors()[0]
                    detail = str(err["msg"]).removeprefix("Value error, ")
                    at = ("grid", b, "models", m) if err["loc"][:1] == ("model",) else loc
                    raise PlanError(f"{where(source, at)}: {detail}") from None
                strategy, mem = plan.place(spec)
                if strategy is None:
                    raise ResourceError(_does_not_fit(plan, spec, mem, b, m, source))
                if plan.resources.device_memory_gib is None:  # still no device holds more than MAX_DEVICE_GIB
                    check_fits(mem, None, what=f"{where(source, ('grid', b, 'models', m))}: run N={spec.n_params:.3g}")
                spec = spec.model_copy(update={"execution": spec.execution.model_copy(update={"strategy": strategy})})
                if data_resolved is not None:
                    spec = spec.model_copy(update={"data": data_resolved})
                elif resolve:
                    try:
                        spec = _resolve_data(spec)
                    except UserError as exc:
                        raise PlanError(f"{where(source, ('data',))}: {exc}") from None
                    data_resolved = spec.data
                if spec.key in runs:
                    notes.append(f"duplicate run {spec.key} (grid.{b}) listed once")
                    continue
                runs[spec.key] = PlannedRun(spec, b, kind, budget, mem.total_gib, strategy)

    # Smallest compute first; an IsoFLOP budget's runs together, smallest model first.
    ordered = sorted(
        runs.values(), key=lambda r: (r.budget or r.spec.flops, r.spec.n_params, r.spec.tokens, r.spec.seed)
    )
    return Expansion(plan, ordered, notes, precision.reason)


def _resolve_precision(plan: Plan) -> tuple[Plan, Any]:
    """The plan with ``auto`` resolved on this machine (the driver), before any key is computed."""
    from scaling.trainer.precision import resolve

    device = "cuda" if plan.resources.gpus_per_worker > 0 else "cpu"
    res = resolve(plan.train.precision, device)
    return plan.model_copy(update={"train": plan.train.model_copy(update={"precision": res.precision})}), res


def _does_not_fit(plan: Plan, spec: RunSpec, mem: Any, block: int, model: int, source: Optional[YamlSource]) -> str:
    r, shape = plan.resources, spec.shape
    tried = (
        f"strategy {r.strategy}" if r.strategy != "auto"
        else ("one worker" if r.workers == 1 else f"zero3 over {r.workers} workers")
    )
    return (
        f"{where(source, ('resources', 'device_memory_gib'))}: run N={spec.n_params:,} "
        f"(grid.{block}.models.{model}, {shape.n_layer}x{shape.d_model}) needs {mem.total_gib:.3g} GiB per "
        f"worker with {tried} (micro-batch {spec.micro_batch}), more than the device's "
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


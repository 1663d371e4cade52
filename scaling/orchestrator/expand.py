"""Expand a plan into `RunSpec`s: models x tokens, tokens per parameter, IsoFLOP, seeds, rules.

Smallest runs (by compute) come first so that early results arrive early and a sweep cut short
still covers its low budgets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from scaling import rules
from scaling.errors import PlanError, ResourceError, UserError
from scaling.orchestrator.plan import Plan
from scaling.orchestrator.yamlsource import YamlSource
from scaling.trainer.spec import RunSpec


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


def _where(source: Optional[YamlSource], loc: tuple[Any, ...]) -> str:
    name = source.name if source is not None else "plan"
    line = source.line(loc) if source is not None else None
    field_path = ".".join(str(p) for p in loc)
    return f"{name}:{line}: {field_path}" if line else f"{name}: {field_path}"


def _base_spec_fields(plan: Plan) -> dict[str, Any]:
    t, r = plan.train, plan.resources
    return {
        "data": {
            "source": plan.data.source,
            "path": plan.data.path,
            "dtype": plan.data.dtype,
            "val_fraction": plan.data.val_fraction,
        },
        "params_convention": plan.conventions.params,
        "flops_convention": plan.conventions.flops,
        "precision": t.precision,
        "schedule": t.schedule.model_dump(),
        "grad_clip": t.grad_clip,
        "spike": t.spike.model_dump(),
        "eval_tokens": t.eval_tokens,
        "execution": {
            "workers": r.workers,
            "cpu_offload": r.cpu_offload,
            "cpus_per_worker": r.cpus_per_worker,
            "gpus_per_worker": r.gpus_per_worker,
            "device": "cuda" if r.gpus_per_worker > 0 else "cpu",
            "micro_batch_size": r.micro_batch_size,
            "threads": t.threads,
            "compile": t.compile,
            "activation_checkpointing": r.activation_checkpointing,
            "eval_interval": t.eval_interval,
            "checkpoint_interval": t.checkpoint_interval,
            "keep_checkpoints": t.keep_checkpoints,
            "log_interval": t.log_interval,
            "device_memory_gib": r.device_memory_gib,
        },
    }


def _resolve_data(spec: RunSpec) -> RunSpec:
    """Fill the corpus fingerprint (part of the key) and size, when the trainer's data module exists."""
    try:
        from scaling.trainer.data import resolve_data
    except ImportError:
        return spec
    return resolve_data(spec)


def expand(plan: Plan, source: Optional[YamlSource] = None, *, resolve: bool = True) -> Expansion:
    """All runs of ``plan`` as `PlannedRun`s (smallest compute first), with notes on dropped ones.

    Raises PlanError for a grid that yields nothing usable (a budget too small for the smallest
    model, explicit D below one batch, a rule without a value) and ResourceError for a run that
    fits the device memory under no strategy.
    """
    plan, precision = _resolve_precision(plan)
    base = _base_spec_fields(plan)
    data_resolved: Optional[dict[str, Any]] = None
    conv = plan.conventions
    runs: dict[str, PlannedRun] = {}
    notes: list[str] = [precision.warning] if precision.warning else []

    for b, block in enumerate(plan.grid):
        points: list[tuple[Any, ...]] = []  # (model index, shape, D, budget, lr, batch, loc)
        kind = "tokens" if block.tokens else "tokens_per_param" if block.tokens_per_param else "compute"
        shapes = []
        for m, point in enumerate(block.models):
            try:
                shapes.append(((m,), point.shape(plan.model, conv.params)))
            except ValueError as exc:
                raise PlanError(f"{_where(source, ('grid', b, 'models', m))}: {exc}") from None
        if kind == "compute":
            smallest = min(shapes, key=lambda s: s[1].params(conv.params))[1]
            for c, C in enumerate(block.compute or ()):
                kept = 0
                for (m,), shape in sorted(shapes, key=lambda s: s[1].params(conv.params)):
                    N = shape.params(conv.params)
                    D = C / shape.flops_per_token(conv.flops, conv.params)
                    loc = ("grid", b, "compute", c)
                    lr, batch = _hyper(plan, N, D, C, source, ("rules",))
                    if D < batch:
                        reason = f"D={D:.3g} tokens is less than one batch ({batch} tokens)"
                        if shape is smallest:
                            raise PlanError(
                                f"{_where(source, loc)}: C={C:.3g} FLOPs is too small for the smallest model "
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
                    points.append((m, shape, round(D), C, lr, batch, loc))
                if kept == 0:
                    raise PlanError(
                        f"{_where(source, ('grid', b, 'compute', c))}: no model of grid.{b} has D within "
                        f"the bounds at C={C:.3g} FLOPs"
                    )
        else:
            values = block.tokens if kind == "tokens" else block.tokens_per_param
            for (m,), shape in shapes:
                N = shape.params(conv.params)
                for j, v in enumerate(values or ()):
                    D = v if kind == "tokens" else v * N
                    C = shape.flops_per_token(conv.flops, conv.params) * D
                    lr, batch = _hyper(plan, N, D, C, source, ("rules",))
                    loc = ("grid", b, kind, j)
                    if D < batch:
                        raise PlanError(
                            f"{_where(source, loc)}: D={D:.3g} tokens for N={N:,} is less than one batch "
                            f"({batch} tokens)"
                        )
                    points.append((m, shape, round(D), None, lr, batch, loc))

        for m, shape, D, budget, lr, batch, loc in points:
            strategy, mem = plan.memory(shape, batch)
            if strategy is None:
                r = plan.resources
                tried = (
                    f"strategy {r.strategy}" if r.strategy != "auto"
                    else ("one worker" if r.workers == 1 else f"zero3 over {r.workers} workers")
                )
                raise ResourceError(
                    f"{_where(source, ('resources', 'device_memory_gib'))}: run N={shape.params(conv.params):,} "
                    f"(grid.{b}.models.{m}, {shape.n_layer}x{shape.d_model}) needs {mem.total_gib:.3g} GiB per "
                    f"worker with {tried} (micro-batch {plan.micro_batch(batch)}), more than the device's "
                    f"{r.device_memory_gib:g} GiB; use more workers, a smaller micro_batch_size or "
                    f"activation_checkpointing"
                )
            for seed in plan.seeds:
                fields = dict(base)
                fields["execution"] = {**base["execution"], "strategy": strategy}
                fields.update(
                    model=shape.as_dict(),
                    tokens=D,
                    optimizer={**plan.train.optimizer.model_dump(), "lr": lr},
                    batch_tokens=batch,
                    seed=seed,
                    faults=block.faults.model_dump(),
                    name=f"{plan.name}/N{shape.params(conv.params):.3g}/D{D:.3g}/s{seed}",
                    tags=_tags(plan, kind, budget),
                )
                if data_resolved is not None:
                    fields["data"] = data_resolved
                try:
                    spec = RunSpec.model_validate(fields)
                except Exception as exc:  # pydantic ValidationError: a value the trainer refuses
                    detail = exc.errors()[0]["msg"] if hasattr(exc, "errors") else str(exc)
                    detail = detail.removeprefix("Value error, ")
                    raise PlanError(f"{_where(source, loc)}: {detail}") from None
                if data_resolved is None and resolve:
                    try:
                        spec = _resolve_data(spec)
                    except UserError as exc:
                        raise PlanError(f"{_where(source, ('data',))}: {exc}") from None
                    data_resolved = spec.data.model_dump(mode="json")
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


def _hyper(plan: Plan, N: float, D: float, C: float, source, loc) -> tuple[float, int]:
    try:
        return plan.hyperparameters(N, D, C)
    except rules.RuleError as exc:
        raise PlanError(f"{_where(source, loc)}: {exc}") from None


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


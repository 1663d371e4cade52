"""The sweep plan (`plan.yaml`): a pydantic v2 schema, loaded safely, expanded into RunSpecs.

Every model sets ``extra="forbid"``: nested pydantic models ignore unknown keys by default, so
a typo such as ``lerning_rate`` would otherwise vanish silently. A validation problem becomes
one :class:`~scaling.errors.PlanError` line naming the file, the line and the field.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from scaling import rules
from scaling.accounting import GIB, Shape, ShapePolicy, choose_strategy, estimate_memory
from scaling.errors import PlanError
from scaling.orchestrator.yamlsource import YamlSource
from scaling.trainer.spec import FaultSpec, OptimizerSpec, ScheduleSpec, SpikeSpec

Rule = Union[float, str, dict[str, Any]]
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DataPlan(_Strict):
    """The corpus every run of the sweep trains on (see `scaling.trainer.spec.DataSpec`)."""

    source: Literal["builtin", "text", "tokens"] = "builtin"
    path: Optional[str] = None
    dtype: Literal["uint8", "uint16"] = "uint16"
    val_fraction: float = Field(default=0.05, gt=0, lt=0.5)

    @model_validator(mode="after")
    def _path_exists(self) -> "DataPlan":
        if self.source == "builtin":
            if self.path:
                raise ValueError("path is only used with source 'text' or 'tokens'")
            return self
        if not self.path:
            raise ValueError(f"path is required for source {self.source!r}")
        import glob

        if not glob.glob(self.path):
            raise ValueError(f"no file matches path {self.path!r}")
        return self


class ModelPlan(_Strict):
    """How a target size N becomes a shape (`scaling.accounting.ShapePolicy`)."""

    aspect_ratio: float = Field(default=64.0, gt=0, description="d_model / n_layer")
    head_size: int = Field(default=64, gt=0, description="d_model / n_head")
    vocab_size: int = Field(default=256, gt=0)
    context: int = Field(default=256, gt=0)

    def policy(self) -> ShapePolicy:
        return ShapePolicy(self.aspect_ratio, self.head_size, self.vocab_size, self.context)


class Conventions(_Strict):
    """What N and C mean in this sweep; stored with the sweep and used by the fits."""

    params: Literal["non_embedding", "total"] = "non_embedding"
    flops: Literal["6N", "6N_attention"] = "6N"


class TrainPlan(_Strict):
    """The training recipe shared by every run (rules may override lr and batch_tokens)."""

    precision: Literal["auto", "bf16", "fp16", "fp32"] = "auto"  # resolved per machine at expansion
    optimizer: OptimizerSpec = OptimizerSpec()
    schedule: ScheduleSpec = ScheduleSpec()
    batch_tokens: int = Field(default=8192, gt=0)
    grad_clip: float = Field(default=1.0, ge=0)
    spike: SpikeSpec = SpikeSpec()
    eval_tokens: int = Field(default=65536, gt=0)
    eval_interval: int = Field(default=100, gt=0, description="steps")
    checkpoint_interval: int = Field(default=100, gt=0, description="steps")
    keep_checkpoints: int = Field(default=2, gt=0)
    log_interval: int = Field(default=1, gt=0, description="steps between metric rows")
    threads: int = Field(default=1, gt=0, description="torch threads per worker")
    compile: bool = False


class ResourcesPlan(_Strict):
    """Where and how runs execute (none of this changes a run's key)."""

    workers: int = Field(default=1, gt=0, description="workers per run")
    cpus_per_worker: float = Field(default=1, gt=0)
    gpus_per_worker: float = Field(default=0, ge=0)
    device_memory_gib: Optional[float] = Field(default=None, gt=0, description="for planning and `auto`")
    strategy: Literal["auto", "single", "ddp", "zero1", "zero2", "zero3"] = "auto"
    cpu_offload: bool = False
    micro_batch_size: Optional[int] = Field(default=None, gt=0, description="sequences per worker")
    activation_checkpointing: bool = False
    max_concurrent: Optional[int] = Field(default=None, gt=0, description="runs at once (default: as many as fit)")
    num_cpus: Optional[int] = Field(default=None, gt=0, description="CPUs of the local Ray (default: all)")
    throughput_flops: Optional[float] = Field(
        default=None, gt=0, description="achieved FLOP/s per worker, for time estimates"
    )

    @model_validator(mode="after")
    def _strategy_matches_workers(self) -> "ResourcesPlan":
        if self.workers == 1 and self.strategy not in ("auto", "single"):
            raise ValueError(f"strategy {self.strategy!r} needs workers > 1 (one worker runs 'single')")
        if self.workers > 1 and self.strategy == "single":
            raise ValueError("strategy 'single' needs workers: 1")
        return self


class RulesPlan(_Strict):
    """Hyperparameters that follow the run's size: numbers, expressions of N, D, C, or power laws."""

    lr: Optional[Rule] = None
    batch_tokens: Optional[Rule] = None

    @field_validator("lr", "batch_tokens")
    @classmethod
    def _rule_is_safe(cls, value: Any) -> Any:
        if value is not None:
            try:
                rules.check_rule(value)
            except rules.RuleError as exc:
                raise ValueError(str(exc)) from None
        return value


class Bounds(_Strict):
    """IsoFLOP runs whose D falls outside these bounds are dropped, with a note."""

    min_tokens: Optional[float] = Field(default=None, gt=0)
    max_tokens: Optional[float] = Field(default=None, gt=0)
    min_tokens_per_param: Optional[float] = Field(default=None, gt=0)
    max_tokens_per_param: Optional[float] = Field(default=None, gt=0)

    def violation(self, D: float, N: float) -> Optional[str]:
        if self.min_tokens is not None and D < self.min_tokens:
            return f"D={D:.3g} < min_tokens {self.min_tokens:.3g}"
        if self.max_tokens is not None and D > self.max_tokens:
            return f"D={D:.3g} > max_tokens {self.max_tokens:.3g}"
        if self.min_tokens_per_param is not None and D / N < self.min_tokens_per_param:
            return f"D/N={D / N:.3g} < min_tokens_per_param {self.min_tokens_per_param:.3g}"
        if self.max_tokens_per_param is not None and D / N > self.max_tokens_per_param:
            return f"D/N={D / N:.3g} > max_tokens_per_param {self.max_tokens_per_param:.3g}"
        return None


class ModelPoint(_Strict):
    """One model of the grid: a target size N (a number) or an explicit shape."""

    N: Optional[float] = Field(default=None, gt=0)
    n_layer: Optional[int] = Field(default=None, gt=0)
    d_model: Optional[int] = Field(default=None, gt=0)
    n_head: Optional[int] = Field(default=None, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _number_is_n(cls, value: Any) -> Any:
        if isinstance(value, (int, float, str)) and not isinstance(value, bool):
            return {"N": value}
        return value

    @model_validator(mode="after")
    def _one_form(self) -> "ModelPoint":
        shape_fields = (self.n_layer, self.d_model, self.n_head)
        if self.N is not None and any(f is not None for f in shape_fields):
            raise ValueError("give either N or a shape (n_layer, d_model, n_head), not both")
        if self.N is None and any(f is None for f in shape_fields):
            raise ValueError("a shape needs n_layer, d_model and n_head")
        if self.N is None and self.d_model % self.n_head:  # type: ignore[operator]
            raise ValueError(f"d_model ({self.d_model}) must be a multiple of n_head ({self.n_head})")
        return self

    def shape(self, model: ModelPlan, convention: str) -> Shape:
        if self.N is not None:
            return model.policy().shape_for(self.N, convention)  # type: ignore[arg-type]
        return Shape(self.n_layer, self.d_model, self.n_head, model.vocab_size, model.context)  # type: ignore[arg-type]


class GridBlock(_Strict):
    """``models`` times one of: ``tokens`` (D), ``tokens_per_param`` (D = k N) or ``compute`` (IsoFLOP)."""

    models: list[ModelPoint] = Field(min_length=1)
    tokens: Optional[list[float]] = Field(default=None, min_length=1)
    tokens_per_param: Optional[list[float]] = Field(default=None, min_length=1)
    compute: Optional[list[float]] = Field(default=None, min_length=1)
    bounds: Bounds = Bounds()
    faults: FaultSpec = FaultSpec()  # injected faults, only for tests of the recovery paths

    @field_validator("tokens", "tokens_per_param", "compute")
    @classmethod
    def _positive(cls, values: Optional[list[float]]) -> Optional[list[float]]:
        for v in values or ():
            if not (v > 0 and math.isfinite(v)):
                raise ValueError(f"values must be positive and finite, got {v}")
        return values

    @model_validator(mode="after")
    def _one_axis(self) -> "GridBlock":
        given = [n for n in ("tokens", "tokens_per_param", "compute") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError(
                "each grid block needs exactly one of tokens, tokens_per_param or compute"
                + (f" (got {', '.join(given)})" if given else "")
            )
        return self


class Plan(_Strict):
    """A sweep: the grid of runs and everything they share."""

    name: str
    db: Optional[str] = None
    runs_dir: str = "./scaling_runs"
    data: DataPlan = DataPlan()
    model: ModelPlan = ModelPlan()
    conventions: Conventions = Conventions()
    train: TrainPlan = TrainPlan()
    resources: ResourcesPlan = ResourcesPlan()
    rules: RulesPlan = RulesPlan()
    retries: int = Field(default=1, ge=0, description="extra attempts after a run fails")
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    grid: list[GridBlock] = Field(min_length=1)

    @field_validator("name")
    @classmethod
    def _name_is_a_directory_name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError("name must be letters, digits, '_', '.' or '-' (it names a directory)")
        return value

    @field_validator("seeds")
    @classmethod
    def _seeds_unique(cls, value: list[int]) -> list[int]:
        if len(set(value)) != len(value):
            raise ValueError("seeds must be distinct")
        return value

    # -- loading ------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Any, source: Optional[YamlSource] = None) -> "Plan":
        """Validate ``data``; the first problem becomes one PlanError line (file:line: field: why)."""
        name = source.name if source is not None else "plan"
        if not isinstance(data, dict):
            raise PlanError(f"{name}: a plan must be a mapping of fields (name, grid, ...)")
        try:
            plan = cls.model_validate(data)
        except ValidationError as exc:
            raise _plan_error(exc, source, name) from None
        plan._cross_checks(source, name)
        return plan

    def _cross_checks(self, source: Optional[YamlSource], name: str) -> None:
        """Rules that span sections (pydantic validates each section alone)."""
        if self.rules.batch_tokens is None and self.train.batch_tokens < self.model.context:
            loc = ("train", "batch_tokens")
            line = source.line(loc) if source is not None else None
            where = f"{name}:{line}" if line else name
            raise PlanError(
                f"{where}: train.batch_tokens: {self.train.batch_tokens} is less than one sequence "
                f"(model.context {self.model.context})"
            )

    def suggest(self, N: float, D: float, C: float) -> dict:
        """What this plan would run for target N, D and C (see :func:`scaling.rules.suggest_run`)."""
        shape = self.model.policy().shape_for(N, self.conventions.params)
        n_params = shape.params(self.conventions.params)
        lr, batch = self.hyperparameters(n_params, D, C)
        strategy, mem = self.memory(shape, batch)
        return {
            "shape": shape.as_dict(),
            "n_params": n_params,
            "lr": lr,
            "batch_tokens": batch,
            "memory_gib": mem.total_gib,
            "strategy": strategy,
        }

    # -- shared computations --------------------------------------------------------------------
    def hyperparameters(self, N: float, D: float, C: float) -> tuple[float, int]:
        """(lr, batch_tokens) for a run, from the rules or the train section."""
        lr = self.train.optimizer.lr
        if self.rules.lr is not None:
            lr = rules.evaluate(self.rules.lr, N, D, C)
            if lr <= 0:
                raise rules.RuleError(f"lr rule gives {lr:g} at N={N:g}, D={D:g}, C={C:g}; it must be positive")
        batch = self.train.batch_tokens
        if self.rules.batch_tokens is not None:
            raw = rules.evaluate(self.rules.batch_tokens, N, D, C)
            if raw <= 0:
                raise rules.RuleError(f"batch_tokens rule gives {raw:g} at N={N:g}; it must be positive")
            ctx = self.model.context
            batch = max(ctx, int(round(raw / ctx)) * ctx)  # whole sequences
        return lr, batch

    def micro_batch(self, batch_tokens: int) -> int:
        """Sequences per worker per forward pass (the memory estimate's b)."""
        if self.resources.micro_batch_size is not None:
            return self.resources.micro_batch_size
        sequences = max(1, batch_tokens // self.model.context)
        return max(1, math.ceil(sequences / self.resources.workers))

    def memory(self, shape: Shape, batch_tokens: int) -> tuple[Optional[str], Any]:
        """(strategy, MemoryEstimate): the plan's strategy, or under `auto` the least sharding that fits.

        The strategy is None when nothing fits ``device_memory_gib``; the estimate is then zero-3's.
        """
        r = self.resources
        mb = self.micro_batch(batch_tokens)
        prec = self.train.precision
        if prec == "auto":  # unresolved (a stored plan, torch-free): fp32 on CPUs is the larger estimate
            prec = "bf16" if r.gpus_per_worker > 0 else "fp32"
        ckpt = r.activation_checkpointing
        if r.strategy == "auto":
            if r.device_memory_gib is None:
                strategy = "single" if r.workers == 1 else "ddp"
                return strategy, estimate_memory(shape, mb, prec, strategy, r.workers, ckpt)  # type: ignore[arg-type]
            est = choose_strategy(shape, mb, prec, r.workers, r.device_memory_gib * GIB, ckpt)  # type: ignore[arg-type]
            if est is None:
                last = "single" if r.workers == 1 else "zero3"
                return None, estimate_memory(shape, mb, prec, last, r.workers, ckpt)  # type: ignore[arg-type]
            return est.strategy, est
        est = estimate_memory(shape, mb, prec, r.strategy, r.workers, ckpt)  # type: ignore[arg-type]
        if r.device_memory_gib is not None and est.total_bytes > r.device_memory_gib * GIB:
            return None, est
        return r.strategy, est


def _plan_error(exc: ValidationError, source: Optional[YamlSource], name: str) -> PlanError:
    err = exc.errors()[0]
    loc = tuple(err["loc"])
    field = ".".join(str(p) for p in loc) or "(top level)"
    line = source.line(loc) if source is not None else None
    where = f"{name}:{line}" if line else name
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if err["type"] == "extra_forbidden":
        msg = "unknown field (not part of the plan schema)"
    elif err["type"] == "missing":
        msg = "required field is missing"
    return PlanError(f"{where}: {field}: {msg}")


def load_plan(path: str | Path) -> tuple[Plan, YamlSource]:
    """Read, parse (safely) and validate a plan file."""
    source = YamlSource.from_path(path)
    return Plan.from_dict(source.data, source), source

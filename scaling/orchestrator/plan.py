"""The sweep plan (`plan.yaml`): a pydantic v2 schema, loaded safely. Data only: expanding it into
resolved RunSpecs is `scaling.orchestrator.expand`'s (its stages), probing the machine the resolver's.

The plan reuses the run spec's models (`scaling.trainer.spec`): ``data`` is a DataSpec,
``conventions`` the spec's Conventions, ``train`` holds the spec's Recipe and LoopSettings
fields and ``resources`` its Placement fields. A default, an allowed value or a check of one of
these fields therefore lives in the spec alone; the plan adds only what is its own (the grid,
the shape policy, the rules, the sweep's name and concurrency).

Every model forbids unknown keys (a typo such as ``lerning_rate`` would otherwise vanish
silently) and infinite or NaN numbers. A validation problem becomes one
:class:`~scaling.errors.PlanError` line naming the file, the line and the field.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import Any, ClassVar, Literal, Optional, Union

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from scaling import layout, rules
from scaling import fmt
from scaling.accounting import FAMILIES, FIELD_DEFAULTS, Shape, ShapePolicy, StrategyChoice
from scaling.batching import batch_problem, whole_sequences
from scaling.communication import LINKS
from scaling.schema import StrictModel, checked
from scaling.errors import FieldProblem, PlanError, UserError
from scaling.naming import name_problem
from scaling.orchestrator.adaptive_spec import AdaptivePlan
from scaling.orchestrator.branches_spec import BranchesPlan
from scaling.orchestrator.hparam_groups import HparamsPlan, coincidence_problem
from scaling.orchestrator.transfer import FittedRule
from scaling.orchestrator.yamlsource import YamlSource, located, where
from scaling.trainer.evaluation.eval_tasks import EvalsSpec, check_tasks
from scaling.trainer.resolve import Host, decide_device
from scaling.trainer.sections import (
    Conventions,
    DataSpec,
    FamilySpec,
    FaultSpec,
    LoopSettings,
    MAX_WORKERS,
    Placement,
    Recipe,
    Seed,
    SequenceSpec,
    SimulateSpec,
    path_entries,
)

Rule = Union[float, str, FittedRule, dict[str, Any]]
#: Runs one plan may expand to; a larger grid is refused before any run is built.
MAX_RUNS = 100_000


class RuleValueError(rules.RuleError):
    """A rule with no usable value for one run; ``field`` names the rule (``lr`` or ``batch_tokens``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class _Strict(StrictModel):
    """The plan's own sections (the others are the run spec's): as strict as the spec's."""


class ModelPlan(SequenceSpec, FamilySpec):
    """How a target size N becomes a shape (`scaling.accounting.ShapePolicy`), of which family."""

    aspect_ratio: float = Field(default=64.0, gt=0, description="d_model / n_layer")
    head_size: int = Field(default=64, gt=0, description="d_model / n_head")

    @model_validator(mode="after")
    def _family_fields_valid(self) -> "ModelPlan":
        self.policy()  # the family's fields, checked once (a llama field on gpt2, a bad epsilon)
        return self

    def policy(self) -> ShapePolicy:
        return ShapePolicy(self.aspect_ratio, self.head_size, self.vocab_size, self.context, **self.family_kwargs())

    @model_serializer(mode="wrap")
    def _omit_family_defaults(self, handler: SerializerFunctionWrapHandler) -> Any:
        out = handler(self)
        return self.family_dump(out, None) if isinstance(out, dict) else out


#: The model section's fields that belong to some families (``scaling.families``), and the z-loss.
FAMILY_ONLY_FIELDS = (*FIELD_DEFAULTS, "z_loss")


class BlockModel(_Strict):
    """A grid block's own family and parametrization, over the plan's ``model`` section, so one
    plan compares families, or standard against μP, block by block. A block of another family
    than the plan's takes that family's defaults for the family's fields (the plan's are its
    family's); a block whose parametrization is ``standard`` leaves the plan's ``base_width``."""

    family: Optional[Literal[tuple(FAMILIES)]] = Field(  # type: ignore[valid-type]
        default=None, description="this block's family (default the plan's)")
    parametrization: Optional[Literal["standard", "mup"]] = Field(
        default=None, description="this block's parametrization (default the plan's)")
    base_width: Optional[int] = Field(default=None, gt=0, description="mup: the d_model of the proxy")

    def over(self, model: ModelPlan) -> ModelPlan:
        """``model`` with this block's fields over it (ValidationError for a combination it refuses)."""
        values = dict(model)
        if self.family not in (None, model.family):
            for name in FAMILY_ONLY_FIELDS:
                values.pop(name)
        if self.parametrization == "standard":
            values.pop("base_width")
        # a field stated as None (a plan stored with its sweep states every field) is the plan's
        values.update({name: getattr(self, name) for name in self.model_fields_set if getattr(self, name) is not None})
        return ModelPlan.model_validate(values)


class TrainPlan(Recipe, LoopSettings):
    """The training recipe shared by every run (rules may set lr and batch_tokens per run)."""


class ClusterPlan(_Strict):
    """The machines runs are laid out on: the layout search keeps tensor parallelism inside a node
    and prices data and pipeline groups that span nodes at the inter-node link (`scaling.communication.LINKS`)."""

    nodes: int = Field(default=1, gt=0, le=MAX_WORKERS, strict=True, description="machines in the cluster")
    gpus_per_node: int = Field(default=8, gt=0, le=MAX_WORKERS, strict=True,
                               description="ranks per node (GPUs, or CPU workers)")
    intra: str = Field(default="nvlink", description="link between ranks of one node")
    inter: str = Field(default="infiniband", description="link between nodes")

    @field_validator("intra", "inter")
    @classmethod
    def _known_link(cls, value: str) -> str:
        if value not in LINKS:
            raise ValueError(f"unknown link {value!r} (use one of {', '.join(LINKS)})")
        return value

    def machine(self) -> layout.Machine:
        return layout.Machine(self.nodes, self.gpus_per_node, self.intra, self.inter)


class ResourcesPlan(Placement):
    """Where and how runs execute (none of this changes a run's key)."""

    max_concurrent: Optional[int] = Field(default=None, gt=0, description="runs at once (default: as many as fit)")
    num_cpus: Optional[int] = Field(default=None, gt=0, description="CPUs of the local Ray (default: all)")
    throughput_flops: Optional[float] = Field(  # from a slow CPU core to 1000x a 2025 accelerator
        default=None, ge=1e6, le=1e18, description="achieved FLOP/s per worker, for time estimates"
    )
    cluster: Optional[ClusterPlan] = Field(
        default=None, description="nodes and links (default: one node holding every worker)"
    )

    @model_validator(mode="after")
    def _strategy_matches_workers(self) -> "ResourcesPlan":
        if self.workers == 1 and self.strategy not in ("auto", "single"):
            raise ValueError(f"strategy {self.strategy!r} needs workers > 1 (one worker runs 'single')")
        if self.workers > 1 and self.strategy == "single":
            raise ValueError("strategy 'single' needs workers: 1")
        machine = self.machine()
        if self.workers > machine.ranks:
            raise ValueError(
                f"workers ({self.workers}) is more than the cluster holds "
                f"({machine.nodes} node(s) x {machine.gpus_per_node} per node)"
            )
        if machine.gpus_per_node % self.tp:
            raise ValueError(
                f"tp={self.tp} does not divide a node ({machine.gpus_per_node} per node): "
                "tensor parallelism stays inside a node, and nodes hold whole tensor-parallel groups"
            )
        return self

    @property
    def device(self) -> str:
        """The plan's runs' device, by the resolver's rule (a plan names GPUs, not a device)."""
        return decide_device("auto", self.gpus_per_worker, probe=False)

    def machine(self) -> layout.Machine:
        """The plan's cluster, or by default one node holding every worker (GPUs: NVLink; CPUs: gloo)."""
        return self.host(probe=False, data=False).machine(self.device, self.workers)

    def host(self, *, probe: bool = True, data: bool = True) -> Host:
        """The resolver's view of where these runs go: the cluster and any stated throughput."""
        cluster = self.cluster.machine() if self.cluster is not None else None
        return Host(probe=probe, data=data, cluster=cluster, throughput_flops=self.throughput_flops)


class BlockResources(_Strict):
    """A grid block's own placement (e.g. more workers for its larger models): overrides ``resources``."""

    workers: Optional[int] = Field(default=None, gt=0, le=MAX_WORKERS, strict=True, description="workers per run")
    strategy: Optional[StrategyChoice] = Field(default=None, description="how workers split a run")
    tp: Optional[int] = Field(default=None, gt=0, le=MAX_WORKERS, strict=True, description="tensor-parallel degree")
    pp: Optional[int] = Field(default=None, gt=0, le=MAX_WORKERS, strict=True, description="pipeline stages")
    pp_schedule: Optional[Literal["gpipe", "1f1b", "interleaved_1f1b"]] = Field(default=None,
                                                                                description="pipeline schedule")
    micro_batch_size: Optional[int] = Field(default=None, gt=0, strict=True, description="sequences per forward pass")
    activation_checkpointing: Optional[bool] = Field(default=None,
                                                     description="recompute activations in the backward pass")

    def over(self, resources: ResourcesPlan) -> ResourcesPlan:
        """``resources`` with this block's fields set (validated as one resources section)."""
        merged = {**resources.model_dump(exclude_unset=True), **self.model_dump(exclude_unset=True)}
        return ResourcesPlan.model_validate(merged)


class RulesPlan(_Strict):
    """Hyperparameters that follow the run's size: numbers, expressions of N, D, C, power laws, or the
    law fitted on another sweep's hyperparameter groups (``{fitted: SWEEP}``, `scaling.orchestrator.transfer`)."""

    lr: Optional[Rule] = Field(default=None,
                               description="the learning rate: a number, an expression of N, D, C, a power law or {fitted: SWEEP}")
    batch_tokens: Optional[Rule] = Field(default=None,
                                         description="the batch in tokens: a number, an expression of N, D, C, a power law or {fitted: SWEEP}")

    @field_validator("lr", "batch_tokens")
    @classmethod
    def _rule_is_safe(cls, value: object) -> object:
        if isinstance(value, dict) and "fitted" in value:  # not a FittedRule: say why
            FittedRule.model_validate(value)
        if value is not None and not isinstance(value, FittedRule):
            try:
                rules.check_rule(value)
            except rules.RuleError as exc:
                raise ValueError(str(exc)) from None
        return value


class Bounds(_Strict):
    """IsoFLOP runs whose D falls outside these bounds are dropped, with a note."""

    min_tokens: Optional[float] = Field(default=None, gt=0, description="drop runs with fewer tokens")
    max_tokens: Optional[float] = Field(default=None, gt=0, description="drop runs with more tokens")
    min_tokens_per_param: Optional[float] = Field(default=None, gt=0,
                                                  description="drop runs with fewer tokens per parameter")
    max_tokens_per_param: Optional[float] = Field(default=None, gt=0,
                                                  description="drop runs with more tokens per parameter")

    def violation(self, D: float, N: float) -> Optional[str]:
        if self.min_tokens is not None and D < self.min_tokens:
            return f"D={fmt.count(D)} < min_tokens {fmt.count(self.min_tokens)}"
        if self.max_tokens is not None and D > self.max_tokens:
            return f"D={fmt.count(D)} > max_tokens {fmt.count(self.max_tokens)}"
        if self.min_tokens_per_param is not None and D / N < self.min_tokens_per_param:
            return f"D/N={D / N:.3g} < min_tokens_per_param {self.min_tokens_per_param:.3g}"
        if self.max_tokens_per_param is not None and D / N > self.max_tokens_per_param:
            return f"D/N={D / N:.3g} > max_tokens_per_param {self.max_tokens_per_param:.3g}"
        return None


class ModelPoint(_Strict):
    """One model of the grid: a target size N (a number) or an explicit shape."""

    N: Optional[float] = Field(default=None, gt=0,
                               description="a target size (the model section turns it into a shape)")
    n_layer: Optional[int] = Field(default=None, gt=0, description="transformer blocks")
    d_model: Optional[int] = Field(default=None, gt=0, description="residual stream width")
    n_head: Optional[int] = Field(default=None, gt=0, description="attention heads")
    n_kv_head: Optional[int] = Field(default=None, gt=0, description="this shape's key/value heads (llama)")
    ffn: Optional[int] = Field(default=None, gt=0, description="this shape's SwiGLU width (llama)")
    n_experts: Optional[int] = Field(default=None, gt=0, description="this shape's routed experts (moe)")
    top_k: Optional[int] = Field(default=None, gt=0, description="this shape's experts per token (moe)")
    expert_ffn: Optional[int] = Field(default=None, gt=0, description="this shape's expert width (moe)")

    #: A shape's own family fields, over the model section's.
    OWN_FIELDS: ClassVar[tuple[str, ...]] = ("n_kv_head", "ffn", "n_experts", "top_k", "expert_ffn")

    @model_validator(mode="before")
    @classmethod
    def _number_is_n(cls, value: object) -> object:
        if isinstance(value, (int, float, str)) and not isinstance(value, bool):
            return {"N": value}
        return value

    @model_validator(mode="after")
    def _one_form(self) -> "ModelPoint":
        shape_fields = (self.n_layer, self.d_model, self.n_head)
        if self.N is not None and any(f is not None for f in (*shape_fields, *(getattr(self, n) for n in self.OWN_FIELDS))):
            raise ValueError("give either N or a shape (n_layer, d_model, n_head), not both")
        if self.N is None and any(f is None for f in shape_fields):
            raise ValueError("a shape needs n_layer, d_model and n_head")
        if self.N is None:
            Shape(self.n_layer, self.d_model, self.n_head)  # type: ignore[arg-type]  # heads divide the width
        return self

    def shape(self, model: ModelPlan, convention: str) -> Shape:
        """The point's shape in the plan's family (a shape's own fields, :attr:`OWN_FIELDS`, over the model section's)."""
        if self.N is not None:
            return model.policy().planned_shape(self.N, convention)  # type: ignore[arg-type]
        family = model.family_kwargs()
        family.update({k: getattr(self, k) for k in self.OWN_FIELDS if getattr(self, k) is not None})
        return Shape(self.n_layer, self.d_model, self.n_head, model.vocab_size, model.context, **family)  # type: ignore[arg-type]


class GridBlock(_Strict):
    """``models`` times one of: ``tokens`` (D), ``tokens_per_param`` (D = k N), ``compute`` (IsoFLOP)
    or ``branches`` (cooldown branches of one trunk per model, `scaling.orchestrator.branches`)."""

    models: list[ModelPoint] = Field(min_length=1, description="the block's models: sizes N or shapes")
    tokens: Optional[list[float]] = Field(default=None, min_length=1, description="training tokens D of each run")
    tokens_per_param: Optional[list[float]] = Field(default=None, min_length=1, description="D = k N for each k")
    compute: Optional[list[float]] = Field(default=None, min_length=1,
                                           description="IsoFLOP budgets C (D = C / (6N) per model)")
    branches: Optional[BranchesPlan] = Field(default=None, description="cooldown branches of one trunk per model")
    bounds: Bounds = Field(default=Bounds(), description="runs whose D falls outside are dropped")
    resources: Optional[BlockResources] = Field(default=None,
                                                description="this block's placement, over the plan's resources")
    faults: FaultSpec = Field(default=FaultSpec(), description="injected faults, only for tests of the recovery paths")
    hparams: Optional[HparamsPlan] = Field(default=None,
                                           description="each point once per lr / batch / beta2 combination")
    model: Optional[BlockModel] = Field(default=None, description="this block's family and parametrization, "
                                        "over the plan's model section")

    @field_validator("tokens", "tokens_per_param", "compute")
    @classmethod
    def _positive(cls, values: Optional[list[float]]) -> Optional[list[float]]:
        for v in values or ():
            if not v > 0:
                raise ValueError(f"values must be positive, got {v}")
        problem = coincidence_problem(values, list(values)) if values else None
        if problem:
            raise ValueError(problem)
        return values

    @property
    def kind(self) -> str:
        """The grid form: ``tokens``, ``tokens_per_param``, ``compute`` or ``branches``."""
        if self.branches is not None:
            return "branches"
        return "tokens" if self.tokens else "tokens_per_param" if self.tokens_per_param else "compute"

    @property
    def size(self) -> int:
        """Runs per seed before any is dropped: models times the axis' values (and a trunk per model),
        times the hyperparameter combinations."""
        if self.branches is not None:
            per_model = 1 if self.branches.cooldowns == "predicted" else len(self.branches.tokens) + 1
            return len(self.models) * per_model
        return len(self.models) * len(getattr(self, self.kind) or ()) * (self.hparams.count if self.hparams else 1)

    @model_validator(mode="after")
    def _one_axis(self) -> "GridBlock":
        given = [n for n in ("tokens", "tokens_per_param", "compute", "branches") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError(
                "each grid block needs exactly one of tokens, tokens_per_param, compute or branches"
                + (f" (got {', '.join(given)})" if given else "")
            )
        if self.branches is not None and self.hparams is not None:
            raise ValueError("hparams sweeps points trained from scratch: give the budgets as tokens, "
                             "tokens_per_param or compute (cooldown branches share one trunk's settings)")
        return self


class Plan(_Strict):
    """A sweep: the grid of runs and everything they share.

    ``data``, ``conventions``, ``train`` and ``resources`` are the run spec's own models
    (`scaling.trainer.spec`), so each default, allowed value and check has one home; expanding a
    plan (`scaling.orchestrator.expand`) fills in each run's shape, D, lr, batch and seed and has
    the resolver decide the rest.
    """

    name: str = Field(description="the sweep's name (its runs' folder and its rows in the database)")
    db: Optional[str] = Field(default=None, description="database URL (default: sqlite:///scaling.db, or --db)")
    runs_dir: str = Field(default="./scaling_runs",
                          description="where each run's folder (checkpoints, logs) is written")
    data: DataSpec = Field(default=DataSpec(), description="where the tokens come from")
    model: ModelPlan = Field(default=ModelPlan(), description="how a size N becomes a shape")
    conventions: Conventions = Field(default=Conventions(), description="what N and C count")
    train: TrainPlan = Field(default=TrainPlan(), description="the training recipe every run shares")
    resources: ResourcesPlan = Field(default=ResourcesPlan(), description="where and how runs execute")
    rules: RulesPlan = Field(default=RulesPlan(), description="hyperparameters that follow a run's size")
    retries: int = Field(default=1, ge=0, le=100, description="extra attempts after a run fails")
    seeds: list[Seed] = Field(default_factory=lambda: [0], min_length=1, description="each run once per seed")
    grid: list[GridBlock] = Field(min_length=1,
                                  description="the runs: blocks of models times tokens, compute or branches")
    simulate: Optional[SimulateSpec] = Field(default=None, description="losses from a known law instead of training")
    adaptive: Optional[AdaptivePlan] = Field(default=None,
                                             description="add IsoFLOP slices until N* is known well enough")
    evals: EvalsSpec = Field(default=EvalsSpec(), description="tasks every run is scored on as it trains")

    @field_validator("name")
    @classmethod
    def _name_is_a_directory_name(cls, value: str) -> str:
        return checked(value, name_problem(value))

    @field_validator("data")
    @classmethod
    def _data_exists(cls, data: DataSpec) -> DataSpec:
        if data.fingerprint is not None or data.unique_tokens is not None:
            raise ValueError("fingerprint and unique_tokens are measured from the data, not set in a plan")
        if data.source == "builtin":
            if data.path:
                raise ValueError("path is only used with source 'text' or 'tokens'")
        else:
            for field in ("path", "val_path"):
                for entry in path_entries(getattr(data, field)):
                    if not glob.glob(os.path.expanduser(entry)):
                        raise ValueError(f"no file matches {field} {entry!r}")
        return data

    @field_validator("seeds")
    @classmethod
    def _seeds_unique(cls, value: list[int]) -> list[int]:
        if len(set(value)) != len(value):
            raise ValueError("seeds must be distinct")
        return value

    # -- loading ------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: object, source: Optional[YamlSource] = None) -> "Plan":
        """Validate ``data``; the first problem becomes one PlanError line (file:line: field: why)."""
        if not isinstance(data, dict):
            name = source.name if source is not None else "plan"
            raise PlanError(f"{name}: a plan must be a mapping of fields (name, grid, ...)")
        try:
            plan = cls.model_validate(data)
        except ValidationError as exc:
            raise _plan_error(exc, source) from None
        plan._cross_checks(source)
        return plan

    def _cross_checks(self, source: Optional[YamlSource]) -> None:
        """Rules that span sections (pydantic validates each section alone)."""
        for b, block in enumerate(self.grid):
            try:
                self.block_model(b)
            except ValidationError as exc:
                raise PlanError(f"{where(source, ('grid', b, 'model'))}: {FieldProblem(exc).message}") from None
            for field in block.hparams.factor_fields() if block.hparams is not None else ():
                if getattr(self.rules, field) is None:
                    raise PlanError(f"{where(source, ('grid', b, 'hparams', field))}: factors multiply the plan's rule "
                                    f"for {field}, and rules sets none: add rules.{field}, or list the values")
            predicted = block.branches is not None and block.branches.cooldowns == "predicted"
            from scaling.fitting.curves.joint import MIN_SIZES  # the curve law that predicts the cooldowns
            if predicted and len(block.models) < MIN_SIZES:
                raise PlanError(f"{where(source, ('grid', b, 'models'))}: predicted cooldowns need trunks of at least "
                                f"{MIN_SIZES} model sizes (the curve law across sizes has three parameters in N); "
                                f"this block has {len(block.models)}")
            if predicted and self.simulate is not None and self.simulate.curve is None:
                raise PlanError(f"{where(source, ('simulate',))}: predicted cooldowns need simulated runs that follow "
                                "their schedule: add simulate.curve (a curve law)")
            if block.branches is not None and self.adaptive is not None and self.adaptive.early_stop is not None:
                raise PlanError(f"{where(source, ('adaptive', 'early_stop'))}: a trunk that stops early has no "
                                f"checkpoint at its branches' steps nor a whole curve to predict from; grid block {b} "
                                "has branches: give its budgets as `tokens`, or drop early_stop")
            if self.simulate is not None and block.branches is not None and not predicted:
                raise PlanError(f"{where(source, ('grid', b, 'branches'))}: simulated runs write no checkpoints, so "
                                "a cooldown branch has no trunk to leave; give the token budgets as `tokens`")
            if block.resources is None:
                continue
            try:
                block.resources.over(self.resources)
            except ValidationError as exc:
                problem = FieldProblem(exc)
                raise PlanError(f"{where(source, ('grid', b, 'resources', *problem.loc))}: {problem.message}") from None
        if self.rules.batch_tokens is None:  # under `auto` the layout search picks dp: checked once placed
            workers = max(r.dp if r.strategy != "auto" else 1 for r in map(self.block_resources, range(len(self.grid))))
            problem = batch_problem(self.train.batch_tokens, self.model.context, workers)
            if problem:
                raise PlanError(f"{where(source, ('train', 'batch_tokens'))}: {problem}")
        runs = self.run_count()
        if runs > MAX_RUNS:
            raise PlanError(
                f"{where(source, ('grid',))}: the grid has {runs:,} runs (models x values x hparams x {len(self.seeds)} seed(s)), "
                f"more than {MAX_RUNS:,}; split it into several plans"
            )

    def check_task_files(self, source: Optional[YamlSource] = None) -> None:
        """Read and check the task files ``evals`` names (`scaling.trainer.evaluation.eval_tasks.check_tasks`): a bad
        line is one PlanError naming the file and line. Done when a plan file is loaded, not in
        validation: a plan stored with its sweep is validated again where its files may be absent."""
        if self.simulate is not None:
            return
        try:
            check_tasks(self.evals, self.data, self.model.context)
        except UserError as exc:
            raise PlanError(located(source, ("evals",), str(exc))) from None

    def block_model(self, block: int) -> ModelPlan:
        """The model section of grid block ``block``: the plan's, with the block's family and
        parametrization over it (:class:`BlockModel`)."""
        own = self.grid[block].model
        return self.model if own is None else own.over(self.model)

    def block_resources(self, block: int) -> ResourcesPlan:
        """The resources of grid block ``block``: the plan's, with the block's own fields over them."""
        own = self.grid[block].resources
        return self.resources if own is None else own.over(self.resources)

    def run_count(self) -> int:
        """Runs the grid lists (before runs that fall outside bounds are dropped), over every seed."""
        return sum(block.size for block in self.grid) * len(self.seeds)

    def with_data_vocab(self, vocab: Optional[int], source: Optional[YamlSource] = None) -> "Plan":
        """The plan with the data's vocabulary (a tokenizer's) as its shape policy's
        ``model.vocab_size``; a plan that names a different one is refused. None: unchanged."""
        if vocab is None or vocab == self.model.vocab_size:
            return self
        if "vocab_size" in self.model.model_fields_set:
            raise PlanError(
                f"{where(source, ('model', 'vocab_size'))}: {self.model.vocab_size} disagrees with the tokenizer's "
                f"{vocab} tokens; leave it out (it is taken from the tokenizer) or set it to {vocab}"
            )
        return self.model_copy(update={"model": self.model.model_copy(update={"vocab_size": vocab})})

    # -- sizing a run -----------------------------------------------------------------------------
    def hyperparameters(self, N: float, D: float, C: float) -> tuple[float, int]:
        """(lr, batch_tokens) for a run, from the rules or the train section.

        A batch from a rule is rounded once, to whole sequences (at least one). Raises
        :class:`RuleValueError` naming the rule that has no usable value.
        """
        lr = self.train.optimizer.lr
        if self.rules.lr is not None:
            lr = self._rule("lr", N, D, C)
        batch = self.train.batch_tokens
        if self.rules.batch_tokens is not None:
            ctx = self.model.context
            batch = whole_sequences(self._rule("batch_tokens", N, D, C), ctx)
        return lr, batch

    def _rule(self, field: str, N: float, D: float, C: float) -> float:
        try:
            value = rules.evaluate(getattr(self.rules, field), N, D, C)
        except rules.RuleError as exc:
            raise RuleValueError(field, str(exc)) from None
        if value <= 0:
            raise RuleValueError(field, f"gives {value:g} at N={fmt.count(N)}, D={fmt.count(D)}, C={fmt.flops(C)}; it must be positive")
        return value


def _plan_error(exc: ValidationError, source: Optional[YamlSource]) -> PlanError:
    problem = FieldProblem(exc, unknown_first=True)
    msg = problem.message
    if problem.kind == "extra_forbidden":
        msg = "unknown field (not part of the plan schema)"
    elif problem.kind == "missing":
        msg = "required field is missing"
    return PlanError(f"{where(source, problem.loc)}: {msg}")


def load_plan(path: str | Path) -> tuple[Plan, YamlSource]:
    """Read, parse (safely) and validate a plan file, and read the task files it names."""
    source = YamlSource.from_path(path)
    plan = Plan.from_dict(source.data, source)
    plan.check_task_files(source)  # before anything trains or is written
    return plan, source

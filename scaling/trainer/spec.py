"""`RunSpec`: the immutable, validated description of one training run.

Both the orchestrator (which expands plans into specs) and the trainer (which trains one) use
it, so it lives on the trainer's side: the trainer never imports the orchestrator. Its sections
(model, data, optimizer, schedule, execution, ...) are `scaling.trainer.sections`' models; this
module puts them together, checks them across sections and computes the run's key.

The run's ``key`` hashes what defines the experiment's *result* (shape, data and its
fingerprint, D, training hyperparameters, precision, seed, injected faults) and not how it is
executed (workers, strategy, micro-batch, intervals, threads, device), so moving a sweep to a
cluster retrains nothing.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any, ClassVar, Optional

from pydantic import (
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from scaling import safe_yaml
from scaling.vocab import HPARAM_GROUP_TAG
from scaling.schema import checked
from scaling.accounting import FlopsConvention, ParamsConvention, PrecisionChoice, Shape
from scaling.batching import batch_problem, micro_batch_size, steps_for
from scaling.accounting import TRAINER_SCHEDULES
from scaling.errors import FieldProblem, SpecError
from scaling.naming import printable_problem
from scaling.trainer.evaluation.eval_tasks import EvalsSpec
from scaling.trainer.sections import (
    MAX_STEP,
    MAX_STORED_INT,
    BranchSpec,
    Conventions,
    DataSpec,
    EarlyStopSpec,
    ExecutionSpec,
    FaultSpec,
    ModelSpec,
    Recipe,
    Seed,
    SimulateSpec,
    decay_start,
)


#: Model chunks per pipeline rank of each schedule (the interleaved one loops over two).
PIPELINE_CHUNKS: dict[str, int] = {name: chunks for name, (_, chunks) in TRAINER_SCHEDULES.items()}


def pipeline_micro_batches(sequences: int, dp: int, requested: Optional[int]) -> int:
    """Pipeline micro-batches m: a data-parallel rank's share split by ``micro_batch_size``
    (one micro-batch when it is not set)."""
    share = sequences // dp
    return share // min(requested or share, share)


def precision_problem(precision: str, tp: int, dp: int) -> str | None:
    """Why ``precision`` cannot train with ``tp`` tensor-parallel ranks over ``dp`` data-parallel
    ones (None: it can).

    fp16's loss scaler unscales all gradients with one fused kernel per device, which refuses a
    mix of tensor-parallel (DTensor) and plain gradients; with one data-parallel rank nothing
    turns the plain ones into DTensors (FSDP2 does over several).
    """
    if precision == "fp16" and tp > 1 and dp == 1:
        return (f"fp16 cannot run with tp={tp} on one data-parallel rank (its loss scaler cannot "
                "unscale tensor-parallel gradients beside plain ones): use bf16, or fp32 on a GPU without bf16")
    return None


def pipeline_problem(spec: "RunSpec", *, unplaced: bool = False) -> Optional[str]:
    """Why ``spec`` cannot be pipelined as its ``execution`` asks, or None (also None for pp = 1).

    Every stage holds at least one block (``interleaved_1f1b``: two chunks per rank, so n_layer
    is a multiple of 2*pp); each data-parallel rank's share of the batch splits into equal
    micro-batches (a stage's send and receive buffers have one shape), and the interleaved
    schedule runs them in whole rounds of pp.
    """
    ex = spec.execution
    if ex.pp == 1:
        return None
    where = f"execution.pp={ex.pp}"
    chunks = PIPELINE_CHUNKS[ex.pp_schedule]
    n_layer = spec.model.n_layer
    if chunks > 1 and n_layer % (ex.pp * chunks):
        return (f"{where}: pp_schedule {ex.pp_schedule} needs n_layer ({n_layer}) to be a multiple of "
                f"{chunks}*pp = {chunks * ex.pp}")
    if n_layer < ex.pp:
        return f"{where}: n_layer ({n_layer}) gives some stage no block"
    if spec.precision == "fp16":
        return f"{where}: precision fp16 (loss scaling) is not supported with pipelining; use bf16 or fp32"
    if ex.compile:
        return f"{where}: compile is not supported with pipelining"
    if unplaced:  # a plan's run before the layout search: it picks dp and the micro-batch, then this is checked
        return None
    sequences, dp = spec.sequences_per_batch, ex.dp
    if sequences % dp:
        return f"{where}: {sequences} sequences per batch do not split evenly over dp={dp}"
    share, size = sequences // dp, ex.micro_batch_size or sequences // dp
    if share % min(size, share):
        return (f"{where}: micro_batch_size {size} does not divide a data-parallel rank's share of "
                f"{share} sequences into equal micro-batches")
    m = pipeline_micro_batches(sequences, dp, ex.micro_batch_size)
    # Under `auto` the trainer resolves only the ZeRO stage: the micro-batching must hold as given.
    if ex.pp_schedule == "1f1b" and m < ex.pp:
        return (f"{where}: pp_schedule 1f1b needs at least pp ({ex.pp}) micro-batches, not {m}: set "
                f"micro_batch_size to at most {share // ex.pp} (a rank's share is {share} sequences)")
    if chunks > 1 and m % ex.pp:
        return f"{where}: pp_schedule {ex.pp_schedule} needs micro-batches ({m}) to be a multiple of pp"
    return None


class RunSpec(Recipe):
    """One training run with nothing left to decide: what the trainer trains. Immutable; build
    variants with ``spec.model_copy(update=...)``.

    Its precision is concrete (``auto`` only on a simulated run, which trains nothing) and it is
    validated in full. A :class:`RunRequest` (a plan's run, a spec file) may still say ``auto``;
    ``scaling.trainer.resolve.resolve`` turns one into a RunSpec.
    """

    precision: PrecisionChoice = Field(default="fp32", description="fp32, bf16 or fp16 (auto only on a simulated run)")
    model: ModelSpec = Field(description="the model's shape")
    tokens: int = Field(gt=0, description="D: training tokens")
    data: DataSpec = Field(default=DataSpec(), description="where the tokens come from")
    params_convention: ParamsConvention = Field(default=Conventions().params, description="what N counts")
    flops_convention: FlopsConvention = Field(default=Conventions().flops, description="what C counts")
    seed: Seed = Field(default=0, description="the run's seed (weights and data order)")
    faults: FaultSpec = Field(default=FaultSpec(), description="injected faults, for tests of the recovery paths")
    branch: Optional[BranchSpec] = Field(default=None, description="a cooldown branch of another run (its trunk)")
    simulate: Optional[SimulateSpec] = Field(default=None, description="losses from a known law instead of training")
    early_stop: Optional[EarlyStopSpec] = Field(default=None, description="stop once the final loss is predicted "
                                                                          "well enough (an adaptive plan's early_stop)")
    execution: ExecutionSpec = Field(default=ExecutionSpec(),
                                     description="where and how the run executes (not part of the key)")
    name: Optional[str] = Field(default=None, description="a display name (not part of the key)")
    tags: dict[str, str] = Field(default_factory=dict, description="free-form labels (not part of the key)")
    evals: EvalsSpec = Field(default=EvalsSpec(), description="tasks scored as the run trains (not part of the key)")

    @field_validator("tokens")
    @classmethod
    def _tokens_storable(cls, value: int) -> int:
        if value > MAX_STORED_INT:
            raise ValueError(f"{value:.3g} tokens is more than the database can store ({MAX_STORED_INT:.3g})")
        return value

    @field_validator("name")
    @classmethod
    def _name_printable(cls, value: Optional[str]) -> Optional[str]:
        return checked(value, printable_problem(value) if value is not None else None)

    #: Nothing left to decide (False for a RunRequest): what ``scaling.trainer.train`` accepts.
    concrete: ClassVar[bool] = True

    def placement_pending(self) -> bool:
        """Whether the checks that depend on the placement wait for the resolver: a request's
        layout under ``strategy: auto`` on several workers (never a RunSpec's)."""
        ex = self.execution
        return not self.concrete and ex.strategy == "auto" and ex.workers > 1

    @model_validator(mode="after")
    def _concrete(self) -> "RunSpec":
        if self.simulate is None and self.precision == "auto" and self.concrete:
            raise ValueError("precision: auto is decided by the resolver (scaling.trainer.resolve.resolve); "
                             "a run spec names bf16, fp16 or fp32")
        return self

    @model_validator(mode="after")
    def _consistent(self) -> "RunSpec":
        ex = self.execution
        # A request whose layout the resolver still picks (strategy auto on several workers): the
        # checks that depend on dp, tp, pp and the micro-batch wait for the placed RunSpec.
        unplaced = self.placement_pending()
        problem = batch_problem(self.batch_tokens, self.model.context, 1 if unplaced else ex.dp)
        if problem:
            raise ValueError(f"batch_tokens: {problem}")
        if ex.tp > 1:
            from scaling.layout import shape_problem

            problem = shape_problem(self.shape, ex.tp, 1)  # the pipeline's split: pipeline_problem
            if problem:
                raise ValueError(f"execution: {problem}")
            if ex.dp > 1 and ex.strategy in ("ddp", "zero1"):
                raise ValueError(
                    f"execution.strategy: {ex.strategy} cannot be combined with tp={ex.tp} on {ex.dp} data-parallel "
                    "workers: use zero2 or zero3 (FSDP2 shards tensor-parallel parameters; DDP and ZeRO-1 do not)"
                )
        if ex.ep > 1:
            from scaling.layout import expert_parallel_problem

            problem = expert_parallel_problem(self.shape, ex.ep, ex.dp, ex.tp, ex.pp, ex.strategy, self.precision)
            if problem:
                raise ValueError(f"execution: {problem}")
        if not unplaced:
            problem = precision_problem(self.precision, ex.tp, ex.dp)
            if problem:
                raise ValueError(f"precision: {problem}")
        if self.tokens < self.batch_tokens:
            raise ValueError(f"tokens ({self.tokens}) must be at least one batch ({self.batch_tokens})")
        problem = pipeline_problem(self, unplaced=unplaced)
        if problem:
            raise ValueError(problem)
        if self.branch is not None:
            if self.schedule.kind != "wsd":
                raise ValueError("branch: a cooldown branch needs schedule kind 'wsd'")
            start = decay_start(self.steps, self.schedule)
            if self.branch.from_step != start:
                raise ValueError(
                    f"branch.from_step: {self.branch.from_step} is not where the schedule's cooldown starts ({start})"
                )
        if self.steps > MAX_STEP:
            raise ValueError(
                f"batch_tokens: {self.tokens:.3g} tokens in batches of {self.batch_tokens} is {self.steps:.3g} steps, "
                f"more than the database's step numbers reach ({MAX_STEP:.3g}); use a larger batch"
            )
        if self.simulate is not None and self.execution.workers > 1:
            raise ValueError("simulate: a simulated run takes one worker (resources.workers: 1)")
        if self.simulate is not None and self.faults != FaultSpec():
            raise ValueError("simulate: injected faults need a real training loop")
        return self

    @model_validator(mode="after")
    def _strategy_placed(self) -> "RunSpec":
        """After the layout's own checks, so a layout that cannot run is named first."""
        if self.concrete and self.execution.strategy == "auto" and self.execution.dp > 1:
            # One data-parallel rank has nothing to decide (it runs `single`); several get the resolver's.
            raise ValueError("execution.strategy: auto is decided by the resolver (scaling.trainer.resolve.resolve); "
                             "a run spec on several data-parallel ranks names ddp, zero1, zero2 or zero3")
        return self

    @property
    def conventions(self) -> Conventions:
        return Conventions(params=self.params_convention, flops=self.flops_convention)

    # -- identity ---------------------------------------------------------------------------
    def key_fields(self) -> dict[str, Any]:
        """The fields that define the result (the key hashes exactly these).

        Fields added after keys were first stored are hashed only when set, so the runs of
        older sweeps keep their keys (and are not retrained): ``branch``, ``simulate`` and
        ``early_stop`` when present (a run that may stop early is not the run trained in full),
        ``simulate`` without its ``pace`` (when the rows are written, not what they are), the
        schedule's ``decay_shape`` when not linear and ``warmup_steps`` when set.
        """
        fields = self.model_dump(mode="json", exclude={"execution", "name", "tags", "evals"})
        for optional in ("branch", "simulate", "early_stop"):
            if fields.get(optional) is None:
                fields.pop(optional, None)
        if fields.get("simulate") is not None:  # when a simulated run's rows are written, not what they are
            fields["simulate"].pop("pace", None)
        if fields["schedule"].get("warmup_steps") is None:
            fields["schedule"].pop("warmup_steps", None)
        if fields["schedule"].get("decay_shape") == "linear":
            fields["schedule"].pop("decay_shape")
        return fields

    @functools.cached_property
    def key(self) -> str:
        """A stable 16-hex-digit hash of :meth:`key_fields`' canonical JSON.

        Computed once per spec (a scheduler asks for it at every event of every run): the spec
        is frozen, and :meth:`model_copy` drops the cached key of a copy whose fields change.
        """
        canonical = json.dumps(self.key_fields(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def model_copy(self, *, update: Optional[dict[str, Any]] = None, deep: bool = False) -> "RunSpec":
        copied = super().model_copy(update=update, deep=deep)
        if update:
            copied.__dict__.pop("key", None)  # the cached key of the original
        return copied

    # -- derived numbers (one home: scaling.accounting) ---------------------------------------
    @property
    def shape(self) -> Shape:
        return self.model.shape

    @property
    def n_params(self) -> int:
        """N in the spec's parameter convention."""
        return self.shape.params(self.params_convention)

    @property
    def sequences_per_batch(self) -> int:
        return self.batch_tokens // self.model.context  # exact: the batch is whole sequences

    @property
    def micro_batch(self) -> int:
        """Sequences in the largest forward pass of any worker (the memory estimate's b)."""
        ex = self.execution
        return micro_batch_size(self.sequences_per_batch, ex.dp, ex.micro_batch_size)

    @property
    def steps(self) -> int:
        """Optimizer steps to consume D tokens (the last batch may overshoot D slightly)."""
        return steps_for(self.tokens, self.batch_tokens)

    @property
    def trained_tokens(self) -> int:
        """The tokens the run trains on: whole batches, so D rounded up to one (what is recorded as D)."""
        return self.steps * self.batch_tokens

    @property
    def trunk_tokens(self) -> int:
        """Tokens a branch inherits from its trunk (0 for a run trained from scratch)."""
        return self.branch.from_step * self.batch_tokens if self.branch else 0

    @property
    def flops_per_token(self) -> float:
        return self.shape.flops_per_token(self.flops_convention, self.params_convention)

    @property
    def flops(self) -> float:
        """C: training compute in the spec's FLOP convention, over the tokens actually trained."""
        return self.flops_per_token * self.trained_tokens

    def record(self) -> dict[str, Any]:
        """The row `db.Store.register` stores for this run: plain values, so the db needs no RunSpec."""
        shape = self.shape
        return {
            "key": self.key,
            "N": self.n_params,
            "N_total": shape.params_total,
            "n_layer": shape.n_layer,
            "d_model": shape.d_model,
            "n_head": shape.n_head,
            "vocab_size": shape.vocab_size,
            "context": shape.context,
            "D": self.trained_tokens,
            "C": self.flops,
            "seed": self.seed,
            "spec": self.model_dump(mode="json"),
            "parent_key": self.branch.parent if self.branch else None,
            "trunk_tokens": self.trunk_tokens,
            "hparam_group": self.tags.get(HPARAM_GROUP_TAG),
        }

    # -- I/O -----------------------------------------------------------------------------------
    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "spec") -> "RunSpec":
        """Validate ``data``; a problem becomes one :class:`SpecError` line naming the field."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problem = FieldProblem(exc)
            loc = problem.path
            raise SpecError(f"{where}: {loc}: {problem.message}" if loc else f"{where}: {problem.message}") from None

    @classmethod
    def from_yaml(cls, path: str | Path) -> "RunSpec":
        p = Path(path)
        data, _ = safe_yaml.parse(safe_yaml.read_text(p, SpecError, "spec"), str(p), SpecError)
        if not isinstance(data, dict):
            raise SpecError(f"{p}: expected a mapping of spec fields")
        return cls.from_dict(data, where=str(p))


class RunRequest(RunSpec):
    """A run as a plan or a spec file states it: its precision and strategy may say ``auto`` and
    its data need not be fingerprinted yet. ``scaling.trainer.resolve.resolve(request, host)``
    decides each of these once and returns the :class:`RunSpec` the trainer accepts."""

    concrete: ClassVar[bool] = False
    precision: PrecisionChoice = "auto"

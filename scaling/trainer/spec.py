"""`RunSpec`: the immutable, validated description of one training run.

Both the orchestrator (which expands plans into specs) and the trainer (which trains one) use
it, so it lives on the trainer's side: the trainer never imports the orchestrator.

The run's ``key`` hashes what defines the experiment's *result* (shape, data and its
fingerprint, D, training hyperparameters, precision, seed, injected faults) and not how it is
executed (workers, strategy, micro-batch, intervals, threads, device), so moving a sweep to a
cluster retrains nothing.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any, Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from scaling.accounting import Shape
from scaling.errors import SpecError


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ModelSpec(_Frozen):
    """Model shape, vocabulary and context length."""

    n_layer: int = Field(gt=0)
    d_model: int = Field(gt=0)
    n_head: int = Field(gt=0)
    vocab_size: int = Field(default=256, gt=0)
    context: int = Field(default=256, gt=0)

    @model_validator(mode="after")
    def _heads_divide_width(self) -> "ModelSpec":
        if self.d_model % self.n_head:
            raise ValueError(f"d_model ({self.d_model}) must be a multiple of n_head ({self.n_head})")
        return self

    @property
    def shape(self) -> Shape:
        return Shape(self.n_layer, self.d_model, self.n_head, self.vocab_size, self.context)


class DataSpec(_Frozen):
    """Where the tokens come from.

    ``builtin``: the Python standard library's own sources (present wherever Python is, nothing
    downloaded); ``text``: a user's text file(s) or glob, byte-tokenized; ``tokens``: a
    pre-tokenized binary file (uint8/uint16 memory map, nanoGPT-style).
    ``fingerprint`` (sha256 of the token stream) and ``unique_tokens`` (U: tokens in the training
    split, the "unique data" of the data-constrained law) are filled in by
    ``scaling.trainer.data.resolve_data``; the fingerprint is part of the run's key.
    """

    source: Literal["builtin", "text", "tokens"] = "builtin"
    path: Optional[str] = None
    dtype: Literal["uint8", "uint16"] = "uint16"
    val_fraction: float = Field(default=0.05, gt=0, lt=0.5)
    fingerprint: Optional[str] = None
    unique_tokens: Optional[int] = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _path_when_needed(self) -> "DataSpec":
        if self.source != "builtin" and not self.path:
            raise ValueError(f"data.path is required for source {self.source!r}")
        return self


class OptimizerSpec(_Frozen):
    """AdamW (no weight decay on norms, biases and embeddings)."""

    lr: float = Field(default=1e-3, gt=0)
    beta1: float = Field(default=0.9, ge=0, lt=1)
    beta2: float = Field(default=0.95, ge=0, lt=1)
    eps: float = Field(default=1e-8, gt=0)
    weight_decay: float = Field(default=0.1, ge=0)


class ScheduleSpec(_Frozen):
    """Learning-rate schedule: linear warmup, then cosine / warmup-stable-decay / constant."""

    kind: Literal["cosine", "wsd", "constant"] = "cosine"
    warmup_fraction: float = Field(default=0.05, ge=0, lt=1)
    min_lr_ratio: float = Field(default=0.1, ge=0, le=1)
    decay_fraction: float = Field(default=0.2, gt=0, le=1)  # wsd: the final share of steps that decays


class SpikeSpec(_Frozen):
    """Loss-spike protection: roll back when loss > factor * mean(last window) or non-finite."""

    enabled: bool = True
    factor: float = Field(default=4.0, gt=1)
    window: int = Field(default=100, gt=0)
    max_rollbacks: int = Field(default=5, ge=0)
    lr_scale_on_rollback: float = Field(default=1.0, gt=0, le=1)


class FaultSpec(_Frozen):
    """Faults injected on purpose, for tests of the recovery paths. Part of the key."""

    # The batches at these data cursors are corrupted (loss spike). The cursor equals the step
    # until a batch is skipped, and a skipped bad batch never returns.
    poison_steps: tuple[int, ...] = ()
    overflow_steps: tuple[int, ...] = ()  # these steps produce inf gradients (fp16 scaler test)
    raise_at_step: Optional[int] = None  # raise an error when this step starts
    raise_attempts: int = Field(default=1_000_000, ge=0)  # ... only on the first this many attempts
    kill_at_step: Optional[int] = None  # SIGKILL the process (rank 1 if distributed) at this step
    kill_attempts: int = Field(default=1, ge=0)  # ... only on the first this many attempts


class ExecutionSpec(_Frozen):
    """How a run executes. Not part of the key: it must not change the result's meaning."""

    workers: int = Field(default=1, gt=0)
    strategy: Literal["auto", "single", "ddp", "zero1", "zero2", "zero3"] = "auto"
    cpu_offload: bool = False
    cpus_per_worker: float = Field(default=1, gt=0)
    gpus_per_worker: float = Field(default=0, ge=0)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # Sequences per forward pass at most (None: a worker's whole share). A share is split into
    # equally many micro-batches on every worker, their sizes differing by at most one.
    micro_batch_size: Optional[int] = Field(default=None, gt=0)
    threads: int = Field(default=1, gt=0)
    compile: bool = False
    activation_checkpointing: bool = False
    eval_interval: int = Field(default=100, gt=0)  # steps
    checkpoint_interval: int = Field(default=100, gt=0)  # steps
    keep_checkpoints: int = Field(default=2, gt=0)
    log_interval: int = Field(default=1, gt=0)  # steps between metric rows
    device_memory_gib: Optional[float] = Field(default=None, gt=0)  # for `auto`


class RunSpec(_Frozen):
    """One training run. Immutable; build variants with ``spec.model_copy(update=...)``."""

    model: ModelSpec
    tokens: int = Field(gt=0, description="D: training tokens")
    data: DataSpec = DataSpec()
    params_convention: Literal["non_embedding", "total"] = "non_embedding"
    flops_convention: Literal["6N", "6N_attention"] = "6N"
    precision: Literal["auto", "bf16", "fp16", "fp32"] = "auto"  # auto: see trainer.precision.resolve
    optimizer: OptimizerSpec = OptimizerSpec()
    schedule: ScheduleSpec = ScheduleSpec()
    batch_tokens: int = Field(default=8192, gt=0, description="global batch size in tokens")
    grad_clip: float = Field(default=1.0, ge=0)
    spike: SpikeSpec = SpikeSpec()
    eval_tokens: int = Field(default=65536, gt=0, description="held-out tokens per evaluation")
    seed: int = 0
    faults: FaultSpec = FaultSpec()
    execution: ExecutionSpec = ExecutionSpec()
    name: Optional[str] = None  # a display name; not part of the key
    tags: dict[str, str] = Field(default_factory=dict)  # free-form labels; not part of the key

    @model_validator(mode="after")
    def _batch_fits_context(self) -> "RunSpec":
        if self.batch_tokens < self.model.context:
            raise ValueError(
                f"batch_tokens ({self.batch_tokens}) must be at least one sequence of context {self.model.context}"
            )
        if self.tokens < self.batch_tokens:
            raise ValueError(f"tokens ({self.tokens}) must be at least one batch ({self.batch_tokens})")
        sequences, workers = self.batch_tokens // self.model.context, self.execution.workers
        if sequences < workers:
            # Every worker takes a share of every batch (trainer.data.Batches.shard).
            raise ValueError(
                f"batch_tokens: {sequences} sequences of {self.model.context} tokens per batch cannot feed "
                f"execution.workers={workers}"
            )
        return self

    # -- identity ---------------------------------------------------------------------------
    def key_fields(self) -> dict[str, Any]:
        """The fields that define the result (the key hashes exactly these)."""
        return self.model_dump(mode="json", exclude={"execution", "name", "tags"})

    @property
    def key(self) -> str:
        """A stable 16-hex-digit hash of :meth:`key_fields`' canonical JSON."""
        canonical = json.dumps(self.key_fields(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

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
        return self.batch_tokens // self.model.context

    @property
    def steps(self) -> int:
        """Optimizer steps to consume D tokens (the last batch may overshoot D slightly)."""
        return math.ceil(self.tokens / (self.sequences_per_batch * self.model.context))

    @property
    def flops_per_token(self) -> float:
        return self.shape.flops_per_token(self.flops_convention, self.params_convention)

    @property
    def flops(self) -> float:
        """C: training compute in the spec's FLOP convention."""
        return self.flops_per_token * self.tokens

    def record(self) -> dict[str, Any]:
        """The row `db.Store.register` stores for this run (the db does not import the trainer)."""
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
            "D": self.tokens,
            "C": self.flops,
            "seed": self.seed,
            "spec": self.model_dump(mode="json"),
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
            err = exc.errors()[0]
            msg = str(err["msg"]).removeprefix("Value error, ")  # validators name their fields
            loc = ".".join(str(p) for p in err["loc"])
            raise SpecError(f"{where}: {loc}: {msg}" if loc else f"{where}: {msg}") from None

    @classmethod
    def from_yaml(cls, path: str | Path) -> "RunSpec":
        p = Path(path)
        if not p.is_file():
            raise SpecError(f"spec file not found: {p}")
        try:
            data = yaml.safe_load(p.read_text())
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = f" line {mark.line + 1}" if mark is not None else ""
            raise SpecError(f"{p}:{line}: invalid YAML: {getattr(exc, 'problem', exc)}") from None
        if not isinstance(data, dict):
            raise SpecError(f"{p}: expected a mapping of spec fields")
        return cls.from_dict(data, where=str(p))

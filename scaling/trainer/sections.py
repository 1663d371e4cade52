"""The sections of a run: its model, data, optimizer, schedule, branch, faults, simulated law,
conventions, training recipe, loop settings, placement and execution, each a frozen, validated model.

A plan's ``data``, ``conventions``, ``train`` and ``resources`` sections are these models too
(DataSpec, Conventions, Recipe + LoopSettings, Placement), so every field, default and check of a
run has its home here; `scaling.trainer.spec` puts them together into a `RunSpec` and its key.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import Field, SerializerFunctionWrapHandler, field_validator, model_serializer, model_validator

from scaling.accounting import (
    FAMILIES,
    FAMILY_FIELDS,
    FIELD_DEFAULTS,
    FlopsConvention,
    ParamsConvention,
    PrecisionChoice,
    Shape,
    StrategyChoice,
)
from scaling.families import BALANCES, ROUTERS
from scaling.lr_schedule import SCHEDULE_DEFAULTS, decay_start, warmup_steps
from scaling.schema import StrictModel, checked
from scaling.trainer.data.shards import MAX_SHARDS, ShardFormat

#: The largest integer the results database stores (SQLite INTEGER, PostgreSQL BIGINT).
MAX_STORED_INT = 2**63 - 1
#: Most workers one run (or one cluster) may have: about ten times the largest training clusters.
MAX_WORKERS = 1 << 20
#: Most memory per device or worker a plan may declare (64 TiB).
MAX_DEVICE_MEMORY_GIB = 65536.0
#: Seeds feed numpy's and torch's generators; both take any integer in this range.
Seed = Annotated[int, Field(ge=0, le=2**32 - 1)]
#: The largest step number the database stores (the metrics' step column is a 32-bit integer).
MAX_STEP = 2**31 - 1


class _Frozen(StrictModel):
    """A run spec's section (:class:`scaling.schema.StrictModel`)."""


class SequenceSpec(_Frozen):
    """Vocabulary and context length: shared by a run's shape and a plan's shape policy."""

    vocab_size: int = Field(default=256, gt=0, description="tokens in the vocabulary")
    context: int = Field(default=256, gt=0, description="sequence length in tokens")


class FamilySpec(_Frozen):
    """The model family, the fields of the families that take them (``scaling.families``: llama's,
    and moe's experts and router) and the parametrization (standard or μP, with μP's
    ``base_width``); `scaling.accounting.Shape` checks them.

    A field at its family's default is left out when serialized, so a gpt2 model serializes, and
    its run key hashes, exactly as before families existed; ``z_loss`` (PaLM's auxiliary loss on
    the log of the softmax normalizer, times this coefficient) is a training loss, not a shape field.
    """

    family: Literal[tuple(FAMILIES)] = Field(  # type: ignore[valid-type]
        default="gpt2", description="the architecture: gpt2 (learned positions, LayerNorm, GELU), llama (RoPE, "
        "RMSNorm, SwiGLU) or moe (the llama block with routed experts); scaling.families")
    n_kv_head: Optional[int] = Field(default=FIELD_DEFAULTS["n_kv_head"], gt=0, description="key/value heads (llama; 1 = multi-query; default n_head)")
    ffn: Optional[int] = Field(default=FIELD_DEFAULTS["ffn"], gt=0, description="SwiGLU hidden width (llama; default 8/3 d_model rounded up to 256)")
    tie_embeddings: Optional[bool] = Field(default=FIELD_DEFAULTS["tie_embeddings"], description="tie the output layer to the token embedding (llama; default false)")
    qk_norm: bool = Field(default=FIELD_DEFAULTS["qk_norm"], description="RMSNorm on each query and key head (llama)")
    rope_theta: float = Field(default=FIELD_DEFAULTS["rope_theta"], gt=1, description="RoPE base (llama)")
    norm_eps: float = Field(default=FIELD_DEFAULTS["norm_eps"], gt=0, lt=1, description="RMSNorm epsilon (llama)")
    z_loss: float = Field(default=0.0, ge=0, le=1, description="coefficient of the z-loss (log Z)^2 (llama)")
    n_experts: Optional[int] = Field(default=FIELD_DEFAULTS["n_experts"], gt=0, description="routed experts per MoE block (moe; default 8)")
    top_k: Optional[int] = Field(default=FIELD_DEFAULTS["top_k"], gt=0, description="experts each token is routed to (moe; default 2)")
    expert_ffn: Optional[int] = Field(default=FIELD_DEFAULTS["expert_ffn"], gt=0, description="each expert's SwiGLU width (moe; default ffn)")
    n_shared_experts: int = Field(default=FIELD_DEFAULTS["n_shared_experts"], ge=0, description="experts every token uses besides its top-k (moe)")
    n_dense_layers: int = Field(default=FIELD_DEFAULTS["n_dense_layers"], ge=0, description="the first blocks with a dense SwiGLU of ffn (moe)")
    router: Literal[ROUTERS] = Field(  # type: ignore[valid-type]
        default=FIELD_DEFAULTS["router"], description="router scores: softmax over the experts or sigmoid per expert; top-k renormalized (moe)")
    balance: Literal[BALANCES] = Field(  # type: ignore[valid-type]
        default=FIELD_DEFAULTS["balance"], description="load balancing: Switch's auxiliary loss, or DeepSeek-V3's bias update (moe)")
    aux_loss: float = Field(default=FIELD_DEFAULTS["aux_loss"], ge=0, le=1, description="coefficient of the load-balancing loss (moe, balance aux_loss)")
    router_z_loss: float = Field(default=FIELD_DEFAULTS["router_z_loss"], ge=0, le=1, description="coefficient of the router's z-loss (moe)")
    bias_rate: float = Field(default=FIELD_DEFAULTS["bias_rate"], ge=0, le=1, description="step of the balancing bias update (moe, balance bias)")
    parametrization: Literal["standard", "mup"] = Field(
        default="standard", description="standard, or mup (Yang et al. 2022: hyperparameters transfer across width)")
    base_width: Optional[int] = Field(
        default=None, gt=0, description="mup: the d_model of the proxy the hyperparameters were tuned on")

    def family_kwargs(self) -> dict[str, Any]:
        """The family fields `scaling.accounting.Shape` takes."""
        return {name: getattr(self, name) for name in FAMILY_FIELDS}

    @model_validator(mode="after")
    def _z_loss_family(self) -> "FamilySpec":
        if self.z_loss and not FAMILIES[self.family].takes_z_loss:
            takers = " or ".join(repr(name) for name, fam in FAMILIES.items() if fam.takes_z_loss)
            raise ValueError(f"z_loss: only for family {takers} (not a field of {self.family!r})")
        return self

    def family_dump(self, out: dict[str, Any], shape: Optional[Shape]) -> dict[str, Any]:
        for name in (*self.family_kwargs(), "z_loss"):
            out.pop(name, None)
        if shape is not None:
            out.update(shape.family_fields())
        else:  # a plan's model section: no shape yet, the fields set off their defaults
            fields = type(self).model_fields
            out.update({name: value for name, value in self.family_kwargs().items() if value != fields[name].default})
        if self.z_loss:
            out["z_loss"] = self.z_loss
        return out


class ModelSpec(SequenceSpec, FamilySpec):
    """Model shape, vocabulary and context length, and the family's fields."""

    n_layer: int = Field(gt=0, description="transformer blocks")
    d_model: int = Field(gt=0, description="residual stream width")
    n_head: int = Field(gt=0, description="attention heads (they divide d_model)")

    @model_validator(mode="after")
    def _valid_shape(self) -> "ModelSpec":
        params = self.shape.params_total  # Shape checks that the heads divide the width
        if params > MAX_STORED_INT:
            raise ValueError(f"{params:.3g} parameters is more than the database can store")
        return self

    @property
    def shape(self) -> Shape:
        return Shape(self.n_layer, self.d_model, self.n_head, self.vocab_size, self.context, **self.family_kwargs())

    @model_serializer(mode="wrap")
    def _omit_family_defaults(self, handler: SerializerFunctionWrapHandler) -> Any:
        out = handler(self)
        return self.family_dump(out, self.shape) if isinstance(out, dict) else out


class TokenizerSpec(_Frozen):
    """A Hugging Face tokenizer for ``source: text``: a ``tokenizer.json`` (``path``) or a
    byte-level BPE trained on the training split (``train: bpe`` with ``vocab_size``).

    Its identity (the sha256 of its canonical JSON) is part of the data fingerprint, so a run's
    key changes with the tokenizer. The token ids are prepared once into a content-addressed
    cache folder (``scaling data prepare``, or the first run) and memory-mapped by every run.
    """

    path: Optional[str] = Field(default=None, description="a Hugging Face tokenizer.json")
    train: Optional[Literal["bpe"]] = Field(default=None,
                                            description="bpe: train a byte-level BPE on the training split")
    vocab_size: Optional[int] = Field(default=None, ge=257, le=1 << 20, description="tokens of a trained BPE")
    min_frequency: Optional[int] = Field(default=None, ge=1, description="a trained BPE's least pair count to merge")

    @model_validator(mode="before")
    @classmethod
    def _trained_defaults(cls, value: object) -> object:
        if isinstance(value, dict) and value.get("train") is not None:
            value = {"vocab_size": 8192, "min_frequency": 2, **{k: v for k, v in value.items() if v is not None}}
        return value

    @model_validator(mode="after")
    def _one_form(self) -> "TokenizerSpec":
        if (self.path is None) == (self.train is None):
            raise ValueError("give either path (a tokenizer.json) or train: bpe, not both or neither")
        if self.path is not None and (self.vocab_size is not None or self.min_frequency is not None):
            raise ValueError("vocab_size and min_frequency are for train: bpe; a tokenizer file has its own")
        return self


#: ``data.path`` / ``data.val_path``: a file or glob, or (``source: tokens``) a list of them.
PathOrShards = Optional[Union[str, Annotated[tuple[str, ...], Field(min_length=1, max_length=MAX_SHARDS)]]]
_DEFAULT_VAL_FRACTION = 0.05


def path_entries(value: "str | tuple[str, ...] | None") -> tuple[str, ...]:
    """The files or globs a ``data.path`` or ``data.val_path`` names, in order."""
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


class DataSpec(_Frozen):
    """Where the tokens come from.

    ``builtin``: the Python standard library's own sources (present wherever Python is, nothing
    downloaded); ``text``: a user's text file(s), folder or glob (``.gz``/``.xz`` read
    decompressed), byte-tokenized, or with ``tokenizer`` tokenized by a Hugging Face tokenizer;
    ``tokens``: pre-tokenized shards read as one stream, each memory-mapped: a file, a glob or a
    list of files and globs, raw (uint8/uint16/uint32, nanoGPT-style), ``.npy`` or llm.c ``.bin``
    (``format``; ``scaling.trainer.data.shards``). ``val_path`` names held-out shards (else the last
    ``val_fraction`` of the stream is held out).
    ``fingerprint`` (sha256 of the token stream, and of the tokenizer when there is one) and
    ``unique_tokens`` (U: tokens in the training split, the "unique data" of the data-constrained
    law) are filled in by ``scaling.trainer.data.corpus.resolve_data``; the fingerprint is part of the
    run's key.
    """

    source: Literal["builtin", "text", "tokens"] = Field(default="builtin",
                                                         description="builtin (the Python library's sources), text (your files) or tokens (pre-tokenized shards)")
    path: PathOrShards = Field(default=None,
                               description="a file, folder or glob (text), or token shards: a file, glob or list of them (tokens)")
    dtype: Literal["uint8", "uint16", "uint32"] = Field(default="uint16",
                                                        description="token width of raw shards (source tokens)")
    format: Optional[ShardFormat] = Field(
        default=None, description="token shards' format: bin (raw), npy or llmc; detected per file when absent")
    val_path: PathOrShards = Field(default=None, description="held-out token shards (source tokens)")
    tokenizer: Optional[TokenizerSpec] = Field(default=None,
                                               description="a Hugging Face tokenizer for source text (default: bytes)")
    val_fraction: float = Field(default=_DEFAULT_VAL_FRACTION, gt=0, lt=0.5,
                                description="share of the token stream held out for evaluation (its end)")
    fingerprint: Optional[str] = Field(default=None,
                                       description="sha256 of the token stream (filled in when the data are resolved; part of the key)")
    unique_tokens: Optional[int] = Field(default=None, gt=0,
                                         description="tokens in the training split (filled in when the data are resolved)")

    @model_validator(mode="after")
    def _path_when_needed(self) -> "DataSpec":
        if self.source != "builtin" and not self.path:
            raise ValueError(f"data.path is required for source {self.source!r}")
        if self.tokenizer is not None and self.source != "text":
            raise ValueError(f"data.tokenizer needs source 'text' (source {self.source!r} is already tokens)")
        if self.source != "tokens":
            if not isinstance(self.path, (str, type(None))):
                raise ValueError(f"data.path: a list of shards needs source 'tokens' (source {self.source!r})")
            for name in ("val_path", "format"):
                if getattr(self, name) is not None:
                    raise ValueError(f"data.{name} needs source 'tokens' (source {self.source!r})")
        if self.val_path is not None and self.val_fraction != _DEFAULT_VAL_FRACTION:
            raise ValueError("data.val_fraction: the held-out split is val_path's shards; leave val_fraction out")
        return self

    @model_serializer(mode="wrap")
    def _omit_absent_fields(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Fields added later serialize only when set, so the run keys of older data stay.
        out = handler(self)
        if isinstance(out, dict):
            for name in ("tokenizer", "format", "val_path"):
                if getattr(self, name) is None:
                    out.pop(name, None)
        return out


class OptimizerSpec(_Frozen):
    """AdamW (no weight decay on norms, biases and embeddings)."""

    lr: float = Field(default=1e-3, gt=0, le=100.0, description="AdamW's peak step size (above 100 every step overflows)")
    beta1: float = Field(default=0.9, ge=0, lt=1, description="AdamW's first-moment decay")
    beta2: float = Field(default=0.95, ge=0, lt=1, description="AdamW's second-moment decay")
    eps: float = Field(default=1e-8, gt=0, description="AdamW's denominator term")
    weight_decay: float = Field(default=0.1, ge=0,
                                description="decoupled weight decay (not on norms, biases, embeddings)")


class ScheduleSpec(_Frozen):
    """Learning-rate schedule: linear warmup, then cosine / warmup-stable-decay / two-stage / constant
    (each step's rate: :func:`scaling.lr_schedule.lr_at`)."""

    kind: Literal["cosine", "wsd", "constant", "two_stage"] = Field(
        default=SCHEDULE_DEFAULTS["kind"],
        description="after warmup: cosine decay, wsd (warmup-stable-decay), two_stage (a step drop) or constant")
    warmup_fraction: float = Field(default=SCHEDULE_DEFAULTS["warmup_fraction"], ge=0, lt=1, description="share of steps warming up linearly")
    # A fixed warmup length in steps, over warmup_fraction: runs of different lengths (a trunk and
    # the runs it stands for) then warm up alike.
    warmup_steps: Optional[int] = Field(default=SCHEDULE_DEFAULTS["warmup_steps"], ge=0,
                                        description="a fixed warmup length in steps, over warmup_fraction (runs of different lengths warm up alike)")
    min_lr_ratio: float = Field(default=SCHEDULE_DEFAULTS["min_lr_ratio"], ge=0, le=1, description="final learning rate / peak")
    decay_fraction: float = Field(default=SCHEDULE_DEFAULTS["decay_fraction"], gt=0, le=1, description="wsd: the final share of steps that decays")
    # wsd: how the decay falls: linear, 1-sqrt (Hägele et al. 2024: 1 - sqrt(progress)) or exponential
    # (geometric from the peak to the floor: a constant factor per step).
    decay_shape: Literal["linear", "1-sqrt", "exponential"] = Field(
        default=SCHEDULE_DEFAULTS["decay_shape"],
        description="wsd: how the decay falls: linear, 1-sqrt (Hägele et al. 2024) or exponential (geometric to the floor)")
    # two_stage only (absent from the stored spec otherwise, so other schedules keep their run keys).
    drop_at: Optional[float] = Field(default=SCHEDULE_DEFAULTS["drop_at"], gt=0, lt=1,
                                     description="two_stage: the share of the run's steps before the drop")
    drop_lr_ratio: Optional[float] = Field(default=SCHEDULE_DEFAULTS["drop_lr_ratio"], gt=0, lt=1,
                                           description="two_stage: the second stage's learning rate / peak")

    @model_validator(mode="after")
    def _fields_of_kind(self) -> "ScheduleSpec":
        two_stage = self.drop_at is not None or self.drop_lr_ratio is not None
        if self.kind == "two_stage" and (self.drop_at is None or self.drop_lr_ratio is None):
            meaning = {"drop_at": "drop_at (the share of the run's steps before the drop)",
                       "drop_lr_ratio": "drop_lr_ratio (the second stage's learning rate / peak)"}
            missing = " and ".join(m for n, m in meaning.items() if getattr(self, n) is None)
            raise ValueError(f"kind two_stage needs {missing}")
        if self.kind != "two_stage" and two_stage:
            raise ValueError(f"drop_at and drop_lr_ratio are for kind two_stage, not {self.kind}")
        if self.kind == "wsd" and self.decay_shape == "exponential" and self.min_lr_ratio <= 0:
            raise ValueError("decay_shape exponential falls geometrically to min_lr_ratio * peak, "
                             "so min_lr_ratio must be above 0")
        return self

    def with_kind(self, kind: str, **fields: Any) -> "ScheduleSpec":
        """This schedule as another kind, validated: the fields only another kind reads are dropped
        (a copy would carry a two-stage drop into a wsd branch)."""
        own = self.model_dump()
        if kind != "two_stage":
            own.pop("drop_at", None)
            own.pop("drop_lr_ratio", None)
        return ScheduleSpec.model_validate({**own, **fields, "kind": kind})

    @model_serializer(mode="wrap")
    def _omit_absent_fields(self, handler: SerializerFunctionWrapHandler) -> Any:
        # The two-stage fields serialize only when set, so the specs and run keys of other schedules stay.
        out = handler(self)
        if isinstance(out, dict):
            for name in ("drop_at", "drop_lr_ratio"):
                if getattr(self, name) is None:
                    out.pop(name, None)
        return out


class BranchSpec(_Frozen):
    """Where a cooldown branch leaves its trunk: it starts from the trunk's checkpoint at
    ``from_step`` (its model, optimizer, data cursor and RNG) and decays the LR to its own end.

    ``parent`` is the trunk's key, so a branch's key changes with its trunk's. The trunk's folder
    is the branch's sibling (``<runs_dir>/<sweep>/<parent>``).
    """

    parent: str = Field(min_length=16, max_length=16, pattern=r"^[0-9a-f]+$", description="the trunk run's key")
    from_step: int = Field(gt=0, description="the trunk's step (its checkpoint) the branch starts from")


class SpikeSpec(_Frozen):
    """Loss-spike protection: roll back when loss > factor * mean(last window) or non-finite."""

    enabled: bool = Field(default=True, description="roll back on a loss spike")
    factor: float = Field(default=4.0, gt=1, description="a spike: loss above factor times the recent mean")
    window: int = Field(default=100, gt=0, description="steps in the recent mean")
    max_rollbacks: int = Field(default=5, ge=0, description="rollbacks before the run fails")
    lr_scale_on_rollback: float = Field(default=1.0, gt=0, le=1,
                                        description="learning rate multiplied by this after each rollback")


class FaultSpec(_Frozen):
    """Faults injected on purpose, for tests of the recovery paths. Part of the key."""

    # The batches at these data cursors are corrupted (loss spike). The cursor equals the step
    # until a batch is skipped, and a skipped bad batch never returns.
    poison_steps: tuple[int, ...] = Field(default=(),
                                          description="data cursors whose batches are corrupted (a loss spike); for tests")
    overflow_steps: tuple[int, ...] = Field(default=(),
                                            description="steps that produce inf gradients (fp16 scaler test)")
    raise_at_step: Optional[int] = Field(default=None, description="raise an error when this step starts")
    raise_attempts: int = Field(default=1_000_000, ge=0, description="raise only on the first this many attempts")
    kill_at_step: Optional[int] = Field(default=None,
                                        description="SIGKILL the process (rank 1 if distributed) at this step")
    kill_attempts: int = Field(default=1, ge=0, description="kill only on the first this many attempts")


class SimulatedHparams(_Frozen):
    """A simulated run's penalty for its learning rate and batch, with a known optimum:
    k_lr (ln lr - ln lr*)^2 + k_batch (ln B - ln B*)^2, lr* = lr_c N^lr_a D^lr_b, B* = batch_d D^batch_e
    (B in tokens; N and D the run's). Bounded so the penalty stays a finite float."""

    k_lr: float = Field(ge=0, le=10, description="loss per (ln lr - ln lr*)^2")
    lr_c: float = Field(gt=0, le=1e6, description="lr* = lr_c N^lr_a D^lr_b")
    lr_a: float = Field(default=0.0, ge=-2, le=2, description="exponent of N in lr*")
    lr_b: float = Field(default=0.0, ge=-2, le=2, description="exponent of D in lr*")
    k_batch: float = Field(default=0.0, ge=0, le=10, description="loss per (ln B - ln B*)^2")
    batch_d: float = Field(default=1.0, gt=0, le=1e12, description="B* = batch_d D^batch_e tokens")
    batch_e: float = Field(default=0.0, ge=-2, le=2, description="exponent of D in B*")


class SimulatedExperts(_Frozen):
    """How a simulated run's experts change the N term of its law: A / N^alpha becomes
    (A (1 - S)^delta + g / G^gamma) / N^alpha with N the active parameters, S the share of the
    routed experts a token does not use and G the granularity of the run's shape
    (``scaling.accounting.Shape.expert_sparsity``, ``.granularity``; 0 and 1 for a dense model):
    the sparsity law (Clark et al. 2022, Abnar et al. 2025) and Krajewski et al.'s granularity term
    (``scaling.fitting.moe.moe_laws``)."""

    delta: float = Field(default=0.0, ge=0, le=3, description="exponent of the dense share 1 - S on A")
    g: float = Field(default=0.0, ge=0, le=1e30, description="coefficient of the granularity term g / G^gamma")
    gamma: float = Field(default=0.0, ge=0, le=3, description="exponent of the granularity G")


class SimulatedLaw(_Frozen):
    """The Chinchilla law a simulated run draws its losses from: L = E + A / N^alpha + B / D^beta,
    plus the ``hparams`` penalty when given (`SimulatedHparams`), with the N term of ``experts``
    when given (`SimulatedExperts`)."""

    # Bounded so that every loss the law gives is a finite float: E is nats per token (ln of a
    # million-token vocabulary is 14), A and B reach 1e30 only with exponents near 2.
    E: float = Field(ge=0, le=100, description="irreducible loss (nats per token)")
    A: float = Field(gt=0, le=1e30, description="coefficient of the N term")
    B: float = Field(gt=0, le=1e30, description="coefficient of the D term")
    alpha: float = Field(gt=0, le=2, description="exponent of N")
    beta: float = Field(gt=0, le=2, description="exponent of D")
    hparams: Optional[SimulatedHparams] = Field(default=None,
                                                description="a learning-rate and batch penalty with a known optimum")
    experts: Optional[SimulatedExperts] = Field(default=None,
                                                description="the N term's dependence on a run's experts")

    @model_serializer(mode="wrap")
    def _omit_absent_terms(self, handler: SerializerFunctionWrapHandler) -> Any:
        # A law without a term serializes without the field, so its runs' keys do not depend on it.
        out = handler(self)
        if isinstance(out, dict):
            for name in ("hparams", "experts"):
                if getattr(self, name) is None:
                    out.pop(name, None)
        return out


class SimulatedTask(_Frozen):
    """A downstream task a simulated run is scored on (`scaling.trainer.simulate`): its task loss in
    bits per byte follows its own Chinchilla law, bpb = E + A / N^alpha + B / D^beta, and its
    accuracy a sigmoid of it, acc = chance + (1 - chance) / (1 + exp(slope * (bpb - midpoint)))
    (the two steps of Bhagia et al. 2024), observed on ``items`` items (binomial noise)."""

    name: str = Field(default="next_line", description="the task (its metrics: task/NAME/acc and task/NAME/bpb)")
    E: float = Field(ge=0, le=100, description="irreducible task loss (bits per byte)")
    A: float = Field(gt=0, le=1e30, description="coefficient of the N term")
    B: float = Field(gt=0, le=1e30, description="coefficient of the D term")
    alpha: float = Field(gt=0, le=2, description="exponent of N")
    beta: float = Field(gt=0, le=2, description="exponent of D")
    chance: float = Field(default=0.25, ge=0, lt=1, description="accuracy of a guess")
    slope: float = Field(gt=0, le=1000, description="steepness of the sigmoid, per bit per byte")
    midpoint: float = Field(ge=0, le=100, description="bpb where accuracy is halfway from chance to 1")
    items: int = Field(default=1000, ge=1, le=1_000_000, description="items the accuracy is measured on")

    @field_validator("name")
    @classmethod
    def _metric_safe(cls, value: str) -> str:
        from scaling.vocab import task_name_problem

        return checked(value, task_name_problem(value))


class SimulatedCurve(_Frozen):
    """A loss-curve law in the learning-rate schedule the simulated runs' eval losses follow
    (:mod:`scaling.curve_forms`): Luo et al.'s multi-power law or Tissue et al.'s annealing law, its
    L0 the loss of an unbounded model; a run of N parameters adds the ``law``'s A / N^alpha."""

    form: Literal["multi-power", "annealing"] = Field(default="multi-power", description="multi-power (Luo et al. "
                                                      "2025) or annealing (Tissue et al. 2024)")
    L0: float = Field(ge=0, le=100, description="loss as the summed learning rate grows without bound")
    A: float = Field(gt=0, le=1e3, description="coefficient of the power law in the summed learning rate")
    alpha: float = Field(gt=0, le=3, description="exponent of the summed learning rate")
    B: float = Field(default=0.0, ge=0, le=1e8, description="multi-power: scale of the loss drop")
    C: float = Field(gt=0, le=1e8, description="multi-power: C of G(x) = 1 - (Cx + 1)^-beta; annealing: "
                     "coefficient of the annealing area")
    beta: float = Field(default=0.6, gt=0, le=5, description="multi-power: exponent of G")
    gamma: float = Field(default=0.6, ge=0, le=2, description="multi-power: exponent of the learning rate in G")
    evals: int = Field(default=50, ge=3, le=2000, description="eval-loss rows per run, evenly spread after warmup")

    def theta(self) -> tuple[float, ...]:
        """The parameters in :mod:`scaling.curve_forms`' order for the form."""
        if self.form == "multi-power":
            return (self.L0, self.A, self.alpha, self.B, self.C, self.beta, self.gamma)
        return (self.L0, self.A, self.alpha, self.C)


class EarlyStopSpec(_Frozen):
    """Stop a run once its final loss is predicted well enough (an adaptive plan's ``early_stop``).

    At each evaluation from ``after`` of its steps on, at most every ``every`` of them, the run predicts
    its last step's loss from the sweep's finished runs of its schedule and peak rate (the drop still to
    come, regressed on their length and size: :mod:`scaling.trainer.early_stop`) with a 95% prediction
    interval; once that interval's half-width is at most ``tolerance`` (in loss units, nats) the run
    stops there, and its predicted final loss stands for the measured one (marked as predicted).
    """

    tolerance: float = Field(gt=0, le=1, description="the largest half-width of the predicted final loss's 95% "
                                                     "interval at which a run stops (nats)")
    after: float = Field(default=0.5, ge=0.1, lt=1, description="the share of its steps a run trains before "
                                                                "it may stop")
    every: float = Field(default=0.1, gt=0, le=0.5, description="the share of its steps between two checks")


class SimulateSpec(_Frozen):
    """Losses from a known law instead of training (`scaling.trainer.simulate`). Part of the key.

    A run with ``simulate`` trains nothing: it writes the loss curve the law gives along its
    tokens, with multiplicative log-normal noise of SD ``noise``, in milliseconds and without
    torch, so sweeps, adaptive loops and fits can be tested at any scale. With ``pace`` a run takes
    that many wall seconds per step instead, as a trained run is in flight for a while.
    """

    law: SimulatedLaw = Field(description="the law the losses are drawn from")
    noise: float = Field(default=0.005, ge=0, le=0.5, description="SD of ln(loss) per measured value")
    seed: Seed = Field(default=0, description="seed of the noise (with the run's key)")
    points: int = Field(default=50, ge=2, le=1000, description="train-loss rows per run")
    tasks: tuple[SimulatedTask, ...] = Field(default=(), max_length=64, description="task metrics to write")
    curve: Optional[SimulatedCurve] = Field(default=None, description="eval losses from a loss-curve law in "
                                            "the run's learning-rate schedule instead of the law's L(N, D)")
    pace: float = Field(default=0.0, ge=0, le=10, allow_inf_nan=False,
                        description="wall seconds each step takes (0: the run is written at once); a paced run "
                                    "writes its rows as its steps pass, in a task of its own, so it stays in "
                                    "flight to be watched or interrupted (not part of the key)")

    @model_serializer(mode="wrap")
    def _omit_absent_tasks(self, handler: SerializerFunctionWrapHandler) -> Any:
        # A simulation without tasks (or a curve law) serializes without the field, so its runs' keys do not depend on it.
        out = handler(self)
        if isinstance(out, dict) and not self.tasks:
            out.pop("tasks", None)
        if isinstance(out, dict) and self.curve is None:
            out.pop("curve", None)
        if isinstance(out, dict) and not self.pace:
            out.pop("pace", None)
        return out


class Conventions(_Frozen):
    """What N and C mean: a run's ``params_convention`` and ``flops_convention``, a plan's ``conventions``."""

    params: ParamsConvention = Field(default="non_embedding",
                                     description="what N counts: non_embedding (Kaplan) or total (Chinchilla) parameters")
    flops: FlopsConvention = Field(default="6N",
                                   description="what C counts: 6N or 6N plus attention FLOPs per token, times D")


class Recipe(_Frozen):
    """The training recipe: what every run of a sweep shares, all of it part of the key.

    A plan's ``train`` section holds these fields (its rules may set lr and batch_tokens per run).
    """

    precision: PrecisionChoice = Field(default="auto", description="fp32, bf16, fp16 or auto (decided per machine)")
    optimizer: OptimizerSpec = Field(default=OptimizerSpec(), description="AdamW's settings")
    schedule: ScheduleSpec = Field(default=ScheduleSpec(), description="the learning-rate schedule")
    # A whole number of sequences (scaling.batching.batch_problem says why one is refused).
    batch_tokens: int = Field(default=8192, gt=0, description="global batch size in tokens")
    grad_clip: float = Field(default=1.0, ge=0, description="gradient norm clip (0: none)")
    spike: SpikeSpec = Field(default=SpikeSpec(), description="loss-spike rollback")
    eval_tokens: int = Field(default=65536, gt=0, description="held-out tokens per evaluation")


class LoopSettings(_Frozen):
    """How often the loop evaluates, checkpoints and logs, and how fast it computes. Not in the key.

    A plan's ``train`` section holds these fields too.
    """

    eval_interval: int = Field(default=100, gt=0, description="steps")
    checkpoint_interval: int = Field(default=100, gt=0, description="steps")
    keep_checkpoints: int = Field(default=2, gt=0, description="most recent checkpoints kept per run")
    log_interval: int = Field(default=1, gt=0, description="steps between metric rows")
    threads: int = Field(default=1, gt=0, le=1024, description="torch threads per worker")
    compile: bool = Field(default=False, description="torch.compile the model")


def offload_problem(cpu_offload: bool, strategy: str, dp: int, pp: int, ep: int = 1) -> Optional[str]:
    """Why ``cpu_offload`` would do nothing in this layout, or not all it should (None: it takes
    effect, or is off).

    Offload moves FSDP2's parameter and optimizer shards to the CPU: only zero2 and zero3 over
    several data-parallel ranks have them, and pipeline stages are sharded without it. Under
    expert parallelism a rank's own experts are no FSDP2 shards: they would stay where the
    offloaded model is built, on the host, beside a device computing with them."""
    if not cpu_offload:
        return None
    if ep > 1:
        return (f"execution.cpu_offload cannot be combined with ep={ep}: FSDP2 offloads only the parameters it "
                "shards, and each rank's own experts stay out of it; drop one of them")
    if pp > 1 or dp == 1 or strategy in ("single", "ddp", "zero1"):
        return (f"execution.cpu_offload takes effect only under strategy zero2 or zero3 on several data-parallel "
                f"ranks without pipelining, not strategy {strategy} with dp={dp}, pp={pp}: drop it or change the layout")
    return None


class Placement(_Frozen):
    """Where a run executes and how its work is split. Not in the key.

    A plan's ``resources`` section holds these fields.
    """

    # Counts are strict integers: YAML's `true` or '8' is a mistake, not one worker or eight.
    workers: int = Field(default=1, gt=0, le=MAX_WORKERS, strict=True, description="workers per run")
    strategy: StrategyChoice = Field(default="auto",
                                     description="how workers split a run: auto (the least sharding that fits), single, ddp, zero1, zero2 or zero3")
    tp: int = Field(default=1, gt=0, le=MAX_WORKERS, strict=True, description="tensor-parallel degree")
    pp: int = Field(default=1, gt=0, le=MAX_WORKERS, strict=True, description="pipeline stages")
    ep: int = Field(default=1, gt=0, le=MAX_WORKERS, strict=True,
                    description="expert-parallel degree: a routed family's experts sharded over this many "
                    "data-parallel ranks (1: every rank holds every expert)")
    pp_schedule: Literal["gpipe", "1f1b", "interleaved_1f1b"] = Field(default="1f1b",
                                                                      description="pipeline schedule when pp > 1")
    cpu_offload: bool = Field(default=False, description="FSDP2 shards on the CPU (zero2 / zero3 only)")
    cpus_per_worker: float = Field(default=1, gt=0, le=1024, description="CPUs Ray reserves per worker")
    gpus_per_worker: float = Field(default=0, ge=0, le=64, description="GPUs Ray reserves per worker (0: CPU)")
    # Sequences per forward pass at most (None: a worker's whole share). A share is split into
    # equally many micro-batches on every worker, their sizes differing by at most one
    # (scaling.batching.micro_batches).
    micro_batch_size: Optional[int] = Field(default=None, gt=0, strict=True, description="sequences per worker")
    activation_checkpointing: bool = Field(default=False, description="recompute activations in the backward pass")
    device_memory_gib: Optional[float] = Field(default=None, gt=0, le=MAX_DEVICE_MEMORY_GIB,
                                               description="for planning and `auto`")

    @model_validator(mode="after")
    def _mesh_divides_workers(self) -> "Placement":
        if self.workers % (self.tp * self.pp):
            raise ValueError(
                f"workers ({self.workers}) must be a multiple of tp*pp ({self.tp}*{self.pp}): "
                "workers = dp*tp*pp"
            )
        return self

    @model_validator(mode="after")
    def _offload_takes_effect(self) -> "Placement":
        problem = offload_problem(self.cpu_offload, self.strategy, self.dp, self.pp, self.ep)
        if problem:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _one_gpu_per_rank(self) -> "Placement":
        if self.workers > 1 and self.gpus_per_worker not in (0, 1):
            raise ValueError(
                f"gpus_per_worker: a multi-worker run takes exactly 1 GPU per worker, not {self.gpus_per_worker:g} "
                "(a fraction packs two ranks on one GPU, which NCCL refuses; more leaves GPUs idle)"
            )
        return self

    @property
    def dp(self) -> int:
        """Data-parallel ranks: ``workers = dp * tp * pp``."""
        return self.workers // (self.tp * self.pp)


class ExecutionSpec(Placement, LoopSettings):
    """How a run executes. Not part of the key: it must not change the result's meaning."""

    device: Literal["auto", "cpu", "cuda"] = Field(default="auto", description="auto, cpu or cuda")
    # Steps whose checkpoints are written and never rotated away: a trunk's branch points.
    keep_steps: tuple[int, ...] = Field(default=(), description="checkpoints kept whatever keep_checkpoints says")

    def ray_gpu_problem(self) -> Optional[str]:
        """Why Ray cannot reserve this run's devices consistently (None: it can).

        A run through Ray gets the GPUs it reserves, ``gpus_per_worker``; ``device: cuda`` with
        none reserved would train on a GPU Ray believes free (one process alone needs no Ray:
        ``scaling train`` runs it in place)."""
        if self.device == "cuda" and self.gpus_per_worker == 0:
            return "execution.device: 'cuda' with gpus_per_worker 0 reserves no GPU for the run: set gpus_per_worker: 1"
        return None

    @model_validator(mode="after")
    def _multi_worker_reserves_its_gpus(self) -> "ExecutionSpec":
        problem = self.ray_gpu_problem() if self.workers > 1 else None  # several workers always run through Ray
        if problem:
            raise ValueError(problem)
        return self

"""Shapes, parameter and FLOP counts, and memory per worker: the one home of these numbers.

Torch-free on purpose: the planner, the fits and the reports use it on machines without torch.
A shape's counts are its family's (``scaling.families``: one registered record per family); they
are exact for the torch modules and checked in the tests against a direct count of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Literal

from scaling import fmt
from scaling.families import FAMILIES, FIELD_DEFAULTS, Family, owners

ParamsConvention = Literal["non_embedding", "total"]
FlopsConvention = Literal["6N", "6N_attention"]
Precision = Literal["bf16", "fp16", "fp32"]
PrecisionChoice = Literal["auto", "bf16", "fp16", "fp32"]  # auto: resolved per machine (trainer.precision)
Strategy = Literal["single", "ddp", "zero1", "zero2", "zero3"]
#: What a plan or spec may ask for: a strategy, or ``auto`` (the least sharding that fits).
StrategyChoice = Literal["auto", "single", "ddp", "zero1", "zero2", "zero3"]

PARAMS_CONVENTIONS: tuple[str, ...] = ("non_embedding", "total")
FLOPS_CONVENTIONS: tuple[str, ...] = ("6N", "6N_attention")
STRATEGIES: tuple[str, ...] = ("single", "ddp", "zero1", "zero2", "zero3")
GIB = 1024**3
# Training FLOPs per parameter per token under the 6N convention (Kaplan et al. 2020, Sec. 2.1): forward
# 2N, backward 4N. C = k N D; every law, report and sizing rule reads k from here.
FLOPS_PER_PARAM_TOKEN = 6.0


@dataclass(frozen=True, kw_only=True)
class ModelFamily:
    """The fields that choose a decoder's family and parametrization and tune the family's parts,
    shared by a :class:`Shape` and a :class:`ShapePolicy`. Keyword-only, so the constructors take
    the sizes first and positionally; ``dataclasses.fields`` lists these first. Each family takes
    some of them (``scaling.families.Family.fields``); the others keep these defaults."""

    family: str = "gpt2"
    n_kv_head: int | None = FIELD_DEFAULTS["n_kv_head"]  # type: ignore[assignment]
    ffn: int | None = FIELD_DEFAULTS["ffn"]  # type: ignore[assignment]
    tie_embeddings: bool | None = FIELD_DEFAULTS["tie_embeddings"]  # type: ignore[assignment]
    qk_norm: bool = FIELD_DEFAULTS["qk_norm"]  # type: ignore[assignment]
    rope_theta: float = FIELD_DEFAULTS["rope_theta"]  # type: ignore[assignment]
    norm_eps: float = FIELD_DEFAULTS["norm_eps"]  # type: ignore[assignment]
    parametrization: str = "standard"
    base_width: int | None = None
    n_experts: int | None = FIELD_DEFAULTS["n_experts"]  # type: ignore[assignment]
    top_k: int | None = FIELD_DEFAULTS["top_k"]  # type: ignore[assignment]
    expert_ffn: int | None = FIELD_DEFAULTS["expert_ffn"]  # type: ignore[assignment]
    n_shared_experts: int = FIELD_DEFAULTS["n_shared_experts"]  # type: ignore[assignment]
    n_dense_layers: int = FIELD_DEFAULTS["n_dense_layers"]  # type: ignore[assignment]
    router: str = FIELD_DEFAULTS["router"]  # type: ignore[assignment]
    balance: str = FIELD_DEFAULTS["balance"]  # type: ignore[assignment]
    aux_loss: float = FIELD_DEFAULTS["aux_loss"]  # type: ignore[assignment]
    router_z_loss: float = FIELD_DEFAULTS["router_z_loss"]  # type: ignore[assignment]
    bias_rate: float = FIELD_DEFAULTS["bias_rate"]  # type: ignore[assignment]


#: The family fields in their order, for whoever passes them on (a plan's or spec's model section).
FAMILY_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(ModelFamily))


@dataclass(frozen=True)
class Shape(ModelFamily):
    """The shape of a decoder of one family (:data:`FAMILIES`, ``scaling.families``).

    ``gpt2``: learned positions, LayerNorm, a GELU MLP of 4*d_model, biases, tied embeddings; the
    other families' fields must keep their defaults. ``llama``: RoPE (``rope_theta``), RMSNorm
    (``norm_eps``), a SwiGLU MLP of ``ffn`` hidden units (default ``scaling.families.llama_ffn``), no biases,
    ``n_kv_head`` key/value heads (grouped-query attention; default ``n_head``), untied embeddings
    unless ``tie_embeddings``, and with ``qk_norm`` an RMSNorm over each query and key head.
    ``moe``: the llama block with routed experts (``scaling.families.MoE``).
    ``None`` fields are resolved to the family's default on construction.

    ``parametrization`` (any family): ``standard``, or ``mup`` (Yang et al. 2022) relative to a
    proxy of width ``base_width``: it changes the initialization, the output layer's multiplier,
    the attention's scale and the learning rates (:attr:`width_mult`), never a count.

    Counts of an MoE: ``params_total`` is every parameter, ``params_active`` those one token uses
    (the router, its top-k and the shared experts); the laws' N (:meth:`params`) and the FLOPs
    count the active ones. For a dense family both are the same.
    """

    n_layer: int
    d_model: int
    n_head: int
    vocab_size: int = 256
    context: int = 256

    def __post_init__(self) -> None:
        problem = parametrization_problem(self.parametrization, self.base_width)
        if problem:
            raise ValueError(problem)
        for name in ("n_layer", "d_model", "n_head", "vocab_size", "context"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.family not in FAMILIES:
            raise ValueError(f"unknown family {self.family!r} (use one of {', '.join(FAMILIES)})")
        if self.d_model % self.n_head:
            raise ValueError(f"d_model ({self.d_model}) must be a multiple of n_head ({self.n_head})")
        fam = self.family_spec
        given = [name for name, value in fam.fixed(self).items() if getattr(self, name) not in (None, value)]
        if given:
            takers = sorted({owner for name in given for owner in owners(name)})
            which = f"family {takers[0]!r}" if len(takers) == 1 else "families " + ", ".join(map(repr, takers))
            raise ValueError(f"{', '.join(given)}: only for {which} (not a field of {fam.name!r})")
        for name, default in fam.defaults(self).items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, default)
        kv = self.kv_heads
        if kv < 1 or self.n_head % kv:
            raise ValueError(f"n_kv_head ({kv}) must divide n_head ({self.n_head})")
        if self.hidden < 1:
            raise ValueError(f"ffn must be positive, got {self.hidden}")
        problem = fam.problem(self)
        if problem:
            raise ValueError(problem)
        if not (self.rope_theta > 1 and math.isfinite(self.rope_theta)):
            raise ValueError(f"rope_theta must be a finite number above 1, got {self.rope_theta}")
        if not (0 < self.norm_eps < 1):
            raise ValueError(f"norm_eps must be between 0 and 1, got {self.norm_eps}")

    # -- resolved fields (typed, never None after construction) ---------------------------------
    @property
    def family_spec(self) -> Family:
        """The family's registered record (``scaling.families.FAMILIES``)."""
        return FAMILIES[self.family]

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @property
    def kv_heads(self) -> int:
        return self.n_head if self.n_kv_head is None else self.n_kv_head

    @property
    def hidden(self) -> int:
        """The dense MLP's hidden width (4*d_model for gpt2, ``ffn`` otherwise)."""
        return self.ffn if self.ffn is not None else 4 * self.d_model

    @property
    def tied(self) -> bool:
        return bool(self.tie_embeddings)

    @property
    def width_mult(self) -> float:
        """μP's width multiplier m = d_model / base_width (1 under the standard parametrization)."""
        return self.d_model / self.base_width if self.parametrization == "mup" and self.base_width else 1.0

    @property
    def attention_scale(self) -> float | None:
        """What attention's logits q.k are multiplied by under μP, 1/head_dim; None for the
        standard 1/sqrt(head_dim) (the attention kernels' default)."""
        return 1.0 / self.head_dim if self.parametrization == "mup" else None

    @property
    def output_mult(self) -> float | None:
        """μP's multiplier 1/m on the output layer's input (``mup``'s ``MuReadout``); None for standard."""
        return 1.0 / self.width_mult if self.parametrization == "mup" else None

    # -- parameters ---------------------------------------------------------------------
    @property
    def layer_matmul_params(self) -> int:
        """The weight matrices of one block (an MoE's largest, every expert): attention's q, k, v
        and output, and the MLP's."""
        return self.family_spec.layer_matmul_params(self)

    @property
    def layer_vector_params(self) -> int:
        """One block's parameters that are not matrices: norms (and gpt2's biases)."""
        return self.family_spec.layer_vector_params(self)

    @property
    def layer_norm_params(self) -> int:
        """One block's norm parameters (autocast computes with them in FP32): gpt2's two
        LayerNorms (4d), llama's RMSNorms (2d, and two head-wide ones with qk_norm)."""
        return self.family_spec.layer_norm_params(self)

    @property
    def layer_replicated_params(self) -> int:
        """One block's parameters every tensor-parallel rank holds whole: the norms, and gpt2's
        row-parallel output biases (column-parallel biases are split with their matrix)."""
        return self.family_spec.layer_replicated_params(self)

    @property
    def params_per_layer(self) -> int:
        """One block (an MoE's largest). gpt2: two LayerNorms (4d), QKV (3d^2+3d), out-proj (d^2+d),
        MLP (8d^2+5d). llama: two RMSNorms (2d), q and o (2d^2), k and v (2 d kv_heads head_dim),
        SwiGLU (3 d ffn), with qk_norm two head-wide RMSNorms."""
        return self.layer_matmul_params + self.layer_vector_params

    @property
    def params_final_norm(self) -> int:
        return self.family_spec.final_norm_params(self)

    @property
    def params_input_embedding(self) -> int:
        """The token embedding, and gpt2's learned positions."""
        return self.vocab_size * self.d_model + self.family_spec.position_params(self)

    @property
    def params_output(self) -> int:
        """The output layer's own parameters: none when tied to the token embedding."""
        return 0 if self.tied else self.vocab_size * self.d_model

    def blocks_params(self, active: bool = False) -> int:
        """Every block's parameters (only those a token uses, when ``active``)."""
        return self.family_spec.blocks_matmul_params(self, active) + self.n_layer * self.layer_vector_params

    @property
    def params_non_embedding(self) -> int:
        """Kaplan's N: every parameter except the embedding matrices.

        The token embedding, gpt2's positions and an untied output layer are embedding
        matrices (a tied output layer is the token embedding), so N is the blocks and the final norm.
        """
        return self.blocks_params() + self.params_final_norm

    @property
    def params_embedding(self) -> int:
        """Token embedding (shared with a tied output layer), gpt2's positions and an untied output layer."""
        return self.params_input_embedding + self.params_output

    @property
    def params_total(self) -> int:
        """Every parameter (an MoE's every expert)."""
        return self.params_non_embedding + self.params_embedding

    @property
    def params_active_non_embedding(self) -> int:
        """The non-embedding parameters one token uses (an MoE's router, top-k and shared experts)."""
        return self.blocks_params(active=True) + self.params_final_norm

    @property
    def params_active(self) -> int:
        """The parameters one token uses, embeddings included (the total for a dense family)."""
        return self.params_active_non_embedding + self.params_embedding

    @property
    def expert_sparsity(self) -> float:
        """1 - top_k / n_experts (0 for a dense family): the sparsity S the MoE laws read from a run's spec."""
        if not self.family_spec.routed:
            return 0.0
        assert self.top_k is not None and self.n_experts is not None
        return 1.0 - self.top_k / self.n_experts

    @property
    def granularity(self) -> float:
        """ffn / expert_ffn, Krajewski et al. 2024's granularity G (1 for a dense family)."""
        if not self.family_spec.routed:
            return 1.0
        assert self.expert_ffn is not None
        return self.hidden / self.expert_ffn

    @property
    def sparse(self) -> bool:
        """Whether a token uses fewer parameters than the model has."""
        return self.params_active != self.params_total

    @property
    def params_matmul(self) -> int:
        """The parameters a token multiplies by: the matrices of the blocks it uses (an MoE's
        active experts) and the output layer (tied or not). Embedding lookups, norms and biases
        are not matrix multiplications."""
        return self.family_spec.blocks_matmul_params(self, active=True) + self.vocab_size * self.d_model

    def params(self, convention: ParamsConvention = "non_embedding") -> int:
        """Parameter count in a sweep's convention: the laws' N, the active parameters (all of
        them for a dense family; an MoE's router, top-k and shared experts)."""
        if convention == "non_embedding":
            return self.params_active_non_embedding
        if convention == "total":
            return self.params_active
        raise ValueError(f"unknown params convention {convention!r} (use one of {PARAMS_CONVENTIONS})")

    def tp_problem(self, tp: int) -> str | None:
        """Why this shape's heads and MLP cannot be split over ``tp`` tensor ranks, or None."""
        if self.n_head % tp:
            return f"tp={tp} does not divide n_head ({self.n_head})"
        if self.kv_heads % tp:
            return f"tp={tp} does not divide n_kv_head ({self.kv_heads})"
        return self.family_spec.tp_problem(self, tp)

    # -- FLOPs ----------------------------------------------------------------------------
    def forward_flops_per_token_attention(self) -> float:
        """Forward FLOPs per token as Hoffmann et al. (2022, Appendix F) count them.

        Embeddings, QKV/out projections, attention logits and the reduction over values with the
        full (not causally halved) context, softmax, the MLP and the final logits. For llama the
        projections have the kv heads' width and the MLP its three SwiGLU matrices; an MoE's MLP
        is its router and the experts a token uses.
        """
        d, L, s, v, h = self.d_model, self.n_layer, self.context, self.vocab_size, self.n_head
        embeddings = 2 * v * d
        logits_attn = 2 * s * d
        softmax = 3 * h * s
        reduction = 2 * s * d
        matmuls = 2 * self.family_spec.blocks_matmul_params(self, active=True)  # q, k, v, o and the MLP
        final_logits = 2 * d * v
        return embeddings + L * (logits_attn + softmax + reduction) + matmuls + final_logits

    def model_flops_per_token(self) -> float:
        """Training FLOPs per token for MFU, as PaLM (Chowdhery et al. 2022, App. B) and nanoGPT
        count them: 6 per matmul parameter a token uses (:attr:`params_matmul`, the output layer
        included, no embedding lookup) plus 12 L H Q T for attention's two matmuls over the full context."""
        return 6.0 * self.params_matmul + 12.0 * self.n_layer * self.n_head * self.head_dim * self.context

    def flops_per_token(
        self, flops: FlopsConvention = "6N", params: ParamsConvention = "non_embedding"
    ) -> float:
        """Training FLOPs per token: 6N (Kaplan) or 3x Chinchilla's forward count.

        Backward costs twice the forward, hence the factor 3 on the forward count.
        """
        if flops == "6N":
            return FLOPS_PER_PARAM_TOKEN * self.params(params)
        if flops == "6N_attention":
            return 3.0 * self.forward_flops_per_token_attention()
        raise ValueError(f"unknown flops convention {flops!r} (use one of {FLOPS_CONVENTIONS})")

    def training_flops(
        self, tokens: float, flops: FlopsConvention = "6N", params: ParamsConvention = "non_embedding"
    ) -> float:
        """C for training on ``tokens`` tokens."""
        return self.flops_per_token(flops, params) * tokens

    def family_fields(self) -> dict[str, object]:
        """The family's fields that differ from its defaults (none for gpt2), and the
        parametrization unless standard, so a standard gpt2 shape's dictionary, and every key
        hashed from it, is what it was before families."""
        mup: dict[str, object] = {}
        if self.parametrization != "standard":
            mup = {"parametrization": self.parametrization, "base_width": self.base_width}
        return {**self.family_spec.keyed_fields(self), **mup}

    def as_dict(self) -> dict[str, object]:
        return {
            "n_layer": self.n_layer,
            "d_model": self.d_model,
            "n_head": self.n_head,
            "vocab_size": self.vocab_size,
            "context": self.context,
            **self.family_fields(),
        }


#: How a model's initialization and learning rates depend on its width (``mup``: Yang et al. 2022).
PARAMETRIZATIONS: tuple[str, ...] = ("standard", "mup")


def parametrization_problem(parametrization: str, base_width: int | None) -> str | None:
    """Why ``parametrization`` with ``base_width`` is no parametrization, or None: μP needs the
    proxy's width (its d_model), and only μP has one."""
    if parametrization not in PARAMETRIZATIONS:
        return f"unknown parametrization {parametrization!r} (use one of {', '.join(PARAMETRIZATIONS)})"
    if base_width is not None and base_width < 1:
        return f"base_width must be positive, got {base_width}"
    if parametrization == "mup" and base_width is None:
        return "parametrization mup needs base_width (the d_model of the proxy its learning rates were tuned on)"
    if parametrization == "standard" and base_width is not None:
        return "base_width: only with parametrization mup"
    return None


def family_fields(model: object) -> dict[str, object]:
    """The :class:`Shape` family fields a serialized model section (a run spec's ``model``) states;
    none for anything else (a gpt2 section states none: they are left out at their defaults)."""
    if not isinstance(model, dict):
        return {}
    return {name: model[name] for name in ("family", *FIELD_DEFAULTS) if name in model}


#: How far (as a ratio, either way) a planned model's parameter count may be from the size asked for.
MAX_SHAPE_FACTOR = 2.0


@dataclass(frozen=True)
class ShapePolicy(ModelFamily):
    """How a target size becomes a shape.

    ``aspect_ratio`` fixes d_model / n_layer (GPT-2 small has 768/12 = 64); ``head_size`` fixes
    d_model / n_head, and d_model is a multiple of it. Kaplan et al. (2020, Fig. 5) found loss
    nearly flat over a wide range of aspect ratios at fixed N, so a fixed ratio costs little.
    """

    aspect_ratio: float = 64.0
    head_size: int = 64
    vocab_size: int = 256
    context: int = 256

    def __post_init__(self) -> None:
        if self.aspect_ratio <= 0 or self.head_size < 1 or self.vocab_size < 1 or self.context < 1:
            raise ValueError("aspect_ratio, head_size, vocab_size and context must be positive")
        # The family's own checks, on a shape with one head per kv head (any width would do).
        kv = self.n_kv_head or 1
        Shape(self.n_dense_layers + 1, self.head_size * kv, kv, self.vocab_size, self.context,
              **{**self._family(), "ffn": self.ffn or None})

    def _family(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in FAMILY_FIELDS}

    def _shape(self, n_layer: int, d_model: int) -> Shape:
        return Shape(n_layer, d_model, d_model // self.head_size, self.vocab_size, self.context,
                     **self._family())  # type: ignore[arg-type]

    def shape_for(self, target: float, convention: ParamsConvention = "non_embedding") -> Shape:
        """The shape of this policy whose parameter count (in ``convention``) is nearest ``target``.

        Solves N ~ 12 L d^2 with d = aspect_ratio * L for L, then searches neighbouring layer
        counts and widths (multiples of head_size) for the exact count nearest the target in
        log space. The result's exact count is ``shape.params(convention)``.
        """
        if not target > 0 or not math.isfinite(target):
            raise ValueError(f"target parameter count must be positive, got {target}")
        r, hs = self.aspect_ratio, self.head_size
        guess_layers = max(1, round((target / (12.0 * r * r)) ** (1.0 / 3.0)))
        best: Shape | None = None
        best_err = math.inf
        kv = self.n_kv_head or 1  # the number of heads is a multiple of n_kv_head: step by it
        for n_layer in range(max(1, guess_layers - 2), guess_layers + 3):
            ideal_d = r * n_layer
            centre = max(1, round(ideal_d / hs / kv))
            for mult in range(kv * max(1, centre - 2), kv * (centre + 3), kv):
                try:
                    shape = self._shape(n_layer, mult * hs)
                except ValueError:  # e.g. n_kv_head does not divide this width's heads
                    continue
                # Prefer the nearest count; break ties by staying near the aspect ratio.
                err = abs(math.log(shape.params(convention) / target))
                err += 1e-3 * abs(math.log(shape.d_model / (r * n_layer)))
                if err < best_err:
                    best, best_err = shape, err
        if best is None:
            raise ValueError(f"no shape near N={fmt.count(target)} with head_size {hs} has heads that n_kv_head "
                             f"({self.n_kv_head}) divides")
        return best

    def planned_shape(self, target: float, convention: ParamsConvention = "non_embedding") -> Shape:
        """:meth:`shape_for`, refused (ValueError) when the nearest shape's count is more than
        :data:`MAX_SHAPE_FACTOR` times from ``target`` either way: a plan that asks for N trains N."""
        shape = self.shape_for(target, convention)
        n = shape.params(convention)
        factor = max(n / target, target / n)
        if factor > MAX_SHAPE_FACTOR:
            kv = f" and n_kv_head {self.n_kv_head}" if self.n_kv_head else ""
            raise ValueError(
                f"the nearest {self.family} shape to N={fmt.count(target)} with head_size {self.head_size}{kv} is "
                f"{shape.n_layer}x{shape.d_model}/{shape.n_head}h with N={fmt.count(n)}, {factor:.1f}x "
                f"{'larger' if n > target else 'smaller'} (more than {MAX_SHAPE_FACTOR:g}x from its target); "
                "ask for a size nearer it, or a smaller head_size or n_kv_head")
        return shape


# -- batches ----------------------------------------------------------------------------


def whole_sequences(tokens: float, context: int) -> int:
    """A batch of ``tokens`` rounded to the nearest whole number of sequences of ``context`` tokens,
    at least one: the one rounding of a batch that a rule, a batch factor or a fitted law gives
    (a plan refuses any batch that is not whole sequences, :func:`batch_problem`)."""
    return int(max(1, round(tokens / context))) * context


def batch_problem(batch_tokens: int, context: int, workers: int = 1) -> str | None:
    """Why a global batch of ``batch_tokens`` cannot be trained, or None.

    A batch is a whole number of sequences of ``context`` tokens (a remainder would be stored
    but never trained, and every estimate would count it), and every worker takes at least one
    sequence of it.
    """
    if batch_tokens < context:
        return f"{batch_tokens} is less than one sequence (context {context})"
    if batch_tokens % context:
        lower = batch_tokens // context * context
        return (f"{batch_tokens} is not a whole number of sequences of context {context} "
                f"(use {lower} or {lower + context})")
    if batch_tokens // context < workers:
        return f"{batch_tokens // context} sequences of {context} tokens per batch cannot feed {workers} workers"
    return None


def micro_batches(batch: int, world: int, share: int, requested: int | None) -> list[tuple[int, int]]:
    """(offset, count) of each micro-batch of a rank's ``share`` of a ``batch`` over ``world`` ranks.

    Every rank runs the same number of micro-batches (sharded models gather parameters in each
    forward pass, so the ranks' passes must pair up): enough for the largest share at no more
    than ``requested`` sequences each. Sizes differ by at most one; a count of 0 can occur only
    with ``requested=1`` on a smaller share, and the loop runs it with weight 0.
    """
    largest = -(-batch // world)
    size = min(requested or largest, largest)
    n = -(-largest // size)
    counts = [share // n + (1 if i < share % n else 0) for i in range(n)]
    offsets = [sum(counts[:i]) for i in range(n)]
    return list(zip(offsets, counts))


def micro_batch_size(batch: int, world: int, requested: int | None) -> int:
    """Sequences in the largest forward pass of any rank: the memory estimate's ``b``.

    ``batch`` sequences are shared over ``world`` ranks as :func:`micro_batches` splits them;
    ``requested`` is the micro-batch size asked for (None: a rank's whole share).
    """
    largest = -(-batch // world)
    return max(count for _, count in micro_batches(batch, world, largest, requested))


# -- memory -----------------------------------------------------------------------------

#: Bytes per parameter for (weights, gradients, optimizer state), by memory layout.
#:
#: ``zero``: mixed-precision Adam as the ZeRO paper counts it (Rajbhandari et al. 2020, Sec. 3.1):
#: 16-bit weights and gradients, FP32 master weights, momentum and variance (12 bytes).
#: ``torch``: what this trainer does: autocast computes in 16 bits but keeps the parameters
#: themselves in FP32 (they are the master weights) and their gradients in FP32, plus Adam's two
#: FP32 moments (4 + 4 + 8). Both total 16 bytes; they differ in what each ZeRO stage shards.
#: Pure FP32 is 4 + 4 + 8 in both.
STATE_BYTES: dict[str, dict[str, tuple[int, int, int]]] = {
    "zero": {"bf16": (2, 2, 12), "fp16": (2, 2, 12), "fp32": (4, 4, 8)},
    "torch": {"bf16": (4, 4, 8), "fp16": (4, 4, 8), "fp32": (4, 4, 8)},
}
Layout = Literal["zero", "torch"]


def compute_bytes(precision: Precision) -> int:
    """Bytes of one value in the compute dtype (activations; what autocast casts matmul inputs to)."""
    return 4 if precision == "fp32" else 2


def gather_bytes(precision: Precision) -> int:
    """Bytes per value in which this trainer's FSDP2 gathers the parameters autocast casts (the
    linear layers): 2 under bf16; 4 under fp16 (gathered in FP32: autocast and loss scaling
    alone) and fp32. Norms and embeddings are gathered in FP32 whatever the precision, as
    autocast computes with them (``scaling.trainer.parallel.data_parallel.shard_as_autocast``)."""
    return 2 if precision == "bf16" else 4


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one worker needs for a run, by component."""

    strategy: str
    workers: int
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    margin_bytes: float
    buffers_bytes: float = 0.0  # FSDP (zero2/zero3): gathered parameters and unsharded gradients; autocast's weight copies

    @property
    def model_state_bytes(self) -> float:
        return self.weights_bytes + self.gradients_bytes + self.optimizer_bytes

    @property
    def total_bytes(self) -> float:
        return self.model_state_bytes + self.activations_bytes + self.buffers_bytes + self.margin_bytes

    @property
    def total_gib(self) -> float:
        return self.total_bytes / GIB

    @classmethod
    def with_margin(
        cls, strategy: str, workers: int, *, weights: float, gradients: float, optimizer: float,
        activations: float, buffers: float, margin: float,
    ) -> "MemoryEstimate":
        """The estimate with ``margin`` (a fraction of everything else) for the allocator's slack."""
        parts = weights + gradients + optimizer + activations + buffers
        return cls(strategy, workers, weights, gradients, optimizer, activations, margin * parts, buffers)


def model_state_bytes(
    params: int, precision: Precision, strategy: Strategy, workers: int, layout: Layout = "torch"
) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per worker under a ZeRO stage.

    ``layout="zero"`` gives the paper's formulas, with Φ parameters, N_d workers and mixed
    precision: DDP 16Φ; ZeRO-1 4Φ + 12Φ/N_d; ZeRO-2 2Φ + 14Φ/N_d; ZeRO-3 16Φ/N_d.
    ``layout="torch"`` (the default: what this trainer allocates) keeps FP32 weights and gradients
    under autocast: DDP 16Φ; ZeRO-1 (ZeroRedundancyOptimizer) 8Φ + 8Φ/N_d; ZeRO-2 (FSDP2 without
    resharding after forward) 16Φ/N_d plus the gathered copy of every parameter held from forward
    to backward, in :func:`gather_bytes` (norms and embeddings, gathered in FP32, add 2 bytes each
    under bf16: ``scaling.memory.memory_per_rank`` knows which they are); ZeRO-3 (FSDP2) 16Φ/N_d.
    """
    if layout not in STATE_BYTES:
        raise ValueError(f"unknown memory layout {layout!r} (use 'zero' or 'torch')")
    if precision not in STATE_BYTES[layout]:
        raise ValueError(f"unknown precision {precision!r}")
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r} (use one of {STRATEGIES})")
    if workers < 1:
        raise ValueError("workers must be at least 1")
    w, g, o = (b * params for b in STATE_BYTES[layout][precision])
    n = workers
    if strategy in ("single", "ddp"):
        return w, g, o
    if strategy == "zero1":
        return w, g, o / n
    if strategy == "zero2":
        if layout == "torch" and n > 1:
            return w / n + gather_bytes(precision) * params, g / n, o / n
        return w, g / n, o / n
    return w / n, g / n, o / n  # zero3


def fsdp_buffer_bytes(shape: Shape, precision: Precision, strategy: Strategy, workers: int) -> float:
    """Transient unsharded state of FSDP (zero2/zero3), which the ZeRO formulas leave out:
    :func:`fsdp_block_buffer_bytes` of one transformer block. Negligible for deep models, but a
    quarter of the model state of a 4-layer one. Zero for one worker and for DDP/ZeRO-1."""
    return fsdp_block_buffer_bytes(shape.params_per_layer, shape.layer_norm_params, precision, strategy, workers)


def fsdp_block_buffer_bytes(block: int, norms: int, precision: Precision, strategy: Strategy, workers: int) -> float:
    """What FSDP (zero2/zero3) holds unsharded for a block of ``block`` parameters (``norms`` of them in norms).

    The trainer shards each transformer block as one FSDP unit (its norms as a second one). In
    backward, ZeRO-3 holds the current block's gathered parameters while it prefetches the next
    block's, each in the dtype it is gathered in (:func:`gather_bytes`; the norms in FP32), and
    the current block's gradients: computed in that dtype, copied to FP32 (the reduce dtype) for
    the reduce-scatter where that differs, and reduced into a new FP32 shard (4/N_d) that is then
    added to the accumulated one. ZeRO-2 keeps every block gathered anyway (counted in the state),
    so only the gradients are added. Measured on the CPU: a ZeRO-3 step of 4 accumulated
    micro-batches peaks at this plus the state and activations (tests/distributed/test_memory_per_rank.py).
    """
    if strategy not in ("zero2", "zero3") or workers < 2:
        return 0.0
    gathered = float((block - norms) * gather_bytes(precision) + norms * 4)
    reduce_copy = 4.0 * (block - norms) if gather_bytes(precision) != 4 else 0.0
    gradients = gathered + reduce_copy + 4.0 * block / workers
    return gradients + (2 * gathered if strategy == "zero3" else 0.0)


#: No single accelerator or host offers one worker more than this; a plan that does not state
#: ``device_memory_gib`` is still held to it.
MAX_DEVICE_GIB = 4096.0


def check_fits(
    est: MemoryEstimate,
    limit_bytes: float | None,
    *,
    what: str,
    limit_name: str = "",
    advice: str = "use a smaller model, more workers, a smaller micro_batch_size or activation_checkpointing",
) -> None:
    """Refuse a run whose estimated memory per worker exceeds ``limit_bytes`` (default:
    :data:`MAX_DEVICE_GIB`), before anything is allocated: one line with estimate and limit."""
    from scaling.errors import ResourceError

    limit = MAX_DEVICE_GIB * GIB if limit_bytes is None else limit_bytes
    name = limit_name or ("any device" if limit_bytes is None else "the device")
    if not est.total_bytes <= limit:  # also refuses an estimate that overflowed to inf or nan
        worker = "worker" if est.workers == 1 else "workers"
        raise ResourceError(
            f"{what} needs an estimated {est.total_gib:.3g} GiB per worker ({est.strategy} on {est.workers} "
            f"{worker}), more than {name} ({limit / GIB:.3g} GiB); {advice}"
        )


# -- a parallel layout and what each of its ranks holds --------------------------------------

Schedule = Literal["gpipe", "1f1b", "interleaved"]
SCHEDULES: tuple[str, ...] = ("gpipe", "1f1b", "interleaved")
#: The trainer's schedule names (``execution.pp_schedule``) as this model's (schedule, model
#: chunks per pipeline rank): the one place the two namings meet (the trainer's interleaved
#: schedule runs two chunks per rank).
TRAINER_SCHEDULES: dict[str, tuple[Schedule, int]] = {
    "1f1b": ("1f1b", 1),
    "gpipe": ("gpipe", 1),
    "interleaved_1f1b": ("interleaved", 2),
}
Recompute = Literal["none", "selective", "full"]
RECOMPUTES: tuple[str, ...] = ("none", "selective", "full")


@dataclass(frozen=True)
class ParallelLayout:
    """How one run is laid out on ``dp * tp * pp`` ranks.

    ``strategy`` is the data-parallel strategy over ``dp`` (accounting's names). A step runs
    ``micro_batches`` micro-batches of ``micro_batch`` sequences on each data-parallel rank
    (gradient accumulation without pipelining; the pipeline's micro-batches with it).
    ``chunks`` is the number of model chunks per pipeline rank (``interleaved`` only).
    """

    dp: int = 1
    tp: int = 1
    pp: int = 1
    strategy: Strategy = "ddp"
    micro_batches: int = 1
    micro_batch: int = 1
    sequence_parallel: bool = False
    recompute: Recompute = "none"
    schedule: Schedule = "1f1b"
    chunks: int = 1
    ep: int = 1  # a routed family's experts sharded over this many data-parallel ranks

    def __post_init__(self) -> None:
        for name in ("dp", "tp", "pp", "micro_batches", "micro_batch", "chunks", "ep"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {self.strategy!r} (use one of {STRATEGIES})")
        if self.recompute not in RECOMPUTES:
            raise ValueError(f"unknown recompute {self.recompute!r} (use one of {RECOMPUTES})")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {self.schedule!r} (use one of {SCHEDULES})")
        if self.chunks > 1 and self.schedule != "interleaved":
            raise ValueError("chunks > 1 needs the interleaved schedule")
        if self.sequence_parallel and self.tp == 1:
            raise ValueError("sequence_parallel needs tp > 1")

    @property
    def world(self) -> int:
        return self.dp * self.tp * self.pp

    def check(self, shape: Shape) -> None:
        """Raise ValueError when ``shape`` cannot be split this way (heads, MLP, layers)."""
        problem = shape.tp_problem(self.tp)
        if problem:
            raise ValueError(problem)
        if shape.n_layer % (self.pp * self.chunks):
            raise ValueError(f"pp*chunks={self.pp * self.chunks} must divide n_layer ({shape.n_layer})")


def block_params_per_tp_rank(shape: Shape, tp: int) -> int:
    """One block's parameters on one tensor rank: matrices and column biases split, the rest kept.

    gpt2: two LayerNorms (4h) and the row-parallel output biases of attention and MLP (2h) are
    replicated; QKV (3h^2 + 3h), the output projection (h^2), the MLP (8h^2 + 4h) are split.
    llama: the RMSNorms are replicated, every matrix is split. moe: only attention is split.
    """
    replicated = shape.layer_replicated_params
    split = shape.params_per_layer - replicated
    return split // tp + replicated


def params_per_rank(shape: Shape, tp: int = 1, pp: int = 1, stage: int = 0, ep: int = 1) -> int:
    """Parameters one tensor rank of pipeline ``stage`` holds (before ZeRO sharding over dp).

    Blocks are split evenly over stages; the embeddings (and positions) sit on the first
    stage, the final norm and the output layer (an untied one, or a copy of the tied
    embedding) on the last; under expert parallelism a rank holds 1/``ep`` of the routed experts.
    Equal to ``shape.params_total`` for tp = pp = ep = 1.
    """
    if not 0 <= stage < pp:
        raise ValueError(f"stage {stage} is outside 0..{pp - 1}")
    n = (shape.n_layer // pp) * block_params_per_tp_rank(shape, tp)
    if pp == 1:  # every block, exactly (an MoE's dense first blocks are smaller than its largest)
        n -= shape.n_layer * shape.params_per_layer - shape.blocks_params()
    n -= shape.family_spec.routed_expert_params(shape) * (ep - 1) // ep
    if stage == 0:
        n += shape.params_input_embedding
    if stage == pp - 1:
        n += shape.params_final_norm + shape.params_output
        if pp > 1 and shape.tied:
            n += shape.vocab_size * shape.d_model  # the output layer's copy of the tied embedding
    return n


def own_expert_params(shape: Shape, ep: int = 1) -> int:
    """The routed experts one rank holds under expert parallelism over ``ep`` ranks, kept out of data
    parallelism (no all-reduce, no ZeRO sharding: ``ep`` shards them); none at ``ep`` = 1."""
    return shape.family_spec.routed_expert_params(shape) // ep if ep > 1 else 0


def data_parallel_params(shape: Shape, tp: int = 1, pp: int = 1, stage: int = 0, ep: int = 1) -> tuple[int, int]:
    """(parameters, of them those gathered in FP32) that data parallelism synchronizes or shards on
    one rank: :func:`params_per_rank` without :func:`own_expert_params`; the FP32 ones are what
    :func:`cast_params_per_rank` leaves out (norms, embeddings)."""
    own = own_expert_params(shape, ep)
    params = params_per_rank(shape, tp, pp, stage, ep) - own
    cast = cast_params_per_rank(shape, tp, pp, stage) - (shape.family_spec.routed_expert_params(shape) if own else 0)
    return params, params - cast


def cast_params_per_rank(shape: Shape, tp: int = 1, pp: int = 1, stage: int = 0) -> int:
    """Of :func:`params_per_rank`, those FSDP2 gathers in the compute dtype: the linear layers,
    weights and biases, which autocast casts: the blocks' and an untied output layer.

    The rest (norms, embeddings, a tied output layer, which is the token embedding) FSDP2
    gathers in FP32 (:func:`scaling.trainer.parallel.data_parallel.shard_as_autocast`).
    """
    if not 0 <= stage < pp:
        raise ValueError(f"stage {stage} is outside 0..{pp - 1}")
    n = (shape.n_layer // pp) * (block_params_per_tp_rank(shape, tp) - shape.layer_norm_params)
    if pp == 1:  # every block, exactly (an MoE's dense first blocks are smaller than its largest)
        n -= shape.n_layer * shape.params_per_layer - shape.blocks_params()
    if stage == pp - 1 and not shape.tied:
        n += shape.params_output
    return n


def gathered_bytes(params: int, kept: int, precision: Precision) -> float:
    """Bytes of ``params`` parameters as FSDP2 gathers them, ``kept`` of them (norms, embeddings) in FP32."""
    return float(gather_bytes(precision) * (params - kept) + 4 * kept)

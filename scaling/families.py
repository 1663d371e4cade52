"""The model families: one registered record each, the one place a family's facts are stated.

A :class:`Family` holds what the torch-free parts ask of a family: its fields and their defaults,
its checks, its parameter counts per block (total and active), the activation-memory terms of its
block, its tensor-parallel plan (as data: a style per linear layer), where its decoder is built
and how it is exported. The torch module that builds the decoder (``scaling.trainer.families.<name>``)
is named, never imported here, so the planner, the fits and the reports read the counts without torch;
:func:`scaling.trainer.families.common.family_module` imports it when a model is built.

Every other module asks ``FAMILIES[shape.family]``; no module outside this one and the families'
own modules branches on a family's name (a test reads the syntax trees). A shape (``scaling.accounting.Shape``)
is passed in as a :class:`ShapeLike`: this module is below the accounting and imports nothing of the project.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Protocol

#: Llama's SwiGLU hidden width is rounded up to a multiple of this (Meta's ``multiple_of``).
FFN_MULTIPLE = 256

#: How an MoE router turns its logits into scores: ``softmax`` over the experts (Mixtral, Qwen-MoE)
#: or ``sigmoid`` per expert (DeepSeek-V3); the top-k scores are renormalized to sum to 1.
ROUTERS: tuple[str, ...] = ("softmax", "sigmoid")
#: How an MoE's load is balanced: ``aux_loss`` (Switch/GShard: coefficient x E x sum_i f_i P_i) or
#: ``bias`` (DeepSeek-V3: a per-expert bias on the selection scores, nudged after every step
#: toward the under-loaded experts, with no auxiliary loss).
BALANCES: tuple[str, ...] = ("aux_loss", "bias")


def llama_ffn(d_model: int, multiple_of: int = FFN_MULTIPLE) -> int:
    """Llama's (and torchtitan's) default SwiGLU width: int(2 * 4d / 3) rounded up to a multiple of
    ``multiple_of``, which keeps the parameters of a 4d GELU MLP (11,008 at d = 4,096)."""
    hidden = int(2 * (4 * d_model) / 3)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


#: The family fields that are not the parametrization's, with the defaults every family's
#: :class:`scaling.accounting.ModelFamily` starts from (None: resolved by the family).
FIELD_DEFAULTS: dict[str, object] = {
    "n_kv_head": None, "ffn": None, "tie_embeddings": None, "qk_norm": False, "rope_theta": 10000.0,
    "norm_eps": 1e-5,
    "n_experts": None, "top_k": None, "expert_ffn": None, "n_shared_experts": 0, "n_dense_layers": 0,
    "router": "softmax", "balance": "aux_loss", "aux_loss": 0.01, "router_z_loss": 0.0, "bias_rate": 1e-3,
}
LLAMA_FIELDS: tuple[str, ...] = ("n_kv_head", "ffn", "tie_embeddings", "qk_norm", "rope_theta", "norm_eps")
MOE_FIELDS: tuple[str, ...] = ("n_experts", "top_k", "expert_ffn", "n_shared_experts", "n_dense_layers", "router",
                               "balance", "aux_loss", "router_z_loss", "bias_rate")


class ShapeLike(Protocol):
    """What a family reads of a shape (``scaling.accounting.Shape``, which imports this module)."""

    @property
    def family(self) -> str: ...
    @property
    def n_layer(self) -> int: ...
    @property
    def d_model(self) -> int: ...
    @property
    def n_head(self) -> int: ...
    @property
    def context(self) -> int: ...
    @property
    def ffn(self) -> int | None: ...
    @property
    def qk_norm(self) -> bool: ...
    @property
    def n_experts(self) -> int | None: ...
    @property
    def top_k(self) -> int | None: ...
    @property
    def expert_ffn(self) -> int | None: ...
    @property
    def n_shared_experts(self) -> int: ...
    @property
    def n_dense_layers(self) -> int: ...
    @property
    def router(self) -> str: ...
    @property
    def balance(self) -> str: ...
    @property
    def head_dim(self) -> int: ...
    @property
    def kv_heads(self) -> int: ...
    @property
    def hidden(self) -> int: ...


@dataclass(frozen=True)
class Family:
    """A decoder family: what every part of the platform asks of it, stated once.

    Subclasses override the counts; the base states the Llama-style block (attention with grouped
    key/value heads, a gated MLP, RMSNorms, no biases) so that a family of that kind changes only
    what differs. Methods take a resolved shape (``scaling.accounting.Shape``).
    """

    name: ClassVar[str]
    #: What it is, in one line (``scaling plan``, the docs).
    summary: ClassVar[str]
    #: The torch module that builds it (imported only when a model is built).
    module: ClassVar[str]
    #: The fields of :data:`FIELD_DEFAULTS` this family takes; the others keep their defaults.
    fields: ClassVar[tuple[str, ...]]
    #: Whether the z-loss (PaLM's (log Z)^2 on the logits) may be asked for.
    takes_z_loss: ClassVar[bool] = True
    #: Normalization (``layernorm``: weight and bias, mean and variance; ``rmsnorm``: weight only).
    norm: ClassVar[str] = "rmsnorm"
    #: Whether positions are rotary (RoPE angles in FP32 per block) rather than learned.
    rope: ClassVar[bool] = True
    #: Weight matrices of the dense MLP (2: up and down; 3: SwiGLU's gate, up and down).
    mlp_matrices: ClassVar[int] = 3
    #: The projections into the residual stream (block-relative), whose init is scaled by 1/sqrt(2 L).
    residual_projections: ClassVar[tuple[str, ...]] = ("attn.o", "mlp.down")
    #: Tensor parallelism: each block's linear layers by block-relative name, ``colwise`` or ``rowwise``.
    tp_plan: ClassVar[dict[str, str]] = {
        "attn.q": "colwise", "attn.k": "colwise", "attn.v": "colwise", "attn.o": "rowwise",
        "mlp.gate": "colwise", "mlp.up": "colwise", "mlp.down": "rowwise",
    }
    #: What the MLP's width is called in messages.
    ffn_name: ClassVar[str] = "ffn"
    #: Whether the family has a pipeline split (its blocks are alike and carry no side outputs).
    pipelines: ClassVar[bool] = True
    #: Whether its tokens are routed: the torch module's ``RouterStats`` adds the router's loss and
    #: records the experts' load.
    routed: ClassVar[bool] = False

    # -- fields ---------------------------------------------------------------------------
    def defaults(self, shape: ShapeLike) -> dict[str, object]:
        """The resolved values of the None fields of ``shape`` (by its sizes)."""
        return {"n_kv_head": shape.n_head, "ffn": llama_ffn(shape.d_model), "tie_embeddings": False}

    def fixed(self, shape: ShapeLike) -> dict[str, object]:
        """Values the fields this family does not take must keep (their defaults)."""
        return {name: FIELD_DEFAULTS[name] for name in FIELD_DEFAULTS if name not in self.fields}

    def problem(self, shape: ShapeLike) -> str | None:
        """Why ``shape``'s family fields make no decoder of this family (after :meth:`defaults`), or None."""
        if shape.head_dim % 2:
            return f"RoPE needs an even head size, got d_model/n_head = {shape.head_dim}"
        return None

    def keyed_fields(self, shape: ShapeLike) -> dict[str, object]:
        """The fields that differ from this family's defaults, with the family's name: what a
        spec serializes and its key hashes (a field at its default is left out, so stating it
        changes no key)."""
        resolved = {**FIELD_DEFAULTS, **self.defaults(shape)}
        out: dict[str, object] = {"family": self.name}
        for name in self.fields:
            value = getattr(shape, name)
            if value != resolved[name]:
                out[name] = value
        return out

    def label(self, shape: ShapeLike) -> str:
        """What ``scaling plan`` adds to ``LxD/Hh``."""
        kv = f"/{shape.kv_heads}kv" if shape.kv_heads != shape.n_head else ""
        return f"{kv} {self.name} ffn {shape.hidden}"

    # -- parameters -----------------------------------------------------------------------
    def attention_params(self, shape: ShapeLike) -> int:
        d = shape.d_model
        return 2 * d * d + 2 * d * shape.kv_heads * shape.head_dim

    def mlp_params(self, shape: ShapeLike) -> int:
        return self.mlp_matrices * shape.d_model * shape.hidden

    def layer_matmul_params(self, shape: ShapeLike) -> int:
        """The weight matrices of the largest block: attention's and the MLP's (all experts)."""
        return self.attention_params(shape) + self.mlp_params(shape)

    def layer_active_matmul_params(self, shape: ShapeLike) -> int:
        """The weight matrices a token multiplies by in the largest block."""
        return self.layer_matmul_params(shape)

    def blocks_matmul_params(self, shape: ShapeLike, active: bool = False) -> int:
        """Every block's weight matrices (those a token uses, when ``active``)."""
        per = self.layer_active_matmul_params(shape) if active else self.layer_matmul_params(shape)
        return shape.n_layer * per

    def layer_vector_params(self, shape: ShapeLike) -> int:
        """One block's parameters that are not matrices: norms (and biases)."""
        return 2 * shape.d_model + (2 * shape.head_dim if shape.qk_norm else 0)

    def layer_norm_params(self, shape: ShapeLike) -> int:
        """One block's norm parameters (autocast computes with them in FP32)."""
        return self.layer_vector_params(shape)

    def layer_replicated_params(self, shape: ShapeLike) -> int:
        """One block's parameters every tensor-parallel rank holds whole."""
        return self.layer_vector_params(shape)

    def final_norm_params(self, shape: ShapeLike) -> int:
        return shape.d_model

    def position_params(self, shape: ShapeLike) -> int:
        return 0

    def routed_expert_params(self, shape: ShapeLike) -> int:
        """Every block's routed experts (what expert parallelism shards; none in a dense family)."""
        return 0

    def tp_problem(self, shape: ShapeLike, tp: int) -> str | None:
        """Why this family's block cannot be split over ``tp`` tensor ranks beyond the heads, or None."""
        if shape.hidden % tp:
            return f"tp={tp} does not divide {self.ffn_name} ({shape.hidden})"
        return None

    # -- activations ----------------------------------------------------------------------
    def mlp_activation_values(self, shape: ShapeLike) -> float:
        """Values per token the MLP keeps for backward, in the compute dtype (split over tensor
        ranks): the gate, SiLU, up and their product (4 ffn)."""
        return 4.0 * shape.hidden


@dataclass(frozen=True)
class GPT2(Family):
    """Learned positions, LayerNorm, a GELU MLP of 4 d_model, biases everywhere, tied embeddings."""

    name: ClassVar[str] = "gpt2"
    summary: ClassVar[str] = "learned positions, LayerNorm, GELU MLP of 4 d_model, biases, tied embeddings"
    module: ClassVar[str] = "scaling.trainer.families.gpt2"
    fields: ClassVar[tuple[str, ...]] = ()
    takes_z_loss: ClassVar[bool] = False
    norm: ClassVar[str] = "layernorm"
    rope: ClassVar[bool] = False
    mlp_matrices: ClassVar[int] = 2
    residual_projections: ClassVar[tuple[str, ...]] = ("attn.proj", "mlp.proj")
    tp_plan: ClassVar[dict[str, str]] = {
        "attn.qkv": "colwise", "attn.proj": "rowwise", "mlp.fc": "colwise", "mlp.proj": "rowwise",
    }
    ffn_name: ClassVar[str] = "4*d_model"

    def defaults(self, shape: ShapeLike) -> dict[str, object]:
        return {"n_kv_head": shape.n_head, "ffn": 4 * shape.d_model, "tie_embeddings": True}

    def fixed(self, shape: ShapeLike) -> dict[str, object]:
        return {**super().fixed(shape), **self.defaults(shape)}

    def problem(self, shape: ShapeLike) -> str | None:
        return None

    def keyed_fields(self, shape: ShapeLike) -> dict[str, object]:
        return {}  # a gpt2 spec serializes as before families existed

    def label(self, shape: ShapeLike) -> str:
        return ""

    def layer_vector_params(self, shape: ShapeLike) -> int:
        return 13 * shape.d_model  # two LayerNorms (4d), biases of QKV (3d), out-proj (d), MLP (4d + d)

    def layer_norm_params(self, shape: ShapeLike) -> int:
        return 4 * shape.d_model

    def layer_replicated_params(self, shape: ShapeLike) -> int:
        return 4 * shape.d_model + 2 * shape.d_model  # the norms and the row-parallel output biases

    def final_norm_params(self, shape: ShapeLike) -> int:
        return 2 * shape.d_model

    def position_params(self, shape: ShapeLike) -> int:
        return shape.context * shape.d_model

    def mlp_activation_values(self, shape: ShapeLike) -> float:
        return 2.0 * shape.hidden  # the first matrix's output and GELU's


@dataclass(frozen=True)
class Llama(Family):
    """RoPE, RMSNorm, a SwiGLU MLP, grouped-query attention, no biases, untied embeddings."""

    name: ClassVar[str] = "llama"
    summary: ClassVar[str] = "RoPE, RMSNorm, SwiGLU MLP, grouped-query attention, no biases"
    module: ClassVar[str] = "scaling.trainer.families.llama"
    fields: ClassVar[tuple[str, ...]] = LLAMA_FIELDS


@dataclass(frozen=True)
class MoE(Family):
    """The Llama block with a routed mixture of SwiGLU experts in place of the MLP (Mixtral,
    DeepSeek-MoE, Qwen-MoE, OLMoE): ``n_experts`` experts of ``expert_ffn`` hidden units, each
    token sent to ``top_k`` of them, ``n_shared_experts`` experts every token uses, and the first
    ``n_dense_layers`` blocks dense (a SwiGLU of ``ffn``). A token uses the router, its top-k and
    the shared experts: the *active* parameters, which the laws' N counts."""

    name: ClassVar[str] = "moe"
    summary: ClassVar[str] = "the llama block with routed SwiGLU experts (top-k, shared experts, dense first layers)"
    module: ClassVar[str] = "scaling.trainer.families.moe"
    fields: ClassVar[tuple[str, ...]] = (*LLAMA_FIELDS, *MOE_FIELDS)
    pipelines: ClassVar[bool] = False
    routed: ClassVar[bool] = True
    residual_projections: ClassVar[tuple[str, ...]] = ("attn.o", "mlp.down", "mlp.experts.down", "mlp.shared.down")
    tp_plan: ClassVar[dict[str, str]] = {
        "attn.q": "colwise", "attn.k": "colwise", "attn.v": "colwise", "attn.o": "rowwise",
    }

    def defaults(self, shape: ShapeLike) -> dict[str, object]:
        ffn = shape.ffn if shape.ffn is not None else llama_ffn(shape.d_model)
        return {**super().defaults(shape), "n_experts": 8, "top_k": 2, "expert_ffn": ffn}

    def problem(self, shape: ShapeLike) -> str | None:
        problem = super().problem(shape)
        if problem:
            return problem
        if shape.n_experts < 2:
            return f"n_experts must be at least 2, got {shape.n_experts}"
        if not 1 <= shape.top_k <= shape.n_experts:
            return f"top_k must be between 1 and n_experts ({shape.n_experts}), got {shape.top_k}"
        if shape.expert_ffn < 1:
            return f"expert_ffn must be positive, got {shape.expert_ffn}"
        if shape.n_shared_experts < 0:
            return f"n_shared_experts must be 0 or more, got {shape.n_shared_experts}"
        if not 0 <= shape.n_dense_layers < shape.n_layer:
            return f"n_dense_layers must be between 0 and n_layer - 1 ({shape.n_layer - 1}), got {shape.n_dense_layers}"
        if shape.router not in ROUTERS:
            return f"router must be one of {', '.join(ROUTERS)}, got {shape.router!r}"
        if shape.balance not in BALANCES:
            return f"balance must be one of {', '.join(BALANCES)}, got {shape.balance!r}"
        for name in ("aux_loss", "router_z_loss", "bias_rate"):
            value = getattr(shape, name)
            if not (0 <= value <= 1 and math.isfinite(value)):
                return f"{name} must be between 0 and 1, got {value}"
        return None

    def label(self, shape: ShapeLike) -> str:
        kv = f"/{shape.kv_heads}kv" if shape.kv_heads != shape.n_head else ""
        shared = f"+{shape.n_shared_experts}s" if shape.n_shared_experts else ""
        dense = f" dense {shape.n_dense_layers}" if shape.n_dense_layers else ""
        return f"{kv} moe {shape.n_experts}{shared}x{shape.expert_ffn} top{shape.top_k}{dense}"

    def router_params(self, shape: ShapeLike) -> int:
        return shape.d_model * shape.n_experts

    def expert_params(self, shape: ShapeLike) -> int:
        return 3 * shape.d_model * shape.expert_ffn

    def moe_mlp_params(self, shape: ShapeLike, active: bool) -> int:
        experts = (shape.top_k if active else shape.n_experts) + shape.n_shared_experts
        return self.router_params(shape) + experts * self.expert_params(shape)

    def layer_matmul_params(self, shape: ShapeLike) -> int:
        return self.attention_params(shape) + self.moe_mlp_params(shape, active=False)

    def layer_active_matmul_params(self, shape: ShapeLike) -> int:
        return self.attention_params(shape) + self.moe_mlp_params(shape, active=True)

    def blocks_matmul_params(self, shape: ShapeLike, active: bool = False) -> int:
        dense = shape.n_dense_layers * (self.attention_params(shape) + self.mlp_params(shape))
        moe = (shape.n_layer - shape.n_dense_layers) * (
            self.layer_active_matmul_params(shape) if active else self.layer_matmul_params(shape))
        return dense + moe

    def routed_expert_params(self, shape: ShapeLike) -> int:
        return (shape.n_layer - shape.n_dense_layers) * shape.n_experts * self.expert_params(shape)

    def layer_replicated_params(self, shape: ShapeLike) -> int:
        """The norms and the whole MLP: only attention is split over tensor ranks."""
        return self.layer_vector_params(shape) + self.moe_mlp_params(shape, active=False)

    def tp_problem(self, shape: ShapeLike, tp: int) -> str | None:
        return None  # the experts are not split over tensor ranks (only attention is)

    def mlp_activation_values(self, shape: ShapeLike) -> float:
        """Per token: the router's FP32 logits and scores (4 E values of the compute dtype's
        size at 16 bits), the gate, SiLU, up and product of each of its top-k and shared experts
        (4 expert_ffn each), and of each routed copy its input cast for gate and up and its
        weighted output (3 d_model); the dense layers' MLP is smaller or equal under the usual shapes."""
        experts = shape.top_k + shape.n_shared_experts
        return 4.0 * shape.n_experts + 4.0 * experts * shape.expert_ffn + 3.0 * shape.top_k * shape.d_model


#: The registry: every family by name.
FAMILIES: dict[str, Family] = {family.name: family for family in (GPT2(), Llama(), MoE())}


def family(name: str) -> Family:
    """The family called ``name`` (ValueError naming the known ones otherwise)."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(f"unknown family {name!r} (use one of {', '.join(FAMILIES)})") from None


def owners(field: str) -> list[str]:
    """The families that take ``field``."""
    return [name for name, fam in FAMILIES.items() if field in fam.fields]

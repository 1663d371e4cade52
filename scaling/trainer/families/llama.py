"""A Llama-style decoder: architecture only.

Pre-RMSNorm blocks, rotary positions (RoPE, Su et al. 2021) on queries and keys, grouped-query
attention (``n_kv_head`` key/value heads, each shared by ``n_head / n_kv_head`` query heads), a
SwiGLU MLP (Shazeer 2020) of ``ffn`` hidden units, no biases, and an output layer of its own
unless ``tie_embeddings``; with ``qk_norm`` each query and key head is RMS-normalized before
RoPE (as OLMo 2 and Qwen 3 do). Exactly the model ``scaling.accounting.Shape`` counts for
family ``llama`` (``scaling.families.Llama``). The loss (and its z-loss) lives in the loop: the
model returns logits.

Its export is a ``LlamaForCausalLM``, with ``qk_norm`` a ``Qwen3ForCausalLM`` (the same decoder
with exactly that norm); the layouts need nothing but names: our RoPE rotates the two halves of
each head (``rotate_half``) as Hugging Face's does, so the query and key rows keep their order.

RoPE rotates the two halves of each head (``rotate_half``, the GPT-NeoX and Hugging Face layout).
Its cos and sin tables are computed in FP32 from the positions alone, once per sequence length,
device and dtype (:func:`rope_tables`; no buffer, so a model built on the meta device needs nothing
but its parameters materialized), and applied in the dtype of q and k, as Hugging Face's Llama
does: under autocast the queries and keys are 16-bit matmul outputs already.

The projections that read one norm output (q, k and v; gate and up) run under autocast as one
matrix product (:func:`fused_projections`; in FP32 q, k and v still do, gate and up one by one;
under tensor parallelism all one by one), so autocast casts that output once; their parameters stay
separate (checkpoints and the Hugging Face export see the same layout). On the CPU in FP32 RMSNorm
and RoPE run as autograd functions with their backward written out (:func:`rms_norm`,
:func:`apply_rope`): fewer passes over the activations than torch's composite operations.

Tensor parallelism splits q, k, v and the SwiGLU gate and up projections by columns (whole heads
per rank) and o and down by rows; the forward pass takes its numbers of heads from the widths it
is given, so the same code runs on one process and on a tensor rank.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from scaling.accounting import Shape
from scaling.trainer.families.attention import causal_attention
from scaling.trainer.families.common import DecoderBase

if TYPE_CHECKING:
    from scaling.trainer.families.model import Decoder


#: How many (length, head width, theta, device, dtype) tables :func:`rope_tables` keeps.
ROPE_TABLES_KEPT = 8
_rope_tables: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}


def rope_angles(t: int, head_dim: int, theta: float, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of RoPE's angles for positions 0..t-1, (t, head_dim), in FP32."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(t, device=device, dtype=torch.float32), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def rope_tables(t: int, head_dim: int, theta: float, device: torch.device,
                dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and the signed sin of :func:`rope_angles` in ``dtype``: the sin's first half negated, so
    that rotating is ``x * cos + swap_halves(x) * sin``. Computed once per key and kept (every layer
    and step of a run asks for the same few); computed afresh while ``torch.compile`` traces, which
    fuses it into the graph."""
    key = (t, head_dim, theta, device, dtype)
    found = None if torch.compiler.is_compiling() else _rope_tables.get(key)
    if found is not None:
        return found
    cos, sin = rope_angles(t, head_dim, theta, device)
    half = head_dim // 2
    sin = torch.cat((-sin[:, :half], sin[:, half:]), dim=-1)
    found = (cos.to(dtype), sin.to(dtype))
    if not torch.compiler.is_compiling():
        if len(_rope_tables) >= ROPE_TABLES_KEPT:
            _rope_tables.pop(next(iter(_rope_tables)))
        _rope_tables[key] = found
    return found


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, transposed: bool = False) -> torch.Tensor:
    """``x * cos + swap_halves(x) * sin`` in three passes and one new tensor (the composite takes
    four of each); ``transposed``: by the rotation's transpose (each half takes the other's sine)."""
    half = x.size(-1) // 2
    first, second = sin[..., :half], sin[..., half:]
    if transposed:
        first, second = second, first
    out = x * cos
    out[..., :half].addcmul_(x[..., half:], first)
    out[..., half:].addcmul_(x[..., :half], second)
    return out


class _Rope(torch.autograd.Function):
    """RoPE's rotation with its backward the transposed rotation (it keeps only the tables)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(cos, sin)
        return _rotate(x, cos, sin)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        cos, sin = ctx.saved_tensors
        return _rotate(grad, cos, sin, transposed=True), None, None


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (B, h, T, hs) ``x`` by :func:`rope_tables`' cos and signed sin (half-split layout), in x's dtype."""
    return _Rope.apply(x, cos, sin)


class _CpuRMSNorm(torch.autograd.Function):
    """RMSNorm with its backward written out: ``x * rstd * w``, keeping for backward the normalized
    input and 1/rms (what CUDA's fused kernel keeps in bytes) instead of the composite's input,
    normalized input and intermediates; the gradient in four passes over x instead of about ten."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        rstd = torch.rsqrt(x.square().mean(-1, keepdim=True).add_(eps))
        normed = x * rstd
        ctx.save_for_backward(normed, rstd, weight)
        return normed * weight

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        normed, rstd, weight = ctx.saved_tensors
        grad_weight = (grad * normed).flatten(0, -2).sum(0) if ctx.needs_input_grad[1] else None
        grad_normed = grad * weight
        grad_x = grad_normed.sub_(normed * (grad_normed * normed).mean(-1, keepdim=True)).mul_(rstd)
        return grad_x, grad_weight, None


def rms_norm(x: torch.Tensor, norm: nn.RMSNorm, weight: torch.Tensor | None = None) -> torch.Tensor:
    """``norm`` applied to ``x`` (with ``weight`` in place of its own): on the CPU in FP32 by
    :class:`_CpuRMSNorm`; elsewhere, under ``torch.compile`` and for tensor-parallel (DTensor)
    weights by ``F.rms_norm`` (CUDA's is one fused kernel)."""
    from torch.distributed.tensor import DTensor

    weight = norm.weight if weight is None else weight
    eps = torch.finfo(x.dtype).eps if norm.eps is None else norm.eps
    if (x.device.type != "cpu" or x.dtype != torch.float32 or weight is None or weight.dtype != torch.float32
            or len(norm.normalized_shape) != 1 or isinstance(weight, DTensor) or torch.compiler.is_compiling()):
        return F.rms_norm(x, norm.normalized_shape, weight, norm.eps)
    return _CpuRMSNorm.apply(x, weight, eps)


class RMSNorm(nn.RMSNorm):
    """``nn.RMSNorm`` through :func:`rms_norm` (the same parameters and state dict)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self)


def autocast_casts(weights: list[torch.Tensor], device: str) -> bool:
    """Whether autocast would cast these weights to its dtype (it is on, and they are not in it yet)."""
    return torch.is_autocast_enabled(device) and all(w.dtype != torch.get_autocast_dtype(device) for w in weights)


class JoinedLinear(torch.autograd.Function):
    """``x @ cat(weights).T`` keeping only ``x`` and the weights themselves for backward (the joined
    matrix is made again there), so joining costs no copy of the weights between forward and backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, *weights: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, *weights)
        return F.linear(x, torch.cat(weights))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x, *weights = ctx.saved_tensors
        grad_x = grad @ torch.cat(weights)
        grad_w = grad.reshape(-1, grad.size(-1)).T @ x.reshape(-1, x.size(-1))
        return (grad_x, *grad_w.split([w.size(0) for w in weights]))


def fused_projections(x: torch.Tensor, layers: list[nn.Linear], join_fp32: bool = False) -> list[torch.Tensor]:
    """``[layer(x) for layer in layers]`` (bias-free linear layers), under autocast as one matrix
    product of the joined weights: one cast of ``x``, kept for backward, instead of one per layer.
    Where autocast would cast the weights, they are cast as it would and joined, and the joined
    16-bit copy kept for backward replaces autocast's copies byte for byte; where they are in its
    dtype already (FSDP2 gathers them so) :class:`JoinedLinear` keeps the weights themselves. In
    FP32 there is no cast to save: with ``join_fp32`` (attention's q, k and v: one wider product
    and one gradient for ``x`` instead of three summed, measured faster on the CPU) the weights are
    joined by :class:`JoinedLinear` (no joined copy kept for backward), else the layers run one by one
    (SwiGLU's gate and up: joined, the step measured no faster on the CPU, SiLU then reading a
    strided view); tensor-parallel layers always do (DTensor weights, with their own input and
    output hooks)."""
    from torch.distributed.tensor import DTensor

    weights = [layer.weight for layer in layers]
    device = x.device.type
    if any(isinstance(w, DTensor) for w in weights):
        return [layer(x) for layer in layers]
    rows = [w.size(0) for w in weights]
    if not torch.is_autocast_enabled(device):
        if join_fp32 and all(w.dtype == x.dtype for w in weights):
            return list(JoinedLinear.apply(x, *weights).split(rows, dim=-1))
        return [layer(x) for layer in layers]
    if autocast_casts(weights, device):
        dtype = torch.get_autocast_dtype(device)
        return list(F.linear(x, torch.cat([w.to(dtype) for w in weights])).split(rows, dim=-1))
    if x.dtype != weights[0].dtype:  # under autocast with weights in its dtype: x cast once
        x = x.to(weights[0].dtype)
    return list(JoinedLinear.apply(x, *weights).split(rows, dim=-1))


class SumGradOver(torch.autograd.Function):
    """Identity forward; the gradient summed over ``group`` in backward (Megatron's "copy to the
    tensor-parallel region"). The qk-norm weights are replicated on every tensor rank but each
    rank normalizes only its own heads, so each holds part of their gradient."""

    @staticmethod
    def forward(ctx: Any, weight: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group = group
        return weight.view_as(weight)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class HeadNorm(nn.RMSNorm):
    """RMSNorm of each query or key head, in FP32 (under autocast q and k arrive in 16 bits, the
    weight in 32), back in the input's dtype. Called as a module, so FSDP2's hooks see it run.
    ``tp_group``: see :class:`SumGradOver` (set by ``scaling.trainer.parallel.tensor_parallel``)."""

    tp_group: Any = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight
        if self.tp_group is not None:
            weight = SumGradOver.apply(weight, self.tp_group)
        # FP32 and contiguous: what it keeps for backward is its own copy, not a view that would keep
        # the whole joined q, k, v product alive
        xf = x.float().contiguous()
        return rms_norm(xf, self, weight.float()).to(x.dtype)


class Attention(nn.Module):
    """Causal self-attention with RoPE and grouped-query heads; separate q, k, v and o matrices.

    Under tensor parallelism its qk-norms sum their weights' gradients over the tensor group (:class:`HeadNorm`)."""

    def __init__(self, cfg: Shape) -> None:
        super().__init__()
        self.head_dim = cfg.head_dim
        self.scale = cfg.attention_scale
        self.theta = cfg.rope_theta
        kv_width = cfg.kv_heads * cfg.head_dim
        self.q = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.k = nn.Linear(cfg.d_model, kv_width, bias=False)
        self.v = nn.Linear(cfg.d_model, kv_width, bias=False)
        self.o = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.q_norm = HeadNorm(cfg.head_dim, eps=cfg.norm_eps) if cfg.qk_norm else None
        self.k_norm = HeadNorm(cfg.head_dim, eps=cfg.norm_eps) if cfg.qk_norm else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        hs = self.head_dim
        projected = fused_projections(x, [self.q, self.k, self.v], join_fp32=True)
        q, k, v = (y.view(b, t, -1, hs) for y in projected)  # local heads under TP
        v = v.contiguous()  # attention keeps v: a view would keep q's and k's part of a joined product too
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        cos, sin = rope_tables(t, hs, self.theta, x.device, q.dtype)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        y = causal_attention(q, k, v, self.scale)
        return self.o(y.transpose(1, 2).reshape(b, t, -1))


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: Shape) -> None:
        super().__init__()
        self.gate = nn.Linear(cfg.d_model, cfg.hidden, bias=False)
        self.up = nn.Linear(cfg.d_model, cfg.hidden, bias=False)
        self.down = nn.Linear(cfg.hidden, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = fused_projections(x, [self.gate, self.up])
        return self.down(F.silu(gate) * up)


class Block(nn.Module):
    """Pre-norm attention and MLP; ``mlp`` builds the MLP (a SwiGLU; an MoE family's experts)."""

    def __init__(self, cfg: Shape, mlp: Callable[[Shape], nn.Module] = SwiGLU) -> None:
        super().__init__()
        self.ln_1 = RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.attn = Attention(cfg)
        self.ln_2 = RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.mlp = mlp(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Llama(DecoderBase):
    """The decoder. ``forward(idx)`` maps (B, T) token ids to (B, T, vocab) logits.

    Its parts carry the GPT's names (``wte``, ``blocks``, ``ln_f``, ``lm_head``), so pipeline
    stages, sharding and checkpoints treat both families alike; there is no ``wpe``.
    """

    family = "llama"

    def __init__(self, cfg: Shape) -> None:
        super().__init__(cfg)
        self.blocks = nn.ModuleList(self.make_block(cfg, i) for i in range(cfg.n_layer))
        self.ln_f = RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tied:
            self.lm_head.weight = self.wte.weight

    def make_block(self, cfg: Shape, index: int) -> nn.Module:
        """Block ``index`` (a family built on this one chooses its MLP per block)."""
        return Block(cfg)


#: The decoder this family builds.
MODEL = Llama


def llama_config(shape: Shape) -> dict[str, Any]:
    """``LlamaConfig``'s fields for a ``llama`` ``shape`` (``Qwen3Config``'s with ``qk_norm``)."""
    config: dict[str, Any] = {
        "vocab_size": shape.vocab_size,
        "hidden_size": shape.d_model,
        "intermediate_size": shape.hidden,
        "num_hidden_layers": shape.n_layer,
        "num_attention_heads": shape.n_head,
        "num_key_value_heads": shape.kv_heads,
        "head_dim": shape.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": shape.context,
        "rms_norm_eps": shape.norm_eps,
        "rope_parameters": {"rope_type": "default", "rope_theta": shape.rope_theta},
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": shape.tied,
        # Llama's own ids (1, 2) name no token of our vocabularies
        "bos_token_id": None,
        "eos_token_id": None,
        "pad_token_id": None,
    }
    if shape.qk_norm:
        config.update(use_sliding_window=False)
    else:
        config.update(mlp_bias=False, pretraining_tp=1)
    return config


#: Our attention's names under Hugging Face's Llama (and Qwen3, Mixtral, Qwen3-MoE) layer.
HF_ATTENTION_NAMES: dict[str, str] = {
    "attn.q": "self_attn.q_proj", "attn.k": "self_attn.k_proj", "attn.v": "self_attn.v_proj",
    "attn.o": "self_attn.o_proj", "ln_1": "input_layernorm", "ln_2": "post_attention_layernorm",
}
#: The dense SwiGLU's names under Hugging Face's.
HF_MLP_NAMES: dict[str, str] = {"mlp.gate": "mlp.gate_proj", "mlp.up": "mlp.up_proj", "mlp.down": "mlp.down_proj"}
#: The qk-norms' names (Qwen3's).
HF_QK_NORM_NAMES: dict[str, str] = {"attn.q_norm": "self_attn.q_norm", "attn.k_norm": "self_attn.k_norm"}


def hf_outer_state_dict(ours: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The embedding, final norm and output layer under Hugging Face's decoder names."""
    return {"model.embed_tokens.weight": ours["wte.weight"], "model.norm.weight": ours["ln_f.weight"],
            "lm_head.weight": ours["lm_head.weight"]}  # the embedding itself when tied


def llama_state_dict(ours: Mapping[str, torch.Tensor], shape: Shape) -> dict[str, torch.Tensor]:
    """Our Llama's weights (names of :class:`Llama`) under ``LlamaForCausalLM``'s (and
    ``Qwen3ForCausalLM``'s) names; the layouts are the same (nn.Linear's, RoPE on halves)."""
    out = hf_outer_state_dict(ours)
    names = {**HF_ATTENTION_NAMES, **HF_MLP_NAMES, **(HF_QK_NORM_NAMES if shape.qk_norm else {})}
    for i in range(shape.n_layer):
        for src, dst in names.items():
            out[f"model.layers.{i}.{dst}.weight"] = ours[f"blocks.{i}.{src}.weight"]
    return out


def to_hf(model: "Decoder") -> Any:
    """A ``LlamaForCausalLM`` (``Qwen3ForCausalLM`` with qk-norm) with ``model``'s weights (fp32, eval mode)."""
    from scaling.trainer.export import require_transformers

    transformers = require_transformers()
    shape = model.cfg
    if shape.qk_norm:
        config, causal_lm = transformers.Qwen3Config(**llama_config(shape)), transformers.Qwen3ForCausalLM
    else:
        config, causal_lm = transformers.LlamaConfig(**llama_config(shape)), transformers.LlamaForCausalLM
    hf = causal_lm(config).float()
    hf.load_state_dict(llama_state_dict(model.state_dict(), shape), strict=True)
    if shape.tied:
        hf.tie_weights()
    return hf.eval()

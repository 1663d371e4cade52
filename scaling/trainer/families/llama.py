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
Its angles are computed in FP32 in every forward pass, from the positions alone: no buffer, so a
model built on the meta device needs nothing but its parameters materialized.

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


def rope_angles(t: int, head_dim: int, theta: float, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of RoPE's angles for positions 0..t-1, (t, head_dim), in FP32."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(t, device=device, dtype=torch.float32), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (B, h, T, hs) ``x`` by the angles (half-split layout), in FP32, back in x's dtype."""
    xf = x.float()
    half = xf.size(-1) // 2
    rotated = torch.cat((-xf[..., half:], xf[..., :half]), dim=-1)
    return (xf * cos + rotated * sin).to(x.dtype)


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


class Attention(nn.Module):
    """Causal self-attention with RoPE and grouped-query heads; separate q, k, v and o matrices.

    ``tp_group`` is the tensor-parallel group once the block is split (set by
    ``scaling.trainer.parallel.tensor_parallel``), over which the qk-norm weights' gradients are summed."""

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
        self.q_norm = nn.RMSNorm(cfg.head_dim, eps=cfg.norm_eps) if cfg.qk_norm else None
        self.k_norm = nn.RMSNorm(cfg.head_dim, eps=cfg.norm_eps) if cfg.qk_norm else None
        self.tp_group: Any = None

    def head_norm(self, norm: nn.RMSNorm, x: torch.Tensor) -> torch.Tensor:
        """RMSNorm of each head in FP32 (under autocast q and k arrive in 16 bits, the weight in 32)."""
        weight = norm.weight
        if self.tp_group is not None:
            weight = SumGradOver.apply(weight, self.tp_group)
        return F.rms_norm(x.float(), norm.normalized_shape, weight.float(), norm.eps).to(x.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        hs = self.head_dim
        q = self.q(x).view(b, t, -1, hs)  # local heads under tensor parallelism
        k = self.k(x).view(b, t, -1, hs)
        v = self.v(x).view(b, t, -1, hs)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.head_norm(self.q_norm, q), self.head_norm(self.k_norm, k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        cos, sin = rope_angles(t, hs, self.theta, x.device)
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
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    """Pre-norm attention and MLP; ``mlp`` builds the MLP (a SwiGLU; an MoE family's experts)."""

    def __init__(self, cfg: Shape, mlp: Callable[[Shape], nn.Module] = SwiGLU) -> None:
        super().__init__()
        self.ln_1 = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.attn = Attention(cfg)
        self.ln_2 = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
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
        self.ln_f = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
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

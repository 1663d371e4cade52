"""A Llama-style decoder: architecture only.

Pre-RMSNorm blocks, rotary positions (RoPE, Su et al. 2021) on queries and keys, grouped-query
attention (``n_kv_head`` key/value heads, each shared by ``n_head / n_kv_head`` query heads), a
SwiGLU MLP (Shazeer 2020) of ``ffn`` hidden units, no biases, and an output layer of its own
unless ``tie_embeddings``; with ``qk_norm`` each query and key head is RMS-normalized before
RoPE (as OLMo 2 and Qwen 3 do). Exactly the model ``scaling.accounting.Shape`` counts for
family ``llama``. The loss (and its z-loss) lives in the loop: the model returns logits.

RoPE rotates the two halves of each head (``rotate_half``, the GPT-NeoX and Hugging Face layout).
Its angles are computed in FP32 in every forward pass, from the positions alone: no buffer, so a
model built on the meta device needs nothing but its parameters materialized.

Tensor parallelism splits q, k, v and the SwiGLU gate and up projections by columns (whole heads
per rank) and o and down by rows; the forward pass takes its numbers of heads from the widths it
is given, so the same code runs on one process and on a tensor rank.
"""

from __future__ import annotations

from typing import Any, Iterable

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from scaling.accounting import Shape
from scaling.trainer.families.attention import causal_attention


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
    def __init__(self, cfg: Shape) -> None:
        super().__init__()
        self.ln_1 = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.attn = Attention(cfg)
        self.ln_2 = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.mlp = SwiGLU(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


def readout(lm_head: nn.Module, x: torch.Tensor, cfg: Shape) -> torch.Tensor:
    """The logits of either family's final hidden state ``x``; under μP its input times 1/m, as
    ``mup``'s ``MuReadout`` does (the output layer keeps its width-independent init and learning rate)."""
    if cfg.output_mult is not None:
        x = x * cfg.output_mult
    return lm_head(x)


def through_blocks(module: nn.Module, blocks: Iterable[nn.Module], x: torch.Tensor) -> torch.Tensor:
    """``x`` through ``blocks`` in order; while ``module`` trains with activation checkpointing on,
    each block's activations are recomputed in the backward pass instead of kept."""
    recompute = module.activation_checkpointing and module.training and torch.is_grad_enabled()
    for block in blocks:
        x = checkpoint(block, x, use_reentrant=False) if recompute else block(x)
    return x


class DecoderBase(nn.Module):
    """What the decoders of both families share: the check of the shape's family, the token
    embedding, the blocks (recomputed in the backward pass under activation checkpointing), the
    final norm and the readout. A subclass sets ``family`` and builds the rest of its parts after
    ``wte``, in the order :func:`scaling.trainer.families.model.init_ops` draws their initial values."""

    #: The family (``Shape.family``) the subclass builds.
    family: str
    blocks: nn.ModuleList
    ln_f: nn.Module
    lm_head: nn.Linear

    def __init__(self, cfg: Shape) -> None:
        super().__init__()
        if cfg.family != self.family:
            raise ValueError(f"{type(self).__name__} builds family {self.family!r}, not {cfg.family!r}")
        self.cfg = cfg
        #: Recompute each block in the backward pass (trades compute for activation memory).
        self.activation_checkpointing = False
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        """The blocks' input for token ids ``idx`` (B, T)."""
        return self.wte(idx)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.size(1)
        if t > self.cfg.context:
            raise ValueError(f"sequence of {t} tokens exceeds the context of {self.cfg.context}")
        x = through_blocks(self, self.blocks, self.embed(idx))
        return readout(self.lm_head, self.ln_f(x), self.cfg)


class Llama(DecoderBase):
    """The decoder. ``forward(idx)`` maps (B, T) token ids to (B, T, vocab) logits.

    Its parts carry the GPT's names (``wte``, ``blocks``, ``ln_f``, ``lm_head``), so pipeline
    stages, sharding and checkpoints treat both families alike; there is no ``wpe``.
    """

    #: The projections into the residual stream, whose init is scaled by 1/sqrt(2 n_layer).
    residual_projections: tuple[str, ...] = ("attn.o", "mlp.down")
    family = "llama"

    def __init__(self, cfg: Shape) -> None:
        super().__init__(cfg)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tied:
            self.lm_head.weight = self.wte.weight

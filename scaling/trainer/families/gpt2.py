"""The GPT-2 family's decoder and its Hugging Face export: architecture only.

Pre-LayerNorm blocks, learned absolute positions, a GELU MLP of 4*d_model, causal
self-attention and tied input/output embeddings, with biases everywhere, exactly the model
that ``scaling.families.GPT2`` counts. Precision, sharding, compilation and the loss live
elsewhere: the model returns logits.

Its export is a ``GPT2LMHeadModel``, whose layouts differ from ours and are converted: its
``Conv1D`` stores a weight as (in, out), ours (nn.Linear) as (out, in); its fused QKV holds all
queries, then all keys, then all values, ours interleaves them head by head.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from scaling.accounting import Shape
from scaling.trainer.families.attention import causal_attention
from scaling.trainer.families.common import DecoderBase

if TYPE_CHECKING:
    from scaling.trainer.families.model import Decoder


class CausalSelfAttention(nn.Module):
    """Causal self-attention with one fused QKV matrix whose output is laid out head by head.

    ``qkv``'s output features are ``[q_0 k_0 v_0 | q_1 k_1 v_1 | ...]`` (each ``head_dim`` wide),
    so any contiguous slice of them holds whole heads: tensor parallelism column-splits the
    matrix into ``n_head / tp`` heads per rank, and the forward pass takes its number of heads
    from the width it is given (all of them on one process, the local ones under tensor
    parallelism) instead of from the configuration.
    """

    def __init__(self, cfg: Shape) -> None:
        super().__init__()
        self.head_dim = cfg.d_model // cfg.n_head
        self.scale = cfg.attention_scale
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        qkv = self.qkv(x)
        heads = qkv.size(-1) // (3 * self.head_dim)  # local heads under tensor parallelism
        q, k, v = qkv.view(b, t, heads, 3, self.head_dim).unbind(dim=3)
        y = causal_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), self.scale)
        return self.proj(y.transpose(1, 2).reshape(b, t, heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, cfg: Shape) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.proj = nn.Linear(4 * cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # GPT-2 used the tanh approximation of GELU.
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg: Shape) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(DecoderBase):
    """The decoder. ``forward(idx)`` maps (B, T) token ids to (B, T, vocab) logits."""

    family = "gpt2"

    def __init__(self, cfg: Shape) -> None:
        super().__init__(cfg)
        self.wpe = nn.Embedding(cfg.context, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied (Press & Wolf 2017), as in GPT-2

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        """Token embeddings plus learned positions."""
        pos = torch.arange(idx.size(1), device=idx.device)
        return self.wte(idx) + self.wpe(pos)


#: The decoder this family builds.
MODEL = GPT


def gpt2_config(shape: Shape) -> dict[str, Any]:
    """``GPT2Config``'s fields for ``shape``: GPT-2 with our layer norm, activation and no dropout."""
    return {
        "vocab_size": shape.vocab_size,
        "n_positions": shape.context,
        "n_embd": shape.d_model,
        "n_layer": shape.n_layer,
        "n_head": shape.n_head,
        "n_inner": 4 * shape.d_model,
        "activation_function": "gelu_pytorch_tanh",  # F.gelu(approximate="tanh"), as ours
        "layer_norm_epsilon": 1e-5,  # nn.LayerNorm's default, which ours uses
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "tie_word_embeddings": True,
        # GPT-2's own ids (50256) name no token of our vocabularies
        "bos_token_id": None,
        "eos_token_id": None,
    }


def gpt2_state_dict(ours: Mapping[str, torch.Tensor], shape: Shape) -> dict[str, torch.Tensor]:
    """Our model's weights (names of :class:`GPT`) under ``GPT2LMHeadModel``'s names and layouts."""
    d, h = shape.d_model, shape.n_head
    hd = d // h

    def conv1d(w: torch.Tensor) -> torch.Tensor:  # nn.Linear's (out, in) -> Conv1D's (in, out)
        return w.t().contiguous()

    out = {
        "transformer.wte.weight": ours["wte.weight"],
        "transformer.wpe.weight": ours["wpe.weight"],
        "transformer.ln_f.weight": ours["ln_f.weight"],
        "transformer.ln_f.bias": ours["ln_f.bias"],
    }
    for i in range(shape.n_layer):
        src, dst = f"blocks.{i}.", f"transformer.h.{i}."
        # ours: output features [q_0 k_0 v_0 | q_1 k_1 v_1 | ...]; GPT-2's: [q_0 q_1 ... | k_0 ... | v_0 ...]
        qkv = ours[src + "attn.qkv.weight"].view(h, 3, hd, d).transpose(0, 1).reshape(3 * d, d)
        out[dst + "attn.c_attn.weight"] = conv1d(qkv)
        out[dst + "attn.c_attn.bias"] = ours[src + "attn.qkv.bias"].view(h, 3, hd).transpose(0, 1).reshape(3 * d).contiguous()
        out[dst + "attn.c_proj.weight"] = conv1d(ours[src + "attn.proj.weight"])
        out[dst + "attn.c_proj.bias"] = ours[src + "attn.proj.bias"]
        out[dst + "mlp.c_fc.weight"] = conv1d(ours[src + "mlp.fc.weight"])
        out[dst + "mlp.c_fc.bias"] = ours[src + "mlp.fc.bias"]
        out[dst + "mlp.c_proj.weight"] = conv1d(ours[src + "mlp.proj.weight"])
        out[dst + "mlp.c_proj.bias"] = ours[src + "mlp.proj.bias"]
        for norm in ("ln_1", "ln_2"):
            out[dst + f"{norm}.weight"] = ours[src + f"{norm}.weight"]
            out[dst + f"{norm}.bias"] = ours[src + f"{norm}.bias"]
    out["lm_head.weight"] = out["transformer.wte.weight"]  # tied
    return out


def to_hf(model: "Decoder") -> Any:
    """A ``GPT2LMHeadModel`` with ``model``'s weights (fp32, eval mode)."""
    from scaling.trainer.export import require_transformers

    transformers = require_transformers()
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(**gpt2_config(model.cfg)))
    hf.load_state_dict(gpt2_state_dict(model.state_dict(), model.cfg), strict=True)
    hf.tie_weights()
    return hf.eval()

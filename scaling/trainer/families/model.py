"""A GPT-2-style decoder, and the builders of both model families: architecture only.

Pre-LayerNorm blocks, learned absolute positions, a GELU MLP of 4*d_model, causal
self-attention and tied input/output embeddings, with biases everywhere, exactly the model
that ``scaling.accounting.Shape`` counts for family ``gpt2``. Precision, sharding, compilation
and the loss live elsewhere (``loop.py`` / ``parallel.py``): the model returns logits.

:func:`build_model`, :func:`build_meta_model`, :func:`init_ops` and :func:`init_materialized`
take either family (``shape.family``): ``gpt2`` is :class:`GPT`, ``llama`` is
:class:`scaling.trainer.families.llama.Llama`. Attention's kernel (flash-attn or SDPA) is
:mod:`scaling.trainer.families.attention`'s, shared by both.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
from typing import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from scaling.accounting import Shape
from scaling.trainer.families.llama import DecoderBase, Llama, readout
from scaling.trainer.families.attention import (  # noqa: F401  (the kernel's names, also importable from here)
    ATTENTION_ENV,
    FLASH_MAX_HEAD_DIM,
    attention_kernel,
    causal_attention,
    masked_softmax_attention,
)


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

    #: The projections into the residual stream, whose init is scaled by 1/sqrt(2 n_layer).
    residual_projections: tuple[str, ...] = ("attn.proj", "mlp.proj")
    family = "gpt2"

    def __init__(self, cfg: Shape) -> None:
        super().__init__(cfg)
        self.wpe = nn.Embedding(cfg.context, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied (Press & Wolf 2017), as in GPT-2
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """GPT-2's init: N(0, 0.02), residual projections scaled by 1/sqrt(2 * n_layer)."""
        for name, init in init_ops(self):
            init(self.get_parameter(name))

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        """Token embeddings plus learned positions."""
        pos = torch.arange(idx.size(1), device=idx.device)
        return self.wte(idx) + self.wpe(pos)

    def num_params(self, non_embedding: bool = True) -> int:
        """Parameters counted once (the tied head is the token embedding)."""
        total = sum(p.numel() for p in self.parameters())
        if non_embedding:
            total -= self.wte.weight.numel() + self.wpe.weight.numel()
        return total


InitOp = Callable[[torch.Tensor], object]
#: The output layer, which μP treats as a vector-like layer (init and learning rate kept).
OUTPUT_LAYER = "lm_head"


def init_ops(model: nn.Module) -> Iterator[tuple[str, InitOp]]:
    """GPT-2's init as (parameter name, in-place op), in the order the ops draw random numbers,
    for either family: every matrix and embedding N(0, 0.02), biases 0, norms 1, the residual
    projections N(0, 0.02 / sqrt(2 n_layer)).

    Under μP the hidden matrices (every linear layer but the output layer) draw with their std
    divided by sqrt(m) (``mup.init.normal_``): variance 1/fan_in, GPT-2's at the base width.

    A tied parameter appears under each of its names (the output layer's draw is the last)."""
    hidden_std = 0.02 / math.sqrt(model.cfg.width_mult)
    for prefix, module in model.named_modules():
        name = f"{prefix}." if prefix else ""
        if isinstance(module, nn.Linear):
            std = 0.02 if prefix.rsplit(".", 1)[-1] == OUTPUT_LAYER else hidden_std
            yield name + "weight", functools.partial(nn.init.normal_, mean=0.0, std=std)
            if module.bias is not None:
                yield name + "bias", nn.init.zeros_
        elif isinstance(module, nn.Embedding):
            yield name + "weight", functools.partial(nn.init.normal_, mean=0.0, std=0.02)
        elif isinstance(module, nn.LayerNorm):
            yield name + "weight", nn.init.ones_
            yield name + "bias", nn.init.zeros_
        elif isinstance(module, nn.RMSNorm):
            yield name + "weight", nn.init.ones_
    residual_std = hidden_std / math.sqrt(2 * model.cfg.n_layer)
    for i in range(len(model.blocks)):
        for proj in model.residual_projections:
            yield f"blocks.{i}.{proj}.weight", functools.partial(nn.init.normal_, mean=0.0, std=residual_std)


Decoder = GPT | Llama


def new_model(shape: Shape) -> Decoder:
    """The model of ``shape``'s family, initialized by :func:`init_ops` from the current generator."""
    if shape.family == "llama":
        model = Llama(shape)
        for name, init in init_ops(model):
            init(model.get_parameter(name))
        return model
    return GPT(shape)


@contextlib.contextmanager
def seeded(seed: int, device: torch.device) -> Iterator[None]:
    """Inside, ``device``'s default generator (the one its random ops draw from) is seeded with
    ``seed``; after, it is back where it was."""
    if device.type == "cpu":
        state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        try:
            yield
        finally:
            torch.random.set_rng_state(state)
        return
    backend = torch.get_device_module(device.type)
    index = device.index if device.index is not None else backend.current_device()
    with torch.random.fork_rng(devices=[index], device_type=device.type), backend.device(index):
        backend.manual_seed(seed)
        yield


def build_model(shape: Shape, seed: int, device: torch.device | str = "cpu") -> Decoder:
    """The model of ``shape`` on ``device`` with its initial weights a pure function of ``seed``
    and the device's kind: the random numbers are drawn on ``device`` (a GPU's generator draws
    other numbers than the CPU's), so a GPU run's weights never pass through the CPU."""
    device = torch.device(device)
    if device.type != "cpu":
        model = build_meta_model(shape)
        materialize(model, device)
        init_materialized(model, shape, seed, device)
        return model
    with seeded(seed, device):
        return new_model(shape)


def build_meta_model(shape: Shape) -> Decoder:
    """The model of ``shape`` on the meta device: shapes only, to shard before any memory is
    allocated; :func:`init_materialized` then gives it :func:`build_model`'s weights."""
    with torch.device("meta"):
        return new_model(shape)


def materialize(model: nn.Module, device: torch.device) -> None:
    """Allocate (uninitialized) storage on ``device`` for a model built on the meta device,
    keeping tied parameters tied (``to_empty`` replaces plain parameters one by one)."""
    first: dict[int, str] = {}
    ties: list[tuple[nn.Module, str, str]] = []
    for prefix, module in model.named_modules():
        for name, p in module.named_parameters(recurse=False, remove_duplicate=False):
            if id(p) in first:
                ties.append((module, name, first[id(p)]))
            else:
                first[id(p)] = f"{prefix}.{name}" if prefix else name
    model.to_empty(device=device)
    for module, name, source in ties:
        shared = model.get_parameter(source)
        if getattr(module, name) is not shared:
            setattr(module, name, shared)


def init_materialized(model: nn.Module, shape: Shape, seed: int, device: torch.device | str = "cpu") -> None:
    """Give ``model`` (built by :func:`build_meta_model`, sharded, then materialized with
    ``to_empty``) exactly the weights ``build_model(shape, seed, device)`` has, on every rank its part.

    The draws of :func:`build_model` are replayed on ``device`` (the run's compute device, also
    where FSDP2 offloads its shards to the CPU) by its own generator, one full tensor at a time:
    first the layers' own constructor inits (their values are overwritten, but they advance the
    generator), then :func:`init_ops`; each rank keeps its shard of each (a DTensor's local part).
    On a GPU nothing is drawn on the CPU or copied from it."""
    device = torch.device(device)
    template = build_meta_model(shape)
    with seeded(seed, device):
        for module in template.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):  # what their constructors drew
                twin = copy.deepcopy(module).to_empty(device=device)
                twin.reset_parameters()
        for name, init in init_ops(template):
            like = template.get_parameter(name)
            full = torch.empty(like.shape, dtype=like.dtype, device=device)
            init(full)
            _assign(model.get_parameter(name), full)


@torch.no_grad()
def _assign(param: torch.Tensor, full: torch.Tensor) -> None:
    """Copy this rank's part of the full tensor ``full`` into ``param`` (no communication); the
    shard is cut where ``full`` was drawn, so only it reaches ``param`` (on the CPU under offload)."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    if isinstance(param, DTensor):
        local = distribute_tensor(full, param.device_mesh, param.placements, src_data_rank=None)
        param.to_local().copy_(local.to_local())
    else:
        param.copy_(full)

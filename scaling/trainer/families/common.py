"""What every family's decoder shares: the token embedding, the blocks (recomputed in backward
under activation checkpointing), the final norm, the readout, the roles of the parameters and
the initialization, and the lookup of a family's torch module.

A family's module (``scaling.trainer.families.<name>``, named by its record in
:mod:`scaling.families`) defines ``MODEL``, a :class:`DecoderBase` subclass, and ``to_hf``, its
Hugging Face export; the registry's torch-free record states the rest (counts, tensor-parallel
plan, residual projections, checks).
"""

from __future__ import annotations

import functools
import importlib
import math
from types import ModuleType
from typing import Callable, Iterable, Iterator, Literal

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from scaling.accounting import Shape
from scaling.families import FAMILIES

#: Parameter-name parts of the embeddings (a tied output layer is the token embedding).
EMBEDDING_NAMES: tuple[str, ...] = ("wte", "wpe")
#: The output layer's name part: a matrix, but no hidden one under μP (its init and learning rate kept).
OUTPUT_NAME = "lm_head"
Role = Literal["embedding", "hidden", "output", "vector"]


def param_role(name: str, p: torch.Tensor) -> Role:
    """What a parameter is to the initialization, μP and the optimizer's groups: an ``embedding``
    (a lookup), the ``output`` layer, a ``hidden`` matrix (every other matrix, an expert's stacked
    matrices too) or a ``vector`` (norms and biases). Names are matched by their dotted parts, so
    wrappers' prefixes (``module.``, ``_orig_mod.``) do not matter."""
    parts = name.split(".")
    if any(part in EMBEDDING_NAMES for part in parts):
        return "embedding"
    if OUTPUT_NAME in parts:
        return "output"
    return "hidden" if p.ndim >= 2 else "vector"


def family_module(name: str) -> ModuleType:
    """The torch module of family ``name`` (``scaling.families.FAMILIES[name].module``)."""
    return importlib.import_module(FAMILIES[name].module)


def readout(lm_head: nn.Module, x: torch.Tensor, cfg: Shape) -> torch.Tensor:
    """The logits of a final hidden state ``x``; under μP its input times 1/m, as ``mup``'s
    ``MuReadout`` does (the output layer keeps its width-independent init and learning rate)."""
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
    """What every family's decoder shares: the check of the shape's family, the token embedding,
    the blocks (recomputed in the backward pass under activation checkpointing), the final norm
    and the readout. A subclass sets ``family`` and builds the rest of its parts after ``wte``,
    under the names ``blocks``, ``ln_f`` and ``lm_head`` (pipeline stages, sharding and
    checkpoints treat every family alike), in the order :func:`init_ops` draws their values."""

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

    def num_params(self, non_embedding: bool = True) -> int:
        """Parameters counted once (a tied head is the token embedding)."""
        total = sum(p.numel() for p in self.parameters())
        if non_embedding:
            total -= sum(p.numel() for name, p in self.named_parameters() if param_role(name, p) == "embedding")
        return total


InitOp = Callable[[torch.Tensor], object]


def init_ops(model: nn.Module) -> Iterator[tuple[str, InitOp]]:
    """GPT-2's init as (parameter name, in-place op), in the order the ops draw random numbers,
    for every family, by :func:`param_role`: embeddings and the output layer N(0, 0.02), hidden
    matrices N(0, 0.02), norms' weights 1, biases 0; then each block's residual projections
    (``Family.residual_projections``) N(0, 0.02 / sqrt(2 n_layer)).

    Under μP the hidden matrices draw with their std divided by sqrt(m) (``mup.init.normal_``):
    variance 1/fan_in, GPT-2's at the base width.

    A tied parameter appears under each of its names (the output layer's draw is the last)."""
    cfg = model.cfg
    hidden_std = 0.02 / math.sqrt(cfg.width_mult)
    for name, p in model.named_parameters(remove_duplicate=False):
        role = param_role(name, p)
        if role == "vector":
            yield name, nn.init.ones_ if name.rsplit(".", 1)[-1] == "weight" else nn.init.zeros_
        else:
            std = hidden_std if role == "hidden" else 0.02
            yield name, functools.partial(nn.init.normal_, mean=0.0, std=std)
    residual_std = hidden_std / math.sqrt(2 * cfg.n_layer)
    names = dict(model.named_parameters())
    for i in range(len(model.blocks)):
        for proj in cfg.family_spec.residual_projections:  # a linear layer's weight, or an expert's stacked matrices
            for name in (f"blocks.{i}.{proj}.weight", f"blocks.{i}.{proj}"):
                if name in names:
                    yield name, functools.partial(nn.init.normal_, mean=0.0, std=residual_std)


def initialize(model: nn.Module) -> None:
    """Draw ``model``'s weights by :func:`init_ops` from the current generator; its buffers
    (state such as an MoE's balancing bias) start at zero."""
    for name, init in init_ops(model):
        init(model.get_parameter(name))
    zero_buffers(model)


@torch.no_grad()
def zero_buffers(model: nn.Module) -> None:
    """Every buffer of ``model`` at zero: what a family's state starts from (drawing nothing)."""
    for buffer in model.buffers():
        buffer.zero_()

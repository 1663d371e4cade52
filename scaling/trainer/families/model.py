"""The builders of every family's decoder: on the CPU or a device, on the meta device, and the
replay of the initial weights on a model sharded before it was materialized.

The family is ``shape.family``; its decoder class is its module's ``MODEL``
(:func:`scaling.trainer.families.common.family_module`), initialized by
:func:`scaling.trainer.families.common.init_ops`.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Iterator

import torch
from torch import nn

from scaling.accounting import Shape
from scaling.trainer.families.attention import (  # noqa: F401  (the kernel's names, also importable from here)
    ATTENTION_ENV,
    FLASH_MAX_HEAD_DIM,
    attention_kernel,
    causal_attention,
    masked_softmax_attention,
)
from scaling.trainer.families.common import DecoderBase, family_module, init_ops, initialize, readout, zero_buffers  # noqa: F401

#: Any family's decoder.
Decoder = DecoderBase


def new_model(shape: Shape) -> Decoder:
    """The model of ``shape``'s family, initialized by :func:`init_ops` from the current generator."""
    model = family_module(shape.family).MODEL(shape)
    initialize(model)
    return model


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
    zero_buffers(model)


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

"""Tensor parallelism (Megatron's column/row split) with PyTorch's ``parallelize_module``.

Each family states its plan (``scaling.families.Family.tp_plan``): gpt2's QKV and the MLP's first
matrix split by columns, the output projections by rows; llama's q, k, v and SwiGLU's gate and up
by columns, o and down by rows; an MoE's attention as llama's, its experts whole on every rank.
Embeddings, the norms and the head replicated. Why, and the dtype of what is all-reduced:
docs/reference/modules.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scaling.errors import SpecError
from scaling.families import FAMILIES
from scaling.layout import shape_problem

if TYPE_CHECKING:  # the checks below are imported by the spec, which stays torch-free
    from torch import nn
    from torch.distributed.device_mesh import DeviceMesh


def block_plan(family: str = "gpt2") -> dict[str, Any]:
    """The parallel style of each linear layer of one block of ``family``, by its name inside the
    block: the family's plan (``scaling.families.Family.tp_plan``) as ``parallelize_module`` takes it."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    return {name: styles[style]() for name, style in FAMILIES[family].tp_plan.items()}


def _compute_dtype_input(module: "nn.Module", args: tuple) -> tuple:
    """Forward pre-hook: cast the input to autocast's dtype, as the linear layer inside would."""
    import torch

    x = args[0]
    device = x.device.type
    if torch.is_autocast_enabled(device) and x.is_floating_point():
        dtype = torch.get_autocast_dtype(device)
        if x.dtype != dtype:
            return (x.to(dtype), *args[1:])
    return args


def apply_tensor_parallel(model: "nn.Module", tp_mesh: DeviceMesh, blocks: "list[nn.Module]") -> None:
    """Split each block's linear layers over the 1-D ``tp_mesh`` in place (its parameters become DTensors)."""
    from torch.distributed.tensor.parallel import parallelize_module

    tp = tp_mesh.size()
    if tp == 1:
        return
    cfg = getattr(model, "cfg", None)
    if cfg is not None:
        problem = shape_problem(cfg, tp, 1)
        if problem:
            raise SpecError(f"execution: {problem}")
    plan = block_plan(cfg.family if cfg is not None else "gpt2")
    for block in blocks:
        parallelize_module(block, tp_mesh, plan)
        for module in block.modules():  # layers that sum a replicated weight's gradient over the heads' ranks
            if hasattr(module, "tp_group"):
                module.tp_group = tp_mesh.get_group()
        for name in {style.split(".")[0] for style in plan}:  # attn, mlp
            block.get_submodule(name).register_forward_pre_hook(_compute_dtype_input)

"""Tensor parallelism (Megatron's column/row split) with PyTorch's ``parallelize_module``.

Shoeybi et al. (2019): in each block the attention's fused QKV matrix and the MLP's first
matrix are split by output columns (``ColwiseParallel``: each tensor rank computes its own heads
and its own quarter of the MLP's hidden units from the replicated block input) and the attention
output projection and the MLP's second matrix by input rows (``RowwiseParallel``: partial
outputs summed by one all-reduce). So a block all-reduces its b*s*h output twice in forward and
the gradient of its input twice in backward, which is what :func:`scaling.comms.tp_traffic`
counts. The collectives are DTensor's; nothing here communicates by hand.

Embeddings, the final LayerNorm and the tied output layer are *replicated* over the tensor
ranks (as :mod:`scaling.comms` assumes): every tensor rank computes the same logits and loss.
Their gradients agree across tensor ranks without a collective, because everything feeding
them is already all-reduced. Replication costs ``vocab * d_model`` parameters per rank and the
full logits, which is small next to the blocks for the models this platform trains; a
vocabulary-parallel head would be the next step for very large vocabularies.

Under autocast the LayerNorm before each split layer returns FP32; the split layer's input is
cast to the compute dtype *before* it becomes a DTensor (:func:`_compute_dtype_input`), which is
exactly the cast autocast would apply inside the linear layer, so the numbers are unchanged but
the backward all-reduce of the input's gradient moves 16-bit values, as Megatron's does.

The model (:mod:`scaling.trainer.model`) lays QKV's output out head by head, so a contiguous
column split gives each rank ``n_head / tp`` whole heads, and it reads its number of heads from
the width it receives: it runs unchanged on local tensors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scaling.errors import SpecError
from scaling.layout import shape_problem

if TYPE_CHECKING:  # the checks below are imported by the spec, which stays torch-free
    from torch import nn


def block_plan() -> dict[str, Any]:
    """The parallel style of each linear layer of one block, by its name inside the block."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    return {
        "attn.qkv": ColwiseParallel(),
        "attn.proj": RowwiseParallel(),
        "mlp.fc": ColwiseParallel(),
        "mlp.proj": RowwiseParallel(),
    }


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


def apply_tensor_parallel(model: "nn.Module", tp_mesh: Any, blocks: "list[nn.Module]") -> None:
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
    for block in blocks:
        parallelize_module(block, tp_mesh, block_plan())
        for name in {style.split(".")[0] for style in block_plan()}:  # attn, mlp
            block.get_submodule(name).register_forward_pre_hook(_compute_dtype_input)

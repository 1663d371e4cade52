"""AdamW's parameter groups and setting the learning rate; the rate at step t is :func:`scaling.lr_schedule.lr_at`.

``lr_at``, ``warmup_steps`` and ``decay_start`` (where a schedule's phases start) live in the
torch-free :mod:`scaling.lr_schedule`, which the curve laws rebuild runs' learning rates with; they
are named here too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scaling.lr_schedule import decay_start, lr_at, warmup_steps
from scaling.trainer.sections import ScheduleSpec

if TYPE_CHECKING:
    import torch
    from torch import nn
    from torch.distributed.device_mesh import DeviceMesh

__all__ = ["NullGradients", "ScheduleSpec", "decay_start", "lr_at", "param_groups", "set_lr", "warmup_steps"]


def param_groups(model: "nn.Module", weight_decay: float, width_mult: float = 1.0) -> list[dict[str, Any]]:
    """AdamW's groups: matrices decay; norms, biases and embeddings do not. Each group holds one
    kind of tensor: plain tensors, or DTensors of one device mesh.

    Decaying gains and biases only pulls them toward zero for no regularizing benefit, and the
    embeddings are lookups (GPT-2/nanoGPT/Megatron practice); which is which is
    :func:`scaling.trainer.families.common.param_role`'s. Tensor parallelism leaves
    norms and embeddings plain beside DTensor biases; the foreach and fused kernels take one
    kind per call ("got mixed torch.Tensor and DTensor"), hence one kind per group.

    ``width_mult`` (μP's m, ``Shape.width_mult``) other than 1 gives the hidden matrices (every
    matrix but the embeddings and the output layer) the learning rate lr/m and the weight decay
    wd*m, so their decay per step lr*wd is the base model's (``mup``'s ``MuAdamW``). Each group's
    ``lr_mult`` is what the schedule's learning rate is multiplied by (:func:`set_lr`).
    """
    from scaling.trainer.families.common import param_role

    groups: dict[tuple[bool, bool, Any], list[Any]] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        role = param_role(name, p)
        decays = role in ("hidden", "output")
        hidden = role == "hidden" and width_mult != 1.0
        groups.setdefault((decays, hidden, _kind(p)), []).append(p)
    ordered = sorted(groups.items(), key=lambda item: (not item[0][0], not item[0][1], item[0][2] is not None))
    out = []
    for (decays, hidden, _), params in ordered:
        group: dict[str, Any] = {"params": params, "weight_decay": weight_decay if decays else 0.0}
        if width_mult != 1.0:
            group["lr_mult"] = 1.0 / width_mult if hidden else 1.0
            group["weight_decay"] *= width_mult if hidden else 1.0
        out.append(group)
    return out


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set the schedule's learning rate ``lr`` on every group, times the group's ``lr_mult`` (μP)."""
    for group in optimizer.param_groups:
        mult = group.get("lr_mult")
        group["lr"] = lr if mult is None else lr * mult


def _kind(p: torch.Tensor) -> DeviceMesh | None:
    """None for a plain tensor, the device mesh for a DTensor (its hash names the mesh)."""
    return getattr(p, "device_mesh", None)


class NullGradients:
    """Zeroes the gradient of the attention's key bias, which is zero in exact arithmetic.

    Adding ``b_k`` to every key adds ``q . b_k`` to a whole row of scores, which the softmax
    ignores: the computed gradient is rounding noise (~1e-10), and Adam divides it by its own
    root-mean-square into steps of the learning rate's size in random directions. So the key bias
    took a random walk that depended on the order of every reduction (a fused or a per-tensor
    AdamW, a tensor-parallel split, a pipeline's micro-batches), and each layout's run followed
    its own trajectory once the bias grew large enough to matter (1.4% apart in eval loss after
    100 steps at 4 x d 64). With its gradient exactly zero the key bias stays at its initial
    zero in every layout, which is what the exact computation does.

    Attention modules are found by what they hold: a fused ``qkv`` linear with a bias, laid out
    head by head (``[q_h k_h v_h]``, each ``head_dim`` wide), and ``head_dim``.
    """

    def __init__(self, model: "nn.Module") -> None:
        import torch

        self.params: list[tuple[Any, Any]] = []
        for module in model.modules():
            qkv, head_dim = getattr(module, "qkv", None), getattr(module, "head_dim", None)
            bias = getattr(qkv, "bias", None)
            if bias is None or not isinstance(head_dim, int):
                continue
            mask = torch.ones(bias.shape[0] // (3 * head_dim), 3, head_dim)
            mask[:, 1] = 0.0
            self.params.append((bias, mask.flatten()))
        self._local: dict[int, Any] = {}

    def __call__(self) -> None:
        """Zero the key part of each key bias's gradient (this rank's shard of it)."""
        for param, full in self.params:
            grad = param.grad
            if grad is None:
                continue
            local = self._local.get(id(param))
            if local is None:
                local = self._local[id(param)] = _local_part(full, grad)
            (grad.to_local() if hasattr(grad, "to_local") else grad).mul_(local)


def _local_part(full: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """This rank's part of the full tensor ``full`` laid out as ``like`` (a DTensor or a plain tensor)."""
    if not hasattr(like, "device_mesh"):
        return full.to(device=like.device, dtype=like.dtype)
    from torch.distributed.tensor import distribute_tensor

    part = distribute_tensor(full.to(device=like.device, dtype=like.dtype), like.device_mesh, like.placements,
                             src_data_rank=None)
    return part.to_local()

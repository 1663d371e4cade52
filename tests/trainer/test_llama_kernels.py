"""Llama's hand-written CPU kernels (RMSNorm's backward, RoPE's rotation, q/k/v joined in FP32)
against torch's composite operations: the same values and gradients to FP32 rounding."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from scaling.accounting import Shape
from scaling.trainer.families import llama
from scaling.trainer.families.model import build_model

FP32 = {"rtol": 1e-5, "atol": 1e-6}


def _composite_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.size(-1) // 2
    return x * cos + torch.cat((x[..., half:], x[..., :half]), dim=-1) * sin


def _composite_norm(x: torch.Tensor, norm: torch.nn.RMSNorm, weight: torch.Tensor | None = None) -> torch.Tensor:
    return F.rms_norm(x, norm.normalized_shape, norm.weight if weight is None else weight, norm.eps)


def _grads(f, *inputs: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    out = f(*leaves)
    out.backward(torch.linspace(-1, 1, out.numel()).view_as(out))
    return out.detach(), [t.grad for t in leaves]


def test_rms_norm_matches_torchs() -> None:
    norm = llama.RMSNorm(48, eps=1e-5)
    torch.nn.init.normal_(norm.weight, 1.0, 0.3)
    x = torch.randn(3, 7, 48) * 4
    ours = _grads(lambda x, w: llama.rms_norm(x, norm, w), x, norm.weight)
    ref = _grads(lambda x, w: _composite_norm(x, norm, w), x, norm.weight)
    torch.testing.assert_close(ours, ref, **FP32)
    assert norm(x).grad_fn.name() == "_CpuRMSNormBackward"  # the hand-written path ran


def test_rope_matches_the_composite_rotation() -> None:
    cos, sin = llama.rope_tables(12, 16, 500.0, torch.device("cpu"), torch.float32)
    x = torch.randn(2, 12, 3, 16).transpose(1, 2)  # strided, as attention passes it
    ours = _grads(lambda x: llama.apply_rope(x, cos, sin), x)
    torch.testing.assert_close(ours, _grads(lambda x: _composite_rope(x, cos, sin), x), **FP32)


def test_joined_fp32_projections_match_the_layers_one_by_one() -> None:
    torch.manual_seed(0)
    layers = [torch.nn.Linear(32, n, bias=False) for n in (32, 16, 16)]
    x = torch.randn(2, 5, 32)

    def run(join: bool) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        for layer in layers:
            layer.weight.grad = None
        xi = x.clone().requires_grad_()
        outs = llama.fused_projections(xi, layers, join_fp32=join)
        sum((o * torch.arange(o.numel()).view_as(o).sin()).sum() for o in outs).backward()
        return [o.detach() for o in outs], [xi.grad, *(layer.weight.grad for layer in layers)]

    torch.testing.assert_close(run(True), run(False), **FP32)


@pytest.mark.parametrize("qk_norm", [False, True])
def test_a_training_step_matches_torchs_composite_ops(qk_norm: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The loss and every gradient of a GQA llama equal, to FP32 rounding, those of the same model
    run by torch's composite RMSNorm and RoPE with q, k and v one by one."""
    shape = Shape(2, 64, 4, 128, 32, family="llama", n_kv_head=2, qk_norm=qk_norm)
    batch = torch.randint(0, 128, (3, 33), generator=torch.Generator().manual_seed(1))

    def step() -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        model = build_model(shape, 0)
        loss = F.cross_entropy(model(batch[:, :-1]).flatten(0, 1), batch[:, 1:].flatten())
        loss.backward()
        return loss.detach(), {n: p.grad for n, p in model.named_parameters()}

    ours = step()
    monkeypatch.setattr(llama, "apply_rope", _composite_rope)
    monkeypatch.setattr(llama, "rms_norm", _composite_norm)
    monkeypatch.setattr(llama, "fused_projections", lambda x, layers, join_fp32=False: [m(x) for m in layers])
    ref = step()
    torch.testing.assert_close(ours, ref, **FP32)

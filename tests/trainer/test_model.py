"""The model: exact parameter counts, tied embeddings, attention kernels agree."""

from __future__ import annotations

import pytest
import torch

from scaling.accounting import Shape
from scaling.trainer.families.gpt2 import GPT
from scaling.trainer.families.model import build_model, causal_attention, masked_softmax_attention


def _meta_model(shape: Shape) -> GPT:
    with torch.device("meta"):  # counts without allocating 124M parameters
        return GPT(shape)


@pytest.mark.parametrize(
    "shape",
    [
        Shape(12, 768, 12, 50257, 1024),  # GPT-2 small
        Shape(1, 32, 2, 256, 32),
        Shape(4, 128, 4, 256, 256),
        Shape(24, 1024, 16, 50257, 1024),  # GPT-2 medium
        Shape(3, 96, 3, 1000, 77),
    ],
)
def test_parameter_counts_match_accounting(shape: Shape) -> None:
    model = _meta_model(shape)
    direct = sum(p.numel() for p in model.parameters())  # tied head counted once
    assert direct == shape.params_total
    assert model.num_params(non_embedding=True) == shape.params_non_embedding
    assert direct - shape.params_non_embedding == shape.params_embedding


def test_gpt2_small_is_124m() -> None:
    assert sum(p.numel() for p in _meta_model(Shape(12, 768, 12, 50257, 1024)).parameters()) == 124_439_808


def test_output_layer_is_tied_and_init_is_seeded() -> None:
    shape = Shape(2, 32, 2, 256, 16)
    a, b, c = build_model(shape, 0), build_model(shape, 0), build_model(shape, 1)
    assert a.lm_head.weight is a.wte.weight
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a.wte.weight, c.wte.weight)
    logits = a(torch.randint(0, 256, (3, 16)))
    assert logits.shape == (3, 16, 256)
    with pytest.raises(ValueError, match="exceeds the context"):
        a(torch.zeros(1, 17, dtype=torch.long))


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_sdpa_matches_masked_softmax_attention(dtype: torch.dtype, tol: float) -> None:
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 17, 8, generator=gen).to(dtype) for _ in range(3))
    fast = causal_attention(q, k, v).float()
    plain = masked_softmax_attention(q, k, v).float()
    assert torch.allclose(fast, plain, atol=tol, rtol=tol)
    # Causality: the first position attends to itself only.
    assert torch.allclose(plain[:, :, 0], v[:, :, 0].float(), atol=tol)


def test_activation_checkpointing_gives_the_same_gradients() -> None:
    shape = Shape(2, 32, 2, 256, 16)
    x = torch.randint(0, 256, (2, 16))
    grads = []
    for ckpt in (False, True):
        m = build_model(shape, 0)
        m.activation_checkpointing = ckpt
        m(x).float().pow(2).mean().backward()
        grads.append([p.grad.clone() for p in m.parameters()])
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(*grads))


def test_flash_attention_runs_only_where_its_kernels_do(monkeypatch: pytest.MonkeyPatch) -> None:
    """flash-attn 2 needs Ampere or newer, half precision, heads of at most 256 (over 192 on sm80/sm90
    only) and, compiled, release 2.7 or newer; else SDPA."""
    from scaling.trainer.families.attention import attention_choice
    from scaling.trainer.families.model import ATTENTION_ENV, attention_kernel

    monkeypatch.delenv(ATTENTION_ENV, raising=False)
    gpu = torch.device("cuda", 0)
    ampere = {"capability": (8, 0), "flash_installed": True}
    assert attention_kernel(128, gpu, torch.bfloat16, **ampere) == "flash_attn"
    assert attention_kernel(256, gpu, torch.float16, **ampere) == "flash_attn"
    assert attention_kernel(257, gpu, torch.bfloat16, **ampere) == "sdpa"  # too wide a head
    assert attention_kernel(128, gpu, torch.float16, capability=(7, 0), flash_installed=True) == "sdpa"  # V100
    assert attention_kernel(128, gpu, torch.float32, **ampere) == "sdpa"
    assert attention_kernel(128, gpu, torch.bfloat16, capability=(9, 0), flash_installed=False) == "sdpa"
    assert attention_kernel(128, torch.device("cpu"), torch.bfloat16, **ampere) == "sdpa"
    # heads wider than 192: flash-attn's backward for them is built for sm80 and sm90 only
    for sm, kernel in (((8, 0), "flash_attn"), ((9, 0), "flash_attn"), ((8, 6), "sdpa"), ((8, 9), "sdpa")):
        assert attention_kernel(224, gpu, torch.bfloat16, capability=sm, flash_installed=True) == kernel, sm
        assert attention_kernel(192, gpu, torch.bfloat16, capability=sm, flash_installed=True) == "flash_attn", sm
    # under torch.compile, flash-attn before 2.7 (no custom op) would break the graph at every layer
    for version, kernel in (("2.6.3", "sdpa"), ("2.5.9.post1", "sdpa"), ("2.7.0", "flash_attn"), ("2.8.3", "flash_attn")):
        assert attention_kernel(128, gpu, torch.bfloat16, capability=(8, 0), flash_version=version, compiled=True) == kernel
        assert attention_kernel(128, gpu, torch.bfloat16, capability=(8, 0), flash_version=version) == "flash_attn"
    kernel, why = attention_choice(224, gpu, torch.bfloat16, capability=(8, 6), flash_version="2.8.3")
    assert kernel == "sdpa" and "sm86" in why and "sm80/sm90" in why
    kernel, why = attention_choice(64, gpu, torch.float16, compiled=True, capability=(9, 0), flash_version="2.6.3")
    assert kernel == "sdpa" and "2.6.3" in why and "compile" in why
    monkeypatch.setenv(ATTENTION_ENV, "sdpa")
    assert attention_kernel(128, gpu, torch.bfloat16, **ampere) == "sdpa"  # forced, to compare the two

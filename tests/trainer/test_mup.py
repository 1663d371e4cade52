"""μP (Yang et al. 2022): its fields keyed and checked in one line, the per-group learning rates
the schedule multiplies, its init (the standard one at the base width), a real run through the
loop, and the paper's coordinate check: after a few Adam steps at one learning rate, every
layer's activations keep their size across widths 32 to 512 under μP and grow with width under
the standard parametrization."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from scaling.accounting import Shape
from scaling.errors import SpecError
from scaling.trainer.families.model import build_model
from scaling.trainer.optim import param_groups, set_lr
from scaling.trainer.spec import RunSpec

GPT2 = {"n_layer": 2, "d_model": 64, "n_head": 4, "vocab_size": 256, "context": 32}
MUP = {"parametrization": "mup", "base_width": 32}


def _spec(model: dict) -> RunSpec:
    return RunSpec.from_dict({"model": model, "tokens": 32 * 8 * 10, "batch_tokens": 32 * 8, "precision": "fp32"})


def test_mup_is_keyed_and_standard_keeps_the_key() -> None:
    standard = _spec(GPT2)
    assert _spec({**GPT2, "parametrization": "standard"}).key == standard.key == "50dc422c9f3f88cf"
    mup = _spec({**GPT2, **MUP})
    assert mup.model.model_dump(mode="json") == {**GPT2, **MUP}
    assert RunSpec.model_validate_json(mup.to_json()).key == mup.key
    llama = {**GPT2, "family": "llama"}
    keys = {standard.key, mup.key, _spec({**GPT2, "parametrization": "mup", "base_width": 64}).key,
            _spec(llama).key, _spec({**llama, **MUP}).key}
    assert len(keys) == 5
    assert _spec({**llama, **MUP}).model.model_dump(mode="json") == {**llama, **MUP}


@pytest.mark.parametrize("model,message", [
    ({**GPT2, "parametrization": "mup"}, r"model: parametrization mup needs base_width"),
    ({**GPT2, "base_width": 32}, r"model: base_width: only with parametrization mup"),
    ({**GPT2, "parametrization": "mup", "base_width": 0}, r"model\.base_width: Input should be greater than 0"),
    ({**GPT2, "parametrization": "mu"}, r"model\.parametrization: Input should be 'standard' or 'mup'"),
])
def test_bad_mup_fields_are_refused_in_one_line(model: dict, message: str) -> None:
    with pytest.raises(SpecError, match=message) as err:
        _spec(model)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_hidden_matrices_get_lr_over_m_and_the_schedule_multiplies_it(family: str) -> None:
    shape = Shape(2, 128, 4, 256, 16, family=family, **MUP)  # m = 4
    model = build_model(shape, 0)
    groups = param_groups(model, 0.1, shape.width_mult)
    names = {id(p): n for n, p in model.named_parameters()}
    by_name = {names[id(p)]: g for g in groups for p in g["params"]}
    assert len(by_name) == len(names)
    hidden = [n for n in by_name if by_name[n]["lr_mult"] != 1.0]
    assert hidden and all(n.startswith("blocks.") and n.endswith(".weight") and "norm" not in n and "ln_" not in n
                          for n in hidden)
    assert all(by_name[n]["lr_mult"] == 0.25 and by_name[n]["weight_decay"] == pytest.approx(0.4) for n in hidden)
    assert by_name["wte.weight"]["lr_mult"] == 1.0 and by_name["wte.weight"]["weight_decay"] == 0.0
    if family == "llama":  # the untied output layer: decays, at the base learning rate
        assert by_name["lm_head.weight"]["lr_mult"] == 1.0 and by_name["lm_head.weight"]["weight_decay"] == 0.1
    opt = torch.optim.AdamW(groups, lr=1.0)
    set_lr(opt, 3e-3)
    assert sorted({g["lr"] for g in opt.param_groups}) == pytest.approx([3e-3 / 4, 3e-3])
    standard = param_groups(build_model(Shape(2, 128, 4, 256, 16, family=family), 0), 0.1)
    assert all("lr_mult" not in g for g in standard)  # the standard groups, as they always were


def test_at_the_base_width_mup_draws_the_standard_weights_and_wider_hidden_ones_shrink() -> None:
    base, standard = build_model(Shape(2, 64, 4, 256, 16, parametrization="mup", base_width=64), 3), build_model(Shape(2, 64, 4, 256, 16), 3)
    for (name, a), (_, b) in zip(base.named_parameters(), standard.named_parameters()):
        assert torch.equal(a, b), name
    wide = build_model(Shape(2, 256, 4, 256, 16, parametrization="mup", base_width=64), 3)  # m = 4
    assert wide.blocks[0].mlp.fc.weight.std().item() == pytest.approx(0.01, rel=0.05)  # 0.02 / sqrt(4)
    assert wide.wte.weight.std().item() == pytest.approx(0.02, rel=0.05)  # vector-like: unchanged


def test_a_mup_run_trains_through_the_loop_at_scaled_rates(make_spec, tmp_path: Path) -> None:
    from scaling.trainer.loop import Trainer

    spec = make_spec(model={**MUP, "base_width": 16}, precision="fp32")  # the tiny model's d 32: m = 2
    trainer = Trainer(spec, None, tmp_path)
    result = trainer.fit()
    assert result.status == "completed" and math.isfinite(result.final_eval_loss)
    rates = sorted({g["lr"] / g["lr_mult"] for g in trainer.optimizer.param_groups})
    assert len(rates) == 1 and rates[0] > 0  # every group at its multiple of one scheduled rate
    assert sorted({g["lr_mult"] for g in trainer.optimizer.param_groups}) == [0.5, 1.0]


WIDTHS = (32, 64, 128, 256, 512)
LAYERS = ("wte", "blocks.0.attn", "blocks.0.mlp", "blocks.1.attn", "blocks.1.mlp", "lm_head")


def coordinate_sizes(family: str, parametrization: str, steps: int = 3, lr: float = 5e-3) -> dict[str, list[float]]:
    """Each layer's output RMS at each width after ``steps`` AdamW steps on one fixed batch (the
    μP paper's coordinate check, Fig. 5: 4 heads at every width, 32 tokens a batch)."""
    sizes: dict[str, list[float]] = {name: [] for name in LAYERS}
    for d in WIDTHS:
        fields = dict(MUP) if parametrization == "mup" else {}
        if family == "llama":
            fields["ffn"] = 2 * d  # proportional to the width (the default rounds up to 256)
        shape = Shape(2, d, 4, 256, 16, family=family, **fields)
        model = build_model(shape, 0)
        opt = torch.optim.AdamW(param_groups(model, 0.0, shape.width_mult), lr=lr, betas=(0.9, 0.95))
        tokens = torch.randint(0, 256, (2, 17), generator=torch.Generator().manual_seed(1))
        for _ in range(steps):
            set_lr(opt, lr)
            loss = F.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
        seen: dict[str, float] = {}
        hooks = [model.get_submodule(name).register_forward_hook(
            lambda _m, _i, out, name=name: seen.__setitem__(name, out.pow(2).mean().sqrt().item())) for name in LAYERS]
        with torch.no_grad():
            model(tokens[:, :-1])
        for hook in hooks:
            hook.remove()
        for name in LAYERS:
            sizes[name].append(seen[name])
    return sizes


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_coordinate_check(family: str) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is fastest, and the machine is shared
    try:
        mup, standard = coordinate_sizes(family, "mup"), coordinate_sizes(family, "standard")
    finally:
        torch.set_num_threads(threads)
    for name in LAYERS:  # each within a factor 2 across a 16-fold range of widths
        assert max(mup[name]) / min(mup[name]) < 2.0, (name, mup[name])
    for name in LAYERS[1:]:  # every layer above the embedding grows with width under SP
        sp = standard[name]
        assert all(b > 0.9 * a for a, b in zip(sp, sp[1:])) and sp[-1] / sp[0] > 5, (name, sp)

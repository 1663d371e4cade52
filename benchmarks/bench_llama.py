"""Llama's training step: its forward as it is against the previous one, in one process.

The previous forward ran q, k, v and gate, up as separate linear layers (under autocast each cast
the norm output again) and computed RoPE's angles in every layer, rotating q and k through FP32;
the current one joins those projections into one product under autocast, and q, k, v in FP32 too
(``scaling.trainer.families.llama.fused_projections``), keeps RoPE's tables per length, device
and dtype, applied in the compute dtype, and on the CPU runs its RMSNorms through a written-out
backward (``llama.rms_norm``) instead of torch's composite one. Both variants are the same model (one set of weights,
copied), trained on the same batches with the same AdamW; steps alternate between them so a
drift in machine load hits both alike, and the median step times are compared. In FP32 the losses
of every step must agree to FP32 rounding (printed: the largest relative gap).

    python benchmarks/bench_llama.py [--d-model 512 --layers 4 --context 256 --batch 8 --steps 12]
    python benchmarks/bench_llama.py --precision bf16
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
import types

import torch
import torch.nn.functional as F

from scaling.accounting import Shape
from scaling.trainer.families.attention import causal_attention
from scaling.trainer.families.llama import Attention, HeadNorm, RMSNorm, SwiGLU, rope_angles
from scaling.trainer.families.model import build_model
from scaling.trainer.optim import param_groups


def previous_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The previous rotation: in FP32 whatever x's dtype, back in x's dtype."""
    xf = x.float()
    half = xf.size(-1) // 2
    rotated = torch.cat((-xf[..., half:], xf[..., :half]), dim=-1)
    return (xf * cos + rotated * sin).to(x.dtype)


def previous_attention(self: Attention, x: torch.Tensor) -> torch.Tensor:
    b, t, _ = x.shape
    hs = self.head_dim
    q, k, v = (layer(x).view(b, t, -1, hs) for layer in (self.q, self.k, self.v))
    if self.q_norm is not None and self.k_norm is not None:
        q, k = self.q_norm(q), self.k_norm(k)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    cos, sin = rope_angles(t, hs, self.theta, x.device)
    q, k = previous_rope(q, cos, sin), previous_rope(k, cos, sin)
    y = causal_attention(q, k, v, self.scale)
    return self.o(y.transpose(1, 2).reshape(b, t, -1))


def previous_head_norm(self: HeadNorm, x: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x.float(), self.normalized_shape, self.weight, self.eps).to(x.dtype)


def previous_mlp(self: SwiGLU, x: torch.Tensor) -> torch.Tensor:
    return self.down(F.silu(self.gate(x)) * self.up(x))


def as_previous(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with each block's attention, MLP and norms running the previous forward."""
    for module in model.modules():
        if isinstance(module, HeadNorm):
            module.forward = types.MethodType(previous_head_norm, module)  # type: ignore[method-assign]
        elif isinstance(module, RMSNorm):
            module.forward = types.MethodType(torch.nn.RMSNorm.forward, module)  # type: ignore[method-assign]
        elif isinstance(module, Attention):
            module.forward = types.MethodType(previous_attention, module)  # type: ignore[method-assign]
        elif isinstance(module, SwiGLU):
            module.forward = types.MethodType(previous_mlp, module)  # type: ignore[method-assign]
    return model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--qk-norm", action="store_true")
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8, help="sequences per step")
    ap.add_argument("--steps", type=int, default=12, help="steps per variant (the first is not timed)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    shape = Shape(args.layers, args.d_model, args.heads, 256, args.context, family="llama",
                  n_kv_head=args.kv_heads, qk_norm=args.qk_norm)
    current = build_model(shape, 0)
    previous = as_previous(copy.deepcopy(current))
    variants = {"current": current, "previous": previous}
    optimizers = {name: torch.optim.AdamW(param_groups(m, 0.1, shape.width_mult), lr=1e-3, fused=True)
                  for name, m in variants.items()}
    g = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, 256, (args.batch, args.context + 1), generator=g) for _ in range(args.steps)]
    times: dict[str, list[float]] = {name: [] for name in variants}
    losses: dict[str, list[float]] = {name: [] for name in variants}
    bf16 = args.precision == "bf16"
    for step, batch in enumerate(batches):
        for name in (("current", "previous") if step % 2 else ("previous", "current")):
            model, opt = variants[name], optimizers[name]
            start = time.process_time()  # CPU time: the machine may be shared
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                logits = model(batch[:, :-1])
            loss = F.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten())
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if step:
                times[name].append(time.process_time() - start)
            losses[name].append(float(loss.detach()))
    med = {name: statistics.median(t) for name, t in times.items()}
    gap = max(abs(a - b) / abs(b) for a, b in zip(losses["current"], losses["previous"]))
    print(f"llama {shape.n_layer}x{shape.d_model}/{shape.n_head}h kv {shape.kv_heads}"
          f"{' qk_norm' if args.qk_norm else ''}, context {args.context}, batch {args.batch}, {args.precision}, "
          f"{args.threads} thread(s), {args.steps - 1} timed steps each")
    for name in variants:
        print(f"  {name:8} median step {med[name] * 1e3:8.1f} ms")
    print(f"current / previous step time: {med['current'] / med['previous']:.3f}")
    print(f"largest relative gap between the two variants' losses over {args.steps} steps: {gap:.2e}")


if __name__ == "__main__":
    main()

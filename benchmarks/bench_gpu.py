"""GPU throughput and MFU of the project's GPT in bf16: a torch-only script for a lent GPU.

Needs only torch (no pydantic, numpy, Ray or database): it imports the model
(``scaling.trainer.model``), the FLOP count (``scaling.accounting``) and the GPU peak table
(``scaling.trainer.mfu``). It trains GPT-2 small's shape (124M parameters, vocabulary padded to
50,304, context 1,024) on random tokens with the trainer's recipe per step: bf16 autocast with
FP32 master weights, fused AdamW with the trainer's parameter groups, clipping at 1.0,
gradient accumulation; optionally ``torch.compile``. MFU counts the model FLOPs of
``Shape.flops_per_token("6N_attention")`` against the device's dense bf16 peak.

    PYTHONPATH=. python benchmarks/bench_gpu.py --compile            # on the GPU machine
    PYTHONPATH=. python benchmarks/bench_gpu.py --tiny --steps 3     # a CPU dry run
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from scaling.accounting import Shape
from scaling.trainer.mfu import peak_flops
from scaling.trainer.model import build_model
from scaling.trainer.optim import param_groups


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--micro-batch", type=int, default=16, help="sequences per forward pass")
    ap.add_argument("--accumulate", type=int, default=2, help="micro-batches per optimizer step")
    ap.add_argument("--steps", type=int, default=20, help="timed optimizer steps")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--tiny", action="store_true", help="a small shape for a CPU dry run")
    args = ap.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    shape = Shape(2, 128, 2, 512, 128) if args.tiny else Shape(12, 768, 12, 50304, 1024)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    model = build_model(shape, seed=0).to(device)
    opt = torch.optim.AdamW(
        param_groups(model, 0.1), lr=6e-4, betas=(0.9, 0.95), **({"fused": True} if device.type == "cuda" else {})
    )
    step_fn = torch.compile(model) if args.compile else model
    gen = torch.Generator(device=device).manual_seed(0)
    tokens_per_step = args.micro_batch * args.accumulate * shape.context

    def step() -> float:
        total = torch.zeros((), device=device)
        for _ in range(args.accumulate):
            data = torch.randint(0, shape.vocab_size, (args.micro_batch, shape.context + 1), device=device, generator=gen)
            with torch.autocast(device.type, dtype=torch.bfloat16):
                logits = step_fn(data[:, :-1])
            loss = F.cross_entropy(logits.float().view(-1, shape.vocab_size), data[:, 1:].reshape(-1))
            (loss / args.accumulate).backward()
            total += loss.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(total / args.accumulate)  # one sync per step, as the trainer's spike check

    for _ in range(args.warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    tps = args.steps * tokens_per_step / elapsed
    fpt = shape.flops_per_token("6N_attention")
    peak = peak_flops(device, "bf16", torch.get_num_threads())
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"{name}: {shape.params_total:,} params, context {shape.context}, {tokens_per_step:,} tokens/step, compile={args.compile}")
    print(f"tokens/s {tps:,.0f}; step {elapsed / args.steps * 1e3:.1f} ms; last loss {loss:.3f}")
    if peak:
        print(f"MFU {tps * fpt / peak:.1%} of {peak / 1e12:.3g} TFLOP/s (model FLOPs/token {fpt:,.0f})")
    if device.type == "cuda":
        print(f"peak memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")


if __name__ == "__main__":
    main()

"""Trainer throughput against the simplest hand-written PyTorch loop, and the CPU's MFU.

Both train the same model (``scaling.trainer.model``) on the same corpus, batch and precision.
The trainer runs its real step (data pure in seed+cursor, LR schedule, autocast, accumulation
hooks, spike check, clipping, scaler, metrics bookkeeping; no database); the plain loop is
nanoGPT's: random windows, forward, cross-entropy, backward, clip, AdamW. Runs alternate in one
process so drifts in machine load hit both; the ratio of median tokens/s is printed. First it
prints this machine's probed matmul rates in bf16 and fp32 (what ``precision: auto`` decides
on) and the precision the run resolves to.

    python benchmarks/bench_trainer.py [--threads 1] [--precision auto] [--rounds 10] [--steps 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
import torch.nn.functional as F

from scaling.trainer.data import load_corpus
from scaling.trainer.loop import Trainer
from scaling.trainer.mfu import peak_flops
from scaling.trainer.model import build_model
from scaling.trainer.optim import param_groups
from scaling.trainer.precision import autocast, cpu_rate
from scaling.trainer.resolve import Host, resolve
from scaling.trainer.spec import RunRequest, RunSpec


class PlainLoop:
    """The simplest loop (nanoGPT-style) for ``spec``'s model, batch and precision."""

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        self.device = torch.device("cpu")
        self.data = torch.from_numpy(load_corpus(spec.data).train.astype("int64"))
        self.model = build_model(spec.shape, spec.seed)
        self.opt = torch.optim.AdamW(param_groups(self.model, 0.1), lr=spec.optimizer.lr, betas=(0.9, 0.95))
        self.gen = torch.Generator().manual_seed(0)
        self.tokens_per_step = spec.sequences_per_batch * spec.model.context

    def step_once(self) -> None:
        ctx, batch = self.spec.model.context, self.spec.sequences_per_batch
        ix = torch.randint(len(self.data) - ctx - 1, (batch,), generator=self.gen)
        x = torch.stack([self.data[j : j + ctx] for j in ix])
        y = torch.stack([self.data[j + 1 : j + 1 + ctx] for j in ix])
        with autocast(self.spec.precision, self.device):
            logits = self.model(x)
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


def timed(loop: object, steps: int) -> tuple[float, float]:
    """(tokens per wall second, tokens per CPU second) over ``steps`` steps of ``loop``."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        loop.step_once()  # type: ignore[attr-defined]
    tokens = steps * loop.tokens_per_step  # type: ignore[attr-defined]
    return tokens / (time.perf_counter() - wall), tokens / (time.process_time() - cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8, help="sequences per step")
    ap.add_argument("--precision", default="auto", choices=["auto", "bf16", "fp16", "fp32"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3, help="timed steps per loop per round")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    total = args.warmup + args.steps * args.rounds
    request = RunRequest.from_dict(
        {
            "model": {"n_layer": args.layers, "d_model": args.d_model, "n_head": args.heads, "context": args.context},
            "batch_tokens": args.batch * args.context,
            "tokens": args.batch * args.context * (total + 1),  # never reaches the final eval
            "precision": args.precision,
            "eval_tokens": args.context,
            "execution": {
                "threads": args.threads, "device": "cpu", "eval_interval": 10**6, "checkpoint_interval": 10**6,
            },
        }
    )
    for threads in sorted({1, args.threads}):  # auto decides on one core's rates
        rates = {p: cpu_rate(p, threads) for p in ("bf16", "fp32")}
        print(
            f"matmul probe on this CPU at {threads} thread(s): bf16 {rates['bf16'] / 1e9:.3g} GFLOP/s, "
            f"fp32 {rates['fp32'] / 1e9:.3g} GFLOP/s (bf16/fp32 = {rates['bf16'] / rates['fp32']:.3g})"
        )
    resolved = resolve(request, Host(data=False))
    spec, resolution = resolved.spec, resolved.precision
    print(f"precision {args.precision} -> {spec.precision} ({resolution.reason})")
    if resolution.warning:
        print(f"warning: {resolution.warning}")
    run_dir = tempfile.TemporaryDirectory()
    trainer = Trainer(spec, None, run_dir.name)
    trainer.start()  # step-0 checkpoint and data event, as train() does before its first step
    trainer.par.module.train()
    plain = PlainLoop(spec)
    for loop in (trainer, plain):
        timed(loop, args.warmup)
    ours, base, ours_cpu, base_cpu = [], [], [], []
    for r in range(args.rounds):
        # Alternate which goes first so a drift in machine load favours neither.
        order = [(trainer, ours, ours_cpu), (plain, base, base_cpu)]
        for loop, wall_list, cpu_list in order if r % 2 == 0 else order[::-1]:
            wall, cpu = timed(loop, args.steps)
            wall_list.append(wall)
            cpu_list.append(cpu)
        print(f"round {r + 1}: trainer {ours[-1]:,.0f} tok/s, plain loop {base[-1]:,.0f} tok/s")
    run_dir.cleanup()
    plain = base
    t, p = statistics.median(ours), statistics.median(plain)
    fpt = spec.shape.flops_per_token("6N_attention")
    peak = peak_flops(torch.device("cpu"), spec.precision, args.threads)
    print(
        f"model {spec.shape.params_total:,} params, {args.batch}x{args.context} tokens/step, {spec.precision}, "
        f"{args.threads} thread(s)"
    )
    print(f"median tokens/s: trainer {t:,.0f}, plain {p:,.0f}; ratio trainer/plain = {t / p:.3f} (target >= 0.95)")
    tc, pc = statistics.median(ours_cpu), statistics.median(base_cpu)
    print(f"per CPU-second (insensitive to other load): trainer {tc:,.0f}, plain {pc:,.0f}; ratio = {tc / pc:.3f}")
    print(f"MFU on this CPU: trainer {t * fpt / peak:.1%}, plain {p * fpt / peak:.1%} (peak {peak / 1e9:.1f} GFLOP/s by matmul probe)")
    print(f"MFU per CPU-second (what a dedicated core would reach): trainer {tc * fpt / peak:.1%}, plain {pc * fpt / peak:.1%}")


if __name__ == "__main__":
    main()

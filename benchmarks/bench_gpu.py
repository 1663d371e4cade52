"""Throughput and MFU of the real trainer (``scaling.trainer.loop.Trainer``) on one device.

It runs the trainer's own step (data by seed and cursor, LR schedule, autocast, accumulation,
the lagged spike check, clipping, the fused AdamW, the loss scaler for fp16, CUDA-event timing)
on the built-in corpus, byte-level, without a database. The shape is GPT-2 small's body (12
layers of 768, context 1,024) over the 256-token byte vocabulary. MFU counts the model FLOPs of
``Shape.flops_per_token("6N_attention")`` against the device's dense peak for the precision.
Timing spans the timed steps only (the first checkpoint, warm-up and compilation are outside),
with the device synchronized at both ends.

    python benchmarks/bench_gpu.py [--precision bf16] [--compile]      # on the GPU machine
    python benchmarks/bench_gpu.py --tiny --steps 3                    # a CPU dry run
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> None:
    from scaling.trainer.loop import Trainer
    from scaling.trainer.spec import RunSpec

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--micro-batch", type=int, default=16, help="sequences per forward pass")
    ap.add_argument("--accumulate", type=int, default=2, help="micro-batches per optimizer step")
    ap.add_argument("--steps", type=int, default=20, help="timed optimizer steps")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--precision", default="bf16", choices=["bf16", "fp16", "fp32"])
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--tiny", action="store_true", help="a small shape for a CPU dry run")
    args = ap.parse_args()

    model = {"n_layer": 2, "d_model": 128, "n_head": 2, "context": 128} if args.tiny else \
        {"n_layer": 12, "d_model": 768, "n_head": 12, "context": 1024}
    sequences = args.micro_batch * args.accumulate
    batch_tokens = sequences * model["context"]
    steps = args.warmup + args.steps + 1  # the last step evaluates and checkpoints: never timed
    quiet = steps + 1
    spec = RunSpec.from_dict({
        "model": model, "precision": args.precision, "batch_tokens": batch_tokens, "tokens": batch_tokens * steps,
        "eval_tokens": model["context"] * 8,
        "execution": {"micro_batch_size": args.micro_batch, "compile": args.compile, "threads": torch.get_num_threads(),
                      "log_interval": quiet, "eval_interval": quiet, "checkpoint_interval": quiet},
    }, where="bench_gpu")
    if torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = True
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = Trainer(spec, None, run_dir)
        device = trainer.rt.device
        trainer.start()
        for _ in range(args.warmup):
            trainer.step_once()
        _sync(device)
        start = time.perf_counter()
        for _ in range(args.steps):
            trainer.step_once()
        _sync(device)
        elapsed = time.perf_counter() - start
        while trainer.step < trainer.total_steps:  # settles the last timed step's loss
            trainer.step_once()
        loss = trainer.window[-1]
    tps = args.steps * batch_tokens / elapsed
    fpt = spec.shape.flops_per_token("6N_attention")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    attention = trainer.data_detail.get("attention", "?")
    print(f"{name}: trainer, {spec.shape.params_total:,} params, context {spec.model.context}, {batch_tokens:,} tokens/step, "
          f"{args.precision}, attention {attention}, compile={args.compile}")
    print(f"tokens/s {tps:,.0f}; step {elapsed / args.steps * 1e3:.1f} ms; loss at the end {loss:.3f}")
    if trainer.peak:
        print(f"MFU {tps * fpt / trainer.peak:.1%} of {trainer.peak / 1e12:.3g} TFLOP/s (model FLOPs/token {fpt:,.0f})")
    if device.type == "cuda":
        print(f"peak memory {torch.cuda.max_memory_allocated(device) / 2**30:.1f} GiB")


if __name__ == "__main__":
    main()

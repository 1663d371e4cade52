"""Benchmark data parallelism on this machine: scaling from one to two workers, and memory per stage.

Run by hand (it takes a few minutes on two cores)::

    python benchmarks/bench_distributed.py            # both parts
    python benchmarks/bench_distributed.py --part throughput --steps 4
    python benchmarks/bench_distributed.py --part memory --precision fp32

Throughput: a compute-bound GPT (large matmuls, one thread per worker) trains the same global
batch on one worker (the baseline, measured in the same run) and on two gloo workers under each
strategy; the figure is tokens/s(2 workers) / tokens/s(1 worker), ideally 2.0 on two free cores.

Memory: a GPT of >= 50M parameters takes two optimizer steps on two workers under each stage.
Two measurements per rank, next to ``scaling.memory.estimate_memory`` (the one home of the
formula):

* model state: the bytes of the distinct tensor storages this rank holds for parameters (the
  local shard under FSDP2), gradients (DDP's bucket views counted once) and optimizer state,
  after a step. Exact and noise-free, it is what the ZeRO formulas describe.
* peak RSS increase: the peak of the process's anonymous resident memory (``RssAnon``, sampled
  every millisecond by a thread) during a step in steady state (after two warm-up steps) minus
  its value just before the model was built, less the
  same figure for a 1-layer d64 model under the same stage (what any model costs: lazily
  built library tables, gloo buffers). It includes activations, FSDP's all-gather and
  reduce-scatter buffers and allocator slack, so it is compared with the estimate's total
  (state + activations + margin). FSDP models are built on the meta device and only their
  shards allocated, as large FSDP jobs do, so the full model never sets the high-water mark.

The estimate uses the accounting's default ``layout="torch"``: PyTorch's bf16 autocast keeps FP32
weights and gradients (4+4+8 bytes/param, not the ZeRO paper's 2+2+12), FSDP2's zero2 holds both
the gathered and the sharded parameters between forward and backward, and FSDP's per-block
gather buffers are counted (``fsdp_buffer_bytes``). With the paper's layout (``layout="zero"``)
ZeRO-1 in bf16 measured 1.28x its estimate.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from typing import Any

import torch
import torch.distributed as dist

STRATEGIES = ("ddp", "zero1", "zero2", "zero3")


def _spec(n_layer: int, d_model: int, n_head: int, context: int, seqs: int, precision: str, strategy: str, workers: int) -> Any:
    from scaling.trainer.spec import RunSpec

    return RunSpec.from_dict(
        {
            "model": {"n_layer": n_layer, "d_model": d_model, "n_head": n_head, "vocab_size": 256, "context": context},
            "tokens": seqs * context * 100,
            "batch_tokens": seqs * context,
            "precision": precision,
            "execution": {"workers": workers, "strategy": "ddp" if strategy == "single" else strategy},
        }
    )


def _rss_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(field)


class _PeakAnon:
    """Samples the process's anonymous resident memory (``RssAnon``) every millisecond.

    ``VmHWM`` would also count the pages of libtorch's code touched for the first time while
    training (file-backed, hundreds of MiB): not memory the formulas describe. The sampler
    runs in a thread; torch's kernels release the GIL, so it keeps sampling during them.
    """

    def __init__(self) -> None:
        import threading

        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _rss_bytes("RssAnon"))
            time.sleep(0.001)

    def __enter__(self) -> "_PeakAnon":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_bytes("RssAnon"))


def _storage_bytes(tensors: list[torch.Tensor], seen: set[int]) -> int:
    total = 0
    for t in tensors:
        if t is None:
            continue
        t = getattr(t, "_local_tensor", t)  # a DTensor's local shard
        st = t.untyped_storage()
        if st.data_ptr() in seen or st.nbytes() == 0:
            continue
        seen.add(st.data_ptr())
        total += st.nbytes()
    return total


def _state_bytes(module: torch.nn.Module, kept: list[torch.Tensor], optim: torch.optim.Optimizer) -> dict[str, int]:
    """Distinct storages of parameters, gradients and optimizer state held right now.

    ``kept`` are the parameters as registered right after wrapping (FSDP2's sharded DTensors);
    while a zero2 model sits between forward and backward, ``module.parameters()`` yields the
    gathered full parameters instead, so both lists are counted (a freed one has 0 bytes).
    """
    inner = getattr(optim, "optim", optim)  # ZeroRedundancyOptimizer keeps its shard in .optim
    seen: set[int] = set()
    params = kept + list(module.parameters())
    w = _storage_bytes([p.data for p in params], seen)
    g = _storage_bytes([p.grad for p in kept], seen)
    o = _storage_bytes([v for s in inner.state.values() for v in s.values() if torch.is_tensor(v) and v.dim() > 0], seen)
    return {"weights": w, "grads": g, "optim": o}


def _worker(rank: int, world: int, init: str, out: str, cfg: dict) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    if world > 1:
        dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    from scaling.trainer.families.model import build_model
    from scaling.trainer.parallel.data_parallel import parallelize

    spec = _spec(**{k: cfg[k] for k in ("n_layer", "d_model", "n_head", "context", "seqs", "precision")},
                 strategy=cfg["strategy"], workers=world)
    import warnings

    warnings.filterwarnings("ignore", message="DTensor random operators")
    rss0 = _rss_bytes("RssAnon")
    sampler = _PeakAnon()
    if cfg.get("memory"):  # the sampling thread costs CPU: never while timing throughput
        sampler.__enter__()
    fsdp = world > 1 and cfg["strategy"] in ("zero2", "zero3")
    if fsdp:
        # Build on the meta device, shard, then allocate only this rank's shards, as large
        # FSDP jobs do; a full model allocated first would set the RSS high-water mark.
        from scaling.trainer.families.common import initialize
        from scaling.trainer.families.model import build_meta_model

        model = build_meta_model(spec.shape)
    else:
        model = build_model(spec.shape, spec.seed)
    if world > 1:
        par = parallelize(model, spec)
        if fsdp:
            model.to_empty(device="cpu")
            initialize(model)  # values differ from build_model's; irrelevant to speed and bytes
        module, optim = par.module, par.build_optimizer(model.parameters(), lr=1e-4)
    else:
        module, optim = model, torch.optim.AdamW(model.parameters(), lr=1e-4)
    kept = list(module.parameters())
    setup_peak = sampler.peak
    state: dict[str, int] = {}
    per = spec.sequences_per_batch // world
    g = torch.Generator().manual_seed(0)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(spec.precision)
    times, cpu_times = [], []
    for step in range(cfg["warmup"] + cfg["steps"]):
        seqs = torch.randint(0, 256, (spec.sequences_per_batch, spec.model.context + 1), generator=g)
        x, y = seqs[rank * per:(rank + 1) * per, :-1], seqs[rank * per:(rank + 1) * per, 1:]
        if world > 1:
            dist.barrier()
        if step == cfg["warmup"]:
            # Steady state from here: DDP rebuilds its gradient buckets once, at the start of
            # the second iteration, briefly holding old and new buckets (+4 bytes/param).
            sampler.peak = 0
        t0, c0 = time.perf_counter(), time.process_time()
        with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
            logits = module(x)
        if step == cfg["warmup"] + cfg["steps"] - 1:
            state = _state_bytes(module, kept, optim)  # the peak of model state: after forward
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        loss.backward()
        optim.step()
        optim.zero_grad(set_to_none=False)  # gradients stay allocated, as the formulas count them
        if world > 1:
            dist.barrier()
        if step >= cfg["warmup"]:
            times.append(time.perf_counter() - t0)
            cpu_times.append(time.process_time() - c0)
    if cfg.get("memory"):
        sampler.__exit__(None, None, None)
    result = {
        "seconds": statistics.median(times) if times else None,
        "cpu_seconds": statistics.median(cpu_times) if cpu_times else None,
        "tokens": spec.batch_tokens,
        "state": state,
        "peak_rss_increase": sampler.peak - rss0,
        "setup_peak_increase": setup_peak - rss0,
    }
    torch.save(result, os.path.join(out, f"r{rank}.pt"))
    if world > 1:
        dist.destroy_process_group()


def run(world: int, cfg: dict) -> list[dict]:
    """Train in ``world`` fresh processes (fresh processes keep the RSS high-water marks apart)."""
    import torch.multiprocessing as mp

    # Serve every allocation over 64 KiB by mmap, so freed tensors leave the resident set at
    # once and the RSS high-water mark tracks live tensors rather than heap fragmentation.
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", "65536")
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_worker, args=(world, os.path.join(tmp, "rdv"), tmp, cfg), nprocs=world, join=True)
        return [torch.load(os.path.join(tmp, f"r{r}.pt"), weights_only=False) for r in range(world)]


def throughput(args: argparse.Namespace) -> None:
    cfg = dict(n_layer=4, d_model=512, n_head=8, context=128, seqs=8, precision=args.precision,
               warmup=1, steps=args.steps)
    print(f"\n== throughput: GPT L4 d512 ctx128, global batch {cfg['seqs']} seqs, {args.precision}, "
          f"{args.repeats} alternating rounds, median step ==")
    tps: dict[str, list[float]] = {s: [] for s in ("single", *STRATEGIES)}
    per_cpu: dict[str, list[float]] = {s: [] for s in ("single", *STRATEGIES)}
    for _ in range(args.repeats):  # alternate so that background load hits every variant alike
        for strategy in ("single", *STRATEGIES):
            world = 1 if strategy == "single" else 2
            res = run(world, {**cfg, "strategy": strategy})
            tps[strategy].append(res[0]["tokens"] / max(r["seconds"] for r in res))
            per_cpu[strategy].append(res[0]["tokens"] / sum(r["cpu_seconds"] for r in res))
    base, base_cpu = statistics.median(tps["single"]), statistics.median(per_cpu["single"])
    # Wall-clock speed-up is what a user gets, but on a shared machine it also measures the
    # neighbours' load; tokens per CPU-second of all workers isolates the parallel overhead
    # (1.0 = two workers waste nothing; the ideal speed-up is then 2x on two free cores).
    print(f"{'strategy':<8} {'tokens/s':>10} {'speed-up':>9} {'tokens/CPU-s':>13} {'efficiency':>11}")
    print(f"{'1 worker':<8} {base:>10.0f} {1.0:>9.2f} {base_cpu:>13.0f} {1.0:>11.2f}")
    for s in STRATEGIES:
        v, c = statistics.median(tps[s]), statistics.median(per_cpu[s])
        print(f"{s:<8} {v:>10.0f} {v / base:>9.2f} {c:>13.0f} {c / base_cpu:>11.2f}")


def memory(args: argparse.Namespace) -> None:
    from scaling.memory import estimate_memory

    cfg = dict(n_layer=4, d_model=1024, n_head=16, context=128, seqs=2, precision=args.precision,
               warmup=2, steps=1, memory=True)
    spec = _spec(**{k: cfg[k] for k in ("n_layer", "d_model", "n_head", "context", "seqs", "precision")},
                 strategy="ddp", workers=2)
    mb = 2**20
    print(f"\n== memory per worker: GPT L4 d1024 ({spec.shape.params_total / 1e6:.1f}M params), 2 workers, "
          f"micro-batch 1 x {cfg['context']}, {args.precision} ==")
    print(f"{'stage':<6} {'state MiB':>10} {'estimate':>9} {'ratio':>6} | "
          f"{'peak RSS+ MiB':>13} {'estimate':>9} {'ratio':>6} | w/g/o MiB measured")
    tiny = dict(cfg, n_layer=1, d_model=64, n_head=4)
    for s in STRATEGIES:
        res = run(2, {**cfg, "strategy": s})
        # The same steps on a 1-layer d64 model, to subtract what any model costs (libraries'
        # lazily built tables, gloo buffers, the census itself): the baseline of this stage.
        fixed = max(r["peak_rss_increase"] for r in run(2, {**tiny, "strategy": s}))
        est = estimate_memory(spec.shape, 1, args.precision, s, 2)
        state = max(sum(r["state"].values()) for r in res)
        rss = max(r["peak_rss_increase"] for r in res) - fixed
        wgo = "/".join(f"{res[0]['state'][k] / mb:.0f}" for k in ("weights", "grads", "optim"))
        print(f"{s:<6} {state / mb:>10.0f} {est.model_state_bytes / mb:>9.0f} {state / est.model_state_bytes:>6.2f} | "
              f"{rss / mb:>13.0f} {est.total_bytes / mb:>9.0f} {rss / est.total_bytes:>6.2f} | {wgo}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", choices=("throughput", "memory", "both"), default="both")
    ap.add_argument("--precision", choices=("fp32", "bf16"), default=None)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    if args.part in ("throughput", "both"):
        throughput(argparse.Namespace(**{**vars(args), "precision": args.precision or "fp32"}))
    if args.part in ("memory", "both"):
        for p in ((args.precision,) if args.precision else ("bf16", "fp32")):
            memory(argparse.Namespace(**{**vars(args), "precision": p}))


if __name__ == "__main__":
    sys.exit(main())

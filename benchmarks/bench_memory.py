"""Benchmark the memory model: a training step's measured peak against ``scaling.memory.memory_per_rank``.

Run by hand (about five minutes on two free cores)::

    python benchmarks/bench_memory.py                    # both families: three sizes in fp32, one in bf16
    python benchmarks/bench_memory.py --precision bf16   # three sizes in bf16 (slow: bf16 matmuls on a CPU)
    python benchmarks/bench_memory.py --family moe       # one family (moe: 8 experts of d_model, top-2, a shared one)
    python benchmarks/bench_memory.py --family llama --qk-norm --sizes 1  # llama with qk_norm, the first size

Each size of each family trains in a fresh process as the trainer's loop does on one worker:
two micro-batches per step, each forward under the precision's autocast and the FP32
cross-entropy inside it, backward, then AdamW's fused step with the gradients set to None. The
peak is measured over the second step (the first creates AdamW's state).

The measurement is the peak of the bytes of live tensor storages, counted by torch's
``MemTracker`` as each operator returns: the CPU's counterpart of
``torch.cuda.max_memory_allocated``, exact and independent of the machine's other processes.
Not the process's RSS high-water mark: glibc's and torch's CPU allocators keep freed blocks
resident (the RSS of the same step is larger by an amount that depends on the sizes freed
before), and on a machine shared with others a sampled RSS misses short-lived peaks.

The estimate is ``memory_per_rank`` of the single-worker layout with the CPU's kernels
(``device="cpu"``: SDPA's CPU flash kernel, which the header confirms) and no margin (the margin is for allocator slack, which live bytes do not include).
Target: within 10% of the peak, whole and in what the step adds to the weights and AdamW's
state ("acts": activations, gradients and autocast's weight copies). The ``math`` column is the
estimate with attention's s x s scores (Korthikanti et al.'s 5as/h, the term the fused kernels
never hold), for comparison.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Any

import torch

#: (label, n_layer, d_model, n_head, n_kv_head, context, micro-batch, vocabulary)
SIZES = (
    ("L4 d256 ctx512", 4, 256, 4, None, 512, 4, 256),
    ("L4 d384 ctx1024", 4, 384, 6, 2, 1024, 2, 256),
    ("L2 d512 ctx2048 V8192", 2, 512, 8, 4, 2048, 1, 8192),
)
FAMILIES = ("gpt2", "llama", "moe")
#: The MoE of each size: fine-grained experts as wide as the residual stream, top-2 of 8 and a shared one.
MOE = {"n_experts": 8, "top_k": 2, "n_shared_experts": 1}
MICRO_BATCHES = 2


def _shape(family: str, n_layer: int, d_model: int, n_head: int, n_kv_head: int | None, context: int,
           vocab: int, qk_norm: bool = False) -> Any:
    from scaling.accounting import Shape

    extra: dict[str, Any] = {"n_kv_head": n_kv_head} if "n_kv_head" in FAMILY_FIELDS[family] and n_kv_head else {}
    if "n_experts" in FAMILY_FIELDS[family]:
        extra.update(MOE, expert_ffn=d_model)
    if qk_norm and "qk_norm" in FAMILY_FIELDS[family]:
        extra["qk_norm"] = True
    return Shape(n_layer, d_model, n_head, vocab, context, family=family, **extra)


def _family_fields() -> dict[str, tuple[str, ...]]:
    from scaling.families import FAMILIES as REGISTRY

    return {name: fam.fields for name, fam in REGISTRY.items()}


FAMILY_FIELDS = _family_fields()


def sdpa_kernel_name() -> str:
    """The aten operator SDPA dispatches to for a causal fp32 call on this CPU."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[str] = []

    class Ops(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if "scaled_dot_product" in str(func):
                seen.append(str(func))
            return func(*args, **(kwargs or {}))

    q = torch.randn(1, 2, 64, 32, requires_grad=True)
    with Ops():
        torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    return ", ".join(dict.fromkeys(seen))


def _worker(out: str, case: dict) -> None:
    torch.set_num_threads(1)
    from torch.distributed._tools.mem_tracker import MemTracker

    from scaling.trainer.families.model import build_model
    from scaling.trainer.optim import param_groups
    from scaling.trainer.precision import autocast

    shape = _shape(case["family"], *case["dims"], qk_norm=case["qk_norm"])
    model = build_model(shape, 0)
    opt = torch.optim.AdamW(param_groups(model, 0.1), lr=1e-4, fused=True)
    g = torch.Generator().manual_seed(0)
    b, precision = case["micro_batch"], case["precision"]

    def step() -> None:
        for _ in range(MICRO_BATCHES):
            seqs = torch.randint(0, shape.vocab_size, (b, shape.context + 1), generator=g)
            with autocast(precision, torch.device("cpu")):
                logits = model(seqs[:, :-1]).float()
                loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), seqs[:, 1:].reshape(-1))
            del logits
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    class StepTracker(MemTracker):
        """MemTracker, letting the model run forward once per micro-batch (it refuses a root
        module's second forward); the device-wide peak, the figure used here, is unaffected."""

        def _pre_fw_hook(self, module: torch.nn.Module, inputs: Any) -> None:
            try:
                super()._pre_fw_hook(module, inputs)
            except NotImplementedError:
                self.memory_tracking.pop(module, None)
                super()._pre_fw_hook(module, inputs)

    step()
    tracker = StepTracker()
    tracker.track_external(model, opt)
    with tracker:
        step()
    peak = max(tracker.get_tracker_snapshot("peak")[torch.device("cpu")].values())
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    state = sum(v.numel() * v.element_size() for s in opt.state.values() for v in s.values() if v.dim() > 0)
    torch.save({"peak": peak, "weights": params, "optim": state}, os.path.join(out, "r.pt"))


def measure(case: dict) -> dict:
    """Run ``case`` in a forked process (nothing of an earlier case stays live)."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        ctx = mp.get_context("fork")  # torch and scaling are imported once, in the parent
        p = ctx.Process(target=_worker, args=(tmp, case))
        p.start()
        p.join()
        if p.exitcode:
            raise RuntimeError(f"{case} failed with exit code {p.exitcode}")
        return torch.load(os.path.join(tmp, "r.pt"), weights_only=False)


def main() -> int:
    from scaling.accounting import ParallelLayout
    from scaling.memory import memory_per_rank

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--precision", choices=("fp32", "bf16"), default=None)
    ap.add_argument("--family", choices=FAMILIES, default=None, help="one family (default: every one)")
    ap.add_argument("--qk-norm", action="store_true", help="qk_norm on, in the families that have it")
    ap.add_argument("--sizes", type=int, default=len(SIZES), help="only the first N sizes")
    args = ap.parse_args()
    mb = 2**20
    import scaling.trainer.families.model  # noqa: F401  (imported before forking, once)

    print(f"torch {torch.__version__}, SDPA on this CPU: {sdpa_kernel_name()}; {MICRO_BATCHES} micro-batches per step")
    print(f"{'family':<6} {'size':<22} {'prec':<5} {'b':>2} {'peak MiB':>9} {'model':>9} {'ratio':>6} | "
          f"{'acts MiB':>9} {'model':>9} {'ratio':>6} | {'math':>9}")
    worst = 0.0
    sizes = SIZES[: args.sizes]
    cases = [(p, size) for p in ((args.precision,) if args.precision else ("fp32", "bf16")) for size in sizes
             if args.precision or p == "fp32" or size == sizes[0]]  # bf16 matmuls are slow on a CPU: one size
    for precision, (label, n_layer, d, heads, kv, ctx, b, vocab) in cases:
        for family in (args.family,) if args.family else FAMILIES:
            dims = (n_layer, d, heads, kv, ctx, vocab)
            got = measure({"family": family, "dims": dims, "micro_batch": b, "precision": precision,
                           "qk_norm": args.qk_norm})
            shape = _shape(family, *dims, qk_norm=args.qk_norm)
            layout = ParallelLayout(micro_batch=b, micro_batches=MICRO_BATCHES, strategy="single")
            est = memory_per_rank(shape, layout, precision, margin=0.0, device="cpu")  # type: ignore[arg-type]
            math_est = memory_per_rank(shape, layout, precision, margin=0.0, device="cpu", attention="math")  # type: ignore[arg-type]
            state = got["weights"] + got["optim"]  # gradients are part of the activations' share below
            acts = got["peak"] - state
            est_acts = est.total_bytes - est.weights_bytes - est.optimizer_bytes
            r, ra = got["peak"] / est.total_bytes, acts / est_acts
            worst = max(worst, abs(r - 1), abs(ra - 1))
            print(f"{family:<6} {label:<22} {precision:<5} {b:>2} {got['peak'] / mb:>9.1f} {est.total_bytes / mb:>9.1f} "
                  f"{r:>6.3f} | {acts / mb:>9.1f} {est_acts / mb:>9.1f} {ra:>6.3f} | {math_est.total_bytes / mb:>9.1f}")
    print(f"largest deviation from the model: {100 * worst:.1f}% (target 10%)")
    return 0 if worst <= 0.10 else 1


if __name__ == "__main__":
    sys.exit(main())

"""Functions run in each spawned worker process (importable by `torch.multiprocessing.spawn`)."""

from __future__ import annotations

import os
import traceback
from typing import Any, Callable

import torch
import torch.distributed as dist


#: Imported once by the forkserver every world forks from (a threadless import: safe to fork).
PRELOAD = ["torch", "torch.distributed", "scaling.trainer.loop", "scaling.trainer.parallel.data_parallel", "scaling.trainer.parallel.pipeline",
           "_workers"]


def spawn(fn: Callable[..., Any], world: int, tmp: str, *args: Any) -> list[Any]:
    """Run ``fn(rank, world, *args)`` in ``world`` real processes over gloo; return each rank's result.

    Rendezvous through a file in ``tmp`` (no TCP port to collide with other jobs on the machine).
    Results come back through ``torch.save`` files so tensors survive the trip. Workers fork from
    one forkserver that imported torch and the trainer once: a fresh interpreter per rank spent
    seconds importing torch, per world.
    """
    import torch.multiprocessing as mp

    init = os.path.join(tmp, "rendezvous")
    if os.path.exists(init):
        os.remove(init)
    mp.set_forkserver_preload(PRELOAD)
    mp.start_processes(_entry, args=(world, init, tmp, fn, args), nprocs=world, join=True, start_method="forkserver")
    return [torch.load(os.path.join(tmp, f"result{r}.pt"), weights_only=False) for r in range(world)]


def _entry(rank: int, world: int, init: str, tmp: str, fn: Callable[..., Any], args: tuple) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ.setdefault("SCALING_PEAK_FLOPS", "1e11")  # MFU without the matmul probe
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    try:
        out = fn(rank, world, *args)
        torch.save(out, os.path.join(tmp, f"result{rank}.pt"))
        # Every rank done with its collectives before any tears the group down: destroying a gloo
        # group while the peer still has work in flight aborted a process once ("terminate called
        # without an active exception", zero3 with CPU offload).
        dist.barrier()
    except Exception:
        traceback.print_exc()
        raise
    finally:
        dist.destroy_process_group()


# -- model and data shared by the workers and the single-process reference --------------------
#: The tiny model's llama counterpart: grouped-query attention (2 kv heads for 4 query heads) with qk-norm.
TINY_LLAMA = {"n_layer": 2, "d_model": 32, "n_head": 4, "n_kv_head": 2, "ffn": 64, "vocab_size": 256, "context": 16,
              "family": "llama", "qk_norm": True}


def placed_spec(fields: dict[str, Any]) -> Any:
    """The RunSpec of ``fields``; ``strategy: auto`` on several data-parallel ranks is given the resolver's choice with
    tp, pp, schedule and micro-batch as stated (:func:`scaling.trainer.resolve.decide_strategy`),
    since a RunSpec names its strategy."""
    from scaling.accounting import GIB, MAX_DEVICE_GIB
    from scaling.trainer.resolve import decide_strategy
    from scaling.trainer.spec import RunRequest, RunSpec

    execution = fields.get("execution", {})
    request = RunRequest.from_dict(fields)
    if request.execution.strategy == "auto" and request.execution.dp > 1:
        memory = (request.execution.device_memory_gib or MAX_DEVICE_GIB) * GIB
        best = decide_strategy(request, request.execution.workers, memory)
        assert best is not None, "no strategy fits"
        fields = {**fields, "execution": {**execution, "strategy": best.strategy}}
    return RunSpec.from_dict(fields)


def tiny_spec(strategy: str = "ddp", precision: str = "fp32", model: Any = None, **execution: Any) -> Any:
    return placed_spec(
        {
            "model": model or {"n_layer": 2, "d_model": 32, "n_head": 2, "vocab_size": 256, "context": 16},
            "tokens": 64 * 10,
            "batch_tokens": 64,
            "precision": precision,
            "execution": {"workers": 2, "strategy": strategy, **execution},
        }
    )


def build_model(spec: Any) -> torch.nn.Module:
    from scaling.trainer.families.model import build_model as build

    return build(spec.shape, spec.seed)


def global_batch(spec: Any) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1234)
    seqs = torch.randint(0, spec.model.vocab_size, (spec.sequences_per_batch, spec.model.context + 1), generator=g)
    return seqs[:, :-1], seqs[:, 1:]


def dp_share(spec: Any, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's data-parallel share of :func:`global_batch` (its "dp" coordinate on the mesh)."""
    from scaling.trainer.runtime import mesh_coords

    x, y = global_batch(spec)
    dp = spec.execution.dp
    d = mesh_coords(rank, dp, spec.execution.tp)[1]
    share = x.shape[0] // dp
    return x[d * share : (d + 1) * share], y[d * share : (d + 1) * share]


def state_bytes(model: torch.nn.Module, opt: torch.optim.Optimizer) -> dict[str, int]:
    """Bytes of the distinct storages of the parameters, gradients and optimizer state this rank
    holds (local shards; FSDP2's gradient shards are views of one reduce-scatter output each)."""
    def storages(tensors: list[torch.Tensor]) -> int:
        seen: dict[int, int] = {}
        for t in tensors:
            t = t.to_local() if hasattr(t, "to_local") else t
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return sum(seen.values())

    params = list(model.parameters())  # each once (the tied copy is one parameter)
    return {"weights": storages(params),
            "gradients": storages([p.grad for p in params if p.grad is not None]),
            "optimizer": storages([v for st in local_optimizer(opt).state.values() for k, v in st.items() if k != "step"])}


def local_optimizer(opt: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """The optimizer holding this rank's state: ZeroRedundancyOptimizer's local one (``optim``), else ``opt``."""
    return getattr(opt, "optim", opt)


def loss_of(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, precision: str) -> torch.Tensor:
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
        logits = model(x)
    return torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), y.flatten())


def reference_grads(spec: Any) -> dict[str, torch.Tensor]:
    """One forward/backward of the whole global batch in this process."""
    model = build_model(spec)
    x, y = global_batch(spec)
    loss_of(model, x, y, spec.precision).backward()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def grads_worker(rank: int, world: int, spec: Any) -> dict[str, torch.Tensor]:
    """Each rank backpropagates its contiguous share of the global batch under the strategy."""
    from scaling.trainer.parallel.data_parallel import parallelize

    par = parallelize(build_model(spec), spec)
    x, y = global_batch(spec)
    share = x.shape[0] // world
    sl = slice(rank * share, (rank + 1) * share)
    loss_of(par.module, x[sl], y[sl], spec.precision).backward()
    return par.full_grads()


def forward_dtypes(module: torch.nn.Module, x: torch.Tensor) -> dict[str, tuple]:
    """Per submodule of ``module`` (by name), the dtypes of its input, its own parameters as its
    forward sees them (as it starts: FSDP2 may reshard a unit as it ends) and its output, in one
    bf16 autocast forward of ``x``."""
    params: dict[str, tuple] = {}
    seen: dict[str, tuple] = {}
    handles = []
    for name, sub in module.named_modules():
        def before(m: torch.nn.Module, args: tuple, _name: str = name) -> None:
            params[_name] = tuple(p.dtype for p in m.parameters(recurse=False))

        def after(m: torch.nn.Module, args: tuple, out: Any, _name: str = name) -> None:
            first = args[0] if args else None
            seen[_name] = (getattr(first, "dtype", None), params[_name], getattr(out, "dtype", None))
        handles += [sub.register_forward_pre_hook(before), sub.register_forward_hook(after)]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        module(x)
    for h in handles:
        h.remove()
    return seen


def forward_dtypes_worker(rank: int, world: int, strategies: list[str],
                          model: Any = None) -> dict[str, dict[str, tuple]]:
    """:func:`forward_dtypes` of the tiny bf16 model (``model``: :func:`tiny_spec`'s) wrapped for each strategy."""
    from scaling.trainer.parallel.data_parallel import parallelize

    out = {}
    for strategy in strategies:
        spec = tiny_spec(strategy, "bf16", model)
        par = parallelize(build_model(spec), spec)
        out[strategy] = forward_dtypes(par.model, global_batch(spec)[0][:2])
    return out


# -- whole runs through scaling.trainer.train ------------------------------------------------------
def run_spec(strategy: str, precision: str = "fp32", workers: int = 2, **over: Any) -> Any:
    """A tiny run of ten steps that reports after every step (eval_interval 1); tasks are scored
    only where ``evals`` asks (test_evals_ranks)."""
    over.setdefault("evals", {"next_line": False})
    execution = {"workers": workers, "strategy": strategy, "threads": 1, "eval_interval": 1,
                 "checkpoint_interval": 100, **over.pop("execution", {})}
    return placed_spec(
        {
            "model": {"n_layer": 2, "d_model": 32, "n_head": 2, "context": 32},
            "tokens": 32 * 8 * 10,
            "batch_tokens": 32 * 8,
            "eval_tokens": 32 * 4,
            "optimizer": {"lr": 3e-3},
            "precision": precision,
            "execution": execution,
            **over,
        }
    )


def train_worker(rank: int, world: int, spec_json: str, run_dir: str, attempt: int = 1) -> dict[str, Any]:
    """Train in this process (one of ``world``); return what ``report`` saw and the result."""
    import dataclasses

    from scaling.trainer import train
    from scaling.trainer.spec import RunSpec

    seen: list[dict[str, Any]] = []
    spec = RunSpec.model_validate_json(spec_json)
    result = train(spec, None, run_dir, attempt=attempt, report=lambda s, m, c: seen.append(m))
    return {"reports": seen, "result": dataclasses.asdict(result)}


def trajectory(out: dict[str, Any]) -> list[tuple[int, float]]:
    return [(m["step"], m["train_loss"]) for m in out["reports"]]


def train_until_fault(rank: int, world: int, spec_json: str, run_dir: str, attempt: int) -> dict[str, Any]:
    """Like :func:`train_worker`, but an injected fault ends the run quietly (it is the point)."""
    from scaling.trainer.faults import InjectedFault

    try:
        return {**train_worker(rank, world, spec_json, run_dir, attempt), "fault": None}
    except InjectedFault as exc:
        return {"reports": [], "result": None, "fault": str(exc)}


def train_each(rank: int, world: int, runs: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """:func:`train_worker` for each ``(spec_json, run_dir)`` in turn, in the same processes
    (process start-up, not training, dominates these tiny runs)."""
    return [train_worker(rank, world, spec_json, run_dir) for spec_json, run_dir in runs]


def until_fault_each(rank: int, world: int, runs: list[tuple[str, str]], attempt: int) -> list[dict[str, Any]]:
    """:func:`train_until_fault` for each ``(spec_json, run_dir)`` in turn, in the same processes."""
    return [train_until_fault(rank, world, spec_json, run_dir, attempt) for spec_json, run_dir in runs]


# -- a parallel plan through `scaling sweep` on Ray Train, against one process -----------------------
def memory_budget_worker(rank: int, world: int) -> float:
    """The smallest of rank-dependent budgets, as every rank sees it."""
    from scaling.trainer.probe import smallest_over_ranks

    return smallest_over_ranks(1000.0 * (rank + 1), torch.device("cpu"))


def meta_build_worker(rank: int, world: int, spec_json: str) -> dict[str, torch.Tensor]:
    """The trainer's sharded model as this rank builds it, gathered whole (name -> full tensor)."""
    from scaling.trainer.loop import build_parallel_model
    from scaling.trainer.runtime import Runtime
    from scaling.trainer.spec import RunSpec

    spec = RunSpec.model_validate_json(spec_json)
    rt = Runtime.current("cpu", spec.execution.tp, spec.execution.pp)
    par = build_parallel_model(spec, rt)
    assert par.model.lm_head.weight is par.model.wte.weight  # still tied
    out = {}
    for name, p in par.model.named_parameters():
        assert p.device.type == "cpu"
        out[name] = (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone()
    return out

"""Tensor parallelism, alone (tp2) and under FSDP2 (tp2 x dp2, zero3), against one process.

Real gloo processes: gradients after one step, the global gradient norm the clipping uses,
ten-step loss trajectories through the real loop in fp32 and bf16, DCP checkpoints resharded
between layouts (tp2 x dp2 -> dp4 and -> one process), and the bytes the communication model
predicts against what the step hands to the collectives (memory per rank: test_memory_per_rank.py).
"""

from __future__ import annotations

import tempfile
from collections import defaultdict
from typing import Any

import pytest
import torch

from _workers import (
    TINY_LLAMA,
    build_model,
    global_batch,
    loss_of,
    reference_grads,
    run_spec,
    spawn,
    tiny_spec,
    train_each,
    train_worker,
    trajectory,
    until_fault_each,
)
from scaling.communication import step_traffic
from scaling.accounting import ParallelLayout
from scaling.memory import memory_per_rank
from scaling.errors import SpecError
from scaling.trainer.checkpoints import checkpoint
from scaling.trainer.spec import RunSpec

FP32_RTOL = 1e-5  # as test_trajectory.py: only the order of reductions changes
BF16_RTOL = 2.0**-9  # test_trajectory.py's bf16 tolerance (half a bf16 ulp)

#: (name, workers, execution settings) of the layouts under test.
LAYOUTS = [("tp2", 2, {"tp": 2}), ("tp2xdp2", 4, {"tp": 2, "strategy": "zero3"})]
#: The gradient test also holds a llama (GQA, qk-norm, untied head) to one process on tp2 x dp2.
GRAD_LAYOUTS = LAYOUTS + [("llama-tp2xdp2", 4, {"tp": 2, "strategy": "zero3", "model": TINY_LLAMA})]


def _tp_grads_worker(rank: int, world: int, spec: Any) -> tuple[dict[str, torch.Tensor], float, float]:
    """This rank's data-parallel share of the global batch, one backward: full grads, the global
    norm, and the global norm after clipping to half of it. Then AdamW steps over the trainer's
    parameter groups with the foreach and the fused kernel forced (CUDA's choices; the CPU's
    default per-tensor loop takes plain tensors and DTensors mixed, those kernels do not)."""
    from scaling.trainer.optim import param_groups
    from scaling.trainer.parallel.data_parallel import parallelize
    from scaling.trainer.runtime import Runtime

    rt = Runtime.current("cpu", spec.execution.tp)
    par = parallelize(build_model(spec), spec)
    x, y = global_batch(spec)
    share = x.shape[0] // rt.dp
    rows = slice(rt.dp_rank * share, (rt.dp_rank + 1) * share)
    loss_of(par.module, x[rows], y[rows], spec.precision).backward()
    grads, norm = par.full_grads(), float(par.clip_grad_norm(0.0))
    par.clip_grad_norm(norm / 2)
    clipped = float(par.clip_grad_norm(0.0))
    for kernel in ({"foreach": True}, {"fused": True}):
        torch.optim.AdamW(param_groups(par.model, 0.1), lr=1e-3, **kernel).step()
    return grads, norm, clipped


@pytest.mark.parametrize("name,workers,execution", GRAD_LAYOUTS, ids=[n for n, _, _ in GRAD_LAYOUTS])
def test_gradients_and_their_norm_match_single_process(name: str, workers: int, execution: dict, tmp_path) -> None:
    torch.set_num_threads(1)
    spec = tiny_spec(execution.get("strategy", "auto"), model=execution.get("model"), workers=workers,
                     tp=execution["tp"])
    ref = reference_grads(spec)
    ref_norm = float(torch.nn.utils.get_total_norm(list(ref.values())))
    for rank, (grads, norm, clipped) in enumerate(spawn(_tp_grads_worker, workers, str(tmp_path), spec)):
        assert grads.keys() == ref.keys(), rank
        for param, g in grads.items():
            # The row-parallel layers add partial sums (over heads, over hidden units) in another
            # order than one matmul does: fp32 rounding of the order of the tensor's largest
            # entries, so the absolute tolerance scales with them (1e-6: about 8 ulps).
            atol = 1e-6 * float(ref[param].abs().max())
            torch.testing.assert_close(g, ref[param], rtol=1e-5, atol=atol, msg=f"{name} rank {rank} {param}")
        # The norm clipping uses spans every shard on both mesh dimensions (clip_grad_norm_
        # itself cannot stack norms of DTensors on different meshes).
        assert norm == pytest.approx(ref_norm, rel=1e-6), rank
        assert clipped == pytest.approx(ref_norm / 2, rel=1e-5), rank  # every shard scaled, on every mesh


_REFERENCE: dict[str, list[tuple[int, float]]] = {}


def _reference(precision: str) -> list[tuple[int, float]]:
    if precision not in _REFERENCE:
        with tempfile.TemporaryDirectory() as tmp:
            _REFERENCE[precision] = trajectory(train_worker(0, 1, run_spec("single", precision, workers=1).to_json(), tmp))
    return _REFERENCE[precision]


def _layout_spec(workers: int, execution: dict, precision: str, extra: dict) -> RunSpec:
    strategy = execution.get("strategy", "auto")
    return run_spec(strategy, precision, workers=workers, execution={"tp": execution["tp"], **extra})


@pytest.mark.slow
@pytest.mark.parametrize("name,workers,execution", LAYOUTS, ids=[n for n, _, _ in LAYOUTS])
def test_ten_steps_track_the_single_process_losses(name: str, workers: int, execution: dict, tmp_path) -> None:
    """fp32 and bf16 runs of the layout (in the same processes) follow one process step by step."""
    runs = [(_layout_spec(workers, execution, p, {"micro_batch_size": 2}).to_json(), str(tmp_path / p))
            for p in ("fp32", "bf16")]
    outs = spawn(train_each, workers, str(tmp_path), runs)
    for i, precision in enumerate(("fp32", "bf16")):
        ref = _reference(precision)
        first = outs[0][i]
        for rank in range(1, workers):
            assert trajectory(outs[rank][i]) == trajectory(first), (precision, rank)
        assert first["result"]["steps"] == 10
        steps, losses = zip(*trajectory(first))
        assert list(steps) == [s for s, _ in ref]
        rtol = FP32_RTOL if precision == "fp32" else BF16_RTOL
        assert list(losses) == pytest.approx([v for _, v in ref], rel=rtol, abs=0), precision


# -- checkpoints: DCP reshards between layouts ------------------------------------------------


def _cut_spec(workers: int, execution: dict) -> str:
    """Ten steps, a checkpoint every 4, cut by an injected fault at step 6 on the first attempt."""
    settings = {"checkpoint_interval": 4, **execution}
    return run_spec(settings.pop("strategy", "auto"), "fp32", workers=workers,
                    faults={"raise_at_step": 6, "raise_attempts": 1}, execution=settings).to_json()


@pytest.mark.slow
def test_tp2xdp2_checkpoint_resumes_at_dp4_and_on_one_process(tmp_path) -> None:
    saved = {"to_dp4": str(tmp_path / "to_dp4"), "to_single": str(tmp_path / "to_single")}
    tp2xdp2 = {"tp": 2, "strategy": "zero3"}
    first = spawn(until_fault_each, 4, str(tmp_path), [(_cut_spec(4, tp2xdp2), d) for d in saved.values()], 1)[0]
    for out, run_dir in zip(first, saved.values()):
        assert out["fault"] is not None
        ckpt = checkpoint.latest(run_dir)
        assert ckpt is not None and ckpt.name == "step_00000004"
        assert len(list(ckpt.glob("*.distcp"))) == 4  # every rank wrote its own shards

    ref = dict(trajectory(train_worker(0, 1, _cut_spec(1, {}), str(tmp_path / "ref"), attempt=2)))
    dp4 = spawn(until_fault_each, 4, str(tmp_path), [(_cut_spec(4, {"strategy": "zero3"}), saved["to_dp4"])], 2)[0][0]
    single = until_fault_each(0, 1, [(_cut_spec(1, {}), saved["to_single"])], 2)[0]
    for name, out in (("dp4", dp4), ("single", single)):
        assert out["fault"] is None and out["result"]["resumed_from"] == 4, name
        got = trajectory(out)
        assert [step for step, _ in got] == list(range(5, 11)), name
        assert [v for _, v in got] == pytest.approx([ref[s] for s, _ in got], rel=FP32_RTOL, abs=0), name


# -- what crosses the wire --------------------------------------------------------------------


class CollectiveBytes(torch.utils._python_dispatch.TorchDispatchMode):
    """Records (kind, payload bytes) of every collective op dispatched inside it, then runs it.

    A dispatch mode sees the collectives DTensor issues (functional ``all_reduce`` for tensor
    parallelism) and FSDP2's (``_allgather_base_`` / ``_reduce_scatter_base_``) alike, which
    ``CommDebugMode`` counts but does not size. Payloads are the model's ``K``: the full tensor
    (an all-gather's output, a reduce-scatter's input, an all-reduce's tensor).
    """

    KINDS = {"all_reduce": "all_reduce", "allreduce_": "all_reduce", "all_gather_into_tensor": "all_gather",
             "_allgather_base_": "all_gather", "reduce_scatter_tensor": "reduce_scatter",
             "_reduce_scatter_base_": "reduce_scatter"}

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[str, list[int]] = defaultdict(list)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = func._overloadpacket.__name__ if hasattr(func, "_overloadpacket") else ""
        kind = self.KINDS.get(name)
        if kind is not None:
            if name == "_allgather_base_":
                tensor = args[0]  # output
            elif name == "allreduce_":
                tensor = args[0][0]
            elif name == "_reduce_scatter_base_":
                tensor = args[1]  # input
            elif kind == "all_gather":
                tensor = None
                self.calls[kind].append(args[0].numel() * args[0].element_size() * args[1])
            else:
                tensor = args[0]
            if tensor is not None:
                self.calls[kind].append(tensor.numel() * tensor.element_size())
        return func(*args, **kwargs)


def _wire_worker(rank: int, world: int, cases: list[tuple[int, str, str]]) -> dict:
    """One training step per case; each case's collectives by kind."""
    import torch.distributed as dist

    from scaling.trainer.parallel.data_parallel import parallelize

    out = {}
    for tp, strategy, precision in cases:
        spec = tiny_spec(strategy, precision, workers=world, tp=tp)
        torch.manual_seed(0)
        par = parallelize(build_model(spec), spec)
        opt = par.build_optimizer(par.model.parameters(), lr=1e-3)
        x, y = global_batch(spec)
        rows = slice(0, 2)  # every rank the same two sequences: bytes do not depend on the data
        with CollectiveBytes() as counter:
            loss_of(par.module, x[rows], y[rows], precision).backward()
            opt.step()
        dist.barrier()
        out[(tp, strategy, precision)] = dict(counter.calls)
    return out


WIRE_CASES = [(2, "auto", "bf16"), (2, "auto", "fp32")]
WIRE_CASES_2D = [(2, "zero3", "fp32"), (2, "zero3", "bf16"), (2, "zero2", "fp32")]


@pytest.fixture(scope="module")
def wire(tmp_path_factory) -> dict[int, list[dict]]:
    base = tmp_path_factory.mktemp("wire")
    return {2: spawn(_wire_worker, 2, str(base), WIRE_CASES), 4: spawn(_wire_worker, 4, str(base), WIRE_CASES_2D)}


@pytest.mark.parametrize("world,case", [(2, c) for c in WIRE_CASES] + [(4, c) for c in WIRE_CASES_2D])
def test_model_bytes_equal_what_crosses_the_wire(world: int, case: tuple[int, str, str], wire) -> None:
    """Per collective kind, the payload bytes of one step equal :func:`scaling.communication.step_traffic`'s, exactly."""
    tp, strategy, precision = case
    dp = world // tp
    layout = ParallelLayout(dp=dp, tp=tp, strategy="ddp" if dp == 1 else strategy, micro_batch=2)  # type: ignore[arg-type]
    expected: dict[str, float] = defaultdict(float)
    for t in step_traffic(tiny_spec().shape, layout, precision):  # type: ignore[arg-type]
        expected[t.kind] += t.bytes_per_step
    for rank, by_case in enumerate(wire[world]):
        measured = {kind: float(sum(sizes)) for kind, sizes in by_case[case].items()}
        assert measured == dict(expected), f"rank {rank}: {by_case[case]}"


# -- checks at spec time ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "execution,model,message",
    [
        ({"workers": 3, "tp": 2}, {}, "workers \\(3\\) must be a multiple of tp\\*pp"),
        ({"workers": 4, "tp": 4}, {}, "execution: tp=4 does not divide n_head \\(2\\)"),
        ({"workers": 4, "tp": 2, "strategy": "ddp"}, {}, "ddp cannot be combined with tp=2"),
        ({"workers": 4, "tp": 2, "strategy": "zero1"}, {}, "zero1 cannot be combined with tp=2"),
    ],
)
def test_layouts_that_cannot_work_are_refused_at_spec_time(execution: dict, model: dict, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        RunSpec.from_dict({"model": {"n_layer": 2, "d_model": 32, "n_head": 2, "context": 16, **model},
                           "tokens": 640, "batch_tokens": 64, "execution": execution})


def test_tp_alone_takes_any_strategy_and_shares_the_batch_over_dp_only() -> None:
    spec = RunSpec.from_dict({"model": {"n_layer": 2, "d_model": 32, "n_head": 2, "context": 16},
                              "tokens": 640, "batch_tokens": 32, "execution": {"workers": 4, "tp": 2,
                                                                               "strategy": "zero3"}})
    assert spec.execution.dp == 2 and spec.micro_batch == 1  # 2 sequences over 2 data-parallel ranks
    assert tiny_spec("ddp", workers=2, tp=2).execution.dp == 1  # nothing to replicate: allowed


# -- through `scaling sweep` on Ray Train: tests/distributed/test_pipeline.py trains a tp2 x pp2 plan,
# and tests/orchestrator/test_sweep.py a data-parallel one, each against one process ----------------


def test_a_plan_under_auto_places_tp_with_dp_on_fsdp2() -> None:
    """``strategy: auto`` with tp2 x dp2 resolves to an FSDP2 stage (ddp could not take the DTensors)."""
    from scaling.accounting import Shape
    from scaling.orchestrator.plan import Plan

    plan = Plan.model_validate({
        "name": "tp", "runs_dir": "runs", "model": {"aspect_ratio": 16, "head_size": 16, "context": 32},
        "train": {"precision": "fp32", "batch_tokens": 512}, "resources": {"workers": 4, "tp": 2, "pp": 1},
        "grid": [{"models": [{"n_layer": 2, "d_model": 32, "n_head": 2}], "tokens": [5120]}],
    })
    from scaling.orchestrator.expand import run_request
    from scaling.trainer.resolve import OFFLINE, resolve

    done = resolve(run_request(plan, Shape(2, 32, 2, 256, 32), 5120, 1e-3, 512), OFFLINE)
    spec, best = done.spec, done.choice.best
    assert spec.execution.strategy == best.strategy == "zero2"
    layout = ParallelLayout(dp=2, tp=2, strategy="zero2", micro_batch=spec.micro_batch)
    assert best.memory == memory_per_rank(spec.shape, layout, "fp32")

"""Pipeline parallelism on real gloo processes against one process: gradients, losses, checkpoints, wire.

Every case runs ``scaling.trainer.parallel.pipeline`` in real processes (``_workers.spawn``) on the same
seed and global batch as a single-process reference: a 4-block model (two blocks per stage,
or one per stage and chunk under ``interleaved_1f1b``), 8 sequences per batch in micro-batches
of 2 (m = 4 on pp2, m = 2 per data-parallel rank on pp2 x dp2).
"""

from __future__ import annotations

import tempfile
from collections import defaultdict
from typing import Any

import pytest
import torch

from _workers import (
    dp_share,
    global_batch,
    loss_of,
    placed_spec,
    spawn,
    state_bytes,
    train_until_fault,
    train_worker,
    trajectory,
)
from scaling.accounting import model_state_bytes
from scaling.communication import bubble_fraction, step_traffic
from scaling.accounting import TRAINER_SCHEDULES, ParallelLayout, params_per_rank
from scaling.memory import memory_per_rank
from scaling.trainer.checkpoints import checkpoint
from scaling.trainer.spec import RunSpec

SCHEDULES = ("gpipe", "1f1b", "interleaved_1f1b")
#: fp32: a pipeline changes only the order of the micro-batches' gradient sums (and the tied
#: embedding's two parts), a few fp32 ulps: measured below 1e-6.
FP32_RTOL = 1e-5
#: bf16 with tensor parallelism, which rounds partial sums one process keeps in FP32: half a bf16
#: ulp of the mean loss.
BF16_RTOL = 2.0**-9
#: bf16 without tensor parallelism: the residual stream crosses the boundary in FP32 and FSDP2
#: gathers in bf16 only what autocast casts, so the stages compute what one process computes
#: under autocast, as DDP does (measured 1.6e-5 on pp2; 1.1e-4 when the boundary was bf16).
BF16_WHOLE_RTOL = 5e-5

MODEL = {"n_layer": 4, "d_model": 32, "n_head": 2, "vocab_size": 256, "context": 32}
#: The Llama family's counterpart: grouped-query attention (2 kv heads for 4 query heads, split
#: over tp2), a head-wide qk-norm, its own (untied) output layer on the last stage.
LLAMA = {"n_layer": 4, "d_model": 32, "n_head": 4, "n_kv_head": 2, "ffn": 64, "vocab_size": 256, "context": 32,
         "family": "llama", "qk_norm": True}


def spec(workers: int = 1, pp: int = 1, schedule: str = "1f1b", strategy: str = "auto", precision: str = "fp32",
         model: dict = MODEL, **execution: Any) -> RunSpec:
    """A ten-step run of 8 sequences per batch that reports after every step (tasks are not scored:
    test_evals_ranks does that)."""
    return placed_spec({
        "model": model,
        "tokens": 32 * 8 * 10,
        "batch_tokens": 32 * 8,
        "eval_tokens": 32 * 4,
        "evals": {"next_line": False},
        "optimizer": {"lr": 3e-3},
        "precision": precision,
        "execution": {"workers": workers, "pp": pp, "pp_schedule": schedule, "strategy": strategy,
                      "micro_batch_size": 2, "threads": 1, "eval_interval": 1, "checkpoint_interval": 100,
                      **execution},
    })


# -- what a plan may ask for ---------------------------------------------------------------


def test_blocks_split_as_evenly_as_possible() -> None:
    from scaling.trainer.parallel.pipeline import split_blocks, stages_of_rank

    assert split_blocks(4, 2) == [range(0, 2), range(2, 4)]
    assert split_blocks(7, 3) == [range(0, 3), range(3, 5), range(5, 7)]
    assert stages_of_rank(1, 2, 2) == [1, 3]  # interleaved: rank r runs stages r and r + pp
    with pytest.raises(ValueError, match="cannot each hold a block"):
        split_blocks(2, 3)


@pytest.mark.parametrize("change,message", [
    ({"workers": 3}, r"workers \(3\) must be a multiple of tp\*pp \(1\*2\)"),
    ({"pp_schedule": "interleaved_1f1b", "pp": 4, "workers": 4},
     r"interleaved_1f1b needs n_layer \(4\) to be a multiple of 2\*pp = 8"),
    ({"pp": 8, "workers": 8}, r"n_layer \(4\) gives some stage no block"),
    ({"micro_batch_size": 3}, r"micro_batch_size 3 does not divide a data-parallel rank's share of 8"),
    ({"micro_batch_size": 8, "pp_schedule": "interleaved_1f1b"}, r"micro-batches \(1\) to be a multiple of pp"),
    ({"compile": True}, "compile is not supported with pipelining"),
    ({"micro_batch_size": 8, "strategy": "ddp"}, r"1f1b needs at least pp \(2\) micro-batches, not 1"),
])
def test_layouts_a_pipeline_cannot_run_are_refused_in_one_line(change: dict, message: str) -> None:
    from scaling.errors import SpecError

    ex = {"workers": 2, "pp": 2, "micro_batch_size": 2, **change}
    with pytest.raises(SpecError, match=message) as err:
        RunSpec.from_dict({"model": MODEL, "tokens": 2560, "batch_tokens": 256, "precision": "fp32", "execution": ex})
    assert "\n" not in str(err.value)


def test_fp16_is_refused_with_pipelining() -> None:
    from scaling.errors import SpecError

    with pytest.raises(SpecError, match="fp16"):
        spec(2, 2, precision="fp16")


# -- gradients of one step ------------------------------------------------------------------


def reference_grads(s: RunSpec) -> tuple[dict[str, torch.Tensor], float, float]:
    """One process's gradients, global gradient norm and loss on the whole global batch."""
    from scaling.trainer.families.model import build_model

    model = build_model(s.shape, s.seed)
    x, y = global_batch(s)
    loss = loss_of(model, x, y, s.precision)
    loss.backward()
    norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
    return {n: p.grad.detach().clone() for n, p in model.named_parameters()}, float(norm), float(loss.detach())


def grads_worker(rank: int, world: int, specs: list[RunSpec]) -> list[dict[str, Any]]:
    """One pipelined step per spec: each rank's full gradients, the loss and the global norm."""
    import torch.distributed as dist

    from scaling.trainer.parallel.pipeline import build_pipeline
    from scaling.trainer.runtime import Runtime

    out = []
    for s in specs:
        pipe = build_pipeline(s, Runtime.current("cpu"))
        loss = pipe.step(*dp_share(s, rank))
        dist.all_reduce(loss, group=pipe.loss_group)  # as the loop sums it: once per tensor column
        norm = pipe.clip_grad_norm(0.0)  # 0: measure, do not clip
        grads = pipe.full_grads()
        opt = pipe.build_optimizer(pipe.model.parameters(), lr=1e-3)
        opt.step()
        out.append({"grads": grads, "loss": float(loss), "norm": float(norm), "state": state_bytes(pipe.model, opt),
                    "first": pipe.has_first})
    return out


GRAD_CASES = {"pp2": [spec(2, 2, sch) for sch in SCHEDULES],
              "pp2xdp2": [spec(4, 2, "1f1b", st) for st in ("zero3", "ddp", "zero2")],
              # stages whose blocks are split over tp; the tied embedding synced per tensor column
              "tp2xpp2": [spec(4, 2, sch, tp=2) for sch in ("1f1b", "interleaved_1f1b")],
              # all three: FSDP2 over dp of stages whose blocks are split over tp (8 processes), both families
              "tp2xpp2xdp2": [spec(8, 2, "1f1b", "zero3", tp=2), spec(8, 2, "1f1b", "zero3", model=LLAMA, tp=2)]}


@pytest.mark.parametrize("layout", list(GRAD_CASES))
def test_gradients_match_single_process(layout: str, tmp_path) -> None:
    """After one step every parameter's gradient on every stage equals the single-process one
    (the tied embedding's on both stages that hold it), as do the loss and the global norm."""
    torch.set_num_threads(1)
    cases = GRAD_CASES[layout]
    world = cases[0].execution.workers
    refs = {s.shape: reference_grads(s) for s in cases}
    outs = spawn(grads_worker, world, str(tmp_path), cases)
    for i, s in enumerate(cases):
        ref, ref_norm, ref_loss = refs[s.shape]
        what = f"{s.shape.family} {s.execution.pp_schedule} on {world} ranks ({s.execution.strategy}, tp{s.execution.tp})"
        seen: set[str] = set()
        for rank in range(world):
            got = outs[rank][i]
            assert got["loss"] == pytest.approx(ref_loss, rel=FP32_RTOL), what
            assert got["norm"] == pytest.approx(ref_norm, rel=FP32_RTOL), what
            for name, g in got["grads"].items():
                seen.add(name)
                # Row-parallel layers add partial sums in another order than one matmul: fp32
                # rounding of the order of the tensor's largest entries (as test_tensor_parallel).
                atol = 1e-7 if s.execution.tp == 1 else 1e-6 * float(ref[name].abs().max())
                torch.testing.assert_close(g, ref[name], rtol=FP32_RTOL, atol=atol, msg=f"{what}: rank {rank} {name}")
        assert seen == set(ref), what  # the stages together hold every parameter
        # Model state per rank is what scaling.memory counts: blocks/pp, the embeddings on the
        # first stage, the final norm and the tied copy on the last, sharded over dp by ZeRO.
        # (zero2's count includes the parameters it keeps gathered from forward to backward,
        # which are gone after the step this is measured at.)
        ex = s.execution
        if ex.strategy == "zero2":
            continue
        strategy = ex.strategy if ex.dp > 1 else "ddp"
        layout = ParallelLayout(dp=ex.dp, tp=ex.tp, pp=2, strategy=strategy, micro_batches=4 // ex.dp, micro_batch=2)
        first = memory_per_rank(s.shape, layout, "fp32")
        last = model_state_bytes(params_per_rank(s.shape, ex.tp, 2, stage=1), "fp32", strategy, ex.dp)
        for rank in range(world):
            got = outs[rank][i]["state"]
            expected = (first.weights_bytes, first.gradients_bytes, first.optimizer_bytes) if outs[rank][i]["first"] \
                else last
            assert (got["weights"], got["gradients"], got["optimizer"]) == expected, f"{what}: rank {rank}"


# -- ten-step trajectories through the real loop -----------------------------------------------

_REFERENCE: dict[tuple[str, str], dict[str, Any]] = {}
#: The llama run of the trajectories adds a z-loss: it must join the gradient on the last stage
#: and stay out of the reported train loss, as on one process.
LLAMA_Z = {**LLAMA, "z_loss": 1e-3}
#: μP on the llama: per-group rates on DTensors (tp) and the output multiplier on the last stage (pp).
FAMILIES = {"gpt2": MODEL, "llama": LLAMA_Z, "llama-mup": {**LLAMA_Z, "parametrization": "mup", "base_width": 8}}


def reference_run(precision: str, family: str = "gpt2") -> dict[str, Any]:
    """The single process's run (its reports and result), trained once per precision and family."""
    if (precision, family) not in _REFERENCE:
        with tempfile.TemporaryDirectory() as tmp:
            _REFERENCE[precision, family] = train_worker(
                0, 1, spec(precision=precision, model=FAMILIES[family]).to_json(), tmp)
    return _REFERENCE[precision, family]


def reference(precision: str, family: str = "gpt2") -> list[tuple[int, float]]:
    return trajectory(reference_run(precision, family))


def train_each(rank: int, world: int, runs: list[tuple[str, str]]) -> list[dict[str, Any]]:
    return [train_worker(rank, world, spec_json, run_dir) for spec_json, run_dir in runs]


TRAJECTORY_CASES = {
    "pp2": (2, 1, [(sch, "auto", p) for p in ("fp32", "bf16") for sch in SCHEDULES]),
    # ddp: DDP's reducer, armed by the schedule before the last backward only, must survive the
    # first step's shape inference (its buckets are rebuilt at the second step)
    "pp2xdp2": (4, 1, [("1f1b", "zero3", p) for p in ("fp32", "bf16")] + [("1f1b", "ddp", "fp32")]),
    "tp2xpp2": (4, 2, [("1f1b", "auto", p) for p in ("fp32", "bf16")]
                + [("1f1b", "auto", "fp32", "llama"), ("1f1b", "auto", "fp32", "llama-mup")]),
}


@pytest.mark.slow
@pytest.mark.parametrize("layout", list(TRAJECTORY_CASES))
def test_trajectories_match_single_process(layout: str, tmp_path) -> None:
    """Ten steps through ``scaling.trainer.train``: every rank reports the single process's losses."""
    world, tp, cases = TRAJECTORY_CASES[layout]
    cases = [(*case, "gpt2")[:4] for case in cases]
    runs = [(spec(world, 2, sch, strat, p, model=FAMILIES[fam], tp=tp).to_json(),
             str(tmp_path / f"{sch}-{strat}-{p}-{fam}")) for sch, strat, p, fam in cases]
    outs = spawn(train_each, world, str(tmp_path), runs)
    for i, (sch, strat, precision, family) in enumerate(cases):
        what = f"{layout} {sch} {strat} {precision} {family}"
        ref = reference(precision, family)
        rank0 = outs[0][i]
        assert rank0["result"]["steps"] == 10, what
        for rank in range(1, world):
            assert trajectory(outs[rank][i]) == trajectory(rank0), what  # one loss, on every rank
        steps, losses = zip(*trajectory(rank0))
        assert list(steps) == list(range(1, 11)), what
        whole = tp == 1
        rtol = FP32_RTOL if precision == "fp32" else BF16_WHOLE_RTOL if whole else BF16_RTOL
        assert list(losses) == pytest.approx([v for _, v in ref], rel=rtol, abs=0), what
        assert rank0["result"]["final_eval_loss"] == pytest.approx(
            train_reference_eval(precision, family), rel=rtol), what


def train_reference_eval(precision: str, family: str = "gpt2") -> float:
    return reference_run(precision, family)["result"]["final_eval_loss"]


# -- checkpoints: saved at pp2, resumed on one process ------------------------------------------


def until_fault_each(rank: int, world: int, runs: list[tuple[str, str]], attempt: int = 1) -> list[dict[str, Any]]:
    return [train_until_fault(rank, world, spec_json, run_dir, attempt) for spec_json, run_dir in runs]


def _cut(s: RunSpec) -> str:
    """``s`` checkpointing at step 4 and stopped by an injected fault at step 6 (first attempt)."""
    return s.model_copy(update={
        "faults": s.faults.model_copy(update={"raise_at_step": 6, "raise_attempts": 1}),
        "execution": s.execution.model_copy(update={"checkpoint_interval": 4}),
    }).to_json()


@pytest.mark.slow
def test_checkpoint_saved_at_pp2_resumes_on_one_process(tmp_path) -> None:
    """DCP reshards a pipeline checkpoint into the unsplit model: the stages' parameter names are
    the single model's, the tied embedding saved once from the two stages that hold it."""
    cases = {sch: str(tmp_path / sch) for sch in ("1f1b", "interleaved_1f1b")}
    first = spawn(until_fault_each, 2, str(tmp_path), [(_cut(spec(2, 2, sch)), d) for sch, d in cases.items()])[0]
    single = _cut(spec())
    ref = dict(trajectory(train_worker(0, 1, single, str(tmp_path / "ref"), attempt=2)))
    for (sch, run_dir), out in zip(cases.items(), first):
        assert out["fault"] is not None, sch
        ckpt = checkpoint.latest(run_dir)
        assert ckpt is not None and ckpt.name == "step_00000004", sch
        resumed = train_until_fault(0, 1, single, run_dir, 2)
        assert resumed["fault"] is None and resumed["result"]["resumed_from"] == 4, sch
        got = trajectory(resumed)
        assert [step for step, _ in got] == list(range(5, 11)), sch
        assert [v for _, v in got] == pytest.approx([ref[step] for step, _ in got], rel=FP32_RTOL, abs=0), sch


@pytest.mark.slow
def test_checkpoint_saved_interleaved_resumes_under_1f1b(tmp_path) -> None:
    """A pipeline checkpoint resumes at pp2 too, under another schedule (other stage boundaries:
    four chunks of one block become two stages of two)."""
    run_dir = str(tmp_path / "run")
    cut = spawn(until_fault_each, 2, str(tmp_path), [(_cut(spec(2, 2, "interleaved_1f1b")), run_dir)])
    assert cut[0][0]["fault"] is not None
    resumed = spawn(until_fault_each, 2, str(tmp_path), [(_cut(spec(2, 2, "1f1b")), run_dir)], 2)[0][0]
    ref = dict(trajectory(train_worker(0, 1, _cut(spec()), str(tmp_path / "ref"), attempt=2)))
    assert resumed["fault"] is None and resumed["result"]["resumed_from"] == 4
    got = trajectory(resumed)
    assert [step for step, _ in got] == list(range(5, 11))
    assert [v for _, v in got] == pytest.approx([ref[step] for step, _ in got], rel=FP32_RTOL, abs=0)


# -- what crosses the wire ---------------------------------------------------------------------


class CountingP2P:
    """Records each point-to-point op the schedules hand to torch (their one ``_batch_p2p``
    helper) and each ``all_reduce``, then runs the real one: counting, not mocking."""

    def __init__(self) -> None:
        self.bytes: dict[str, int] = defaultdict(int)

    def __enter__(self) -> "CountingP2P":
        import torch.distributed as dist
        from torch.distributed.pipelining import schedules

        self._p2p, self._all_reduce = schedules._batch_p2p, dist.all_reduce

        def p2p(ops: list, *args: Any, **kwargs: Any) -> Any:
            for op in ops:
                self.bytes[op.op.__name__] += op.tensor.numel() * op.tensor.element_size()
            return self._p2p(ops, *args, **kwargs)

        def all_reduce(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            self.bytes["all_reduce"] += tensor.numel() * tensor.element_size()
            return self._all_reduce(tensor, *args, **kwargs)

        schedules._batch_p2p, dist.all_reduce = p2p, all_reduce
        return self

    def __exit__(self, *exc: Any) -> None:
        import torch.distributed as dist
        from torch.distributed.pipelining import schedules

        schedules._batch_p2p, dist.all_reduce = self._p2p, self._all_reduce


def wire_worker(rank: int, world: int, specs: list[RunSpec]) -> list[dict[str, int]]:
    """Bytes each rank sent, received and all-reduced in one step (the second: the first also
    infers the stages' shapes)."""
    from scaling.trainer.parallel.pipeline import build_pipeline
    from scaling.trainer.runtime import Runtime

    out = []
    for s in specs:
        pipe = build_pipeline(s, Runtime.current("cpu"))
        x, y = dp_share(s, rank)
        pipe.step(x, y)
        with CountingP2P() as counter:
            pipe.step(x, y)
        out.append(dict(counter.bytes))
    return out


WIRE_CASES = [spec(2, 2, sch, precision=p) for sch in ("gpipe", "1f1b") for p in ("fp32", "bf16")] + [
    spec(2, 2, "interleaved_1f1b", precision=p) for p in ("fp32", "bf16")]


def test_p2p_bytes_equal_the_comms_model(tmp_path) -> None:
    """What the first rank sends (activations forward; under interleaving also its second chunk's
    input gradients backward) and receives, and the tied embedding's gradient all-reduce, equal
    :func:`scaling.communication.step_traffic`'s pipeline payloads exactly; the last rank mirrors the
    first. Boundary activations travel in FP32, the residual stream's dtype in every layout."""
    outs = spawn(wire_worker, 2, str(tmp_path), WIRE_CASES)
    for i, s in enumerate(WIRE_CASES):
        schedule, chunks = TRAINER_SCHEDULES[s.execution.pp_schedule]
        layout = ParallelLayout(pp=2, micro_batches=4, micro_batch=2, schedule=schedule, chunks=chunks)
        model = {t.what: t.bytes_per_step for t in step_traffic(s.shape, layout, s.precision) if t.group == "pp"}
        first, last = outs[0][i], outs[1][i]
        what = f"{s.execution.pp_schedule} {s.precision}"
        sent = model["activations sent, forward"] + model.get("activation gradients sent, backward", 0)
        received = model["activation gradients received, backward"] + model.get("activations received, forward", 0)
        assert first["isend"] == sent, what
        assert first["irecv"] == received, what
        assert (last["irecv"], last["isend"]) == (first["isend"], first["irecv"]), what
        assert first["all_reduce"] == last["all_reduce"] == model["tied embedding gradient"], what


# -- the bubble ------------------------------------------------------------------------------

#: Unit costs of one micro-batch's forward and backward on a rank (split over its chunks) for the
#: replay of the recorded order; the backward is twice the forward, as in Narayanan et al. (2021).
UNIT_FORWARD, UNIT_BACKWARD = 1.0, 2.0


def order_worker(rank: int, world: int, specs: list[RunSpec]) -> list[list[tuple[int, str, int]]]:
    """:func:`compute_order` of each spec in turn, in the same processes."""
    return [compute_order(rank, s) for s in specs]


def compute_order(rank: int, s: RunSpec) -> list[tuple[int, str, int]]:
    """The order in which this rank runs its stages' compute during one step: (stage index,
    ``F`` or ``B``, micro-batch), recorded around each stage's ``forward_one_chunk`` and
    ``backward_one_chunk`` (the compute of one micro-batch, loss included)."""
    from scaling.trainer.parallel.pipeline import build_pipeline
    from scaling.trainer.runtime import Runtime

    pipe = build_pipeline(s, Runtime.current("cpu"))
    order: list[tuple[int, str, int]] = []

    def recorded(fn: Any, index: int, kind: str) -> Any:
        def run(chunk: int, *args: Any, **kwargs: Any) -> Any:
            order.append((index, kind, chunk))
            return fn(chunk, *args, **kwargs)
        return run

    for stage in pipe.stages:
        stage.forward_one_chunk = recorded(stage.forward_one_chunk, stage.stage_index, "F")
        stage.backward_one_chunk = recorded(stage.backward_one_chunk, stage.stage_index, "B")
    x, y = dp_share(s, rank)
    pipe.step(x, y)  # the first step also infers the stages' shapes
    order.clear()
    pipe.step(x, y)
    return order


def replayed_idle_share(orders: list[list[tuple[int, str, int]]], chunks: int) -> float:
    """The idle share of a step when each rank runs its recorded order with fixed costs.

    A forward of stage s waits for the forward of stage s-1 on the same micro-batch, a backward
    for the backward of stage s+1 (the last stage's for its own forward); a rank runs one thing at
    a time in the order it ran them. Communication is free. The step ends when the last rank
    finishes; idle = 1 - busy / (ranks x step)."""
    cost = {"F": UNIT_FORWARD / chunks, "B": UNIT_BACKWARD / chunks}
    last_stage = max(index for order in orders for index, _, _ in order)
    done: dict[tuple[int, str, int], float] = {}
    position, clock = [0] * len(orders), [0.0] * len(orders)
    while any(position[r] < len(order) for r, order in enumerate(orders)):
        progressed = False
        for r, order in enumerate(orders):
            while position[r] < len(order):
                index, kind, mb = order[position[r]]
                needs = ((index - 1, "F", mb) if kind == "F" else
                         (index, "F", mb) if index == last_stage else (index + 1, "B", mb))
                if kind == "F" and index == 0:
                    ready = 0.0
                elif needs in done:
                    ready = done[needs]
                else:
                    break
                clock[r] = max(clock[r], ready) + cost[kind]
                done[(index, kind, mb)] = clock[r]
                position[r] += 1
                progressed = True
        assert progressed, f"the recorded orders deadlock: {orders}"
    busy = sum(cost[kind] for order in orders for _, kind, _ in order)
    return 1.0 - busy / (len(orders) * max(clock))


def test_the_schedules_order_gives_the_modelled_bubble(tmp_path) -> None:
    """The idle share of a step, (p-1)/(v*m+p-1), is what each schedule's own order of compute
    gives. The order each rank runs its stages' forwards and backwards is recorded from the real
    pipeline (p = 2, m = 4; v = 2 chunks per rank under interleaving) and replayed with fixed
    costs and the pipeline's dependencies, so the check is of the schedule's structure, not of
    the timings a shared CPU grants (``benchmarks/bench_pipeline.py`` measures those)."""
    outs = spawn(order_worker, 2, str(tmp_path), [spec(2, 2, sch) for sch in SCHEDULES])
    for i, schedule in enumerate(SCHEDULES):
        orders = [out[i] for out in outs]
        _, chunks = TRAINER_SCHEDULES[schedule]
        for order in orders:  # every micro-batch through every stage of the rank, once each way
            assert sorted(order) == sorted({(st, k, mb) for st, _, _ in order for k in "FB" for mb in range(4)})
        expected = bubble_fraction(2, 4, *TRAINER_SCHEDULES[schedule])
        assert replayed_idle_share(orders, chunks) == pytest.approx(expected, rel=1e-9), (schedule, orders)


# -- tensor-parallel stages (tp2 x pp2) -----------------------------------------------------------


@pytest.mark.slow
def test_checkpoint_saved_at_tp2xpp2_resumes_on_one_process(tmp_path) -> None:
    """DCP reshards a checkpoint of tensor-parallel stages (blocks split over tp, each stage its
    own blocks) into the unsplit model of one process."""
    run_dir = str(tmp_path / "run")
    cut = spawn(until_fault_each, 4, str(tmp_path), [(_cut(spec(4, 2, "1f1b", tp=2)), run_dir)])
    assert all(out[0]["fault"] is not None for out in cut)
    ckpt = checkpoint.latest(run_dir)
    assert ckpt is not None and ckpt.name == "step_00000004"
    single = _cut(spec())
    ref = dict(trajectory(train_worker(0, 1, single, str(tmp_path / "ref"), attempt=2)))
    resumed = train_until_fault(0, 1, single, run_dir, 2)
    assert resumed["fault"] is None and resumed["result"]["resumed_from"] == 4
    got = trajectory(resumed)
    assert [step for step, _ in got] == list(range(5, 11))
    assert [v for _, v in got] == pytest.approx([ref[step] for step, _ in got], rel=FP32_RTOL, abs=0)

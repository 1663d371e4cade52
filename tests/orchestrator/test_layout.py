"""The layout search (`scaling.layout`) and `strategy: auto` in plans: what it picks, what it refuses, why.

The optimality test enumerates the search space on its own (every dp, tp, pp, strategy, schedule
and micro-batch, with the constraints written out here) and times each layout with the same
cost model, so it checks that the search misses no layout and returns the fastest that fits.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_run import run_cli

from scaling.accounting import GIB, Shape
from scaling.batching import micro_batch_size, micro_batches
from scaling.accounting import ParallelLayout
from scaling.layout import SCHEDULES, Machine, Request, choose, evaluate, layouts, no_layout_problem

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "gpu-cluster.yaml"


@pytest.fixture(scope="module")
def cluster_plan() -> dict[str, Any]:
    from scaling.orchestrator.planning import plan_summary

    return plan_summary(EXAMPLE)


def _rung(summary: dict[str, Any], n_layer: int) -> dict[str, Any]:
    (row,) = [r for r in summary["runs"] if r["n_layer"] == n_layer and r["budget"] is None]
    return row


# -- the example's large rungs --------------------------------------------------------------------


def test_30b_rung_pipelines_across_nodes_and_keeps_each_stage_inside_one(cluster_plan: dict[str, Any]) -> None:
    """29.6B parameters on 32 GPUs of 80 GiB: with the activations a fused attention kernel keeps
    (36 sbh a block, not Korthikanti's 34 + 5as/h) the rung fits without tensor parallelism;
    its pipeline stages sit on different nodes and each stage's ranks inside one."""
    row = _rung(cluster_plan, 48)  # 48 x 7168, 29.6B parameters on 32 GPUs (4 nodes of 8)
    assert row["N"] > 2.9e10 and row["workers"] == 32
    assert row["pp"] > 1 and row["tp"] * row["dp"] <= 8, "every stage's ranks inside one node"
    assert row["dp"] * row["tp"] * row["pp"] == 32
    assert row["memory_gib"] <= 80
    reasons = " ".join(row["reasons"])
    assert f"pp={row['pp']} across nodes" in reasons and "slower than nvlink" in reasons
    if row["tp"] == 1:
        assert "tp=1: tensor parallelism's activation all-reduces" in reasons
    else:
        assert f"tp={row['tp']} inside one node" in reasons
    assert row["compute_seconds"] > 0 and row["comm_seconds"] > 0 and row["bubble_seconds"] > 0


def test_a_model_that_fits_no_node_without_tp_puts_tp_inside_a_node() -> None:
    """GPT-3's 175B on 1,024 GPUs of 48 GiB: tp=8 inside each node, because less does not fit."""
    req = Request(shape=Shape(96, 12288, 96, 50257, 2048), precision="bf16", workers=1024, sequences=1536,
                  flops_per_step=6 * 1.75e11 * 3145728, rate=3.5e14, memory_limit_bytes=48 * GIB,
                  machine=Machine(128, 8, "nvlink", "infiniband"))
    choice = choose(req)
    assert choice.best is not None and choice.best.layout.tp == 8 and choice.best.memory.total_gib <= 48
    reasons = " ".join(r.long for r in choice.reasons)
    assert "tp=8 inside one node" in reasons and "do not fit a 48 GiB device at tp<8" in reasons


def test_7b_rung_pipelines_across_nodes_and_says_why_not_tp(cluster_plan: dict[str, Any]) -> None:
    """At 80 GiB a 6.4B model fits without tensor parallelism; the model then prefers a pipeline
    across nodes (activations only) and keeps data parallelism inside the node."""
    row = _rung(cluster_plan, 32)
    assert row["N"] > 6e9 and row["workers"] == 32
    assert row["pp"] > 1 and row["dp"] * row["tp"] <= 8, "every stage's ranks inside one node"
    assert row["tp"] <= 8
    reasons = " ".join(row["reasons"])
    assert f"pp={row['pp']} across nodes" in reasons
    if row["tp"] == 1:
        assert "tp=1: tensor parallelism's activation all-reduces" in reasons
    else:
        assert f"tp={row['tp']} inside one node" in reasons


def test_the_runs_execution_carries_the_chosen_layout(cluster_plan: dict[str, Any]) -> None:
    from scaling.orchestrator.expand import expand
    from scaling.orchestrator.plan import load_plan

    plan, source = load_plan(EXAMPLE)
    exp = expand(plan, source)
    big = [r for r in exp.runs if r.spec.shape.n_layer == 48][0]
    row = _rung(cluster_plan, 48)
    ex = big.spec.execution
    assert (ex.tp, ex.pp, ex.strategy, ex.workers) == (row["tp"], row["pp"], row["strategy"], 32)
    assert ex.micro_batch_size == row["micro_batch"]
    assert big.layout is not None and big.layout.best.label() == row["layout"]
    # The layout is execution, not result: the key is the one a single worker would have.
    single = big.spec.model_copy(update={"execution": ex.model_copy(update={"workers": 1, "tp": 1, "pp": 1})})
    assert single.key == big.key


def test_small_models_pick_pure_data_parallelism(cluster_plan: dict[str, Any]) -> None:
    small = [r for r in cluster_plan["runs"] if r["budget"] is not None]
    assert len(small) >= 10
    assert all((r["tp"], r["pp"], r["dp"]) == (1, 1, 8) for r in small)
    assert all(r["bubble_seconds"] == 0 for r in small)


def test_scaling_plan_prints_layouts_and_explains_a_run(cluster_plan: dict[str, Any]) -> None:
    code, out, err = run_cli("plan", str(EXAMPLE))
    assert code == 0, err
    for col in ("layout", "GiB/rank", "compute", "comm", "bubble", "why"):
        assert col in out
    key = _rung(cluster_plan, 48)["key"]
    code, out, err = run_cli("plan", str(EXAMPLE), "--explain", key[:8])
    assert code == 0, err
    assert out.startswith(f"run {key}")
    assert "s per step = compute" in out and "not overlapped" in out
    assert "across nodes" in out
    code, out, err = run_cli("plan", str(EXAMPLE), "--explain", "zzzz")
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "--explain 'zzzz': no run" in err
    code, out, err = run_cli("plan", str(EXAMPLE), "--explain", "")
    assert code == 2 and "no run" in err  # the empty prefix names nothing
    prefix = next(p for p in "0123456789abcdef"
                  if sum(r["key"].startswith(p) for r in cluster_plan["runs"]) > 1)
    code, out, err = run_cli("plan", str(EXAMPLE), "--explain", prefix)
    assert code == 2 and f"--explain '{prefix}': the prefix is ambiguous" in err and len(err.strip().splitlines()) == 1
    code, out, err = run_cli("plan", str(EXAMPLE), "--explain", key[:8], "--format", "json")
    d = json.loads(out)
    assert code == 0 and d["run"]["key"] == key and d["explanation"][0].startswith(f"run {key}")


def test_scaling_plan_says_which_attention_kernel_the_runs_get(cluster_plan: dict[str, Any], tmp_path: Path) -> None:
    """One note per distinct (head dim, device, precision, compile): the kernel and why."""
    from scaling.orchestrator.planning import plan_summary

    (line,) = [n for n in cluster_plan["notes"] if n.startswith("attention for ")]
    assert line.startswith(f"attention for {len(cluster_plan['runs'])} run(s) (head dim 128, cuda, bf16): ")
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: t\nmodel: {context: 64}\ntrain: {precision: fp32, batch_tokens: 1024, compile: true}\n"
                    "resources: {throughput_flops: 1.0e+9}\ngrid:\n  - tokens: [102400]\n"
                    "    models: [{n_layer: 1, d_model: 16, n_head: 2}, {n_layer: 1, d_model: 32, n_head: 2}, "
                    "{n_layer: 2, d_model: 32, n_head: 2}]\n")
    lines = [n for n in plan_summary(plan)["notes"] if n.startswith("attention for ")]
    assert [line.split(":")[0] for line in lines] == [
        f"attention for {runs} run(s) (head dim {hd}, {dev}, fp32, compiled)"
        for runs, hd, dev in ((1, 8, lines[0].split(", ")[1]), (2, 16, lines[1].split(", ")[1]))]
    assert all(": sdpa (" in line for line in lines)  # fp32 never takes flash-attn, whatever the machine


# -- refusals -------------------------------------------------------------------------------------


def _plan(tmp_path: Path, resources: dict[str, Any], models: list[Any]) -> Path:
    plan = {
        "name": "layouts",
        "model": {"aspect_ratio": 16, "head_size": 16, "context": 64},
        "train": {"precision": "bf16", "batch_tokens": 64 * 64},
        "resources": {"gpus_per_worker": 1, **resources},
        "grid": [{"models": models, "tokens": [1e7]}],
    }
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


def _one_line_error(path: Path) -> str:
    code, out, err = run_cli("plan", str(path))
    assert code == 2, (out, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


def test_a_model_no_layout_fits_is_refused_in_one_line(tmp_path: Path) -> None:
    big = {"n_layer": 8, "d_model": 2048, "n_head": 16}  # 403M parameters: 6 GiB of state alone
    err = _one_line_error(_plan(tmp_path, {"workers": 4, "device_memory_gib": 1,
                                           "cluster": {"nodes": 1, "gpus_per_node": 4}}, [big]))
    assert "resources.device_memory_gib" in err and "any layout of 4 workers" in err and "more than the device's 1 GiB" in err


@pytest.mark.parametrize("workers, tp, per_node", [(8, 8, 4), (24, 6, 8)])
def test_tp_not_dividing_a_node_is_refused(tmp_path: Path, workers: int, tp: int, per_node: int) -> None:
    """Larger than a node, or not dividing it: three tp=6 groups do not fit three nodes of 8 whole."""
    shape = {"n_layer": 4, "d_model": 384, "n_head": 24}
    err = _one_line_error(_plan(tmp_path, {"workers": workers, "tp": tp,
                                           "cluster": {"nodes": 3, "gpus_per_node": per_node}}, [shape]))
    assert "resources" in err and f"tp={tp} does not divide a node ({per_node} per node)" in err


def test_the_search_keeps_tp_to_divisors_of_a_node() -> None:
    """Two nodes of 6: a 12-worker run may not take tp=4 (three groups of 4 need three nodes)."""
    shape = Shape(12, 512, 8, 256, 1024)  # tp 1, 2, 4 and 8 divide its heads and its MLP
    req = Request(shape, "bf16", 12, 48, 1e15, 1e14, 80 * GIB, Machine(2, 6), 0.0)
    assert {lay.tp for lay, _ in layouts(req)} == {1, 2}
    assert "tp=4 does not divide a node's 6 ranks" in no_layout_problem(replace(req, tp=4))


def test_shapes_tp_cannot_split_are_refused(tmp_path: Path) -> None:
    shape = {"n_layer": 4, "d_model": 192, "n_head": 3}
    err = _one_line_error(_plan(tmp_path, {"workers": 2, "tp": 2}, [shape]))
    assert "tp=2 does not divide n_head (3)" in err
    err = _one_line_error(_plan(tmp_path, {"workers": 6, "tp": 2, "pp": 3}, [{"n_layer": 4, "d_model": 256, "n_head": 4}]))
    assert "pp=3 does not divide n_layer (4)" in err


def test_workers_must_be_dp_tp_pp(tmp_path: Path) -> None:
    err = _one_line_error(_plan(tmp_path, {"workers": 6, "tp": 4}, [{"n_layer": 4, "d_model": 256, "n_head": 4}]))
    assert "workers (6) must be a multiple of tp*pp (4*1)" in err


def test_fixed_tp_and_pp_are_kept_and_auto_fills_the_rest(tmp_path: Path) -> None:
    from scaling.orchestrator.expand import expand
    from scaling.orchestrator.plan import load_plan

    shape = {"n_layer": 4, "d_model": 256, "n_head": 4}
    plan, source = load_plan(_plan(tmp_path, {"workers": 8, "tp": 2, "pp": 2, "cluster": {"gpus_per_node": 8}}, [shape]))
    (run,) = expand(plan, source, resolve=False).runs
    ex = run.spec.execution
    assert (ex.tp, ex.pp, ex.dp) == (2, 2, 2)
    assert ex.strategy in ("zero2", "zero3") and ex.pp_schedule in SCHEDULES  # FSDP2 takes TP's DTensors
    assert run.layout is not None and not any(r.long.startswith(("tp=", "pp=")) for r in run.layout.reasons)
    # Fixing the micro-batch too leaves the strategy and schedule to the search.
    plan, source = load_plan(_plan(tmp_path, {"workers": 8, "pp": 4, "micro_batch_size": 2,
                                              "cluster": {"gpus_per_node": 8}}, [shape]))
    (run,) = expand(plan, source, resolve=False).runs
    ex = run.spec.execution
    assert (ex.pp, ex.micro_batch_size) == (4, 2) and ex.tp * ex.dp == 2


# -- the search itself ----------------------------------------------------------------------------


MACHINES = [Machine(2, 4, "nvlink", "infiniband"), Machine(4, 2, "pcie", "roce"), Machine(1, 8, "nvlink", "roce")]


def _requests() -> list[Request]:
    out = []
    for shape, limit_gib, machine in itertools.product(
        [Shape(8, 512, 8, 256, 512), Shape(4, 384, 6, 256, 256), Shape(12, 1024, 16, 512, 1024)],
        [0.05, 0.5, 4.0, 64.0],
        MACHINES,
    ):
        flops = shape.flops_per_token("6N_attention", "total") * 32 * shape.context
        out.append(Request(shape, "bf16", 8, 32, flops, 1e12, limit_gib * GIB, machine, 0.001))
    return out


def _brute_force(req: Request) -> set[tuple[Any, ...]]:
    """Every layout of the request, enumerated independently of `scaling.layout.layouts`."""
    found = set()
    for dp, tp, pp in itertools.product(range(1, 9), repeat=3):
        if dp * tp * pp != req.workers or req.machine.gpus_per_node % tp or dp > req.sequences:
            continue
        if pp > 1 and req.sequences % dp:  # a pipeline's ranks take equal shares
            continue
        if req.shape.n_head % tp or (4 * req.shape.d_model) % tp:
            continue
        schedules = ["1f1b"] if pp == 1 else ["gpipe", "1f1b", "interleaved_1f1b"]
        strategies = ["ddp"] if dp == 1 else ["ddp", "zero1", "zero2", "zero3"] if tp == 1 else ["zero2", "zero3"]
        for name, strategy in itertools.product(schedules, strategies):
            kind, chunks = SCHEDULES[name] if pp > 1 else ("1f1b", 1)
            if req.shape.n_layer % (pp * chunks):
                continue
            share = math.ceil(req.sequences / dp)
            for b in {micro_batch_size(req.sequences, dp, s) for s in range(1, share + 1)
                      if s == share or s & (s - 1) == 0}:
                m = len(micro_batches(req.sequences, dp, share, b))
                if pp > 1 and b * m != share:  # ... in equal micro-batches
                    continue
                if (chunks > 1 and m % pp) or (pp > 1 and name == "1f1b" and m < pp):
                    continue
                found.add((dp, tp, pp, strategy, kind, chunks, b, m, name if pp > 1 else "1f1b"))
    return found


def _key(layout: ParallelLayout, name: str) -> tuple[Any, ...]:
    return (layout.dp, layout.tp, layout.pp, layout.strategy, layout.schedule, layout.chunks,
            layout.micro_batch, layout.micro_batches, name)


@pytest.mark.parametrize("req", _requests(), ids=lambda r: f"L{r.shape.n_layer}-{r.memory_limit_bytes / GIB:g}GiB-"
                         f"{r.machine.nodes}x{r.machine.gpus_per_node}")
def test_the_chosen_layout_is_the_fastest_that_fits(req: Request) -> None:
    expected = _brute_force(req)
    assert {_key(lay, name) for lay, name in layouts(req)} == expected
    timed = [evaluate(req, lay, name) for lay, name in layouts(req)]
    feasible = [c for c in timed if c.fits]
    choice = choose(req)
    if not feasible:
        assert choice.best is None and choice.considered
        return
    assert choice.best is not None and choice.best.fits
    assert all(choice.best.step_s <= c.step_s for c in feasible)
    assert all(c.layout.tp <= req.machine.gpus_per_node for c in choice.considered), "TP never spans nodes"
    assert choice.reasons or req.workers == 1


def test_tp_never_spans_a_node_even_when_it_would_fit_only_there() -> None:
    """A model that would need tp=8 on nodes of 4 GPUs gets no layout rather than a cross-node TP group."""
    shape = Shape(4, 4096, 32, 256, 2048)
    req = Request(shape, "bf16", 8, 8, 1e15, 1e14, 4 * GIB, Machine(2, 4), 0.0)
    wide = Request(shape, "bf16", 8, 8, 1e15, 1e14, 4 * GIB, Machine(1, 8), 0.0)
    assert all(c.layout.tp <= 4 for c in choose(req).considered)
    assert max(c.layout.tp for c in choose(wide).considered) == 8


def test_communication_time_is_the_cost_models_plus_message_latency() -> None:
    """The search times a layout with `scaling.communication.step_comm_time`, adding only the latency of
    the extra messages a data-parallel collective is split into (buckets, FSDP units, tensors)."""
    from scaling.communication import step_comm_time
    from scaling.layout import comm_seconds

    shape = Shape(4, 256, 4, 256, 256)  # 3.2M parameters: DDP's FP32 gradients fit one 25 MiB bucket
    req = Request(shape, "bf16", 8, 32, 1e12, 1e12, 64 * GIB, Machine(2, 4, "nvlink", "infiniband"))
    assert 4 * shape.params_total < 25 * 2**20
    for lay, _ in layouts(req):
        model = step_comm_time(shape, lay, req.machine.cluster, "bf16")
        ours = comm_seconds(req, lay)
        assert ours["tp"] == pytest.approx(model["tp"]) and ours["pp"] == pytest.approx(model["pp"])
        assert ours["dp"] >= model["dp"] - 1e-15
        if lay.dp == 1 or lay.strategy == "ddp":  # one bucket: DDP's gradients here are < 25 MiB
            assert ours["dp"] == pytest.approx(model["dp"])
        else:
            assert ours["dp"] > model["dp"]


def test_pipeline_layouts_take_equal_shares_in_equal_micro_batches(tmp_path: Path) -> None:
    """The trainer's pipeline needs every stage's micro-batches of one shape: the search offers no
    other, and the layout it picks passes the run spec's own check once placed."""
    from scaling.orchestrator.expand import expand
    from scaling.orchestrator.plan import load_plan

    req = Request(Shape(8, 512, 8, 256, 512), "bf16", 8, 48, 1e15, 1e14, 80 * GIB, Machine(1, 8), 0.0)
    piped = [lay for lay, _ in layouts(req) if lay.pp > 1]
    assert piped and all(48 % lay.dp == 0 and lay.micro_batch * lay.micro_batches == 48 // lay.dp for lay in piped)
    # micro-batches of at most 5: a share of 12 (dp=4) splits as 3 x 4; shares of 24 and 48 do not split equally
    capped = [lay for lay, _ in layouts(replace(req, micro_batch_size=5)) if lay.pp > 1]
    assert {lay.dp for lay in capped} == {4} and {(lay.micro_batch, lay.micro_batches) for lay in capped} == {(4, 3)}
    shape = {"n_layer": 8, "d_model": 512, "n_head": 8}
    path = _plan(tmp_path, {"workers": 8, "micro_batch_size": 3, "device_memory_gib": 80,
                            "cluster": {"nodes": 1, "gpus_per_node": 8}}, [shape])
    ex = expand(load_plan(path)[0], resolve=False).runs[0].spec.execution  # placed and validated again
    assert ex.pp == 1 or 64 % (ex.dp * 3) == 0


def test_auto_searches_tp_before_judging_dp(tmp_path: Path) -> None:
    """8 sequences on 16 workers: tp=1 cannot feed them, tp=2 x dp=8 can, and auto finds it."""
    from scaling.orchestrator.expand import expand
    from scaling.orchestrator.plan import load_plan

    plan = {"name": "few-seq", "model": {"context": 2048}, "train": {"precision": "bf16", "batch_tokens": 8 * 2048},
            "resources": {"workers": 16, "gpus_per_worker": 1, "device_memory_gib": 80,
                          "cluster": {"nodes": 2, "gpus_per_node": 8}},
            "grid": [{"models": [{"n_layer": 8, "d_model": 1024, "n_head": 16}], "tokens": [1e9]}]}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    ex = expand(load_plan(path)[0], resolve=False).runs[0].spec.execution
    assert ex.dp <= 8 and ex.tp * ex.pp >= 2


def test_reasons_never_show_a_tie_as_a_win() -> None:
    from scaling.layout import _faster, _seconds_against

    assert _seconds_against(27.61, 27.64) == "27.61 s per step against 27.64 s"
    assert _seconds_against(8.96, 8.27) == "8.96 s per step against 8.27 s"
    assert "a tie" in _seconds_against(27.6, 27.6)
    assert _faster(1.5, 1.0) == "1.50x faster than" and _faster(1.004, 1.0) == "0.4% faster than"
    assert _faster(1.0, 1.0) == "ties with"

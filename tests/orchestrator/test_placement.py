"""Placement of tensor- and pipeline-parallel runs: a bundle per node, TP groups on one node, stages spread.

The Ray test reserves a run's bundles on two real (fake) Ray nodes, pins a real Ray Train
TorchTrainer's workers with the result, and has each worker write down its world rank and the
node it runs on: the probe replaces the trainer's loop (what is under test is where Ray puts the
ranks, not training). Then the scheduler's own path on the same cluster: a tp=2 x pp=2 plan reserved
per node, its four Ray Train workers pinned there, each building its tensor-parallel stage from the
spec, every step's loss stored once and equal to one process's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scaling.orchestrator import placement
from scaling.trainer.spec import RunSpec
from scaling.trainer.sections import ExecutionSpec


def _spec(workers: int, tp: int, pp: int, cpus: float = 1) -> RunSpec:
    return RunSpec(
        model={"n_layer": 4, "d_model": 32, "n_head": 2, "context": 16},
        tokens=16 * 64, batch_tokens=16 * 8,
        execution=ExecutionSpec(workers=workers, tp=tp, pp=pp, strategy="ddp", micro_batch_size=1, cpus_per_worker=cpus),
    )


def test_node_groups_hold_whole_tensor_parallel_groups() -> None:
    assert placement.node_groups(16, 8, 8) == [8, 8]
    assert placement.node_groups(12, 2, 8) == [8, 4]
    assert placement.node_groups(12, 4, 6) == [4, 4, 4]  # 6 ranks per node hold one group of 4
    assert placement.node_groups(4, 2, 8) == [4]
    with pytest.raises(ValueError, match="does not fit a node"):
        placement.node_groups(8, 8, 4)


def test_bundles_per_node_for_tp_pp_runs_and_per_worker_otherwise() -> None:
    bundles, sizes, strategy = placement.bundles(_spec(4, 2, 2, cpus=2), ranks_per_node=2)
    assert bundles == [{"CPU": 4.0}, {"CPU": 4.0}] and sizes == [2, 2] and strategy == "SPREAD"
    bundles, sizes, strategy = placement.bundles(_spec(4, 2, 2), ranks_per_node=8)
    assert bundles == [{"CPU": 4.0}] and strategy == "STRICT_PACK"
    bundles, sizes, strategy = placement.bundles(_spec(4, 1, 1), ranks_per_node=2)
    assert len(bundles) == 4 and strategy == "PACK"  # plain data parallel: Ray packs per worker


def test_rank_nodes_keep_each_node_contiguous() -> None:
    assert placement.rank_nodes(["a", "b"], [2, 2]) == ["a", "a", "b", "b"]
    # Two bundles on one node become adjacent, as Ray Train numbers workers node by node.
    assert placement.rank_nodes(["a", "b", "a"], [2, 2, 2]) == ["a"] * 4 + ["b"] * 2


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.usefixtures("no_shared_ray")
def test_tp_groups_share_a_node_and_pipeline_stages_spread(
    tmp_path: Path, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray
    from ray.cluster_utils import Cluster
    from ray.train import RunConfig
    from ray.train.torch import TorchConfig, TorchTrainer
    from ray.util.placement_group import placement_group, remove_placement_group

    from scaling.orchestrator.multiworker import scaling_config

    monkeypatch.setenv("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.1")
    spec = _spec(workers=4, tp=2, pp=2)  # dp=1: ranks 0-1 are stage 0's TP group, 2-3 stage 1's
    out = tmp_path / "ranks"
    out.mkdir()

    def probe(config: dict) -> None:
        import ray
        import ray.train

        rank = ray.train.get_context().get_world_rank()
        node = ray.get_runtime_context().get_node_id()
        Path(config["out"], f"{rank}.json").write_text(json.dumps(node))

    memory = 80 * 1024**2
    cluster = Cluster(initialize_head=True,
                      head_node_args={"num_cpus": 0, "object_store_memory": memory, "include_dashboard": False})
    # Each node could hold both bundles: the spread is the placement's doing, not a lack of room.
    workers = [cluster.add_node(num_cpus=4, object_store_memory=memory) for _ in range(2)]
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes()
        bundles, sizes, strategy = placement.bundles(spec, ranks_per_node=2)
        pg = placement_group(bundles, strategy=strategy)
        ray.get(pg.ready(), timeout=60)
        nodes = placement.bundle_nodes(pg)
        remove_placement_group(pg)
        rank_nodes = placement.rank_nodes(nodes, sizes)
        TorchTrainer(
            probe,
            train_loop_config={"out": str(out)},
            scaling_config=scaling_config(spec, rank_nodes),
            torch_config=TorchConfig(backend="gloo"),
            run_config=RunConfig(name="probe", storage_path=str(tmp_path / "ray")),
        ).fit()
        swept = _sweep_a_tp2_pp2_run(tmp_path, sqlite_url)
    finally:
        ray.shutdown()
        cluster.shutdown()

    worker_ids = {w.node_id for w in workers}
    assert len(set(nodes)) == 2 and set(nodes) == worker_ids, "one bundle on each node"
    seen = {int(p.stem): json.loads(p.read_text()) for p in out.glob("*.json")}
    assert sorted(seen) == [0, 1, 2, 3]
    assert [seen[r] for r in range(4)] == rank_nodes, "Ray Train's rank i runs where the mesh put rank i"
    assert seen[0] == seen[1] and seen[2] == seen[3], "each TP group on one node"
    assert seen[0] != seen[2], "the pipeline stages on different nodes"

    # The scheduler's own path: reservation per node, nodes per rank, a pinned TorchTrainer whose
    # four workers each build their tensor-parallel stage from the spec and train as one process does.
    state, completed, stored, reference = swept
    assert completed == [state.key]
    assert state.rank_sizes == [2, 2] and state.rank_nodes is not None
    assert state.rank_nodes[0] == state.rank_nodes[1] and state.rank_nodes[2] == state.rank_nodes[3]
    assert set(state.rank_nodes) == worker_ids
    assert sorted(stored) == list(range(1, 7)), "each step's loss stored once"
    assert reference and set(reference) <= set(stored), "one process reports at its checkpoints, each step stored"
    assert [stored[step] for step in reference] == pytest.approx(list(reference.values()), rel=1e-5, abs=0)


def _sweep_a_tp2_pp2_run(tmp_path: Path, sqlite_url: str) -> tuple[object, list[str], dict[int, float], dict[int, float]]:
    """A tp=2 x pp=2 run on nodes of two ranks each, through the scheduler, on the Ray the caller started.

    Returns the run's state, the completed keys, the stored train loss by step, and one process's
    losses at the steps it reports (its checkpoints, 4 and 6)."""
    from orch_helpers import shape, write_plan

    from scaling import vocab as names
    from scaling.db import Store, connect
    from scaling.orchestrator.expand import expand
    from scaling.orchestrator.plan import load_plan
    from scaling.orchestrator.scheduler import Scheduler
    from scaling.orchestrator.sweep import register
    from scaling.trainer import train

    grid = [{"models": [shape(2, 32)], "tokens": [512 * 6]}]
    resources = {"workers": 4, "tp": 2, "pp": 2, "strategy": "auto", "micro_batch_size": 8,  # 16 sequences: 2 micro-batches
                 "cluster": {"nodes": 2, "gpus_per_node": 2}}
    plan, source = load_plan(write_plan(tmp_path / "p.yaml", "pinned", tmp_path / "runs", grid, resources=resources))
    expansion = expand(plan, source)
    (run,) = expansion.runs
    assert (run.spec.execution.tp, run.spec.execution.pp, run.ranks_per_node) == (2, 2, 2)
    store = Store(sqlite_url)
    register(store, plan, expansion)
    sched = Scheduler(expansion.runs, store, sqlite_url, "pinned", plan.runs_dir, retries=0, heartbeat_s=1.0)
    out = sched.run()
    rows = connect(sqlite_url).metrics(run_keys=[run.spec.key], names=[names.TRAIN_LOSS])
    assert rows["step"].is_unique, "a step's loss stored twice"
    stored = dict(zip(rows["step"], rows["value"]))

    spec = run.spec
    one = type(spec).model_validate({**spec.model_dump(), "execution": {
        **spec.execution.model_dump(), "workers": 1, "tp": 1, "pp": 1, "strategy": "single"}})
    seen: dict[int, float] = {}
    train(one, None, tmp_path / "one", report=lambda step, metrics, ckpt: seen.update({metrics["step"]: metrics["train_loss"]}))
    return sched.states[0], out.completed, stored, seen

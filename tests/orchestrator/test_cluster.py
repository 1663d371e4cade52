"""Two Ray nodes on one machine: losing one mid-sweep costs only its runs, which resume elsewhere."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from orch_helpers import assert_consistent, shape, write_plan
from scaling import vocab as names

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.usefixtures("no_shared_ray")]


def test_node_loss_costs_only_its_runs(tmp_path: Path, sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import ray
    from ray.cluster_utils import Cluster

    from scaling.db import Store, connect
    from scaling.orchestrator.expand import expand
    from scaling.orchestrator.plan import load_plan
    from scaling.orchestrator.scheduler import Scheduler
    from scaling.orchestrator.sweep import register

    monkeypatch.setenv("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.1")
    grid = [{"models": [shape(2, 32), shape(3, 32)], "tokens": [512 * 40]}]
    plan_path = write_plan(tmp_path / "p.yaml", "nodes", tmp_path / "runs", grid)
    plan, source = load_plan(plan_path)
    expansion = expand(plan, source)
    store = Store(sqlite_url)
    register(store, plan, expansion)

    # A short health-check period so the head declares the removed node dead within a second.
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "object_store_memory": 80 * 1024**2,
            "include_dashboard": False,
            "_system_config": {"health_check_period_ms": 200, "health_check_failure_threshold": 3},
        },
    )
    worker = cluster.add_node(num_cpus=1, object_store_memory=80 * 1024**2)
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes()
        removed: dict[str, object] = {}

        def remove_worker_when_both_run() -> None:
            end = time.monotonic() + 120
            while time.monotonic() < end:
                m = connect(sqlite_url).metrics(names=[names.TRAIN_LOSS], sweep="nodes")
                if len(m) and m.groupby("run_key")["step"].max().min() >= 6 and m["run_key"].nunique() == 2:
                    removed["at"] = m.groupby("run_key")["step"].max().to_dict()
                    cluster.remove_node(worker)
                    return
                time.sleep(0.3)

        killer = threading.Thread(target=remove_worker_when_both_run, daemon=True)
        killer.start()
        sched = Scheduler(expansion.runs, store, sqlite_url, "nodes", plan.runs_dir, retries=plan.retries,
                          heartbeat_s=1.0)
        out = sched.run()
        killer.join(timeout=5)
    finally:
        ray.shutdown()
        cluster.shutdown()

    assert "at" in removed, "the worker node was never removed"
    assert sorted(out.completed) == sorted(r.key for r in expansion.runs) and not out.failed
    runs = assert_consistent(sqlite_url, "nodes").set_index("run_key")
    # Exactly the run on the lost node took a second attempt; it resumed from its checkpoint.
    assert sorted(runs["attempts"]) == [1, 2]
    lost = runs.index[runs["attempts"] == 2][0]
    ev = connect(sqlite_url).events(sweep="nodes")
    assert set(ev.loc[ev["kind"] == names.INTERRUPTED, "run_key"]) == {lost}
    assert lost in set(ev.loc[ev["kind"] == names.RESUME, "run_key"])
    assert names.FAILURE not in set(ev["kind"])

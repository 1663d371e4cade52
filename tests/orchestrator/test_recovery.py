"""Runs left `running` by a dead orchestrator are taken over; live claims are left alone (no Ray)."""

from __future__ import annotations

import time
from pathlib import Path

from orch_helpers import shape, write_plan
from scaling.db import connect
from scaling.orchestrator.expand import expand
from scaling.orchestrator.plan import load_plan
from scaling.orchestrator.scheduler import Scheduler
from scaling.orchestrator.sweep import register


def _scheduler(tmp_path: Path, url: str, stale_after_s: float):
    from scaling.db import Store

    grid = [{"models": [shape(1, 16), shape(2, 16), shape(1, 32)], "tokens": [512 * 4]}]
    plan, source = load_plan(write_plan(tmp_path / "p.yaml", "rec", tmp_path / "runs", grid))
    exp = expand(plan, source)
    store = Store(url)
    register(store, plan, exp)
    return Scheduler(exp.runs, store, url, "rec", tmp_path / "runs", retries=1, stale_after_s=stale_after_s), store


def test_stale_and_live_claims(tmp_path: Path, db_url: str) -> None:
    sched, store = _scheduler(tmp_path, db_url, stale_after_s=1.0)
    a, b, c = (s.key for s in sched.states)
    assert store.claim(a, "elsewhere:1", sweep="rec") == 1  # another host; will go stale
    assert store.claim(b, "elsewhere:2", sweep="rec") == 1
    store.finish(b, "completed", final_eval_loss=1.0, sweep="rec")
    time.sleep(1.5)
    assert store.claim(c, "elsewhere:3", sweep="rec") == 1  # fresh heartbeat: a live claimant
    sched._prepare()
    states = {s.key: s.state for s in sched.states}
    assert states == {a: "queued", b: "completed", c: "waiting"}
    assert connect(db_url).run(a, sweep="rec")["status"] == "interrupted"
    assert connect(db_url).run(c, sweep="rec")["status"] == "running"
    # Once its heartbeat is stale too, the waiting run is taken over.
    time.sleep(1.5)
    sched._recover_waiting()
    assert {s.key: s.state for s in sched.states}[c] == "queued"


def test_dead_claimant_on_this_host_is_recovered_at_once(tmp_path: Path, sqlite_url: str) -> None:
    import socket
    import subprocess
    import sys

    sched, store = _scheduler(tmp_path, sqlite_url, stale_after_s=3600)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    key = sched.states[0].key
    assert store.claim(key, f"{socket.gethostname()}:{dead}", sweep="rec") == 1
    sched._prepare()
    assert sched.states[0].state == "queued"
    assert connect(sqlite_url).run(key, sweep="rec")["status"] == "interrupted"

"""Claims as ``host:pid``: a dead claimant on this host is taken over at once, a live one or one
elsewhere only once its heartbeat is stale."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from scaling import vocab
from scaling.db import Store, claimant_id, connect
from scaling.db.claimant import claimant_is_dead

from db_helpers import records


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # exited and reaped: its pid names no process now
    return proc.pid


def test_claimant_id_is_host_and_pid() -> None:
    assert claimant_id() == f"{socket.gethostname()}:{os.getpid()}"


def test_which_claimants_count_as_dead() -> None:
    here = socket.gethostname()
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as alive:
        try:
            assert not claimant_is_dead(f"{here}:{alive.pid}")
        finally:
            alive.kill()
    assert claimant_is_dead(f"{here}:{_dead_pid()}")
    for unknown in (claimant_id(), "elsewhere:1", here, f"{here}:0", f"{here}:-3", f"{here}:x", "", None):
        assert not claimant_is_dead(unknown), unknown


def test_a_dead_claimant_on_this_host_is_taken_over_at_once(db_url: str) -> None:
    recs = records(1)
    key = recs[0]["key"]
    dead = f"{socket.gethostname()}:{_dead_pid()}"
    with Store(db_url, stale_after_s=3600) as store:
        store.register("s", recs)
        assert store.claim(key, dead) == 1  # its heartbeat is fresh: only the pid says it is gone
        assert store.claim(key, claimant_id()) == 2
        assert store.claim(key, "elsewhere:1") is None  # we are alive
    with connect(db_url) as res:
        ev = res.events(run_keys=[key])
        assert res.run(key)["host"] == claimant_id()  # type: ignore[index]
    assert list(ev["kind"]) == [vocab.STALE_RECOVERED]
    assert ev["detail"][0]["host"] == dead and ev["detail"][0]["reason"] == "its claimant process is gone"


@pytest.mark.parametrize("holder", ["elsewhere:1", "old-style-host-only", "live"])
def test_a_live_or_unknowable_claimant_keeps_its_run(sqlite_url: str, holder: str) -> None:
    recs = records(1)
    key = recs[0]["key"]
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as alive:
        try:
            if holder == "live":
                holder = f"{socket.gethostname()}:{alive.pid}"
            with Store(sqlite_url, stale_after_s=3600) as store:
                store.register("s", recs)
                assert store.claim(key, holder) == 1
                assert store.claim(key, claimant_id()) is None
        finally:
            alive.kill()

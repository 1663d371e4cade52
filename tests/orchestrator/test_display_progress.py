"""The sweep's live table reads one row per run and metric, however long the runs have trained."""

from __future__ import annotations

from types import SimpleNamespace

from scaling.db import Store, connect
from scaling.orchestrator.display import read_progress
from scaling import vocab as names
from scaling.trainer.spec import RunSpec


def _records(n: int) -> list[dict]:
    return [RunSpec(model={"n_layer": 2, "d_model": 64, "n_head": 2}, tokens=65536, batch_tokens=8192,
                    seed=i).record() for i in range(n)]


def _log(store: Store, key: str, steps: range, offset: float) -> None:
    rows = [(s, s * 10, s * 1e6, names.TRAIN_LOSS, offset + 1.0 / s) for s in steps]
    rows += [(s, s * 10, s * 1e6, names.EVAL_LOSS, offset + 2.0 / s) for s in steps if s % 50 == 0]
    store.log_metrics(key, rows)


def test_progress_reads_one_row_per_run_and_metric(db_url: str) -> None:
    recs = _records(3)
    keys = [r["key"] for r in recs]
    with Store(db_url) as store:
        store.register("live", recs)
        for i, key in enumerate(keys):
            assert store.claim(key, "test-host") == 1
            _log(store, key, range(1, 101), offset=i)
        with connect(db_url) as res:
            short = res.last_metrics(sweep="live", run_keys=keys, names=[names.TRAIN_LOSS, names.EVAL_LOSS])
            for i, key in enumerate(keys):  # ten times longer runs: the same number of rows comes back
                _log(store, key, range(101, 1001), offset=i)
            long = res.last_metrics(sweep="live", run_keys=keys, names=[names.TRAIN_LOSS, names.EVAL_LOSS])
            all_rows = res.metrics(sweep="live", run_keys=keys, names=[names.TRAIN_LOSS, names.EVAL_LOSS])
            states = [SimpleNamespace(key=k, step=0, loss=None, eval_loss=None, first_seen=None) for k in keys[:2]]
            read_progress(res, states, "live", now=5.0)
    assert len(short) == len(long) == 2 * len(keys)  # O(runs), not O(steps)
    assert len(all_rows) == 3 * (1000 + 20)
    last = long.set_index(["run_key", "name"])
    for i, key in enumerate(keys):
        assert last.loc[(key, names.TRAIN_LOSS), "step"] == 1000
        assert last.loc[(key, names.TRAIN_LOSS), "value"] == i + 1.0 / 1000
        assert last.loc[(key, names.EVAL_LOSS), "value"] == i + 2.0 / 1000
    for i, s in enumerate(states):
        assert (s.step, s.loss, s.eval_loss, s.first_seen) == (1000, i + 0.001, i + 0.002, (5.0, 1000))

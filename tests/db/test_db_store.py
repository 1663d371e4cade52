"""The write API (register, claim, heartbeat, finish, events, fits, stale recovery) read back through `connect`."""

from __future__ import annotations

import time

import pytest

from scaling.db import AmbiguousRunError, Store, connect
from scaling.errors import NotFoundError, PlanError
from scaling import vocab

from db_helpers import records


def test_register_adds_only_new_keys_and_keeps_the_plan(db_url: str) -> None:
    recs = records(3)
    with Store(db_url) as store, connect(db_url) as res:
        assert store.register("s1", recs[:2], plan="runs: 2\n") == [r["key"] for r in recs[:2]]
        assert store.register("s1", recs) == [recs[2]["key"]]
        assert store.register("s1", recs + recs) == []
        info = res.sweep_info("s1")
        assert info["plan"] == "runs: 2\n"
        assert info["params_convention"] == "non_embedding" and info["flops_convention"] == "6N"
        row = res.run(recs[0]["key"])
        assert row is not None
        assert (row["N"], row["N_total"], row["D"], row["C"]) == (recs[0]["N"], recs[0]["N_total"], recs[0]["D"], recs[0]["C"])
        assert row["status"] == "pending" and row["attempts"] == 0 and row["spec"] == recs[0]["spec"]
        assert res.latest_sweep() == "s1"
        assert list(res.runs(sweep="s1")["run_key"]) == [r["key"] for r in recs]


def test_register_never_touches_completed_runs(db_url: str) -> None:
    recs = records(2)
    with Store(db_url) as store, connect(db_url) as res:
        store.register("s", recs)
        key = recs[0]["key"]
        store.claim(key, "h")
        store.finish(key, "completed", final_train_loss=2.5, final_eval_loss=2.6)
        assert store.register("s", recs) == []
        row = res.run(key)
        assert row is not None and row["status"] == "completed" and row["final_loss"] == 2.6 and row["attempts"] == 1
        assert store.claim(key, "h2") is None  # a completed run is never claimed


def test_register_refuses_changed_conventions(db_url: str) -> None:
    with Store(db_url) as store:
        store.register("s", records(1))
        with pytest.raises(PlanError, match="non_embedding"):
            store.register("s", records(1), params_convention="total")
        with pytest.raises(ValueError, match="lacks"):
            store.register("s", [{"key": "x"}])


def test_plan_as_a_mapping_round_trips(db_url: str) -> None:
    plan = {"name": "demo", "grid": {"N": [1e5, 1e6]}, "bad": float("inf")}
    with Store(db_url) as store:
        store.register("s", records(1), plan=plan)
    with connect(db_url) as res:
        info = res.sweep_info("s")
    assert info["plan"] == {"name": "demo", "grid": {"N": [1e5, 1e6]}, "bad": "inf"}


def test_claim_lifecycle(db_url: str) -> None:
    recs = records(1)
    key = recs[0]["key"]
    with Store(db_url) as store, connect(db_url) as res:
        store.register("s", recs)
        assert store.claim(key, "host-a") == 1
        assert store.claim(key, "host-b") is None  # running with a fresh heartbeat
        store.heartbeat(key)
        store.finish(key, "failed", error="CUDA out of memory")
        row = res.run(key)
        assert row is not None and row["status"] == "failed" and row["error"] == "CUDA out of memory"
        assert row["finished_at"] is not None
        assert store.claim(key, "host-b") == 2  # failed runs are retried
        row = res.run(key)
        assert row is not None and row["host"] == "host-b" and row["error"] is None and row["status"] == "running"
        store.finish(key, "interrupted")
        assert store.claim(key, "host-c") == 3
        store.finish(key, "completed", final_train_loss=3.0, final_eval_loss=3.1)
        assert store.claim(key, "host-d") is None
        with pytest.raises(ValueError):
            store.finish(key, "running")
        with pytest.raises(NotFoundError, match="nope"):
            store.claim("nope", "h")


def test_claim_takes_over_a_stale_running_run(db_url: str) -> None:
    recs = records(1)
    key = recs[0]["key"]
    with Store(db_url, stale_after_s=0.2) as store:
        store.register("s", recs)
        assert store.claim(key, "dead-host") == 1
        assert store.claim(key, "h2") is None
        time.sleep(0.3)
        assert store.claim(key, "h2") == 2
        assert store.claim(key, "h3", stale_after_s=60) is None
    with connect(db_url) as res:
        ev = res.events(run_keys=[key])
    assert list(ev["kind"]) == [vocab.STALE_RECOVERED]
    assert ev["detail"][0]["host"] == "dead-host" and ev["detail"][0]["by"] == "claim"


def test_recover_stale_interrupts_runs_without_heartbeat(db_url: str) -> None:
    recs = records(3)
    k0, k1, k2 = (r["key"] for r in recs)
    with Store(db_url) as store, connect(db_url) as res:
        store.register("s", recs)
        store.claim(k0, "h")
        store.claim(k1, "h")
        time.sleep(0.3)
        store.heartbeat(k1)  # k1's claimant is alive
        assert store.recover_stale(0.2) == [k0]
        assert store.recover_stale(0.2) == []
        assert res.run(k0)["status"] == "interrupted"  # type: ignore[index]
        assert res.run(k1)["status"] == "running"  # type: ignore[index]
        assert res.run(k2)["status"] == "pending"  # type: ignore[index]
        assert store.claim(k0, "h2") == 2
    with connect(db_url) as res:
        ev = res.events(sweep="s")
    assert list(ev["kind"]) == [vocab.STALE_RECOVERED]
    assert ev["run_key"][0] == k0 and ev["detail"][0]["timeout_s"] == 0.2


def test_mark_interrupted_only_touches_running_runs(db_url: str) -> None:
    recs = records(3)
    k0, k1, k2 = (r["key"] for r in recs)
    with Store(db_url) as store, connect(db_url) as res:
        store.register("s", recs)
        store.claim(k0, "h")
        store.claim(k1, "h")
        store.finish(k1, "completed")
        assert store.mark_interrupted([k0, k1, k2, "unknown"]) == [k0]
        assert list(res.runs(sweep="s")["status"]) == ["interrupted", "completed", "pending"]
        assert list(res.runs(sweep="s", status="interrupted")["run_key"]) == [k0]
    with connect(db_url) as res:
        assert list(res.events()["kind"]) == [vocab.INTERRUPTED]


def test_events_accept_text_and_mappings(db_url: str) -> None:
    recs = records(1)
    key = recs[0]["key"]
    with Store(db_url) as store:
        store.register("s", recs)
        store.log_event(key, 10, vocab.LOSS_SPIKE, {"loss": 9.5, "mean": float("nan")})
        store.log_event(key, None, vocab.RESUME, "from checkpoint step 10")
        with pytest.raises(TypeError):
            store.log_event(key, 1, vocab.RETRY, {"obj": object()})
    with connect(db_url) as res:
        ev = res.events(run_keys=[key])
    assert list(ev["kind"]) == [vocab.LOSS_SPIKE, vocab.RESUME]
    assert ev["detail"][0] == {"loss": 9.5, "mean": "nan"} and ev["detail"][1] == "from checkpoint step 10"
    assert ev["step"][0] == 10 and ev["step"].isna()[1]


def test_a_stopped_early_event_and_the_runs_stopped_step_are_one_write(db_url: str) -> None:
    recs = records(2)
    a, b = recs[0]["key"], recs[1]["key"]
    stop = (8, vocab.STOPPED_EARLY, {"step": 8, "loss": 3.1, "lo": 3.05, "hi": 3.15})
    with Store(db_url) as store, connect(db_url) as res:
        store.register("s", recs)
        store.claim(a, "h")
        with pytest.raises(NotFoundError):  # one run of the write is unknown: nothing of it is written
            store.log_runs([(a, [(8, 8, 0.0, vocab.EVAL_LOSS, 3.3)], [stop]), ("nope", [], [(1, vocab.DATA, {})])], sweep="s")
        assert res.run(a)["stopped_step"] is None and res.events(run_keys=[a]).empty
        store.log_runs([(a, [(8, 8, 0.0, vocab.EVAL_LOSS, 3.3)], [stop])], sweep="s")
        assert res.run(a)["stopped_step"] == 8 and res.run(b)["stopped_step"] is None
        store.complete(a, final_train_loss=3.3, final_eval_loss=3.1)
        assert res.run(a)["stopped_step"] == 8 and res.run(a)["final_loss"] == 3.1
        store.log_event(b, 5, vocab.STOPPED_EARLY, {"step": 5})  # one event alone sets it too
        assert res.run(b)["stopped_step"] == 5
        store.finish(b, "failed", error="lost")
        store.claim(b, "h")  # an attempt that stops again records its step again
        assert res.run(b)["stopped_step"] is None


def test_fits_are_saved_and_found_by_fingerprint(db_url: str) -> None:
    with Store(db_url) as store, connect(db_url) as res:
        store.register("s", records(1))
        a = store.save_fit("s", "chinchilla_parametric", "huber", {"E": 1.7, "A": 400.0}, "fp1")
        b = store.save_fit("s", "chinchilla_parametric", "huber", {"E": 1.8}, "fp1")
        store.save_fit("s", "kaplan", "curve_fit", {"alpha": 0.07}, "fp2")
        assert b > a
        found = res.find_fit("s", "chinchilla_parametric", "huber", "fp1")
        assert found is not None and found["id"] == b and found["result"] == {"E": 1.8}
        assert res.find_fit("s", "chinchilla_parametric", "huber", "other") is None
        with pytest.raises(NotFoundError):
            store.save_fit("missing", "kaplan", "x", {}, "fp")
    with connect(db_url) as res:
        fits = res.fits(sweep="s")
        assert list(fits["law"]) == ["chinchilla_parametric", "chinchilla_parametric", "kaplan"]
        assert fits["result"][0] == {"E": 1.7, "A": 400.0}
        assert list(res.fits(law="kaplan")["fingerprint"]) == ["fp2"]


def test_a_key_in_two_sweeps(db_url: str) -> None:
    recs = records(1)
    key = recs[0]["key"]
    with Store(db_url) as store, connect(db_url) as res:
        store.register("a", recs)
        store.register("b", recs)
        with pytest.raises(AmbiguousRunError, match="a, b"):
            store.claim(key, "h")
        assert store.claim(key, "h", sweep="b") == 1
        # Without sweep=, writes go to the one sweep where the key is running.
        store.log_metrics(key, [(1, 8192, 1.0, vocab.TRAIN_LOSS, 4.0)])
        store.finish(key, "completed", final_eval_loss=4.0)
        assert res.run(key, sweep="b")["status"] == "completed"  # type: ignore[index]
        assert res.run(key, sweep="a")["status"] == "pending"  # type: ignore[index]
    with connect(db_url) as res:
        assert len(res.metrics(sweep="b")) == 1 and res.metrics(sweep="a").empty


def test_store_pickles_as_its_url(sqlite_url: str) -> None:
    import pickle

    with Store(sqlite_url, stale_after_s=5) as store:
        clone = pickle.loads(pickle.dumps(store))
        assert clone.url == store.url and clone.stale_after_s == 5
        clone.register("s", records(1))
        assert connect(sqlite_url).latest_sweep() == "s"
        clone.close()


def test_claims_completions_and_heartbeats_of_several_runs_in_one_call(db_url: str) -> None:
    """What a scheduler does for the runs it admits or collects together: one transaction each,
    with every run decided on its own (a completed or live run refused, another's result kept)."""
    recs = records(4)
    k0, k1, k2, k3 = (r["key"] for r in recs)
    with Store(db_url) as store, connect(db_url) as res:
        store.register("s", recs)
        assert store.claim(k1, "live-host") == 1
        store.heartbeat(k1)
        store.finish(k2, vocab.COMPLETED, final_eval_loss=2.5)
        assert store.claim_many([k3, k2, k1, k0], "h") == {k0: 1, k1: None, k2: None, k3: 1}
        time.sleep(0.3)
        store.heartbeat_many([k0, k1])
        assert store.recover_stale(0.2) == [k3]  # the one left without a heartbeat
        assert store.complete_many({k0: (3.0, 3.1), k2: (9.0, 9.9)}) == {k0: 3.1, k2: 2.5}
        rows = {k: res.run(k) for k in (k0, k1, k2, k3)}
        assert [rows[k]["status"] for k in (k0, k1, k2, k3)] == ["completed", "running", "completed", "interrupted"]  # type: ignore[index]
        assert rows[k1]["host"] == "live-host" and rows[k2]["final_loss"] == 2.5  # type: ignore[index]


def test_claims_committed_are_released_when_the_claimant_stops_before_seeing_them(sqlite_url: str,
                                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`Lifecycle.claim_many` commits the claims, then reads the rows of the refused runs; Ctrl-C
    there (raised in its place: the instant cannot be hit by hand) releases the claims it made."""
    from scaling.db.lifecycle import Lifecycle

    recs = records(3)
    k0, k1, k2 = (r["key"] for r in recs)
    with Store(sqlite_url) as store:
        store.register("s", recs)
        store.finish(k1, vocab.COMPLETED, final_eval_loss=2.0)
        lifecycle = Lifecycle(store, "s")
        monkeypatch.setattr(lifecycle, "row", lambda key: (_ for _ in ()).throw(KeyboardInterrupt))
        with pytest.raises(KeyboardInterrupt):
            lifecycle.claim_many([k0, k1, k2])
        lifecycle.close()
    with connect(sqlite_url) as res:
        assert [res.run(k)["status"] for k in (k0, k1, k2)] == ["interrupted", "completed", "interrupted"]  # type: ignore[index]

"""A sharded checkpoint written by two workers resumes on one, and the reverse (DCP resharding).

Each run is cut by an injected fault at step 6 (after the checkpoint of step 4), resumed at
the other world size, and must then follow the uninterrupted single-process trajectory.
ZeRO-1 (optimizer state partitioned by parameter, model replicated) and ZeRO-3 (everything
sharded by FSDP2) are the two layouts DCP must merge and split.
"""

from __future__ import annotations

import pytest

from _workers import run_spec, spawn, train_until_fault, train_worker, trajectory, until_fault_each
from scaling.trainer.checkpoints import checkpoint

FP32_RTOL = 1e-5  # see test_trajectory.py
STRATEGIES = ("zero1", "zero3")


def _spec(strategy: str, workers: int) -> str:
    return run_spec(strategy, "fp32", workers=workers, faults={"raise_at_step": 6, "raise_attempts": 1},
                    execution={"checkpoint_interval": 4}).to_json()


def _run_all(workers: int, run_dirs: dict[str, str], tmp, attempt: int) -> dict[str, dict]:
    """Train every strategy's run at ``workers`` workers (``single`` on one), until the fault."""
    if workers == 1:
        return {s: train_until_fault(0, 1, _spec("single", 1), d, attempt) for s, d in run_dirs.items()}
    runs = [(_spec(s, workers), d) for s, d in run_dirs.items()]
    outs = spawn(until_fault_each, workers, str(tmp), runs, attempt)[0]
    return dict(zip(run_dirs, outs))


@pytest.mark.slow
@pytest.mark.parametrize("before,after", [(2, 1), (1, 2)])
def test_checkpoint_resumes_at_another_world_size(before: int, after: int, tmp_path) -> None:
    run_dirs = {s: str(tmp_path / s) for s in STRATEGIES}
    first = _run_all(before, run_dirs, tmp_path, attempt=1)
    for s in STRATEGIES:
        assert first[s]["fault"] is not None, s  # cut at step 6
        ckpt = checkpoint.latest(run_dirs[s])
        assert ckpt is not None and ckpt.name == "step_00000004", s
        assert len(list(ckpt.glob("*.distcp"))) == before, s  # each writing rank wrote its own file

    resumed = _run_all(after, run_dirs, tmp_path, attempt=2)
    ref = dict(trajectory(train_worker(0, 1, _spec("single", 1), str(tmp_path / "ref"), attempt=2)))
    for s in STRATEGIES:
        out = resumed[s]
        assert out["fault"] is None and out["result"]["resumed_from"] == 4, s
        assert out["result"]["steps"] == 10, s
        got = trajectory(out)
        assert [step for step, _ in got] == list(range(5, 11)), s
        assert [v for _, v in got] == pytest.approx([ref[step] for step, _ in got], rel=FP32_RTOL, abs=0), s


def _hashing_worker(rank: int, world: int, run_dir: str) -> dict:
    """Save one checkpoint of a zero3 model and verify it, then verify it with one shard changed;
    which files this rank hashed by reading them in each phase (``sha256_of`` wrapped, not replaced)."""
    import torch

    from scaling.trainer.parallel.data_parallel import parallelize
    from scaling.trainer.runtime import Runtime
    from scaling.trainer.spec import RunSpec

    from _workers import build_model

    hashed: list[str] = []
    real = checkpoint.sha256_of
    checkpoint.sha256_of = lambda path: (hashed.append(path.name), real(path))[1]
    spec = RunSpec.model_validate_json(_spec("zero3", world))
    rt = Runtime.current("cpu")
    par = parallelize(build_model(spec), spec)
    opt = torch.optim.AdamW(par.model.parameters())
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    path = checkpoint.save(run_dir, 4, model=par.model, optimizer=opt, scaler=scaler, meta={}, keep=2, rt=rt)
    saved, hashed[:] = list(hashed), []
    intact = checkpoint.verify(path, rt)
    verified, hashed[:] = list(hashed), []
    rt.barrier()
    if rank == 1:  # a shard only rank 0 read back at save time is changed by the other rank
        victim = sorted(p for p in path.iterdir() if p.suffix == ".distcp")[-1]
        data = bytearray(victim.read_bytes())
        data[-1] ^= 0xFF
        victim.write_bytes(bytes(data))
    rt.barrier()
    return {"saved": saved, "verified": verified, "intact": intact, "broken": checkpoint.verify(path, rt)}


def test_each_rank_hashes_its_share_of_the_checkpoint(tmp_path) -> None:
    """Saving reads no file back (each rank hashed what it wrote); verifying hashes every file
    exactly once over the world, on every rank a share; a changed shard is found whichever rank
    reads it, and every rank gets the same answer."""
    outs = spawn(_hashing_worker, 2, str(tmp_path), str(tmp_path / "run"))
    path = checkpoint.latest(str(tmp_path / "run"))
    files = {p.name for p in path.iterdir()} - {checkpoint.MANIFEST_FILE}
    assert [out["saved"] for out in outs] == [[], []]
    names = [n for out in outs for n in out["verified"]]
    assert sorted(names) == sorted(files)  # each file once, over both ranks
    assert all(out["verified"] for out in outs)  # and both ranks took part
    assert [out["intact"] for out in outs] == [None, None]
    assert outs[0]["broken"] == outs[1]["broken"] and "does not match its sha256" in outs[0]["broken"]

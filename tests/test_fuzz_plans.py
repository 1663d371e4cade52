"""Fuzz: mutated plans and specs thrown at `scaling plan` and `scaling train` never crash.

A seeded mutation loop (reproducible: the failing case's seed and text are in the message)
derives plans from a good one and specs from a good one, by structure (a key dropped, a value
replaced by a hostile one, a list blown up, an unknown key) and by text (truncated, a byte
flipped, aliases and deep nesting spliced in). Each must end with exit 0 or 2, a one-line error
and no traceback; together they stay under 1 GiB of peak memory, each under 10 CPU seconds, and a results
database is left byte for byte as it was whenever a command exits 2. Most cases run in-process
(through ``scaling.cli.main``); a few run as real subprocesses.
"""

from __future__ import annotations

import copy
import hashlib
import random
import resource
import time
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from cli_run import Outcome, run_main, run_process

PLAN: dict[str, Any] = {
    "name": "fuzz",
    "runs_dir": "./fuzz_runs",
    "data": {"source": "builtin"},
    "model": {"aspect_ratio": 16, "head_size": 16, "vocab_size": 256, "context": 64},
    "conventions": {"params": "non_embedding", "flops": "6N"},
    "train": {"precision": "fp32", "batch_tokens": 2048, "optimizer": {"lr": 3.0e-3, "weight_decay": 0.1},
              "schedule": {"kind": "cosine", "warmup_fraction": 0.05}, "eval_interval": 100,
              "checkpoint_interval": 100},
    "resources": {"workers": 1},
    "retries": 1,
    "seeds": [0],
    "grid": [{"compute": [1.0e+12, 3.0e+12], "models": [6000, 30000]},
             {"tokens": [1.0e+6], "models": [{"n_layer": 2, "d_model": 32, "n_head": 2}]}],
}
SPEC: dict[str, Any] = {
    "model": {"n_layer": 1, "d_model": 32, "n_head": 2, "context": 32, "vocab_size": 256},
    "tokens": 6144,
    "batch_tokens": 256,
    "eval_tokens": 512,
    "precision": "fp32",
    "optimizer": {"lr": 3.0e-3},
    "execution": {"eval_interval": 8, "checkpoint_interval": 4, "device": "cpu"},
}

HOSTILE_VALUES: list[Any] = [
    -1, 0, 1, 2**63, 2**200, -(2**70), 1e300, -1e300, 1e-300, float("nan"), float("inf"), float("-inf"), 0.5,
    "", "x" * 5000, "../../../etc/passwd", "name\n", "\x1b[31mred", "<script>", "1e9", "auto", "zero3", "none",
    None, True, False, [], {}, [None], [[[]]], {"a": {"b": {"c": 1}}}, list(range(300)),
    "postgresql+psycopg://u:Fuzz3dPW@nowhere.invalid/x",
]
TEXT_SPLICES = [
    "\n\t- tab",
    "\nbomb: &a [1, 2]\nmore: [*a, *a]\n",
    "\nx: " + "[" * 200 + "]" * 200 + "\n",
    "\nx: !!python/object/apply:os.system ['touch pwned']\n",
    "\n---\nsecond: doc\n",
    "\n%YAML 1.1\n",
    ": : :",
    "\n" + "k: v\n" * 3,
    "\x00",
    "\nname: x\nname: y\n",
]

CASES_PLAN = 320
CASES_SPEC = 260
PER_CASE_SECONDS = 10.0
MAX_EXTRA_RSS_BYTES = 1 << 30


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.extend(_paths(v, prefix + (k,)))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.extend(_paths(v, prefix + (i,)))
    return out


def _get_parent(obj: Any, path: tuple) -> Any:
    for p in path[:-1]:
        obj = obj[p]
    return obj


def mutate_structure(base: dict[str, Any], rng: random.Random) -> str:
    doc = copy.deepcopy(base)
    for _ in range(rng.randint(1, 3)):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = rng.choice(paths)
        parent = _get_parent(doc, path)
        key = path[-1]
        op = rng.random()
        if op < 0.2:
            del parent[key]
        elif op < 0.75:
            parent[key] = copy.deepcopy(rng.choice(HOSTILE_VALUES))
        elif op < 0.85 and isinstance(parent[key], list) and parent[key]:
            parent[key] = parent[key] * rng.choice([2, 50, 400])
        elif op < 0.92 and isinstance(parent, dict):
            parent[rng.choice(["nmae", "extra", "grid_", "__class__", "0"])] = rng.choice(HOSTILE_VALUES)
        else:
            parent[key] = {"nested": parent[key]} if rng.random() < 0.5 else [parent[key]]
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


def mutate_text(base: dict[str, Any], rng: random.Random) -> str:
    text = yaml.safe_dump(base, sort_keys=False)
    op = rng.random()
    if op < 0.3:
        return text[: rng.randrange(len(text))]
    if op < 0.55:
        i = rng.randrange(len(text))
        return text[:i] + chr(rng.choice([0x20, 0x3A, 0x2D, 0x5B, 0x7B, 0x26, 0x2A, 0x22, 0x27, 0x09, 0x7C, 0x3E])) + text[i + 1:]
    i = rng.randrange(len(text))
    return text[:i] + rng.choice(TEXT_SPLICES) + text[i:]


def _mutant(base: dict[str, Any], rng: random.Random) -> str:
    return mutate_structure(base, rng) if rng.random() < 0.65 else mutate_text(base, rng)


def _rss(field: str) -> int:
    """``VmRSS`` (now) or ``VmHWM`` (peak since the last reset) of this process, in bytes."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"{field} not in /proc/self/status")


def _reset_peak() -> None:
    """Start a new peak-RSS measurement (Linux: writing 5 to clear_refs resets VmHWM)."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else "absent"


def _seeded_db(tmp_path: Path) -> str:
    """A results database with rows in it, so 'unchanged' has something to lose."""
    from scaling.db import Store
    from scaling.trainer.spec import RunSpec

    url = f"sqlite:///{tmp_path / 'results.db'}"
    with Store(url) as store:
        store.register("existing", [RunSpec.from_dict(SPEC).record()])
    return url


def _check(outcome: Outcome, seconds: float, seed: int, text: str, what: str) -> None:
    context = f"{what} seed {seed} (exit {outcome.code}, {seconds:.1f}s):\n{text[:2000]}\n--- stderr:\n{outcome.err[-2000:]}"
    assert outcome.code in (0, 2), context
    assert "Traceback" not in outcome.err, context
    if outcome.code == 2 and not outcome.err.startswith("Usage:"):
        assert outcome.err.strip().count("\n") == 0, context  # one line
    assert seconds < PER_CASE_SECONDS, context


def _fuzz(tmp_path: Path, base: dict[str, Any], cases: int, seed0: int, command: Callable[[Path], list[str]],
          db_file: Path) -> dict[int, int]:
    codes = {0: 0, 2: 0}
    path = tmp_path / "mutant.yaml"
    for i in range(cases):
        seed = seed0 + i
        rng = random.Random(seed)
        text = _mutant(base, rng)
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        before = _digest(db_file)
        _reset_peak()
        rss = _rss("VmRSS")
        start = time.process_time()  # CPU seconds: a blow-up shows there, a busy machine does not
        outcome = run_main(*command(path))
        seconds = time.process_time() - start
        grew = _rss("VmHWM") - rss
        _check(outcome, seconds, seed, text, "case")
        assert grew < MAX_EXTRA_RSS_BYTES, f"seed {seed}: peak memory grew by {grew / 2**20:.0f} MiB"
        if outcome.code == 2:
            assert _digest(db_file) == before, f"seed {seed}: the database changed on exit 2"
        codes[outcome.code] += 1
    return codes


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # a relative runs_dir or default database lands here, if anywhere
    monkeypatch.setenv("SCALING_DB", f"sqlite:///{tmp_path / 'results.db'}")
    return tmp_path


def test_fuzz_scaling_plan(in_tmp: Path) -> None:
    _seeded_db(in_tmp)
    codes = _fuzz(in_tmp, PLAN, CASES_PLAN, 10_000, lambda p: ["plan", str(p), "--format", "json"],
                  in_tmp / "results.db")
    assert codes[0] > 10 and codes[2] > 100, codes  # the mutants reach both sides
    assert not (in_tmp / "pwned").exists() and not (in_tmp / "fuzz_runs").exists()


def test_fuzz_scaling_train_dry_run_and_refusals(in_tmp: Path) -> None:
    url = _seeded_db(in_tmp)
    db_file = in_tmp / "results.db"
    codes = _fuzz(in_tmp, SPEC, CASES_SPEC, 20_000,
                  lambda p: ["train", str(p), "--db", url, "--run-dir", str(in_tmp / "run"), "--dry-run"], db_file)
    assert codes[0] > 10 and codes[2] > 100, codes
    # Without --dry-run, what the loader refuses is refused before the database is touched.
    refused = 0
    for seed in range(30_000, 30_400):
        rng = random.Random(seed)
        text = _mutant(SPEC, rng)
        path = in_tmp / "mutant.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        dry = run_main("train", str(path), "--db", url, "--dry-run")
        if dry.code != 2:
            continue
        before = _digest(db_file)
        start = time.process_time()
        real = run_main("train", str(path), "--db", url, "--run-dir", str(in_tmp / "run"))
        _check(real, time.process_time() - start, seed, text, "train")
        assert real.code == 2 and _digest(db_file) == before, f"seed {seed}: {real.err}"
        refused += 1
        if refused == 60:
            break
    assert refused == 60
    assert not (in_tmp / "run").exists() and not (in_tmp / "pwned").exists()


@pytest.mark.parametrize("seed", [10_007, 10_042, 20_003, 20_077, 10_311])
def test_fuzz_cases_in_real_processes(seed: int, tmp_path: Path) -> None:
    rng = random.Random(seed)
    base, cmd = (PLAN, "plan") if seed < 20_000 else (SPEC, "train")
    text = _mutant(base, rng)
    path = tmp_path / "mutant.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    args = [cmd, str(path)] + (["--dry-run", "--db", f"sqlite:///{tmp_path / 'r.db'}"] if cmd == "train" else [])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    outcome = run_process(*args, cwd=tmp_path)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    _check(outcome, cpu, seed, text, "process")  # CPU seconds, imports included
    assert not (tmp_path / "r.db").exists()

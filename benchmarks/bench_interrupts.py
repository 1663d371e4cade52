"""Ctrl-C at random moments of a real simulated sweep, many times: every one must exit 130.

Run by hand: ``python benchmarks/bench_interrupts.py [--tries 20] [--runs 3000] [--max-delay 10]``.
Each try starts ``scaling sweep`` on a simulated plan of ``--runs`` runs (10 sizes x runs/10 token
counts) in a fresh database, in its own process group as a terminal would, sends SIGINT to the
group after a random delay in [--min-delay, --max-delay] s (expansion, registration, Ray's start, the
scheduler and the clean-up all get hit), and records the exit code and whether any run was left
`running`. Prints the tally; exits 1 when any try ended otherwise than 130 (or 0, finished first).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

SCALING = str(Path(sys.executable).with_name("scaling"))


def plan_text(folder: Path, runs: int) -> str:
    n_tokens = max(1, runs // 10)
    tokens = ", ".join(f"{1e6 * 1000 ** (i / max(1, n_tokens - 1)):.6g}" for i in range(n_tokens))
    models = "\n".join(f"      - {{n_layer: 2, d_model: {d}, n_head: 2}}" for d in range(16, 176, 16))
    return f"""name: interrupts
runs_dir: {folder / 'runs'}
simulate:
  law: {{E: 1.69, A: 406.4, B: 410.7, alpha: 0.34, beta: 0.28}}
  noise: 0.005
  seed: 0
model: {{vocab_size: 1024, context: 128}}
train: {{batch_tokens: 512}}
resources: {{num_cpus: 2}}
grid:
  - tokens: [{tokens}]
    models:
{models}
"""


def one(folder: Path, delay: float) -> tuple[int, int, str]:
    plan = folder / "plan.yaml"
    db = folder / "results.db"
    proc = subprocess.Popen([SCALING, "sweep", str(plan), "--db", f"sqlite:///{db}", "--no-fit", "--no-report"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    time.sleep(delay)
    try:
        os.killpg(proc.pid, signal.SIGINT)
    except ProcessLookupError:
        pass
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
    code = proc.returncode
    running = 0
    if db.exists():
        with sqlite3.connect(db) as con:
            try:
                running = con.execute("SELECT count(*) FROM runs WHERE status = 'running'").fetchone()[0]
            except sqlite3.OperationalError:  # interrupted before the schema was written: nothing registered
                running = 0
    return code, running, err.decode(errors="replace").strip().splitlines()[-1:] and \
        err.decode(errors="replace").strip().splitlines()[-1] or ""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tries", type=int, default=20)
    ap.add_argument("--runs", type=int, default=3000)
    ap.add_argument("--min-delay", type=float, default=0.0)
    ap.add_argument("--max-delay", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    codes: Counter[int] = Counter()
    bad = 0
    for i in range(args.tries):
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            (folder / "plan.yaml").write_text(plan_text(folder, args.runs))
            delay = rng.uniform(args.min_delay, args.max_delay)
            code, running, last = one(folder, delay)
        codes[code] += 1
        ok = code in (130, 0) and running == 0
        bad += not ok
        print(f"try {i}: SIGINT after {delay:.2f} s: exit {code}, {running} run(s) left running"
              + ("" if ok else f"  <-- BAD (last line: {last[:200]})"), flush=True)
    print(f"{args.tries} tries: exit codes {dict(codes)}; {bad} bad")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

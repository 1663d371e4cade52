"""The prepared GPU check: the trainer's CUDA, flash-attn, fp16, checkpoint and Ray paths, one line each.

Run by ``scripts/gpu-check.sh`` on a machine with one GPU (under 10 minutes). Every check runs
the real command line (``scaling train``, ``scaling sweep``) on the built-in corpus and reads
what the run recorded from its database, then prints ``PASS``/``FAIL``/``SKIP``, the check's name
and what it measured. ``--dry-run`` runs the same checks on the CPU with a tiny model (flash-attn
and the GPU-only tests are then skipped), to prove the script itself in CI-like conditions.
Exit status: 0 when nothing failed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
#: The agreement asked of two runs differing only in their attention kernel (final eval loss, nats).
ATTENTION_TOLERANCE_NATS = 0.02


def _yaml(obj: Any, indent: int = 0) -> str:
    """A small YAML writer for the specs and plan below (dicts, lists, scalars)."""
    pad = "  " * indent
    lines = []
    for key, value in obj.items():
        if isinstance(value, dict):
            lines.append(f"{pad}{key}:")
            lines.append(_yaml(value, indent + 1))
        elif isinstance(value, list):
            lines.append(f"{pad}{key}:")
            for item in value:
                if isinstance(item, dict):
                    first, *rest = _yaml(item, indent + 2).splitlines()
                    lines.append(f"{pad}  - {first.strip()}")
                    lines.extend(rest)
                else:
                    lines.append(f"{pad}  - {item}")
        else:
            lines.append(f"{pad}{key}: {value}")
    return "\n".join(lines)


class Check:
    """The checks' shared setup: where they write, which model they train, how they call the CLI."""

    def __init__(self, work: Path, dry_run: bool) -> None:
        self.work = work
        self.dry_run = dry_run
        self.cli = [sys.executable, "-c", "from scaling.cli import main; main()"]
        if dry_run:
            self.model = {"n_layer": 1, "d_model": 32, "n_head": 2, "context": 32}
            self.batch_tokens, self.steps = 32 * 8, 12
        else:
            self.model = {"n_layer": 8, "d_model": 512, "n_head": 8, "context": 512}
            self.batch_tokens, self.steps = 512 * 32, 300
        self.device = "cpu" if dry_run else "cuda"

    def spec(self, precision: str, **extra: Any) -> dict[str, Any]:
        quarter = max(1, self.steps // 4)
        return {
            "model": dict(self.model),
            "precision": precision,
            "tokens": self.batch_tokens * self.steps,
            "batch_tokens": self.batch_tokens,
            "eval_tokens": self.model["context"] * 64,
            "optimizer": {"lr": 1.0e-3},
            "execution": {"device": self.device, "log_interval": quarter, "eval_interval": self.steps,
                          "checkpoint_interval": quarter, "threads": 1 if self.dry_run else 4},
            **extra,
        }

    def train(self, name: str, spec: dict[str, Any], env: dict[str, str] | None = None) -> tuple[int, str, str]:
        """``scaling train`` on ``spec`` into its own database; (exit status, output, database URL)."""
        folder = self.work / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "spec.yaml").write_text(_yaml(spec) + "\n")
        db = f"sqlite:///{folder / 'runs.db'}"
        proc = subprocess.run([*self.cli, "train", str(folder / "spec.yaml"), "--db", db, "--run-dir", str(folder / "run")],
                              capture_output=True, text=True, cwd=ROOT, env={**os.environ, **(env or {})})
        return proc.returncode, proc.stdout + proc.stderr, db


def recorded(db: str) -> dict[str, Any]:
    """What the database holds of its one run: final eval loss, last tokens/s, MFU, loss scale, events."""
    from scaling import vocab as names
    from scaling.db import connect

    res = connect(db)
    m = res.metrics()
    last = {name: float(g.sort_values("step")["value"].iloc[-1]) for name, g in m.groupby("name")}
    ev = res.events()
    events = list(zip(ev["kind"].tolist(), ev["detail"].tolist()))
    data = next((d for k, d in events if k == names.DATA), {})
    return {"eval": last.get(names.EVAL_LOSS, math.nan), "tps": last.get(names.TOKENS_PER_SECOND),
            "mfu": last.get(names.MFU), "scale": last.get(names.LOSS_SCALE), "attention": data.get("attention"),
            "device": data.get("device"), "kinds": [k for k, _ in events]}


def _speed(r: dict[str, Any]) -> str:
    tps = f"{r['tps']:,.0f} tokens/s" if r["tps"] else "no tokens/s"
    mfu = f"MFU {r['mfu']:.1%}" if r["mfu"] is not None else "MFU unknown (GPU not in the peak table)"
    return f"{tps}, {mfu}"


def check_attention(c: Check) -> list[tuple[str, str, str]]:
    """bf16 with flash-attn and with SDPA: both train, and their final eval losses agree."""
    out = []
    runs = {}
    for kernel, env in (("flash_attn", {}), ("sdpa", {"SCALING_ATTENTION": "sdpa"})):
        code, text, db = c.train(f"bf16-{kernel}", c.spec("bf16"), env)
        if code != 0:
            out.append(("FAIL", f"bf16 {kernel}", f"scaling train exited {code}: {text.strip().splitlines()[-1:]}"))
            continue
        r = runs[kernel] = recorded(db)
        if kernel == "flash_attn" and r["attention"] != "flash_attn":
            why = "dry run on the CPU" if c.dry_run else "flash-attn not installed or not usable on this GPU"
            out.append(("SKIP", "bf16 flash_attn", f"ran {r['attention']} ({why}); eval loss {r['eval']:.4f}, {_speed(r)}"))
            del runs[kernel]  # nothing to compare SDPA with
            continue
        out.append(("PASS", f"bf16 {kernel}", f"eval loss {r['eval']:.4f}, {_speed(r)}, on {r['device']}"))
    if "flash_attn" in runs and "sdpa" in runs:
        gap = abs(runs["flash_attn"]["eval"] - runs["sdpa"]["eval"])
        ok = gap <= ATTENTION_TOLERANCE_NATS
        out.append(("PASS" if ok else "FAIL", "flash_attn vs sdpa",
                    f"final eval losses differ by {gap:.4f} nats (allowed {ATTENTION_TOLERANCE_NATS})"))
    return out


def check_fp16(c: Check) -> list[tuple[str, str, str]]:
    code, text, db = c.train("fp16", c.spec("fp16"))
    if code != 0:
        return [("FAIL", "fp16 loss scaling", f"scaling train exited {code}: {text.strip().splitlines()[-1:]}")]
    r = recorded(db)
    ok = math.isfinite(r["eval"]) and r["scale"] is not None
    return [("PASS" if ok else "FAIL", "fp16 loss scaling", f"eval loss {r['eval']:.4f}, loss scale {r['scale']}, {_speed(r)}")]


def check_resume(c: Check) -> list[tuple[str, str, str]]:
    """A run stopped by an injected fault after a checkpoint resumes from it and completes."""
    stop = c.steps // 2 + 1
    spec = c.spec("bf16" if not c.dry_run else "fp32", faults={"raise_at_step": stop, "raise_attempts": 1})
    first, _, db = c.train("resume", spec)
    second, text, _ = c.train("resume", spec)
    if first == 0 or second != 0:
        return [("FAIL", "resume from a checkpoint", f"first attempt exited {first} (expected a failure), "
                 f"second {second}: {text.strip().splitlines()[-1:]}")]
    r = recorded(db)
    ok = "resume" in r["kinds"] and math.isfinite(r["eval"])
    return [("PASS" if ok else "FAIL", "resume from a checkpoint",
             f"stopped at step {stop}, resumed ({'resume' in r['kinds']}), eval loss {r['eval']:.4f}")]


def check_sweep(c: Check) -> list[tuple[str, str, str]]:
    """Two runs through Ray, one GPU each (one after the other on a one-GPU machine)."""
    from scaling.db import connect

    folder = c.work / "sweep"
    folder.mkdir(parents=True, exist_ok=True)
    quarter = max(1, c.steps // 4)
    d = c.model["d_model"]
    plan = {
        "name": "gpu-check",
        "runs_dir": str(folder / "runs"),
        "model": {"context": c.model["context"]},
        "train": {"precision": "fp32" if c.dry_run else "bf16", "batch_tokens": c.batch_tokens,
                  "eval_tokens": c.model["context"] * 64, "eval_interval": c.steps, "checkpoint_interval": quarter,
                  "log_interval": quarter, "threads": 1},
        "resources": {"workers": 1, "cpus_per_worker": 1, "gpus_per_worker": 0 if c.dry_run else 1},
        "seeds": [0],
        "grid": [{"tokens": [c.batch_tokens * c.steps],
                  "models": [{"n_layer": c.model["n_layer"], "d_model": d, "n_head": c.model["n_head"]},
                             {"n_layer": c.model["n_layer"] + 1, "d_model": d, "n_head": c.model["n_head"]}]}],
    }
    (folder / "plan.yaml").write_text(_yaml(plan) + "\n")
    db = f"sqlite:///{folder / 'runs.db'}"
    proc = subprocess.run([*c.cli, "sweep", str(folder / "plan.yaml"), "--db", db, "--no-fit", "--no-report"],
                          capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-2:]
        return [("FAIL", "two-run sweep through Ray", f"scaling sweep exited {proc.returncode}: {tail}")]
    runs = connect(db).runs()
    status = sorted(runs["status"].tolist())
    ok = status == ["completed", "completed"]
    return [("PASS" if ok else "FAIL", "two-run sweep through Ray",
             f"{len(runs)} runs {status}, {'no GPU (dry run)' if c.dry_run else 'one GPU each'}")]


def check_gpu_tests(c: Check) -> list[tuple[str, str, str]]:
    if c.dry_run:
        return [("SKIP", "GPU-only tests", "dry run on the CPU")]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/gpu"],
                          capture_output=True, text=True, cwd=ROOT)
    summary = (proc.stdout.strip().splitlines() or ["no output"])[-1]
    return [("PASS" if proc.returncode == 0 else "FAIL", "GPU-only tests", summary)]


CHECKS: list[Callable[[Check], list[tuple[str, str, str]]]] = [
    check_attention, check_fp16, check_resume, check_sweep, check_gpu_tests,
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="the same checks on the CPU, with a tiny model")
    ap.add_argument("--keep", type=Path, help="write the runs here and keep them (default: a temporary folder)")
    args = ap.parse_args()
    if not args.dry_run:
        import torch

        if not torch.cuda.is_available():
            print("gpu-check: no CUDA device visible (use --dry-run to check the script on the CPU)", file=sys.stderr)
            return 2
        print(f"gpu-check on {torch.cuda.get_device_name()} (torch {torch.__version__})", flush=True)
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep or Path(tmp)
        c = Check(work, args.dry_run)
        for check in CHECKS:
            started = time.monotonic()
            try:
                lines = check(c)
            except Exception as exc:  # one broken check must not hide the others' lines
                lines = [("FAIL", check.__name__.removeprefix("check_"), f"{type(exc).__name__}: {exc}")]
            for verdict, name, detail in lines:
                failed |= verdict == "FAIL"
                print(f"{verdict:4} {name}: {detail} ({time.monotonic() - started:.0f} s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

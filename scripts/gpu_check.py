"""The prepared GPU check: the trainer's CUDA paths on one lent GPU, one verdict line per step.

Run by ``scripts/gpu-check.sh`` on a machine with one GPU (at most 8 minutes on one H200), from
the checkout, with only the wheels of ``scripts/gpu-wheels.sh`` added to the machine's stock
image (no Ray, no plotly: every step runs ``scaling train`` or the trainer in place). Each step
prints ``PASS``/``FAIL``/``SKIP``, its name and what it measured; the verdicts, the device and
the time go to a JSON summary (``--summary``). Exit status: 0 when nothing failed, 1 otherwise,
2 when the check cannot start.

- ``--dry-run`` (no GPU): lists the steps and checks the wheels (all there, at most 40 MiB).
- ``--cpu``: every step that can run without a GPU, on the CPU with a tiny model (the rehearsal
  the test suite runs); the others say SKIP.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
WHEELS = Path(os.environ.get("SCALING_GPU_WHEELS", ROOT / ".gpu-wheels"))  # scripts/gpu-wheels.sh's folder
#: What may travel with the checkout besides it (the device machine takes 64 MiB of extra files).
WHEELS_LIMIT_MIB = 40
#: The wheels scripts/gpu-wheels.sh downloads (distribution names as their files spell them).
WHEEL_NAMES = ("pydantic", "pydantic_core", "annotated_types", "typing_inspection", "typing_extensions",
               "sqlalchemy", "alembic", "mako", "markupsafe")
#: The floor under which the large bf16 run fails (model FLOPs utilization).
MFU_FLOOR = 0.35
#: How far the measured peak memory may be from ``scaling.memory.memory_per_rank`` (its margin excluded).
MEMORY_TOLERANCE = 0.15
#: How far a resumed run's final eval loss may be from the uninterrupted one's (relative): the same
#: batches and state, but GPU kernels that add in a different order from run to run.
RESUME_RTOL = 0.005
#: How far two layouts' (or compiled and eager) final train losses may be apart (relative), bf16.
LAYOUT_RTOL = 0.02
#: The same, for the CPU rehearsal in fp32, where only the order of reductions differs.
FP32_LAYOUT_RTOL = 1e-4

Verdict = tuple[str, str, str]


class Check:
    """The steps' shared setup: where they write, the model sizes, how they call the CLI."""

    def __init__(self, work: Path, cpu: bool) -> None:
        self.work = work
        self.cpu = cpu
        self.device = "cpu" if cpu else "cuda"
        self.cli = [sys.executable, "-c", "from scaling.cli import main; main()"]
        if cpu:
            tiny = {"n_layer": 2, "d_model": 32, "n_head": 2, "context": 32}
            self.large, self.medium, self.small = tiny, tiny, tiny
            self.large_batch, self.medium_batch = 32 * 8, 32 * 8
            self.large_steps, self.medium_steps = 8, 8
        else:
            self.large = {"n_layer": 24, "d_model": 2048, "n_head": 16, "context": 2048}
            self.medium = {"n_layer": 8, "d_model": 1024, "n_head": 8, "context": 1024}
            self.small = {"n_layer": 4, "d_model": 512, "n_head": 8, "context": 512}
            self.large_batch, self.medium_batch = 2048 * 16, 1024 * 16
            self.large_steps, self.medium_steps = 50, 30

    def spec(self, model: dict[str, Any], batch_tokens: int, steps: int, precision: str, **extra: Any) -> dict[str, Any]:
        execution = {"device": self.device, "log_interval": max(1, steps // 5), "eval_interval": steps,
                     "checkpoint_interval": 10_000, "threads": 1 if self.cpu else 4, **extra.pop("execution", {})}
        return {"model": dict(model), "precision": precision, "tokens": batch_tokens * steps,
                "batch_tokens": batch_tokens, "eval_tokens": model["context"] * 16, "optimizer": {"lr": 1.0e-3},
                "evals": {"next_line": False}, "execution": execution, **extra}

    def train(self, name: str, spec: dict[str, Any]) -> tuple[int, str, str]:
        """``scaling train`` on ``spec`` into its own database; (exit status, output, database URL)."""
        folder = self.work / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "spec.json").write_text(json.dumps(spec))  # JSON is YAML
        db = f"sqlite:///{folder / 'runs.db'}"
        proc = subprocess.run([*self.cli, "train", str(folder / "spec.json"), "--db", db, "--run-dir", str(folder / "run")],
                              capture_output=True, text=True, cwd=ROOT)
        return proc.returncode, proc.stdout + proc.stderr, db


def recorded(db: str) -> dict[str, Any]:
    """What the database holds of its one run: final losses, last tokens/s, MFU, loss scale, events."""
    from scaling import vocab as names
    from scaling.db import connect

    res = connect(db)
    m = res.metrics()
    last = {name: float(g.sort_values("step")["value"].iloc[-1]) for name, g in m.groupby("name")}
    ev = res.events()
    events = list(zip(ev["kind"].tolist(), ev["detail"].tolist()))
    data = next((d for k, d in events if k == names.DATA), {})
    return {"eval": last.get(names.EVAL_LOSS, math.nan), "train": last.get(names.TRAIN_LOSS, math.nan),
            "tps": last.get(names.TOKENS_PER_SECOND), "mfu": last.get(names.MFU), "scale": last.get(names.LOSS_SCALE),
            "attention": data.get("attention"), "device": data.get("device"), "kinds": [k for k, _ in events]}


def _speed(r: dict[str, Any]) -> str:
    tps = f"{r['tps']:,.0f} tokens/s" if r["tps"] else "no tokens/s"
    if r["device"] == "cpu":  # the CPU's peak is a probe's, and the rehearsal's runs are too short to judge
        return f"{tps} (MFU not judged on the CPU)"
    mfu = f"MFU {r['mfu']:.1%}" if r["mfu"] is not None else "MFU unknown (device not in the peak table)"
    return f"{tps}, {mfu}"


def _failed(name: str, code: int, text: str) -> Verdict:
    return ("FAIL", name, f"exited {code}: {text.strip().splitlines()[-1:]}")


def _rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b) if b else math.inf


# -- the steps ---------------------------------------------------------------------------------------
def step_cuda_tests(c: Check) -> list[Verdict]:
    """tests/gpu: flash-attn against SDPA, one sync per quiet step, CUDA generators, fp16's device skip."""
    if c.cpu:
        return [("SKIP", "CUDA tests", "no GPU")]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/gpu"],
                          capture_output=True, text=True, cwd=ROOT)
    summary = (proc.stdout.strip().splitlines() or ["no output"])[-1]
    return [("PASS" if proc.returncode == 0 else "FAIL", "CUDA tests", summary)]


def step_bf16_families(c: Check) -> list[Verdict]:
    """``scaling train`` in bf16 at about d 2,048, 24 layers, context 2,048 for 50 steps, for each
    model family this checkout has: tokens/s and MFU, failing under the floor."""
    from scaling.trainer.sections import ModelSpec

    out: list[Verdict] = []
    families = ["gpt"]
    if "family" in ModelSpec.model_fields:
        families.append("llama")
    for family in families:
        name = f"bf16 {family} d{c.large['d_model']} x {c.large['n_layer']}"
        model = dict(c.large, **({"family": family} if family != "gpt" else {}))
        code, text, db = c.train(f"bf16-{family}", c.spec(model, c.large_batch, c.large_steps, "bf16"))
        if code != 0:
            out.append(_failed(name, code, text))
            continue
        r = recorded(db)
        if c.cpu:
            out.append(("PASS", name, f"eval loss {r['eval']:.4f}, {_speed(r)}"))
            continue
        ok = r["mfu"] is not None and r["mfu"] >= MFU_FLOOR and math.isfinite(r["eval"])
        out.append(("PASS" if ok else "FAIL", name,
                    f"eval loss {r['eval']:.4f}, {_speed(r)} (floor {MFU_FLOOR:.0%}), attention {r['attention']}"))
    if len(families) == 1:
        out.append(("SKIP", "bf16 llama", "this checkout has one model family"))
    return out


def step_fp16(c: Check) -> list[Verdict]:
    code, text, db = c.train("fp16", c.spec(c.medium, c.medium_batch, c.medium_steps, "fp16"))
    if code != 0:
        return [_failed("fp16 loss scaling", code, text)]
    r = recorded(db)
    ok = math.isfinite(r["eval"]) and r["scale"] is not None
    return [("PASS" if ok else "FAIL", "fp16 loss scaling", f"eval loss {r['eval']:.4f}, loss scale {r['scale']}, {_speed(r)}")]


def step_resume(c: Check) -> list[Verdict]:
    """A run stopped by an injected fault after a checkpoint resumes from it and ends where the
    uninterrupted run ends."""
    name = "stop and resume vs uninterrupted"
    steps = c.medium_steps
    half = steps // 2
    precision = "fp32" if c.cpu else "bf16"
    base = c.spec(c.medium, c.medium_batch, steps, precision, execution={"checkpoint_interval": half})
    code, text, whole_db = c.train("uninterrupted", base)
    if code != 0:
        return [_failed(name, code, text)]
    cut = dict(base, faults={"raise_at_step": half + 2, "raise_attempts": 1})
    first, _, db = c.train("resumed", cut)
    second, text, _ = c.train("resumed", cut)
    if first == 0 or second != 0:
        return [("FAIL", name, f"first attempt exited {first} (expected the fault), second {second}: "
                 f"{text.strip().splitlines()[-1:]}")]
    whole, resumed = recorded(whole_db), recorded(db)
    gap = _rel(resumed["eval"], whole["eval"])
    ok = "resume" in resumed["kinds"] and gap <= RESUME_RTOL
    return [("PASS" if ok else "FAIL", name, f"stopped at step {half + 2}, resumed from {half}: eval loss "
             f"{resumed['eval']:.4f} vs {whole['eval']:.4f} uninterrupted ({gap:.2e} apart, allowed {RESUME_RTOL})")]


def _rank(rank: int, world: int, init: str, spec_json: str, run_dir: str, out: str) -> None:
    """One rank of a two-rank run on this machine's one device, over gloo."""
    import torch.distributed as dist

    from scaling.trainer import train
    from scaling.trainer.spec import RunSpec

    os.environ["LOCAL_RANK"] = str(rank)
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    try:
        result = train(RunSpec.model_validate_json(spec_json), None, run_dir)
        Path(out, f"rank{rank}.json").write_text(json.dumps({"eval": result.final_eval_loss}))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def step_two_ranks(c: Check) -> list[Verdict]:
    """Two ranks on the one device over gloo, tensor parallel (tp2: one data-parallel rank, the
    layout whose AdamW mixed plain tensors and DTensors) and ZeRO-3, against one process."""
    import torch.multiprocessing as mp

    from scaling.trainer.spec import RunSpec

    precision = "fp32" if c.cpu else "bf16"
    steps = 10
    batch = c.small["context"] * 8
    one = c.spec(c.small, batch, steps, precision)
    code, text, db = c.train("two-ranks-reference", one)
    if code != 0:
        return [_failed("two ranks: one-process reference", code, text)]
    ref = recorded(db)
    out: list[Verdict] = []
    for layout, placement in (("tp2", {"tp": 2}), ("zero3", {"strategy": "zero3"})):
        name = f"two ranks on one device over gloo, {layout}"
        folder = c.work / f"two-ranks-{layout}"
        folder.mkdir(parents=True, exist_ok=True)
        spec = c.spec(c.small, batch, steps, precision,
                      execution={"workers": 2, "gpus_per_worker": 0 if c.cpu else 1, **placement})
        spec_json = RunSpec.from_dict(spec).to_json()
        try:
            mp.start_processes(_rank, args=(2, str(folder / "rendezvous"), spec_json, str(folder / "run"), str(folder)),
                               nprocs=2, join=True, start_method="spawn")
        except Exception as exc:  # noqa: BLE001 - the rank's error is the verdict
            out.append(("FAIL", name, " ".join(str(exc).split())[-300:]))
            continue
        got = json.loads((folder / "rank0.json").read_text())
        gap = _rel(got["eval"], ref["eval"])
        allowed = FP32_LAYOUT_RTOL if precision == "fp32" else LAYOUT_RTOL
        out.append(("PASS" if gap <= allowed else "FAIL", name, f"final eval loss {got['eval']:.4f} vs "
                    f"{ref['eval']:.4f} on one process ({gap:.2e} apart, allowed {allowed})"))
    return out


def step_memory(c: Check) -> list[Verdict]:
    """The trainer's measured peak memory against ``scaling.memory.memory_per_rank`` (no margin)."""
    name = "peak memory vs memory_per_rank"
    if c.cpu:
        return [("SKIP", name, "no device memory statistics on the CPU")]
    import torch

    from scaling.accounting import ParallelLayout
    from scaling.memory import memory_per_rank
    from scaling.trainer import train
    from scaling.trainer.spec import RunSpec

    spec = RunSpec.from_dict(c.spec(c.medium, c.medium_batch, 5, "bf16"))
    torch.cuda.reset_peak_memory_stats()
    train(spec, None, c.work / "memory")
    measured = torch.cuda.max_memory_allocated()
    sequences = spec.sequences_per_batch
    est = memory_per_rank(spec.shape, ParallelLayout(micro_batch=sequences), "bf16")
    expected = est.total_bytes - est.margin_bytes
    gap = _rel(measured, expected)
    return [("PASS" if gap <= MEMORY_TOLERANCE else "FAIL", name,
             f"measured {measured / 2**30:.2f} GiB, modelled {expected / 2**30:.2f} GiB ({gap:.1%} apart, "
             f"allowed {MEMORY_TOLERANCE:.0%})")]


def step_compile(c: Check) -> list[Verdict]:
    """``compile`` on against off: both train to the same loss; the speed-up is reported."""
    name = "compile on vs off"
    if c.cpu:
        return [("SKIP", name, "compiling needs the GPU's time, not the rehearsal's")]
    runs = {}
    for on in (False, True):
        code, text, db = c.train(f"compile-{on}", c.spec(c.medium, c.medium_batch, c.medium_steps, "bf16",
                                                          execution={"compile": on}))
        if code != 0:
            return [_failed(f"{name} (compile {on})", code, text)]
        runs[on] = recorded(db)
    gap = _rel(runs[True]["train"], runs[False]["train"])
    speedup = (runs[True]["tps"] or 0) / (runs[False]["tps"] or math.inf)
    return [("PASS" if gap <= LAYOUT_RTOL else "FAIL", name,
             f"final train loss {runs[True]['train']:.4f} vs {runs[False]['train']:.4f} ({gap:.2e} apart); "
             f"{speedup:.2f}x the eager tokens/s")]


STEPS: list[tuple[str, Callable[[Check], list[Verdict]]]] = [
    ("the CUDA tests (tests/gpu)", step_cuda_tests),
    ("scaling train in bf16 per model family, d 2,048 x 24, context 2,048, 50 steps: tokens/s, MFU >= 35%",
     step_bf16_families),
    ("fp16 with its loss scaler", step_fp16),
    ("a run stopped and resumed against the uninterrupted one", step_resume),
    ("two ranks on the one GPU over gloo: tp2 and zero3 against one process", step_two_ranks),
    ("measured peak memory against memory_per_rank (within 15%)", step_memory),
    ("compile on against off", step_compile),
]


def wheels_problem() -> str | None:
    """What is wrong with the wheels scripts/gpu-wheels.sh downloads (None: all there, small enough)."""
    found = sorted(WHEELS.glob("*.whl")) if WHEELS.is_dir() else []
    names = {p.name.split("-", 1)[0].lower() for p in found}
    missing = [n for n in WHEEL_NAMES if n not in names]
    if missing:
        return f"wheels missing from {WHEELS.name}/: {', '.join(missing)} (run bash scripts/gpu-wheels.sh)"
    size = sum(p.stat().st_size for p in found)
    if size > WHEELS_LIMIT_MIB * 2**20:
        return f"the wheels take {size / 2**20:.1f} MiB, over {WHEELS_LIMIT_MIB} MiB"
    return None


def dry_run() -> int:
    for i, (what, _) in enumerate(STEPS, 1):
        print(f"step {i}: {what}")
    problem = wheels_problem()
    if problem:
        print(f"FAIL wheels: {problem}")
        return 1
    size = sum(p.stat().st_size for p in WHEELS.glob("*.whl"))
    print(f"PASS wheels: {len(WHEEL_NAMES)} in {WHEELS.name}/, {size / 2**20:.1f} MiB (at most {WHEELS_LIMIT_MIB})")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="list the steps and check the wheels (no GPU)")
    mode.add_argument("--cpu", action="store_true", help="every step that can, on the CPU with a tiny model")
    ap.add_argument("--keep", type=Path, help="write the runs here and keep them (default: a temporary folder)")
    ap.add_argument("--summary", type=Path, default=ROOT / "artifacts" / "gpu-check.json", help="the JSON summary")
    args = ap.parse_args()
    if args.dry_run:
        return dry_run()
    import torch

    if not args.cpu and not torch.cuda.is_available():
        print("gpu-check: no CUDA device visible (--cpu rehearses the steps on the CPU)", file=sys.stderr)
        return 2
    device = "cpu" if args.cpu else torch.cuda.get_device_name()
    print(f"gpu-check on {device} (torch {torch.__version__})", flush=True)
    verdicts: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep or Path(tmp)
        c = Check(work, args.cpu)
        for _, step in STEPS:
            started = time.monotonic()
            try:
                lines = step(c)
            except Exception as exc:  # one broken step must not hide the others' lines
                lines = [("FAIL", step.__name__.removeprefix("step_"), f"{type(exc).__name__}: {exc}")]
            seconds = time.monotonic() - started
            for verdict, name, detail in lines:
                verdicts.append({"verdict": verdict, "step": name, "detail": detail, "seconds": round(seconds, 1)})
                print(f"{verdict:4} {name}: {detail} ({seconds:.0f} s)", flush=True)
    args.summary.parent.mkdir(parents=True, exist_ok=True)
    args.summary.write_text(json.dumps({"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                                        "device": device, "torch": torch.__version__, "steps": verdicts}, indent=1))
    print(f"summary: {args.summary}")
    return 1 if any(v["verdict"] == "FAIL" for v in verdicts) else 0


if __name__ == "__main__":
    sys.exit(main())

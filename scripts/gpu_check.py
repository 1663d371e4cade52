"""The prepared GPU check: the trainer's CUDA paths on one lent GPU, one verdict line per step.

Run by ``scripts/gpu-check.sh`` on a machine with one GPU, from the checkout, with only the wheels
of ``scripts/gpu-wheels.sh`` added to the machine's stock image (no Ray, no plotly: every step runs
the trainer in place). The machine is lent for one command of at most 10 minutes, so the check
must end in time whatever happens: the steps run most valuable first, each in its own process
group killed when it passes its time budget or the global deadline (default 8 minutes), and the
JSON summary is rewritten after every step (to ``--summary``, by default ``$OUT/gpu-check.json``
where the lent machine sends ``$OUT`` back). Each step's run folders are deleted as it ends (a
large checkpoint is tens of GB on a 64 GiB disk). Each step prints ``PASS``/``FAIL``/``SKIP``, its
name and what it measured. Exit status: 0 when nothing failed, 1 otherwise, 2 when the check
cannot start.

- ``--dry-run`` (no GPU): lists the steps in order with their budgets and checks the wheels.
- ``--cpu``: every step that can run without a GPU, on the CPU with a tiny model (the rehearsal
  the test suite runs); the others say SKIP. No deadline unless ``--deadline`` gives one.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

ROOT = Path(__file__).resolve().parent.parent
WHEELS = Path(os.environ.get("SCALING_GPU_WHEELS", ROOT / ".gpu-wheels"))  # scripts/gpu-wheels.sh's folder
#: What may travel with the checkout besides it (the device machine takes 64 MiB of extra files).
WHEELS_LIMIT_MIB = 40
#: The wheels scripts/gpu-wheels.sh downloads (distribution names as their files spell them).
WHEEL_NAMES = ("pydantic", "pydantic_core", "annotated_types", "typing_inspection", "typing_extensions",
               "sqlalchemy", "alembic", "mako", "markupsafe")
#: The image's packages whose versions the check prints first (what the trainer runs against there).
IMAGE_PACKAGES = ("torch", "pandas", "typer")
#: The whole check's deadline on the GPU (seconds): a 10-minute command less start-up and transfers.
DEADLINE_S = 480.0
#: The floor under which the large bf16 run fails (model FLOPs utilization).
MFU_FLOOR = 0.35
#: How far the measured peak memory may be from ``scaling.memory.memory_per_rank`` (its margin excluded).
MEMORY_TOLERANCE = 0.15
#: How far a resumed run's final eval loss may be from the uninterrupted one's (relative): the same
#: batches and state, but GPU kernels that add in a different order from run to run.
RESUME_RTOL = 0.005
#: How far two layouts' (or compiled and eager) final train losses may be apart (relative), bf16.
LAYOUT_RTOL = 0.02
#: How far tensor parallelism's first gradient norm may be from one process's (relative), in FP32:
#: the same gradients summed in another order (FP32 matmuls are not TF32 unless asked).
GRAD_NORM_RTOL = 1e-4
#: The same, for the CPU rehearsal in fp32, where only the order of reductions differs.
FP32_LAYOUT_RTOL = 1e-4
#: Micro-batches per rank of the ZeRO-3 accumulation step.
ACCUMULATED = 4
#: Written on its own line by a step's process before each verdict it found (the parent reads them).
VERDICT_TAG = "gpu-check-verdict "

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
            self.llama = {**tiny, "n_head": 4, "n_kv_head": 2}
            self.large_batch, self.medium_batch = 32 * 8, 32 * 8
            self.large_steps, self.medium_steps = 8, 8
        else:
            self.large = {"n_layer": 24, "d_model": 2048, "n_head": 16, "context": 2048}
            self.llama = {**self.large, "n_kv_head": 4}
            self.medium = {"n_layer": 8, "d_model": 1024, "n_head": 8, "context": 1024}
            self.small = {"n_layer": 4, "d_model": 512, "n_head": 8, "context": 512}
            self.large_batch, self.medium_batch = 2048 * 16, 1024 * 16
            self.large_steps, self.medium_steps = 30, 20

    def spec(self, model: dict[str, Any], batch_tokens: int, steps: int, precision: str, **extra: Any) -> dict[str, Any]:
        execution = {"device": self.device, "log_interval": max(1, steps // 5), "eval_interval": steps,
                     "checkpoint_interval": 10_000, "threads": 1 if self.cpu else 4, **extra.pop("execution", {})}
        return {"model": dict(model), "precision": precision, "tokens": batch_tokens * steps,
                "batch_tokens": batch_tokens, "eval_tokens": model["context"] * 16, "optimizer": {"lr": 1.0e-3},
                "evals": {"next_line": False}, "execution": execution, **extra}

    def folder(self, name: str) -> Path:
        folder = self.work / name
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def train(self, name: str, spec: dict[str, Any]) -> tuple[int, str, str]:
        """``scaling train`` on ``spec`` into its own database; (exit status, output, database URL)."""
        folder = self.folder(name)
        (folder / "spec.json").write_text(json.dumps(spec))  # JSON is YAML
        db = f"sqlite:///{folder / 'runs.db'}"
        proc = subprocess.run([*self.cli, "train", str(folder / "spec.json"), "--db", db, "--run-dir", str(folder / "run")],
                              capture_output=True, text=True, cwd=ROOT)
        return proc.returncode, proc.stdout + proc.stderr, db


def recorded(db: str) -> dict[str, Any]:
    """What the database holds of its one run: final losses, step 1's gradient norm, last tokens/s,
    MFU, loss scale, events."""
    from scaling import vocab as names
    from scaling.db import connect

    res = connect(db)
    m = res.metrics()
    last = {name: float(g.sort_values("step")["value"].iloc[-1]) for name, g in m.groupby("name")}
    norms = m[(m["name"] == names.GRAD_NORM) & (m["step"] == 1)]["value"]
    ev = res.events()
    events = list(zip(ev["kind"].tolist(), ev["detail"].tolist()))
    data = next((d for k, d in events if k == names.DATA), {})
    return {"eval": last.get(names.EVAL_LOSS, math.nan), "train": last.get(names.TRAIN_LOSS, math.nan),
            "norm1": float(norms.iloc[0]) if len(norms) else math.nan,
            "tps": last.get(names.TOKENS_PER_SECOND), "mfu": last.get(names.MFU), "scale": last.get(names.LOSS_SCALE),
            "attention": data.get("attention"), "device": data.get("device"), "fused": data.get("fused_optimizer"), "kinds": [k for k, _ in events]}


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


def _modelled(spec: Any, dp: int = 1, strategy: str = "single", micro_batches: int = 1) -> float:
    """``memory_per_rank`` of ``spec``'s layout on the GPU, its margin left out (bytes)."""
    from scaling.accounting import ParallelLayout
    from scaling.memory import memory_per_rank

    layout = ParallelLayout(dp=dp, strategy=strategy, micro_batch=spec.micro_batch,  # type: ignore[arg-type]
                            micro_batches=micro_batches)
    est = memory_per_rank(spec.shape, layout, spec.precision)
    return est.total_bytes - est.margin_bytes


def _memory_verdict(name: str, measured: float, modelled: float) -> Verdict:
    gap = _rel(measured, modelled)
    return ("PASS" if gap <= MEMORY_TOLERANCE else "FAIL", name,
            f"peak {measured / 2**30:.2f} GiB, modelled {modelled / 2**30:.2f} GiB ({gap:.1%} apart, "
            f"allowed {MEMORY_TOLERANCE:.0%})")


# -- the steps, most valuable first ------------------------------------------------------------------
def step_llama(c: Check) -> list[Verdict]:
    """A llama with grouped-query attention and qk-norm in bf16, trained in this process: MFU
    against the floor, the peak memory against the model, and AdamW fused."""
    import torch

    from scaling.trainer.adhoc import train_adhoc
    from scaling.trainer.spec import RunRequest, RunSpec

    name = f"bf16 llama GQA qk_norm d{c.llama['d_model']} x {c.llama['n_layer']}"
    # 4 sequences of 2,048 per micro-batch: about 35 GiB modelled (the whole batch at once, 85 GiB)
    fields = c.spec(dict(c.llama, family="llama", qk_norm=True), c.large_batch, c.large_steps, "bf16",
                    execution={"micro_batch_size": 1 if c.cpu else 4})
    folder = c.folder("llama")
    db = f"sqlite:///{folder / 'runs.db'}"
    if not c.cpu:
        torch.cuda.reset_peak_memory_stats()
    train_adhoc(RunRequest.from_dict(fields), db, folder / "run")  # `scaling train`, in this process
    spec = RunSpec.from_dict(fields)
    r = recorded(db)
    fused = bool(r["fused"])
    out: list[Verdict] = []
    if c.cpu:
        out.append(("PASS" if math.isfinite(r["eval"]) else "FAIL", name, f"eval loss {r['eval']:.4f}, {_speed(r)}"))
        out.append(("SKIP", "llama peak memory vs memory_per_rank", "no device memory statistics on the CPU"))
    else:
        ok = r["mfu"] is not None and r["mfu"] >= MFU_FLOOR and math.isfinite(r["eval"])
        out.append(("PASS" if ok else "FAIL", name,
                    f"eval loss {r['eval']:.4f}, {_speed(r)} (floor {MFU_FLOOR:.0%}), attention {r['attention']}"))
        out.append(_memory_verdict("llama peak memory vs memory_per_rank", torch.cuda.max_memory_allocated(),
                                   _modelled(spec)))
    out.append(("PASS" if fused else "FAIL", "fused AdamW", f"the optimizer is {'fused' if fused else 'not fused'}"))
    return out


def _rank(rank: int, world: int, init: str, spec_json: str, folder: str, db: Optional[str]) -> None:
    """One rank of a two-rank run on this machine's one device, over gloo: its peak memory to a file."""
    import torch
    import torch.distributed as dist

    from scaling.trainer import train
    from scaling.trainer.spec import RunSpec

    os.environ["LOCAL_RANK"] = str(rank)
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    try:
        spec = RunSpec.model_validate_json(spec_json)
        if spec.execution.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        result = train(spec, db if rank == 0 else None, Path(folder, "run"))
        peak = torch.cuda.max_memory_allocated() if spec.execution.device == "cuda" else None
        Path(folder, f"rank{rank}.json").write_text(json.dumps({"eval": result.final_eval_loss, "peak": peak}))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _two_ranks(c: Check, name: str, spec: dict[str, Any], db: Optional[str] = None) -> list[dict[str, Any]]:
    """Each rank's final eval loss and peak memory, of ``spec`` on two ranks of this device."""
    import torch.multiprocessing as mp

    from scaling.trainer.spec import RunSpec

    folder = c.folder(name)
    run = RunSpec.from_dict(spec)
    if db is not None:  # registered and claimed, as `scaling train` does, for rank 0 to record into
        from scaling.db import Store
        from scaling.db.lifecycle import Lifecycle

        store = Store(db)
        runs = Lifecycle(store, "gpu-check")
        try:
            runs.register([run.record()], params_convention=run.params_convention,
                          flops_convention=run.flops_convention)
            runs.claim(run.key)
        finally:
            runs.close()
            store.close()
    spec_json = run.to_json()
    mp.start_processes(_rank, args=(2, str(folder / "rendezvous"), spec_json, str(folder), db),
                       nprocs=2, join=True, start_method="spawn")
    return [json.loads((folder / f"rank{r}.json").read_text()) for r in range(2)]


def step_accumulation(c: Check) -> list[Verdict]:
    """ZeRO-3 over two ranks of the one GPU, accumulating 4 micro-batches: each rank's peak memory
    against the model (FSDP2 must keep the gradients sharded between micro-batches)."""
    from scaling.trainer.spec import RunSpec

    name = f"zero3, {ACCUMULATED} micro-batches, peak memory vs memory_per_rank"
    model = c.medium if c.cpu else {"n_layer": 4, "d_model": 2048, "n_head": 16, "context": 512}  # state dominates
    batch = 2 * ACCUMULATED * model["context"]
    spec = c.spec(model, batch, 5, "bf16", execution={"workers": 2, "gpus_per_worker": 0 if c.cpu else 1,
                                                      "strategy": "zero3", "micro_batch_size": 1})
    ranks = _two_ranks(c, "accumulation", spec)
    if c.cpu:
        return [("SKIP", name, f"no device memory statistics on the CPU (eval loss {ranks[0]['eval']:.4f})")]
    modelled = _modelled(RunSpec.from_dict(spec), dp=2, strategy="zero3", micro_batches=ACCUMULATED)
    return [_memory_verdict(name, max(r["peak"] for r in ranks), modelled)]


def step_tensor_parallel(c: Check) -> list[Verdict]:
    """Two ranks on the one device over gloo, tensor parallel (tp2: one data-parallel rank, the
    layout whose AdamW mixes plain tensors and DTensors), against one process in FP32: the first
    step's gradient norm tightly, and the final eval loss."""
    steps = 10
    batch = c.small["context"] * 8
    one = c.spec(c.small, batch, steps, "fp32", execution={"log_interval": 1})
    code, text, ref_db = c.train("tp2-reference", one)
    name = "two ranks on one device over gloo, tp2"
    if code != 0:
        return [_failed(f"{name}: one-process reference", code, text)]
    ref = recorded(ref_db)
    spec = c.spec(c.small, batch, steps, "fp32", execution={"workers": 2, "gpus_per_worker": 0 if c.cpu else 1,
                                                            "tp": 2, "log_interval": 1})
    db = f"sqlite:///{c.folder('tp2') / 'runs.db'}"
    _two_ranks(c, "tp2", spec, db)
    got = recorded(db)
    norm_gap, loss_gap = _rel(got["norm1"], ref["norm1"]), _rel(got["eval"], ref["eval"])
    ok = norm_gap <= GRAD_NORM_RTOL and loss_gap <= FP32_LAYOUT_RTOL
    return [("PASS" if ok else "FAIL", name,
             f"step 1 gradient norm {got['norm1']:.6g} vs {ref['norm1']:.6g} ({norm_gap:.1e} apart, allowed "
             f"{GRAD_NORM_RTOL:g}); final eval loss {got['eval']:.5f} vs {ref['eval']:.5f} ({loss_gap:.1e})")]


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


def step_fp16(c: Check) -> list[Verdict]:
    code, text, db = c.train("fp16", c.spec(c.medium, c.medium_batch, c.medium_steps, "fp16"))
    if code != 0:
        return [_failed("fp16 loss scaling", code, text)]
    r = recorded(db)
    ok = math.isfinite(r["eval"]) and r["scale"] is not None
    return [("PASS" if ok else "FAIL", "fp16 loss scaling", f"eval loss {r['eval']:.4f}, loss scale {r['scale']}, {_speed(r)}")]


def step_cuda_tests(c: Check) -> list[Verdict]:
    """tests/gpu: flash-attn against SDPA, one sync per quiet step, CUDA generators, fp16's device skip."""
    if c.cpu:
        return [("SKIP", "CUDA tests", "no GPU")]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/gpu"],
                          capture_output=True, text=True, cwd=ROOT)
    summary = (proc.stdout.strip().splitlines() or ["no output"])[-1]
    return [("PASS" if proc.returncode == 0 else "FAIL", "CUDA tests", summary)]


@dataclass(frozen=True)
class Step:
    """One step: its key (``--steps``, ``--budget``), what it does, its time budget on an H100."""

    key: str
    what: str
    budget_s: float
    run: Callable[[Check], list[Verdict]]


#: In order of what a failure would cost a GPU sweep; the budgets (seconds on one H100, start-up of
#: the step's process included) sum to at most :data:`DEADLINE_S`.
STEPS: list[Step] = [
    Step("llama", "llama GQA + qk_norm in bf16, d 2,048 x 24, context 2,048, 30 steps: MFU >= 35%, peak memory "
         "vs the model, fused AdamW", 110, step_llama),
    Step("accumulation", "ZeRO-3 on two ranks of the GPU, 4 micro-batches: peak memory vs the model", 60,
         step_accumulation),
    Step("tp2", "two ranks on the one GPU over gloo, tp2 against one process: step 1's gradient norm, final loss",
         50, step_tensor_parallel),
    Step("resume", "a run stopped and resumed against the uninterrupted one", 70, step_resume),
    Step("compile", "compile on against off", 100, step_compile),
    Step("fp16", "fp16 with its loss scaler", 35, step_fp16),
    Step("cuda-tests", "the CUDA tests (tests/gpu)", 45, step_cuda_tests),
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


def dry_run(steps: list[Step], deadline: float) -> int:
    for i, step in enumerate(steps, 1):
        print(f"step {i}: [{step.key}, {step.budget_s:.0f} s] {step.what}")
    total = sum(s.budget_s for s in steps)
    over = total > deadline
    print(f"{'FAIL' if over else 'PASS'} budgets: {total:.0f} s in all, deadline {deadline:.0f} s")
    problem = wheels_problem()
    if problem:
        print(f"FAIL wheels: {problem}")
        return 1
    size = sum(p.stat().st_size for p in WHEELS.glob("*.whl"))
    print(f"PASS wheels: {len(WHEEL_NAMES)} in {WHEELS.name}/, {size / 2**20:.1f} MiB (at most {WHEELS_LIMIT_MIB})")
    return 1 if over else 0


def versions() -> dict[str, str]:
    """The image's versions of :data:`IMAGE_PACKAGES` (``missing`` where one is not installed)."""
    out = {}
    for name in IMAGE_PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "missing"
    return out


def run_one(key: str, work: Path, cpu: bool) -> int:
    """The child process of one step: its verdicts on stdout, each after :data:`VERDICT_TAG`."""
    step = next(s for s in STEPS if s.key == key)
    try:
        lines = step.run(Check(work, cpu))
    except Exception as exc:  # noqa: BLE001 - the step's error is its verdict
        lines = [("FAIL", step.key, f"{type(exc).__name__}: {' '.join(str(exc).split())[-300:]}")]
    for verdict, name, detail in lines:
        print(VERDICT_TAG + json.dumps([verdict, name, detail]), flush=True)
    return 0


def run_step(step: Step, work: Path, cpu: bool, timeout: Optional[float]) -> list[Verdict]:
    """``step`` in its own process group, killed with everything it started past ``timeout`` seconds."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--run-step", step.key, "--work", str(work),
           *(["--cpu"] if cpu else [])]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # its trainers and ranks too
        proc.communicate()
        return [("FAIL", step.key, f"killed after {timeout:.0f} s, its time budget")]
    found = [tuple(json.loads(line[len(VERDICT_TAG):])) for line in out.splitlines() if line.startswith(VERDICT_TAG)]
    if not found:
        tail = " ".join(out.strip().splitlines()[-3:])[-300:]
        return [("FAIL", step.key, f"its process exited {proc.returncode} without a verdict: {tail}")]
    return found  # type: ignore[return-value]


def write_summary(path: Path, head: dict[str, Any], verdicts: list[dict[str, Any]], done: bool) -> None:
    """The summary so far (rewritten after every step, replaced whole so it is never half-written)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({**head, "finished": done, "steps": verdicts}, indent=1))
    os.replace(tmp, path)


def _budgets(pairs: list[str]) -> dict[str, float]:
    keys = {s.key for s in STEPS}
    out = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        if key not in keys:
            raise SystemExit(f"gpu-check: --budget {pair!r}: no step {key!r} (steps: {', '.join(sorted(keys))})")
        try:
            out[key] = float(value)
        except ValueError:
            raise SystemExit(f"gpu-check: --budget {pair!r}: {value!r} is not a number of seconds") from None
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="list the steps and check the wheels (no GPU)")
    mode.add_argument("--cpu", action="store_true", help="every step that can, on the CPU with a tiny model")
    ap.add_argument("--run-step", help=argparse.SUPPRESS)  # one step's own process
    ap.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--keep", type=Path, help="write the runs here and keep them (default: a temporary folder, "
                                              "each step's runs deleted as it ends)")
    out = os.environ.get("OUT")
    default_summary = Path(out) / "gpu-check.json" if out else ROOT / "artifacts" / "gpu-check.json"
    ap.add_argument("--summary", type=Path, default=default_summary, help="the JSON summary ($OUT/gpu-check.json "
                                                                          "when $OUT is set)")
    ap.add_argument("--deadline", type=float, help=f"seconds for the whole check (default {DEADLINE_S:.0f} on "
                                                   "the GPU, none with --cpu)")
    ap.add_argument("--steps", help="comma-separated step keys to run, in the check's order (default: all)")
    ap.add_argument("--budget", action="append", default=[], metavar="KEY=SECONDS",
                    help="a step's time budget instead of its own (with --cpu, budgets apply only when given)")
    args = ap.parse_args()
    if args.run_step:
        return run_one(args.run_step, args.work, args.cpu)
    keys = {s.key for s in STEPS}
    wanted = args.steps.split(",") if args.steps else [s.key for s in STEPS]
    unknown = [k for k in wanted if k not in keys]
    if unknown:
        print(f"gpu-check: --steps: no step {', '.join(map(repr, unknown))} (steps: {', '.join(s.key for s in STEPS)})",
              file=sys.stderr)
        return 2
    budgets = _budgets(args.budget)
    steps = [s for s in STEPS if s.key in wanted]
    deadline = args.deadline if args.deadline is not None else (None if args.cpu else DEADLINE_S)
    if args.dry_run:
        return dry_run(steps, deadline or DEADLINE_S)
    found = versions()
    print("image: " + ", ".join(f"{k} {v}" for k, v in found.items()), flush=True)
    import torch

    if not args.cpu and not torch.cuda.is_available():
        print("gpu-check: no CUDA device visible (--cpu rehearses the steps on the CPU)", file=sys.stderr)
        return 2
    device = "cpu" if args.cpu else torch.cuda.get_device_name()
    print(f"gpu-check on {device}", flush=True)
    head = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "device": device,
            "versions": found, "deadline_s": deadline}
    verdicts: list[dict[str, Any]] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep or Path(tmp)
        for step in steps:
            left = None if deadline is None else deadline - (time.monotonic() - started)
            budget = budgets.get(step.key, None if args.cpu else step.budget_s)
            timeout = left if budget is None else (budget if left is None else min(budget, left))
            if timeout is not None and timeout < 1:
                lines: list[Verdict] = [("SKIP", step.key, f"not started: the {deadline:.0f} s deadline has passed")]
                seconds = 0.0
            else:
                begun = time.monotonic()
                lines = run_step(step, work / step.key, args.cpu, timeout)
                seconds = time.monotonic() - begun
                if args.keep is None:
                    shutil.rmtree(work / step.key, ignore_errors=True)  # checkpoints off the disk at once
            for verdict, name, detail in lines:
                verdicts.append({"verdict": verdict, "step": name, "key": step.key, "detail": detail,
                                 "seconds": round(seconds, 1)})
                print(f"{verdict:4} {name}: {detail} ({seconds:.0f} s)", flush=True)
            write_summary(args.summary, head, verdicts, done=False)
    write_summary(args.summary, head, verdicts, done=True)
    print(f"summary: {args.summary}")
    return 1 if any(v["verdict"] == "FAIL" for v in verdicts) else 0


if __name__ == "__main__":
    sys.exit(main())

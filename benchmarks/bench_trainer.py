"""The trainer's own overhead: ``scaling train`` against a plain nanoGPT-style loop of the same model.

Both train the same model (``scaling.trainer.families.model``) on the same bytes (one ``.bin`` token
file, memory-mapped by both), batch and optimizer (AdamW, clipping at 1.0), each as a whole
process as a user runs it: ``scaling train SPEC --db sqlite:///...`` (database, data check,
precision, step-0 and final checkpoints, metrics every step, spike checks) against a script that
imports torch and the model, takes random windows, steps, prints the loss each step, evaluates
once and saves once (what nanoGPT's ``train.py`` does). With ``--nanogpt PATH`` (a checkout of
karpathy/nanoGPT) nanoGPT's own ``train.py`` runs too, from a copy of its three files in a
temporary folder (the checkout is only read), on the same bytes split as the plain loop splits
them (``data/bench/{train,val}.bin``, ``meta.pkl`` naming the vocabulary), at the same shape,
batch and optimizer, in fp32 without ``compile``, with biases; it evaluates ``eval_iters=1``
batch of each split at step 0 and at its last step (where it saves), and otherwise differs as
its model does (exact GELU, split q/k/v, loss inside the model, foreach AdamW on the CPU). Every
process runs with ``OMP_NUM_THREADS`` set to ``--threads``. The trainer's runs share one database
(created before the first, as a user's runs share theirs), each in a sweep of its own. Runs alternate, so a drift in machine
load hits every variant alike; medians of wall time are compared, and two ratios are printed:

- ``scaling train`` in fp32 / the plain loop in fp32 (the trainer's overhead; target <= 1.0);
- ``scaling train`` with ``precision: auto`` / the plain loop in fp32 (what a user gets: bf16 where
  the CPU has native bf16 matmuls, which ``auto`` probes for);
- the same two against nanoGPT's ``train.py`` in fp32, with ``--nanogpt``.

One-step runs of the trainer and the loop give the start-up difference, and (long - one-step) /
(steps - 1) the per-step time of each. ``--in-process`` instead times the trainer's step and the
plain loop's step alternately inside one process (no start-up, no database).

    python benchmarks/bench_trainer.py [--d-model 128 --context 128 --batch 16 --steps 300] [--rounds 5]
    python benchmarks/bench_trainer.py --d-model 512 --context 256 --steps 20 --rounds 3
    python benchmarks/bench_trainer.py --nanogpt ~/src/nanoGPT [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PLAIN = "--plain-process"


# -- the plain loop, as its own process ------------------------------------------------------------
def plain_process(config: dict[str, Any]) -> None:
    """nanoGPT's train.py, reduced to what the comparison needs: the same model, data and optimizer."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    from scaling.accounting import Shape
    from scaling.trainer.families.model import build_model
    from scaling.trainer.optim import param_groups

    torch.set_num_threads(config["threads"])
    ctx, batch = config["context"], config["batch"]
    data = np.memmap(config["bin"], dtype=np.uint16, mode="r")
    n_train = int(len(data) * (1 - config["val_fraction"]))
    train, val = data[:n_train], data[n_train:]
    model = build_model(Shape(config["layers"], config["d_model"], config["heads"], config["vocab"], ctx), config["seed"])
    opt = torch.optim.AdamW(param_groups(model, 0.1), lr=config["lr"], betas=(0.9, 0.95))
    half = config["precision"] == "bf16"
    gen = torch.Generator().manual_seed(0)

    def get_batch(split: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        ix = torch.randint(len(split) - ctx - 1, (batch,), generator=gen)
        x = torch.stack([torch.from_numpy(split[i : i + ctx].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(split[i + 1 : i + 1 + ctx].astype(np.int64)) for i in ix])
        return x, y

    def loss_of(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=half):
            logits = model(x)
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1))

    model.train()
    for step in range(config["steps"]):
        x, y = get_batch(train)
        loss = loss_of(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"iter {step}: loss {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        losses = [loss_of(*get_batch(val)).item() for _ in range(max(1, config["eval_tokens"] // (ctx * batch)))]
    print(f"val loss {sum(losses) / len(losses):.4f}")
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, Path(config["out"]) / "ckpt.pt")


# -- the comparison ---------------------------------------------------------------------------------
def write_tokens(path: Path) -> tuple[int, float]:
    """The builtin corpus's token stream as a nanoGPT-style uint16 ``.bin``; (vocabulary, val fraction)."""
    import numpy as np

    from scaling.trainer.data.corpus import load_corpus
    from scaling.trainer.sections import DataSpec

    data = DataSpec()
    corpus = load_corpus(data)
    np.asarray(corpus.tokens, dtype=np.uint16).tofile(path)
    return int(corpus.vocab_size or 256), data.val_fraction


def nanogpt_folder(checkout: Path, tmp: Path, bin_path: Path, vocab: int, val_fraction: float) -> Path:
    """A folder to run nanoGPT's ``train.py`` in: its three files copied from ``checkout``, and
    ``data/bench`` holding the bytes of ``bin_path`` split as the plain loop splits them."""
    import pickle
    import shutil

    import numpy as np

    folder = tmp / "nanogpt"
    (folder / "data" / "bench").mkdir(parents=True)
    for name in ("train.py", "model.py", "configurator.py"):
        if not (checkout / name).is_file():
            raise SystemExit(f"--nanogpt {checkout}: no {name} there (not a nanoGPT checkout)")
        shutil.copy(checkout / name, folder / name)
    tokens = np.fromfile(bin_path, dtype=np.uint16)
    n_train = int(len(tokens) * (1 - val_fraction))
    tokens[:n_train].tofile(folder / "data" / "bench" / "train.bin")
    tokens[n_train:].tofile(folder / "data" / "bench" / "val.bin")
    with open(folder / "data" / "bench" / "meta.pkl", "wb") as fh:  # nanoGPT reads its vocabulary here
        pickle.dump({"vocab_size": vocab}, fh)
    return folder


def nanogpt_args(args: argparse.Namespace, steps: int, out: Path) -> list[str]:
    """``train.py``'s overrides for ``steps`` optimizer steps (it runs ``max_iters + 1``)."""
    last = max(steps - 1, 1)
    return ["--dataset=bench", "--device=cpu", "--dtype=float32", "--compile=False", f"--n_layer={args.layers}",
            f"--n_embd={args.d_model}", f"--n_head={args.heads}", f"--block_size={args.context}",
            f"--batch_size={args.batch}", "--gradient_accumulation_steps=1", f"--max_iters={steps - 1}",
            f"--eval_interval={last}", "--eval_iters=1", "--bias=True", "--dropout=0.0", f"--out_dir={out}"]


def spec_file(path: Path, args: argparse.Namespace, bin_path: Path, precision: str, steps: int) -> Path:
    import yaml

    tokens = args.batch * args.context
    spec = {
        "model": {"n_layer": args.layers, "d_model": args.d_model, "n_head": args.heads, "context": args.context},
        "data": {"source": "tokens", "path": str(bin_path), "dtype": "uint16"},
        "batch_tokens": tokens,
        "tokens": tokens * steps,
        "precision": precision,
        "eval_tokens": args.eval_tokens,
        "execution": {"device": "cpu", "threads": args.threads, "eval_interval": steps, "checkpoint_interval": steps},
    }
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def run_once(cmd: list[str], threads: int, cwd: Path | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one process."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    t0, c0 = time.perf_counter(), os.times()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
    wall, c1 = time.perf_counter() - t0, os.times()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} failed:\n{proc.stderr[-3000:]}")
    return wall, (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system)


def load_average() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def compile_bytecode() -> None:
    """Compile scaling's modules to bytecode first, as installing a package does: with
    ``PYTHONDONTWRITEBYTECODE`` set (as on the development machine) an editable checkout is
    otherwise compiled again by every process, a cost the trainer (which imports more of scaling
    than the plain loop) pays and no installed copy does."""
    import compileall

    import scaling

    compileall.compile_dir(str(Path(scaling.__file__).parent), quiet=1)


def process_comparison(args: argparse.Namespace) -> None:
    compile_bytecode()
    tmp = Path(tempfile.mkdtemp(prefix="bench_trainer_"))
    bin_path = tmp / "train.bin"
    vocab, val_fraction = write_tokens(bin_path)
    scaling_cmd = [sys.executable, "-c", "from scaling.cli import main; main()", "train"]
    # One database for every run, as a user's runs share theirs (its schema is made once, here);
    # each run is recorded in a sweep of its own, so none finds its key already completed.
    url = f"sqlite:///{tmp / 'bench.db'}"
    from scaling.db import Store

    Store(url).close()
    nanogpt = None
    if args.nanogpt is not None:
        nanogpt = nanogpt_folder(Path(args.nanogpt).expanduser(), tmp, bin_path, vocab, val_fraction)
    variants: dict[str, Any] = {}
    for steps in (1, args.steps):
        for precision in ("fp32", "auto"):
            spec = spec_file(tmp / f"{precision}{steps}.yaml", args, bin_path, precision, steps)
            variants[f"trainer {precision} x{steps}"] = lambda n, s=spec: scaling_cmd + [
                str(s), "--db", url, "--sweep", f"run{n}", "--run-dir", str(tmp / f"run{n}")]
        config = {"layers": args.layers, "d_model": args.d_model, "heads": args.heads, "context": args.context,
                  "batch": args.batch, "vocab": vocab, "bin": str(bin_path), "val_fraction": val_fraction,
                  "steps": steps, "threads": args.threads, "lr": 6e-4, "seed": 0, "precision": "fp32",
                  "eval_tokens": args.eval_tokens}
        variants[f"plain fp32 x{steps}"] = lambda n, c=config: [sys.executable, __file__, PLAIN, json.dumps(
            {**c, "out": str(tmp / f"run{n}")})]
        if nanogpt is not None:
            variants[f"nanogpt fp32 x{steps}"] = lambda n, s=steps: [sys.executable, "train.py"] + nanogpt_args(
                args, s, tmp / f"run{n}")
    names = list(variants)
    walls: dict[str, list[float]] = {k: [] for k in names}
    cpus: dict[str, list[float]] = {k: [] for k in names}
    print(f"model {args.layers}x{args.d_model}, context {args.context}, batch {args.batch}, {args.steps} steps, "
          f"{args.threads} thread(s); CPU bf16: {cpu_has_bf16()}", flush=True)
    n = 0
    for r in range(args.rounds):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            n += 1
            (tmp / f"run{n}").mkdir()
            wall, cpu = run_once(variants[name](n), args.threads, nanogpt if name.startswith("nanogpt") else None)
            walls[name].append(wall)
            cpus[name].append(cpu)
        print(f"round {r + 1} (load {load_average()}): "
              + ", ".join(f"{k} {walls[k][-1]:.1f}s ({cpus[k][-1]:.1f} CPU)" for k in names), flush=True)
    for label, series in (("CPU", cpus), ("wall", walls)):
        med = {k: statistics.median(v) for k, v in series.items()}
        ratios(label, med, args.steps)


def ratios(label: str, med: dict[str, float], steps: int) -> None:
    """The ratios and the start-up and per-step split, from medians of ``label`` (CPU or wall) seconds,
    against the plain loop and, where it ran, nanoGPT's ``train.py``."""
    long, one = f"x{steps}", "x1"
    print(f"\nmedian {label} s: " + ", ".join(f"{k} {v:.2f}" for k, v in med.items()))
    for base in ("plain", "nanogpt"):
        if f"{base} fp32 {long}" not in med:
            continue
        fp32 = med[f"trainer fp32 {long}"] / med[f"{base} fp32 {long}"]
        auto = med[f"trainer auto {long}"] / med[f"{base} fp32 {long}"]
        print(f"{label}: ratio scaling train fp32 / {base} fp32 = {fp32:.3f} (target <= 1.0)")
        print(f"{label}: ratio scaling train auto / {base} fp32 = {auto:.3f} (auto's gain kept where < 1)")
        if steps > 1:
            start = med[f"trainer fp32 {one}"] - med[f"{base} fp32 {one}"]
            per_t = (med[f"trainer fp32 {long}"] - med[f"trainer fp32 {one}"]) / (steps - 1)
            per_b = (med[f"{base} fp32 {long}"] - med[f"{base} fp32 {one}"]) / (steps - 1)
            print(f"{label}: one-step run: trainer {med[f'trainer fp32 {one}']:.2f}s, {base} {med[f'{base} fp32 {one}']:.2f}s "
                  f"(start-up difference {start:+.2f}s, target <= +0.5s); per step: trainer {1e3 * per_t:.1f} ms, "
                  f"{base} {1e3 * per_b:.1f} ms (ratio {per_t / per_b:.3f})")


def cpu_has_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(f in flags for f in ("avx512_bf16", "amx_bf16"))


# -- in one process -----------------------------------------------------------------------------------
def in_process(args: argparse.Namespace) -> None:
    """The trainer's step against the plain loop's, alternately in this process (no start-up, no database)."""
    import torch
    import torch.nn.functional as F

    from scaling.trainer.data.corpus import load_corpus
    from scaling.trainer.loop import Trainer
    from scaling.trainer.families.model import build_model
    from scaling.trainer.optim import param_groups
    from scaling.trainer.precision import autocast
    from scaling.trainer.resolve import local_host, resolve
    from scaling.trainer.spec import RunRequest

    class PlainLoop:
        def __init__(self, spec: Any) -> None:
            self.spec = spec
            self.data = torch.from_numpy(load_corpus(spec.data).train.astype("int64"))
            self.model = build_model(spec.shape, spec.seed)
            self.opt = torch.optim.AdamW(param_groups(self.model, 0.1), lr=spec.optimizer.lr, betas=(0.9, 0.95))
            self.gen = torch.Generator().manual_seed(0)
            self.tokens_per_step = spec.sequences_per_batch * spec.model.context

        def step_once(self) -> None:
            ctx, batch = self.spec.model.context, self.spec.sequences_per_batch
            ix = torch.randint(len(self.data) - ctx - 1, (batch,), generator=self.gen)
            x = torch.stack([self.data[j : j + ctx] for j in ix])
            y = torch.stack([self.data[j + 1 : j + 1 + ctx] for j in ix])
            with autocast(self.spec.precision, torch.device("cpu")):
                logits = self.model(x)
            loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)

    def timed(loop: Any, steps: int) -> float:
        wall = time.perf_counter()
        for _ in range(steps):
            loop.step_once()
        return steps * loop.tokens_per_step / (time.perf_counter() - wall)

    torch.set_num_threads(args.threads)
    total = 2 + args.steps * args.rounds
    request = RunRequest.from_dict({
        "model": {"n_layer": args.layers, "d_model": args.d_model, "n_head": args.heads, "context": args.context},
        "batch_tokens": args.batch * args.context, "tokens": args.batch * args.context * (total + 1),
        "precision": args.precision, "eval_tokens": args.context,
        "execution": {"threads": args.threads, "device": "cpu", "eval_interval": 10**6, "checkpoint_interval": 10**6},
    })
    resolved = resolve(request, local_host(request))
    spec = resolved.spec
    print(f"precision {args.precision} -> {spec.precision} ({resolved.precision.reason})")
    run_dir = tempfile.TemporaryDirectory()
    trainer = Trainer(spec, None, run_dir.name)
    trainer.start()
    trainer.par.module.train()
    plain = PlainLoop(spec)
    for loop in (trainer, plain):
        timed(loop, 2)
    ours, base = [], []
    for r in range(args.rounds):
        order = [(trainer, ours), (plain, base)]
        for loop, out in order if r % 2 == 0 else order[::-1]:
            out.append(timed(loop, args.steps))
        print(f"round {r + 1}: trainer {ours[-1]:,.0f} tok/s, plain loop {base[-1]:,.0f} tok/s")
    run_dir.cleanup()
    t, p = statistics.median(ours), statistics.median(base)
    print(f"median tokens/s: trainer {t:,.0f}, plain {p:,.0f}; ratio trainer/plain = {t / p:.3f} (target >= 0.95)")


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == PLAIN:
        plain_process(json.loads(sys.argv[2]))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16, help="sequences per step")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--eval-tokens", type=int, default=8192, help="held-out tokens of the one evaluation")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--nanogpt", metavar="PATH", help="a nanoGPT checkout: time its train.py too (the checkout is only read)")
    ap.add_argument("--in-process", action="store_true", help="time steps inside one process instead")
    ap.add_argument("--precision", default="auto", choices=["auto", "bf16", "fp16", "fp32"], help="--in-process only")
    args = ap.parse_args()
    if args.in_process:
        in_process(args)
    else:
        process_comparison(args)


if __name__ == "__main__":
    main()

"""Approach 3 on Epoch AI's 240 Chinchilla points: batched full grid vs a plain scipy loop.

Run by hand: ``python benchmarks/bench_fit.py [--subset K] [--threads 1]``. Prints, measured in
this one run:

1. the batched fit (4,500 starts at once + polish of the best five) as ChinchillaParametric does it;
2. the baseline: ``scipy.optimize.minimize(method="L-BFGS-B")`` from each of the same starts in a
   Python loop, the way Epoch AI's replication does it (objective only, gradients by finite
   differences); with ``--subset K`` only K random starts are timed and the time extrapolated;
3. the same loop given the analytic gradient (a stronger baseline);
4. the full fit plus 1,000 bootstrap refits;

and whether every path reached the same optimum.

With ``--csv-rows R [--laws approach3,approach2]`` it measures instead ``scaling fit --csv`` on a
CSV of R random (N, D) points from the synthetic law, one subprocess per law: wall time and
peak RSS, against a 10,000-row run in the same session (time ratio per row) and against the
memory an unchunked start grid would need (4,500 starts x R points x 64 B). With ``--before TREE``
the same CSV goes instead through this tree's CLI and through the CLI of the checkout TREE (an
older commit), one law at a time, each run capped by ``--timeout`` seconds and ``--mem-cap-gib``
of address space, and the time ratio before / after is printed (a run that was killed or ran out
of memory is reported as such, with its time as a lower bound).

With ``--kaplan-rows R`` it measures the Kaplan laws in this process on R random points: the
full fit with its starts on a 20,000-point subset against the same fit with every start on all
points, and the bag-of-little-bootstraps bootstrap against the plain bootstrap (timed on a few
replicates and extrapolated), with the peak traced memory of each.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subset", type=int, default=0, help="time the plain loops on K random starts and extrapolate")
    ap.add_argument("--threads", type=int, default=1, help="BLAS/OpenMP threads (set before numpy loads)")
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--csv-rows", type=int, default=0, help="measure `scaling fit --csv` on this many rows instead")
    ap.add_argument("--laws", default="approach3,approach2,kaplan", help="with --csv-rows: the laws, one run each")
    ap.add_argument("--before", type=Path, default=None,
                    help="with --csv-rows: a checkout of an older commit; run the same CSV through both CLIs")
    ap.add_argument("--timeout", type=float, default=1200.0, help="with --before: seconds per run before it is killed")
    ap.add_argument("--mem-cap-gib", type=float, default=8.0, help="with --before: address-space cap per run")
    ap.add_argument("--kaplan-rows", type=int, default=0, help="measure the Kaplan fit and bootstrap on this many rows")
    ap.add_argument("--plain-replicates", type=int, default=3, help="with --kaplan-rows: plain replicates timed")
    args = ap.parse_args()
    if args.kaplan_rows:
        return kaplan_rows(args.kaplan_rows, args.bootstrap if args.bootstrap != 1000 else 200, args.plain_replicates)
    if args.csv_rows:
        boot = args.bootstrap if args.bootstrap != 1000 else 200
        if args.before is not None:
            return before_after(args.csv_rows, args.laws.split(","), boot, args.before, args.timeout, args.mem_cap_gib)
        return csv_rows(args.csv_rows, args.laws.split(","), boot)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)

    import numpy as np
    import pandas as pd
    from scipy.optimize import minimize
    from scipy.special import logsumexp

    from scaling import fmt
    from scaling.fitting import ChinchillaParametric, from_frame
    from scaling.fitting.loss.parametric import start_grid

    df = pd.read_csv(ROOT / "tests" / "data" / "chinchilla_epoch" / "svg_extracted_data.csv")
    data = from_frame(df.sort_values("loss").iloc[:-5])
    pts = data.points
    starts = start_grid("epoch")
    print(f"{len(pts)} points, {len(starts)} starts, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")

    t = time.perf_counter()
    law = ChinchillaParametric().fit(data)
    t_batched = time.perf_counter() - t
    print(f"batched grid + polish : {t_batched:8.2f} s   objective {law.objective_:.10g}   {law.params_}")

    lN, lD, lL = np.log(pts["N"].to_numpy()), np.log(pts["D"].to_numpy()), np.log(pts["loss"].to_numpy())
    delta = 1e-3

    def epoch_objective(x: np.ndarray) -> float:
        a, b, e, alpha, beta = x
        pred = logsumexp([a - alpha * lN, b - beta * lD, np.full_like(lN, e)], axis=0)
        r = pred - lL
        return float(np.sum(np.where(np.abs(r) <= delta, 0.5 * r * r, delta * (np.abs(r) - 0.5 * delta))))

    def plain_with_grad(x: np.ndarray) -> tuple[float, np.ndarray]:
        """The same objective and its analytic gradient, for one parameter vector."""
        a, b, e, alpha, beta = x
        t = np.stack([a - alpha * lN, b - beta * lD, np.full_like(lN, e)])
        lse = logsumexp(t, axis=0)
        r = lse - lL
        psi = np.clip(r, -delta, delta)
        w = np.exp(t - lse) * psi  # softmax weights times the Huber derivative
        g = np.array([w[0].sum(), w[1].sum(), w[2].sum(), -(w[0] * lN).sum(), -(w[1] * lD).sum()])
        return float(np.sum(psi * (r - 0.5 * psi))), g

    idx = np.arange(len(starts))
    if args.subset:
        idx = np.random.default_rng(0).choice(len(starts), args.subset, replace=False)
    scale = len(starts) / len(idx)
    note = f" (timed on {len(idx)} starts, x{scale:.1f})" if args.subset else ""

    t = time.perf_counter()
    loop = [minimize(epoch_objective, starts[i], method="L-BFGS-B") for i in idx]
    t_plain = (time.perf_counter() - t) * scale
    best_plain = min(loop, key=lambda r: r.fun)
    print(f"plain loop, numeric grad : {t_plain:8.2f} s{note}   objective {best_plain.fun:.10g}")

    t = time.perf_counter()
    loop_j = [minimize(plain_with_grad, starts[i], jac=True, method="L-BFGS-B") for i in idx]
    t_jac = (time.perf_counter() - t) * scale
    best_jac = min(loop_j, key=lambda r: r.fun)
    print(f"plain loop, analytic grad: {t_jac:8.2f} s{note}   objective {best_jac.fun:.10g}")

    t = time.perf_counter()
    full = ChinchillaParametric().fit(data).bootstrap(args.bootstrap, seed=0)
    t_boot = time.perf_counter() - t
    iv = full.intervals()

    same = all(abs(r.fun - law.objective_) <= 1e-6 * law.objective_ for r in (best_plain, best_jac))
    x_plain = best_plain.x
    dx = np.max(np.abs(x_plain - law.theta_))
    print()
    print(f"speed-up vs the plain loop (numeric gradients, Epoch's way): {t_plain / t_batched:6.1f}x  (target >= 20x)")
    print(f"speed-up vs the plain loop with analytic gradients          : {t_jac / t_batched:6.1f}x")
    print(f"same optimum: {same} (objective within 1e-6 relative; max |parameter difference| {dx:.2e})")
    print(f"full fit + {args.bootstrap} bootstrap refits: {t_boot:.2f} s  (target < 60 s); "
          f"failed refits {full.bootstrap_info_['failed']}")
    print("bootstrap SEs: " + ", ".join(f"{k} {fmt.num(iv[k].se, 4, '-')}" for k in ("E", "A", "B", "alpha", "beta")))


def _fit_csv(path: Path, law: str, bootstrap: int) -> tuple[float, float, int]:
    """(wall seconds, peak RSS in MiB, exit code) of one `scaling fit --csv` subprocess."""
    import resource
    import subprocess
    import sys

    code = ("import resource, sys, time; from scaling.cli import main; t = time.perf_counter()\n"
            "try:\n    main()\nfinally:\n"
            "    print(f'@@ {time.perf_counter() - t} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}',"
            " file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code, "fit", "--csv", str(path), "--law", law,
                          "--bootstrap", str(bootstrap)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    line = [ln for ln in out.stderr.splitlines() if ln.startswith("@@ ")]
    if not line:
        print(out.stderr[-2000:])
        return float("nan"), float("nan"), out.returncode
    wall, rss_kb = line[-1].split()[1:]
    del resource
    return float(wall), float(rss_kb) / 1024, out.returncode


def _write_csv(n: int, path: Path) -> None:
    """``n`` random (N, D) points from the synthetic Chinchilla law with 1% log-normal noise (seed 0)."""
    import numpy as np
    import pandas as pd

    from scaling.fitting.loss import synthetic as S

    rng = np.random.default_rng(0)
    N = np.exp(rng.uniform(np.log(1e7), np.log(1e10), n))
    D = np.exp(rng.uniform(np.log(1e9), np.log(1e12), n))
    pd.DataFrame({"N": N, "D": D, "loss": S.chinchilla_loss(N, D) * np.exp(rng.normal(0, 0.01, n))}).to_csv(
        path, index=False)


def _fit_capped(root: Path, path: Path, law: str, bootstrap: int, timeout: float, cap_gib: float) -> dict:
    """One `scaling fit --csv` of the checkout ``root`` as a subprocess under a time and address-space cap.

    Returns wall seconds, the child's own peak RSS (wait4), its exit code, whether the timeout killed
    it, whether it ran out of memory, and the laws its table fitted or skipped.
    """
    import resource
    import subprocess
    import sys
    import tempfile
    import threading

    cap = int(cap_gib * 2**30)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, "-c", "from scaling.cli import main; main()", "fit", "--csv",
                                 str(path), "--law", law, "--bootstrap", str(bootstrap)], stdout=out, stderr=err,
                                env={**os.environ, "PYTHONPATH": str(root)}, preexec_fn=limit, cwd=root)
        killed = threading.Event()

        def kill() -> None:
            killed.set()
            proc.kill()

        timer = threading.Timer(timeout, kill)
        t = time.perf_counter()
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
        timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text, errors = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    fitted = [ln.strip() for ln in text.splitlines() if ln.startswith(("Kaplan", "Chinchilla")) and "not fitted" not in ln]
    skipped = [ln.strip() for ln in text.splitlines() if "not fitted" in ln]
    last = (errors.strip().splitlines() or [""])[-1]
    oom = "MemoryError" in errors or "Unable to allocate" in errors or "memory" in last.lower()
    return {"wall": wall, "rss_mib": usage.ru_maxrss / 1024, "rc": proc.returncode, "killed": killed.is_set(),
            "oom": oom, "fitted": fitted, "skipped": skipped, "stderr_tail": last[-300:]}


def _outcome(r: dict, timeout: float) -> str:
    if r["killed"]:
        return f"> {timeout:.0f} s (killed at the timeout), peak RSS {r['rss_mib']:.0f} MiB"
    if r["oom"]:
        return f"out of memory after {r['wall']:.1f} s, peak RSS {r['rss_mib']:.0f} MiB: {r['stderr_tail']}"
    if r["rc"] != 0:
        return f"exit {r['rc']} after {r['wall']:.1f} s, peak RSS {r['rss_mib']:.0f} MiB: {r['stderr_tail']}"
    return f"{r['wall']:.1f} s, peak RSS {r['rss_mib']:.0f} MiB"


def before_after(rows: int, laws: list[str], bootstrap: int, before: Path, timeout: float, cap_gib: float) -> None:
    """The same CSV through this tree's CLI and through ``before``'s, one law and one run at a time."""
    import tempfile

    print(f"`scaling fit --csv` on {rows:,} rows, {bootstrap} bootstrap replicates, each run capped at "
          f"{timeout:.0f} s and {cap_gib:g} GiB of address space, on {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "big.csv"
        _write_csv(rows, big)
        for law in laws:
            res = {}
            for name, root in (("after", ROOT), ("before", before.resolve())):
                load = os.getloadavg()[0]
                r = _fit_capped(root, big, law, bootstrap, timeout, cap_gib)
                res[name] = r
                print(f"--law {law:10s} {name:6s} ({root}): {_outcome(r, timeout)}   load average "
                      f"{load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end", flush=True)
                for line in r["fitted"] + r["skipped"]:
                    print(f"    {line}")
            a, b = res["after"], res["before"]
            if a["killed"] or a["oom"] or a["rc"] != 0:
                print(f"--law {law}: this tree's run did not finish; no ratio", flush=True)
                continue
            bound = ">" if b["killed"] or b["oom"] or b["rc"] != 0 else ""
            print(f"--law {law}: before / after time ratio {bound}{b['wall'] / a['wall']:.2f}x"
                  f"{' (before did not finish: a lower bound)' if bound else ''}; "
                  f"peak RSS before / after {b['rss_mib'] / a['rss_mib']:.2f}x", flush=True)


def csv_rows(rows: int, laws: list[str], bootstrap: int) -> None:
    import tempfile

    write = _write_csv

    print(f"`scaling fit --csv`, {bootstrap} bootstrap replicates, load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as tmp:
        small, big = Path(tmp) / "small.csv", Path(tmp) / "big.csv"
        write(10_000, small)
        write(rows, big)
        for law in laws:
            t_small, rss_small, rc_small = _fit_csv(small, law, bootstrap)
            t_big, rss_big, rc_big = _fit_csv(big, law, bootstrap)
            unchunked = 4500 * rows * 64 / 2**20 if law == "approach3" else float("nan")
            print(f"{law:10s} 10,000 rows: {t_small:7.1f} s {rss_small:7.0f} MiB (exit {rc_small})   "
                  f"{rows:,} rows: {t_big:7.1f} s {rss_big:7.0f} MiB (exit {rc_big})   "
                  f"time ratio {t_big / t_small:5.1f}x for {rows / 10_000:.0f}x the rows"
                  + (f"   peak / unchunked grid {rss_big / unchunked:.4f}" if law == "approach3" else ""))


def kaplan_rows(rows: int, bootstrap: int, plain: int) -> None:
    import tracemalloc

    import numpy as np
    import pandas as pd

    import scaling.fitting.loss.kaplan as K
    from scaling.fitting import from_frame
    from scaling.fitting.loss import synthetic as S

    rng = np.random.default_rng(0)
    N = np.exp(rng.uniform(np.log(1e7), np.log(1e10), rows))
    D = np.exp(rng.uniform(np.log(1e9), np.log(1e12), rows))
    loss = S.chinchilla_loss(N, D) * np.exp(rng.normal(0, 0.01, rows))
    data = from_frame(pd.DataFrame({"N": N, "D": D, "loss": loss}))

    def measure(fn):  # (seconds, peak traced MiB, result)
        tracemalloc.start()
        t = time.perf_counter()
        try:
            out = fn()
            return time.perf_counter() - t, tracemalloc.get_traced_memory()[1] / 2**20, out
        finally:
            tracemalloc.stop()

    print(f"Kaplan laws on {rows:,} points, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    t_fit, m_fit, law = measure(lambda: K.KaplanLaw().fit(data))
    start_points = K.START_POINTS
    K.START_POINTS = 10**12
    t_all, m_all, law_all = measure(lambda: K.KaplanLaw().fit(data))
    K.START_POINTS = start_points
    dp = max(abs(law.params_[k] - law_all.params_[k]) / max(abs(law_all.params_[k]), 1e-12) for k in K.JOINT_NAMES)
    print(f"fit, starts on 20,000 points : {t_fit:8.1f} s {m_fit:7.0f} MiB   every start on all points: {t_all:8.1f} s "
          f"{m_all:7.0f} MiB   ratio {t_all / t_fit:5.1f}x   max rel. difference of joint parameters {dp:.1e}")
    t_blb, m_blb, _ = measure(lambda: law.bootstrap(bootstrap, 0))
    iv = law.intervals()
    threshold = K.BLB_THRESHOLD
    K.BLB_THRESHOLD = 10**12
    t_plain, m_plain, _ = measure(lambda: law.bootstrap(plain, 0))
    K.BLB_THRESHOLD = threshold
    t_plain_all = t_plain * bootstrap / plain
    print(f"bootstrap of {bootstrap}, little bootstraps: {t_blb:8.1f} s {m_blb:7.0f} MiB   plain: {t_plain_all:8.1f} s "
          f"(timed on {plain}) {m_plain:7.0f} MiB   ratio {t_plain_all / t_blb:5.1f}x")
    inside = all(v.covers(v.value) for v in iv.values() if v.kind == "percentile")
    print("intervals: " + ", ".join(f"{k} {iv[k].text(4)}" for k in ("alpha_N", "alpha_D", "alpha_N1", "alpha_D1", "alpha_C"))
          + f"; every percentile interval contains its estimate: {inside}")


if __name__ == "__main__":
    main()

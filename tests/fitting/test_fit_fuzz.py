"""Hostile CSVs for `scaling fit --csv`: a seeded mutation loop over a valid file.

520 mutants (cells replaced by junk, bytes inserted or deleted, delimiters swapped, header
broken, rows duplicated, binary noise, huge numbers, empty files) go through the command's
entry point in-process, and a few through real subprocesses. Every one must end with exit code
0 or 2, no traceback, at most one line on stderr for an error, and leave a database given with
``--db`` byte for byte unchanged.
"""

from __future__ import annotations

import hashlib
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_run import run_cli
from scaling.fitting.loss import synthetic as S

JUNK = ["", "nan", "NaN", "-1", "0", "inf", "-inf", "1e400", "1e-400", "abc", "10M", "1,000", "1.5B", "2 k", "1e9x",
        "🙂", "\x00", '"', "'", "1e", "--3", "0x10", "1_0", " ", "None", "TRUE", "1/2", "3,5", "9" * 400, "-0",
        "1e308", "5e-324", "=cmd|' /C calc'!A0", "%s%s%n", "../../etc/passwd"]
DELIMS = [",", ";", "\t", "|", " "]
SIZES_BOUND_S = 10.0




def base_csv(seed: int) -> list[list[str]]:
    df = S.isoflop_points(budgets=[1e18, 1e19, 1e20], n_sizes=5, seed=seed)
    rows = [["N", "D", "C", "loss"]] + [[f"{v:.6g}" for v in r] for r in df.to_numpy()]
    if seed % 3 == 0:
        for r, u in zip(rows, ["U"] + ["3e9"] * (len(rows) - 1)):
            r.append(u)
    if seed % 4 == 1:
        for r, s in zip(rows, ["seed"] + [str(i % 2) for i in range(len(rows) - 1)]):
            r.append(s)
    return rows


def mutate(rng: random.Random) -> tuple[bytes, list[str]]:
    """One mutated CSV (bytes) and extra command-line options."""
    rows = base_csv(rng.randrange(12))
    for _ in range(rng.randrange(1, 5)):
        kind = rng.randrange(10)
        if kind <= 2 and len(rows) > 1:  # junk into cells
            r = rng.randrange(len(rows))
            c = rng.randrange(len(rows[r]))
            rows[r][c] = rng.choice(JUNK)
        elif kind == 3:  # duplicate or drop rows
            if rng.random() < 0.5 and len(rows) > 1:
                del rows[rng.randrange(len(rows))]
            else:
                rows.extend(rows[1:][: rng.randrange(1, 20)] * rng.randrange(1, 4))
        elif kind == 4:  # rename or drop a column
            c = rng.randrange(len(rows[0]))
            if rng.random() < 0.5:
                rows[0][c] = rng.choice(["params", "tokens", "flops", "ppl", "bpb", "x", "", "N", "loss", "U"])
            else:
                for r in rows:
                    if c < len(r):
                        del r[c]
        elif kind == 5:  # ragged row
            r = rng.choice(rows)
            r.extend(rng.choice(JUNK) for _ in range(rng.randrange(1, 3)))
        elif kind == 6:  # scale a column (perplexity-like, tiny, huge)
            c = rng.randrange(len(rows[0]))
            f = rng.choice([1e-30, 1e3, 1e300, -1.0])
            for r in rows[1:]:
                try:
                    r[c] = repr(float(r[c]) * f)
                except (ValueError, IndexError):
                    pass
        elif kind == 7 and len(rows) > 2:  # every row the same
            rows = rows[:1] + [rows[1]] * rng.randrange(1, 30)
        else:
            pass
    sep = rng.choice(DELIMS) if rng.random() < 0.3 else ","
    text = "\n".join(sep.join(r) for r in rows) + "\n"
    raw = bytearray(text.encode("utf-8"))
    for _ in range(rng.choice([0, 0, 0, 1, 3])):  # byte-level damage
        op = rng.randrange(3)
        pos = rng.randrange(len(raw) + 1)
        if op == 0 and raw:
            del raw[min(pos, len(raw) - 1)]
        elif op == 1:
            raw[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 8)))
        else:
            raw = raw[:pos]
    if rng.random() < 0.03:
        raw = bytearray(rng.randbytes(rng.randrange(0, 2000)))
    if rng.random() < 0.03:
        raw = bytearray(b"\xef\xbb\xbf") + raw  # a byte-order mark
    opts = []
    if rng.random() < 0.3:
        opts.append("--drop-invalid")
    if rng.random() < 0.1:
        opts += ["--flops", "given"]
    if rng.random() < 0.1:
        opts += ["--loss-units", rng.choice(["perplexity", "bits", "nats", "furlongs"])]
    if rng.random() < 0.05:
        opts += ["--unique-tokens", rng.choice(["1e9", "-5", "nan", "1e30"])]
    if rng.random() < 0.05:
        opts += ["--params", "total"]
    return bytes(raw), opts


@pytest.fixture
def db_file(sqlite_url: str, make_sweep) -> Path:
    make_sweep(sqlite_url, curves=False)
    return Path(sqlite_url.split("///", 1)[1])


def reset_peak_rss() -> None:
    """Start this process's peak-RSS count afresh (Linux), so earlier tests in it do not count."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def peak_rss() -> int:
    """Peak resident memory (bytes) since :func:`reset_peak_rss`, or over the process's life."""
    return _status("VmHWM") or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def rss() -> int:
    """Resident memory (bytes) now; 0 where /proc is not there (the growth checked is then the peak's)."""
    return _status("VmRSS")


def _status(field: str) -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_mutated_csvs_end_in_0_or_2_without_traceback(tmp_path: Path, db_file: Path, sqlite_url: str) -> None:
    rng = random.Random(20261201)
    reset_peak_rss()
    resident = rss()  # what earlier tests in this worker left resident is not the fuzz's
    before = _digest(db_file)
    codes = {0: 0, 2: 0}
    slowest = 0.0
    for i in range(520):
        raw, opts = mutate(rng)
        p = tmp_path / f"m{i % 7}.csv"
        p.write_bytes(raw)
        law = ["kaplan", "approach2"][i % 2] if i % 100 != 50 else "approach3"
        t = time.perf_counter()
        code, out, err = run_cli("fit", "--csv", str(p), "--db", sqlite_url, "--law", law, "--bootstrap", "0",
                                 *opts)
        if law != "approach3":  # its 4,500-start grid is a fit's cost, not the input's
            slowest = max(slowest, time.perf_counter() - t)
        assert code in (0, 2), (i, code, err, raw[:300])
        assert "Traceback" not in err and "Traceback" not in out, (i, err)
        if code == 2:
            lines = [ln for ln in err.splitlines() if not ln.startswith("warning: ")]
            assert len(lines) == 1 and lines[0].strip(), (i, err)
            assert _digest(db_file) == before, i
        codes[code] += 1
    assert codes[0] >= 50 and codes[2] >= 50, codes  # the loop reaches both outcomes
    assert slowest < SIZES_BOUND_S, slowest
    grown = peak_rss() - resident
    assert grown < 1 << 29, (resident, grown)
    assert _digest(db_file) == before


def test_mutated_csvs_in_real_processes(tmp_path: Path) -> None:
    rng = random.Random(7)
    for i in range(4):
        raw, opts = mutate(rng)
        p = tmp_path / f"p{i}.csv"
        p.write_bytes(raw)
        out = subprocess.run([sys.executable, "-c", "from scaling.cli import main; main()", "fit", "--csv", str(p),
                              "--law", "kaplan", "--bootstrap", "0", *opts],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode in (0, 2), (out.returncode, out.stderr)
        assert "Traceback" not in out.stderr

"""Malformed plans: one line naming the field (and line), exit 2, no traceback, nothing written."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from scaling.cli import main

GOOD = """\
name: bad-plans
data:
  source: builtin
model:
  aspect_ratio: 16
  head_size: 16
  context: 64
train:
  precision: fp32
  batch_tokens: 2048
  optimizer: {lr: 3.0e-3}
resources:
  workers: 1
grid:
  - models: [6000, 30000]
    compute: [1.0e+12]
"""

# (name, plan text, substrings the one error line must contain)
CASES: list[tuple[str, str, list[str]]] = [
    ("unknown top-level key", GOOD + "nmae: x\n", ["nmae", "unknown field", ":17:"]),
    ("misspelt required key", GOOD.replace("name: bad-plans", "nam: bad-plans"), ["nam", "unknown field", ":1:"]),
    ("unknown nested key", GOOD.replace("{lr: 3.0e-3}", "{lerning_rate: 3.0e-3}"),
     ["train.optimizer.lerning_rate", ":11:"]),
    ("unknown key in a grid block", GOOD.replace("compute: [1.0e+12]", "compute: [1.0e+12]\n    budget: 3"),
     ["grid.0.budget", ":17:"]),
    ("wrong type", GOOD.replace("batch_tokens: 2048", "batch_tokens: lots"), ["train.batch_tokens", ":10:"]),
    ("negative model size", GOOD.replace("[6000, 30000]", "[-6000, 30000]"), ["grid.0.models.0", ":15:"]),
    ("zero tokens", GOOD.replace("compute: [1.0e+12]", "tokens: [0]"), ["grid.0.tokens", "positive"]),
    ("tokens equal to 6 digits", GOOD.replace("compute: [1.0e+12]", "tokens: [1.0e+6, 1.0000001e+6]"),
     ["grid.0.tokens", "items 0 and 1", "equal to 6 significant digits"]),
    ("budgets equal to 6 digits", GOOD.replace("compute: [1.0e+12]", "compute: [1.0e+12, 1.0000000001e+12]"),
     ["grid.0.compute", "equal to 6 significant digits"]),
    ("empty grid", GOOD.split("grid:")[0] + "grid: []\n", ["grid", "at least 1"]),
    ("no grid at all", GOOD.split("grid:")[0], ["grid", "required"]),
    ("empty models", GOOD.replace("[6000, 30000]", "[]"), ["grid.0.models", ":15:"]),
    ("block without an axis", GOOD.replace("    compute: [1.0e+12]\n", ""), ["grid.0", "exactly one of"]),
    ("two axes in a block", GOOD.replace("compute: [1.0e+12]", "compute: [1.0e+12]\n    tokens: [1.0e+6]"),
     ["grid.0", "exactly one of"]),
    ("C too small for the smallest model", GOOD.replace("1.0e+12", "1.0e+6"),
     ["grid.0.compute.0", "too small for the smallest model", ":16:"]),
    ("unknown precision", GOOD.replace("precision: fp32", "precision: fp8"), ["train.precision", ":9:"]),
    ("unknown strategy", GOOD.replace("workers: 1", "workers: 2\n  strategy: zero4"), ["resources.strategy"]),
    ("strategy needing workers", GOOD.replace("workers: 1", "workers: 1\n  strategy: zero2"),
     ["resources", "needs workers > 1"]),
    ("infeasible memory", GOOD.replace("workers: 1", "workers: 1\n  device_memory_gib: 0.001"),
     ["resources.device_memory_gib", "GiB", "0.001"]),
    ("YAML syntax error", GOOD.replace("context: 64", "context: [64"), ["invalid YAML", "bad-plan.yaml:"]),
    ("YAML tab indentation", GOOD.replace("  context: 64", "\tcontext: 64"), ["invalid YAML"]),
    ("python object tag (unsafe YAML)", GOOD + "x: !!python/object/apply:os.system ['true']\n",
     ["invalid YAML"]),
    ("missing data path", GOOD.replace("source: builtin", "source: text\n  path: /nonexistent/*.txt"),
     ["data", "no file matches"]),
    ("data path missing for text", GOOD.replace("source: builtin", "source: text"), ["data", "path is required"]),
    ("a held-out shard that matches nothing", GOOD.replace("source: builtin", f"source: tokens\n  path: [{__file__}]\n"
                                                           "  val_path: /nonexistent/val_*.npy"),
     ["data", "no file matches val_path"]),
    ("a list of shards for text", GOOD.replace("source: builtin", f"source: text\n  path: [{__file__}]"),
     ["data", "needs source 'tokens'"]),
    ("missing name", GOOD.replace("name: bad-plans\n", ""), ["name", "required"]),
    ("bad name", GOOD.replace("name: bad-plans", "name: 'my sweep/x'"), ["name", "directory", ":1:"]),
    ("unsafe rule", GOOD + "rules:\n  lr: \"__import__('os').system('true')\"\n", ["rules.lr", ":18:"]),
    ("rule with an unknown name", GOOD + "rules:\n  lr: 'x * 2'\n", ["rules.lr", "unknown name 'x'"]),
    ("rule with a negative value", GOOD + "rules:\n  lr: '-1e-3'\n", ["rules.lr", ":18:", "positive"]),
    ("duplicate seeds", GOOD + "seeds: [1, 1]\n", ["seeds", "distinct", ":17:"]),
    ("explicit D below one batch", GOOD.replace("compute: [1.0e+12]", "tokens: [1000]"),
     ["grid.0.tokens.0", "less than one batch"]),
    ("shape with heads not dividing width",
     GOOD.replace("[6000, 30000]", "[{n_layer: 2, d_model: 30, n_head: 4}]"), ["grid.0.models.0", "multiple"]),
    ("shape and N together", GOOD.replace("[6000, 30000]", "[{N: 5000, n_layer: 2, d_model: 32, n_head: 2}]"),
     ["grid.0.models.0", "either N or a shape"]),
    ("plan is a list", "- name: x\n", ["mapping"]),
    ("negative retries", GOOD + "retries: -1\n", ["retries", ":17:"]),
    ("retries without end", GOOD + "retries: 1000000000000\n", ["retries", ":17:", "100"]),
    ("lr that overflows every step", GOOD.replace("{lr: 3.0e-3}", "{lr: 1.0e+300}"), ["train.optimizer.lr", ":11:", "100"]),
    ("threads past any machine", GOOD.replace("  precision: fp32", "  precision: fp32\n  threads: 100000"),
     ["train.threads", ":10:", "1024"]),
    ("unknown convention", GOOD + "conventions:\n  params: all\n", ["conventions.params", ":18:"]),
    ("batch smaller than context", GOOD.replace("batch_tokens: 2048", "batch_tokens: 32"),
     ["train.batch_tokens", ":10:", "one sequence"]),
    ("duplicate key", GOOD.replace("  context: 64", "  context: 64\n  context: 128"), ["model.context", "duplicate"]),
    ("batch not whole sequences", GOOD.replace("batch_tokens: 2048", "batch_tokens: 2000"),
     ["train.batch_tokens", ":10:", "not a whole number of sequences", "1984 or 2048"]),
    ("fewer sequences than workers", GOOD.replace("batch_tokens: 2048", "batch_tokens: 128").replace(
        "workers: 1", "workers: 4"), ["resources", "2 sequences per batch cannot feed 4 workers"]),
    ("tokens past the database's integers", GOOD.replace("compute: [1.0e+12]", "tokens: [1.0e+20]"),
     ["grid.0.tokens.0", ":16:", "more than the database can store"]),
    ("model past the database's integers", GOOD.replace("[6000, 30000]", "[1.0e+21]").replace(
        "compute: [1.0e+12]", "tokens: [1.0e+6]"), ["grid.0.models.0", ":15:", "parameters", "database"]),
    ("infinite lr", GOOD.replace("{lr: 3.0e-3}", "{lr: .inf}"), ["train.optimizer.lr", ":11:", "finite"]),
    ("NaN weight decay", GOOD.replace("{lr: 3.0e-3}", "{lr: 3.0e-3, weight_decay: .nan}"),
     ["train.optimizer.weight_decay", ":11:", "finite"]),
    ("infinite compute", GOOD.replace("compute: [1.0e+12]", "compute: [.inf]"), ["grid.0.compute.0", "finite"]),
    ("negative seed", GOOD + "seeds: [-1]\n", ["seeds.0", ":17:", "greater than or equal to 0"]),
    ("seed past the generators' range", GOOD + "seeds: [4294967296]\n", ["seeds.0", ":17:"]),
    ("rule with a complex value", GOOD + "rules:\n  lr: '(-8)**0.5'\n", ["rules.lr", ":18:", "(-8) ** 0.5 has no real value"]),
    ("rule with an infinite value", GOOD + "rules:\n  batch_tokens: '1e308 * 10'\n", ["rules.batch_tokens", ":18:", "not finite"]),
    ("name with a trailing newline", GOOD.replace("name: bad-plans", 'name: "nl\\n"'), ["name", ":1:", "'nl\\n'"]),
    ("name with a terminal escape", GOOD.replace("name: bad-plans", 'name: "esc\\e[31m"'),
     ["name", ":1:", "\\x1b"]),
    ("name climbing out of runs_dir", GOOD.replace("name: bad-plans", "name: ../../../elsewhere"), ["name", ":1:"]),
    ("name that is a parent folder", GOOD.replace("name: bad-plans", "name: '..'"), ["name", ":1:"]),
    ("fingerprint set by hand", GOOD.replace("source: builtin", "source: builtin\n  fingerprint: abc"),
     ["data", "measured from the data"]),
    ("grid past the run limit", GOOD.replace("[6000, 30000]", "[" + ", ".join(str(6000 + i) for i in range(400)) + "]")
     .replace("compute: [1.0e+12]", "tokens: [" + ", ".join(str(1_000_000 + 10 * i) for i in range(300)) + "]"),
     ["grid", "120,000 runs", "100,000"]),  # 400 x 300: within the plan file's size cap
    ("branch tokens past the database's integers",
     GOOD.replace("compute: [1.0e+12]", "branches: {tokens: [1.0e+6, 1.0e+30]}"),
     ["grid.0.branches.tokens", ":16:", "more than the database can store"]),
    ("workers given as a boolean", GOOD.replace("workers: 1", "workers: true"), ["resources.workers", "expected a number, not true"]),
    ("batch given as a boolean", GOOD.replace("batch_tokens: 2048", "batch_tokens: true"),
     ["train.batch_tokens", "expected a number, not true", ":10:"]),
    ("a budget given as a boolean", GOOD.replace("compute: [1.0e+12]", "compute: [yes]"),
     ["grid.0.compute", "expected a number"]),
    ("workers given as a string", GOOD.replace("workers: 1", "workers: '8'"), ["resources.workers", "valid integer"]),
    ("a million-fold cluster", GOOD.replace("workers: 1", "workers: 100000000"), ["resources.workers", "1048576"]),
    ("throughput that overflows the estimates", GOOD.replace("workers: 1", "workers: 1\n  throughput_flops: 1.0e-300"),
     ["resources.throughput_flops", "greater than or equal to 1000000"]),
    ("device memory past any device", GOOD.replace("workers: 1", "workers: 1\n  device_memory_gib: 1.0e+300"),
     ["resources.device_memory_gib", "65536"]),
    ("a size no shape of the family comes near", GOOD.replace("model:\n", "model:\n  family: llama\n  n_kv_head: 7\n"),
     ["grid.0.models.0", "N=6.00K", "1x112/7h", "more than 2x from its target"]),
    ("more steps than the database numbers", GOOD.replace("batch_tokens: 2048", "batch_tokens: 256").replace(
        "compute: [1.0e+12]", "compute: [1.0e+21]"), ["grid.0.compute.0: train.batch_tokens: ", "use a larger batch"]),
    ("a boolean given as a string", GOOD.replace("  precision: fp32", "  precision: fp32\n  compile: 'yes'"),
     ["train.compile", ":10:", "expected true or false, not 'yes'"]),
    ("a boolean given as a number", GOOD.replace("  precision: fp32", "  precision: fp32\n  compile: 0"),
     ["train.compile", ":10:", "expected true or false, not 0"]),
    ("bounds drop everything", GOOD.replace("compute: [1.0e+12]", "compute: [1.0e+12]\n    bounds: {max_tokens: 10}"),
     ["grid.0.compute.0", "bounds"]),
]


def _run_cli(argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["scaling", *argv])
    with pytest.raises(SystemExit) as exc:
        main()
    return int(exc.value.code), capsys.readouterr().err


@pytest.mark.parametrize("name, text, expected", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("command", ["sweep", "plan"])
def test_bad_plan(name: str, text: str, expected: list[str], command: str, tmp_path: Path,
                  capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    plan = tmp_path / "bad-plan.yaml"
    plan.write_text(text)
    db = tmp_path / "should-not-exist.db"
    argv = [command, str(plan)] + (["--db", f"sqlite:///{db}", "--no-fit", "--no-report"] if command == "sweep" else [])
    code, err = _run_cli(argv, capsys, monkeypatch)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    assert "Traceback" not in err and "{'" not in err, err  # a place is a field's name, never a dict's repr
    for part in expected:
        assert part in lines[0], (part, lines[0])
    assert not db.exists(), "a bad plan must not create or write the database"
    assert not (tmp_path / "scaling_runs").exists()


def test_the_plan_every_case_breaks_is_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Each case changes one thing in GOOD: GOOD itself must pass, or the cases prove nothing."""
    plan = tmp_path / "good.yaml"
    plan.write_text(GOOD)
    monkeypatch.setattr(sys, "argv", ["scaling", "plan", str(plan)])
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    err = capsys.readouterr().err
    assert code == 0, err
    assert "error" not in err


def test_missing_plan_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    code, err = _run_cli(["plan", str(tmp_path / "nope.yaml")], capsys, monkeypatch)
    assert code == 2 and "plan file not found" in err
    for not_a_file in (tmp_path, Path("/dev/null")):
        code, err = _run_cli(["plan", str(not_a_file)], capsys, monkeypatch)
        assert code == 2 and "not a regular file" in err, err


def test_sqlite_refused_on_a_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    plan = tmp_path / "p.yaml"
    plan.write_text(GOOD)
    db = tmp_path / "x.db"
    code, err = _run_cli(["sweep", str(plan), "--address", "10.0.0.1:6379", "--db", f"sqlite:///{db}"],
                         capsys, monkeypatch)
    assert code == 2
    assert "SQLite" in err and "postgresql" in err
    assert not db.exists()


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_run_bigger_than_the_local_ray_is_refused_before_registering(
        dry_run: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    plan = tmp_path / "p.yaml"
    plan.write_text(GOOD.replace("workers: 1", "workers: 1\n  num_cpus: 2\n  cpus_per_worker: 3")
                    + "runs_dir: " + str(tmp_path / "runs") + "\n")
    db = tmp_path / "x.db"
    code, err = _run_cli(["sweep", str(plan), "--db", f"sqlite:///{db}"] + (["--dry-run"] if dry_run else []),
                         capsys, monkeypatch)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "needs 3 CPUs" in err and "resources.num_cpus: 2" in err and "cpus_per_worker" in err, err
    assert not db.exists() and not (tmp_path / "runs").exists()


@pytest.mark.postgres
@pytest.mark.parametrize("address, says", [
    ("127.0.0.1:1", "no Ray cluster answers there"),  # a closed port: Ray itself would wait without end
    ("garbage", "is not host:port"),
    ("ray://127.0.0.1:10001", "not a URL"),
])
def test_a_cluster_that_cannot_be_joined_is_one_line_and_registers_nothing(
        address: str, says: str, tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from scaling.db import connect

    plan = tmp_path / "p.yaml"
    runs = tmp_path / "runs" / "nested"
    plan.write_text(GOOD + f"runs_dir: {runs}\n")
    code, err = _run_cli(["sweep", str(plan), "--address", address, "--db", postgres_url], capsys, monkeypatch)
    assert code == 2 and says in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    with connect(postgres_url) as results:
        assert len(results.runs()) == 0 and len(results.sweeps()) == 0
    assert not (tmp_path / "runs").exists()  # the folders created to check runs_dir are gone again


def test_an_unreachable_database_leaves_no_run_folder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    plan = tmp_path / "p.yaml"
    plan.write_text(GOOD + f"runs_dir: {tmp_path / 'runs' / 'nested'}\n")
    code, err = _run_cli(["sweep", str(plan), "--db", "postgresql+psycopg://nobody@127.0.0.1:1/none"], capsys, monkeypatch)
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "runs").exists()


def test_real_process_exit_code(tmp_path: Path) -> None:
    """The installed console script itself: exit 2 and a single line, no traceback."""
    plan = tmp_path / "p.yaml"
    plan.write_text(textwrap.dedent(GOOD).replace("precision: fp32", "precision: fp8"))
    proc = subprocess.run([str(Path(sys.executable).parent / "scaling"), "plan", str(plan)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "train.precision" in proc.stderr

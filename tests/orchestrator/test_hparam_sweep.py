"""A hyperparameter sweep end to end on simulated runs with a known optimum: each point expanded into
its combinations (one key each, one group per point), trained into the database with its group, and
the laws fitted on the groups carried to the top budget by ``rules: {fitted: ...}``.

The small budgets' 54 runs are registered and moved through their lifecycle by the sweep's own
functions (register, claim, train, complete) in this process, which takes a second; the top
budget is a real sweep through Ray."""

from __future__ import annotations

import io

import math
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from in_process_sweep import train_plan
from scaling.cli import main
from scaling.orchestrator.expand import expand
from scaling.orchestrator.plan import load_plan
from scaling.vocab import HPARAM_GROUP_TAG

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SMALL, TOP = EXAMPLES / "sim-hparams.yaml", EXAMPLES / "sim-hparams-top.yaml"


def copy(plan: Path, folder: Path, **update: Any) -> Path:
    """The example plan with its runs (and anything in ``update``) under ``folder``."""
    data = yaml.safe_load(plan.read_text())
    data.update(runs_dir=str(folder / "runs"), **update)
    out = folder / plan.name
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def truth(N: float, D: float) -> tuple[float, float]:
    """lr* and B* of the simulated law of the examples."""
    law = yaml.safe_load(SMALL.read_text())["simulate"]["law"]["hparams"]
    return law["lr_c"] * N ** law["lr_a"] * D ** law["lr_b"], law["batch_d"] * D ** law["batch_e"]


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """The small budgets of the simulated example, swept in this process."""
    folder = tmp_path_factory.mktemp("hparams")
    url = f"sqlite:///{folder / 'results.db'}"
    train_plan(copy(SMALL, folder), url, folder)
    return url, folder


def test_each_point_trains_once_per_combination_as_one_group() -> None:
    plan, source = load_plan(SMALL)
    runs = expand(plan, source).runs
    assert len(runs) == plan.run_count() == 6 * 9
    assert len({r.key for r in runs}) == len(runs) and len({r.spec.name for r in runs}) == len(runs)
    groups: dict[str, list[Any]] = {}
    for r in runs:
        groups.setdefault(r.spec.tags[HPARAM_GROUP_TAG], []).append(r.spec)
    assert len(groups) == 6 and all(len(g) == 9 for g in groups.values())
    for label, specs in groups.items():
        first = specs[0]
        assert label == f"{first.model.n_layer}x{first.model.d_model}x{first.model.n_head} D={first.tokens:.6g}"
        # one point: the same shape, D and C for every combination (D whole batches of every batch)
        assert {(s.shape, s.trained_tokens, s.flops) for s in specs} == {(first.shape, first.tokens, first.flops)}
        rule = 1.0e-2 * (first.n_params / 2.0e5) ** -0.25
        assert sorted({s.optimizer.lr for s in specs}) == pytest.approx([0.33 * rule, rule, 3 * rule])
        assert sorted({s.batch_tokens for s in specs}) == [256, 512, 1024]


def test_the_stage_multiplies_only_the_points_of_blocks_with_hparams(tmp_path: Path) -> None:
    from scaling.orchestrator.expand import grid_points, hparam_points

    grid = yaml.safe_load(SMALL.read_text())["grid"]
    last = len(grid)
    grid.append({"compute": [3.0e11], "models": [{"n_layer": 2, "d_model": 64, "n_head": 4}]})  # no hparams
    plan, source = load_plan(copy(SMALL, tmp_path, grid=grid, seeds=[0, 1]))
    points, _ = grid_points(plan, source)
    out = hparam_points(plan, points, source)
    plain = [p for p in points if p.block == last]
    assert [p for p in out if p.block == last] == plain and len(plain) == 2  # one point per seed, as they were
    swept = [p for p in out if p.block != last]
    assert len(swept) == 6 * 2 * 9  # points x seeds x combinations
    for p in swept:
        assert p.overrides["optimizer"] == {"beta2": plan.train.optimizer.beta2}
        assert p.overrides["name"].endswith(f"/s{p.seed}/lr={p.lr:.4g},batch={p.batch}")
        assert p.tokens % 1024 == 0 and p.tags[HPARAM_GROUP_TAG].endswith(f" D={p.tokens:.6g}")
    # the seeds of a point are one group: its runs differ in lr, batch and seed only
    assert len({p.tags[HPARAM_GROUP_TAG] for p in swept}) == 6


def test_the_groups_are_stored_and_their_best_runs_sit_at_the_known_optimum(swept: tuple[str, Path]) -> None:
    from scaling.db import connect

    url, _ = swept
    with connect(url) as res:
        runs = res.runs(sweep="sim-hparams")
    assert len(runs) == 54 and set(runs["status"]) == {"completed"}
    from scaling.orchestrator.status import sweep_status

    spent = sweep_status(url, "sim-hparams")  # the compute spent counts every run of every group
    assert spent["flops_spent"] == pytest.approx(runs["C"].sum()) and spent["flops_remaining"] == 0
    assert runs["hparam_group"].notna().all() and runs["hparam_group"].nunique() == 6
    for _, group in runs.groupby("hparam_group"):
        best = group.loc[group["final_loss"].idxmin()]
        lr_opt, b_opt = truth(best["N"], best["D"])
        distance = lambda r: abs(math.log(r["spec"]["optimizer"]["lr"] / lr_opt)) + abs(  # noqa: E731
            math.log(r["spec"]["batch_tokens"] / b_opt))
        assert distance(best) == min(distance(r) for _, r in group.iterrows())


@pytest.mark.usefixtures("shared_ray")
def test_the_top_budget_takes_lr_and_batch_from_the_laws_fitted_on_the_groups(swept: tuple[str, Path]) -> None:
    from scaling.db import connect
    from scaling.orchestrator.sweep import run_sweep

    url, folder = swept
    top = copy(TOP, folder)  # its fitted rules read sweep sim-hparams from the database the sweep is given
    plan, source = load_plan(top)
    runs = expand(plan, source, db=url).runs
    assert len(runs) == 5 and len({r.spec.tags[HPARAM_GROUP_TAG] for r in runs}) == 1
    centre = sorted(runs, key=lambda r: r.spec.optimizer.lr)[2].spec  # factor 1: the transferred run
    lr_opt, b_opt = truth(centre.n_params, centre.trained_tokens)
    assert centre.optimizer.lr == pytest.approx(lr_opt, rel=0.15)  # 3x beyond the groups' compute
    assert abs(math.log(centre.batch_tokens / b_opt)) < math.log(1.25)
    assert " * N ** " in centre.tags["rule.lr"] and " * D ** " in centre.tags["rule.batch_tokens"]

    result = run_sweep(top, db=url, fit=False, report=False, echo=lambda _: None)  # trained through Ray
    assert result.outcome is not None and len(result.outcome.completed) == 5
    with connect(url) as res:
        stored = res.runs(sweep="sim-hparams-top").set_index("run_key")
        kept = res.sweeps().set_index("sweep").loc["sim-hparams-top", "plan"]
    assert set(stored.index) == {r.key for r in runs}
    assert stored["hparam_group"].eq(centre.tags[HPARAM_GROUP_TAG]).all()
    assert stored["final_loss"].idxmin() == centre.key  # the transferred run is the group's best
    assert kept["rules"]["lr"] == centre.tags["rule.lr"]  # the plan stored says what was trained


def test_nothing_is_transferred_from_a_flagged_law(tmp_path: Path) -> None:
    """One budget's groups: ln N and ln D move together, so lr*(N, D) is flagged and the plan refused."""
    from scaling.errors import PlanError

    url = f"sqlite:///{tmp_path / 'one-budget.db'}"
    grid = yaml.safe_load(SMALL.read_text())["grid"]
    grid[0].update(compute=[3.0e11], hparams={"lr": grid[0]["hparams"]["lr"]})  # 3 groups of 3 learning rates
    train_plan(copy(SMALL, tmp_path, grid=grid), url, tmp_path)
    plan, source = load_plan(copy(TOP, tmp_path))
    with pytest.raises(PlanError, match=r"sim-hparams-top\.yaml:\d+: rules\.lr: .*lr\* = c N\^a D\^b of sweep .sim-hparams. is flagged .*"
                                        r"nothing is transferred"):
        expand(plan, source, db=url)


def test_a_transferred_law_is_frozen_when_the_sweep_is_registered_until_refreshed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The source sweep gains a budget after the target was registered: a re-run of the target keeps
    the law it was sized by (and says so); --refresh-transfer refits and records the new one."""
    from scaling.db import connect

    url = f"sqlite:///{tmp_path / 'results.db'}"
    monkeypatch.setenv("SCALING_DB", url)  # the in-process sweep reads the fitted rule's sweep here
    small = copy(SMALL, tmp_path)
    train_plan(small, url, tmp_path)
    top = copy(TOP, tmp_path)
    plan, source = load_plan(top)
    first = expand(plan, source, db=url)
    assert not any("frozen" in n for n in first.notes)
    train_plan(top, url, tmp_path)  # registered: its plan records the law written out
    grid = yaml.safe_load(SMALL.read_text())["grid"]
    grid[0]["compute"] = [3.0e11, 6.0e11, 1.2e12]  # the source sweep gains a budget: its law moves
    train_plan(copy(SMALL, tmp_path, grid=grid), url, tmp_path)

    again = expand(plan, source, db=url)
    assert [r.key for r in again.runs] == [r.key for r in first.runs]
    assert any("rules lr, batch_tokens: the laws transferred from sweep 'sim-hparams' when sweep 'sim-hparams-top' "
               "was first registered (frozen" in n and "--refresh-transfer" in n for n in again.notes)
    refreshed = expand(plan, source, db=url, refresh_transfer=True)
    assert {r.key for r in refreshed.runs}.isdisjoint(r.key for r in first.runs)
    code, out, err = _cli(["plan", str(top), "--db", url], capsys, monkeypatch)
    assert code == 0 and "(frozen: lr = " in " ".join(out.split()), err
    with connect(url) as res:  # nothing refreshed is recorded by a plan
        kept = res.sweep_info("sim-hparams-top")["plan"]["rules"]
    assert kept["lr"] == first.runs[0].spec.tags["rule.lr"]


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["scaling", *argv])
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_scaling_plan_shows_the_groups_and_their_cost(capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    code, out, err = _cli(["plan", str(SMALL), "--format", "json"], capsys, monkeypatch)
    assert code == 0, err
    summary = json.loads(out)
    groups = summary["groups"]
    assert len(groups) == 6 and sum(g["runs"] for g in groups) == summary["totals"]["runs"] == 54
    assert sum(g["C"] for g in groups) == pytest.approx(summary["totals"]["C"])  # every run is counted
    assert all(g["batch_tokens"] == [256, 512, 1024] and len(g["lr"]) == 3 for g in groups)
    code, out, err = _cli(["plan", str(SMALL)], capsys, monkeypatch)
    assert code == 0, err
    assert "6 hyperparameter groups" in out and groups[0]["group"] in out


def test_a_plan_of_100000_runs_prints_a_summary_with_values_told_apart() -> None:
    """Every run and group of a plan at the bound, printed whole, is 18 MB of table; the ends are
    listed, with what lies between counted and spanned, and each lr to 6 significant digits."""
    from rich.console import Console

    from scaling.orchestrator.hparam_groups import group_rows
    from scaling.orchestrator.planning import render_groups, render_table

    lrs = [1e-4 * 1.0005 ** i for i in range(20)]  # neighbours 0.05% apart: alike at 3 digits
    runs = [{"key": f"{i:016x}", "N": 10_000 + i // 20, "N_total": 14_096 + i // 20, "N_active": 14_096 + i // 20, "shape": "2x16/2h", "D": 1e6 + i, "C": 6e10 + i,
             "C_own": 6e10 + i, "tokens_per_param": 100.0, "epochs": None, "lr": lrs[i % 20], "batch_tokens": 512,
             "beta2": 0.95, "strategy": "single", "workers": 1, "memory_gib": 0.1, "est_seconds": 0.0,
             "hparam_group": f"g{i // 20}"} for i in range(100_000)]
    summary = {"sweep": "big", "runs": runs, "groups": group_rows(runs), "notes": [],
               "conventions": {"params": "non_embedding", "flops": "6N"},
               "precision": {"resolved": "fp32", "reason": "simulated"},
               "totals": {"runs": len(runs), "C": 6e15, "tokens": 1e11, "max_memory_gib": 0.1,
                          "est_seconds_serial": 0.0, "concurrent_runs": 2, "est_seconds_wall": 0.0,
                          "throughput_flops_per_worker": None, "task_eval_flops": 0.0}}
    console = Console(width=400, record=True, file=io.StringIO())
    console.print(render_table(summary))
    console.print(render_groups(summary))
    text = console.export_text()
    assert len(text.splitlines()) < 200
    words = " ".join(text.split())
    assert "listed: the first and last 30 of 100,000 runs (N 10.0K to 15.0K; D 1.00M to 1.10M; " in words
    assert "99,940 runs not listed" in words and "4,960 groups not listed" in words
    assert "0.0001, 0.00010005, 0.0001001 … 0.000100853, 0.000100904, 0.000100954 (20 values)" in text
    assert "0.000100904" in text and "0.00010005 " in text  # the runs' own lr column, 6 digits


def bad(**change: Any) -> str:
    """The small example with one grid block's hparams (or another field) changed."""
    data = yaml.safe_load(SMALL.read_text())
    block = data["grid"][0]
    if "hparams" in change:
        block["hparams"] = change.pop("hparams")
    data.update(change)
    return yaml.safe_dump(data, sort_keys=False)


CASES: list[tuple[str, str, list[str]]] = [
    ("an empty list", bad(hparams={"lr": []}), ["grid.0.hparams.lr", "empty list"]),
    ("a zero learning rate", bad(hparams={"lr": [0.0, 1e-3]}), ["grid.0.hparams.lr", "item 0 is 0.0", "positive"]),
    ("a negative learning rate", bad(hparams={"lr": [1e-3, -1e-3]}), ["grid.0.hparams.lr", "item 1 is -0.001"]),
    ("a key that is not a hyperparameter", bad(hparams={"lr": [1e-3, 2e-3], "momentum": [0.9, 0.99]}),
     ["grid.0.hparams", "'momentum' is not a hyperparameter"]),
    ("factors of a field without a rule", bad(hparams={"batch_tokens": {"from": "rule", "factors": [0.5, 1, 2]}}),
     ["grid.0.hparams.batch_tokens", "rules sets none", "add rules.batch_tokens"]),
    ("factors of beta2", bad(hparams={"beta2": {"from": "rule", "factors": [1, 2]}}),
     ["grid.0.hparams.beta2", "no rule"]),
    ("a single combination", bad(hparams={"lr": [1e-3]}), ["grid.0.hparams", "not a sweep"]),
    ("a batch that is not whole sequences", bad(hparams={"batch_tokens": [1000, 2048]}),
     ["grid.0.hparams.batch_tokens", "not a whole number of sequences of 128"]),
    ("a batch above a point's tokens", bad(hparams={"batch_tokens": [1024, 2 ** 24]}),
     ["grid.0.hparams.batch_tokens", "less than one batch"]),
    ("more runs than the plan's bound", bad(hparams={"lr": [1e-5 * (i + 1) for i in range(1000)],
                                                     "beta2": [0.5 + 0.004 * i for i in range(100)]}),
     ["grid", "hparams", "more than 100,000"]),
    ("learning rates equal to 6 digits", bad(hparams={"lr": [0.01, 0.0100000000001]}),
     ["grid.0.hparams.lr", "items 0 and 1 (0.01 and 0.0100000000001) are equal to 6 significant digits"]),
    ("a transfer from a sweep the database lacks", bad(rules={"lr": {"fitted": "nowhere"}}),
     ["rules.lr", "'nowhere'"]),
]


@pytest.mark.parametrize("name, text, expected", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("command", ["plan", "sweep"])
def test_a_bad_sweep_is_one_line_at_its_place_and_writes_nothing(
        name: str, text: str, expected: list[str], command: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    plan = tmp_path / "bad.yaml"
    plan.write_text(text.replace("./scaling_runs", str(tmp_path / "runs")))
    db = tmp_path / "nothing.db"
    monkeypatch.setenv("SCALING_DB", f"sqlite:///{db}")
    argv = [command, str(plan)] + (["--no-fit", "--no-report"] if command == "sweep" else [])
    code, _, err = _cli(argv, capsys, monkeypatch)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    assert f"{plan}:" in lines[0], lines[0]  # the file and line of the field
    for part in expected:
        assert part in lines[0], (part, lines[0])
    assert not db.exists() and not (tmp_path / "runs").exists()

"""The answer as the next plan: `scaling recommend --emit-plan` writes a plan `scaling plan` accepts unchanged.

A simulated sweep (four budgets of five sizes, losses from a known law) is trained in this process
by the real simulated trainer into a real SQLite database; the recommendation is fitted from it and
written as a plan, which `scaling plan` then reads as a user would. Nothing is written from a flagged
law, and a refused write leaves the file that was there.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml
from cli_run import run_main
from in_process_sweep import train_plan

PLAN = {
    "name": "sim-next",
    "simulate": {"law": {"E": 1.5, "A": 40.0, "B": 60.0, "alpha": 0.3, "beta": 0.3}, "noise": 0.002, "seed": 0},
    "model": {"vocab_size": 256, "context": 64},
    "train": {"batch_tokens": 256},
    "rules": {"lr": "1.0e-2 * (N / 2.0e5) ** -0.25"},
    "grid": [{"compute": [3e11, 1e12, 3e12, 1e13],
              "models": [{"n_layer": 2, "d_model": d, "n_head": 2} for d in (16, 24, 32, 48, 64)]}],
}
BOOT = "20"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    folder = tmp_path_factory.mktemp("next-plan")
    (folder / "plan.yaml").write_text(yaml.safe_dump({**PLAN, "runs_dir": str(folder / "runs")}, sort_keys=False))
    url = f"sqlite:///{folder / 'results.db'}"
    train_plan(folder / "plan.yaml", url, folder)
    return url, folder


@pytest.fixture(scope="module")
def answer(sweep: tuple[str, Path]) -> dict:
    """The recommendation as `scaling recommend --format json` prints it (its fits stored for the tests below)."""
    url, folder = sweep
    out = run_main("recommend", "--db", url, "--bootstrap", BOOT, "--format", "json",
                   "--emit-plan", str(folder / "first.yaml"))
    assert out.code == 0, out.err
    return json.loads(out.out)


def planned(path: Path) -> list[dict]:
    """The runs `scaling plan PATH --format json` lists (it must accept the file)."""
    out = run_main("plan", str(path), "--format", "json")
    assert out.code == 0, out.err
    return json.loads(out.out)["runs"]


def test_the_recommended_run_round_trips_through_scaling_plan(sweep, answer, tmp_path: Path) -> None:
    url, _ = sweep
    path = tmp_path / "next.yaml"
    out = run_main("recommend", "--db", url, "--bootstrap", BOOT, "--emit-plan", str(path))
    assert out.code == 0, out.err
    assert f"next plan: {path}" in out.out
    runs = planned(path)
    assert len(runs) == 1
    run, target = runs[0], answer["run"]
    assert answer["chosen"] == "approach3" and answer["run_source"] == "the plan's rules"
    assert {k: run[k] for k in ("n_layer", "d_model", "n_head")} == \
        {k: target["shape"][k] for k in ("n_layer", "d_model", "n_head")}
    assert run["N"] == target["n_params"]
    assert run["lr"] == pytest.approx(target["lr"], rel=1e-9) and run["batch_tokens"] == target["batch_tokens"]
    # D*, rounded by the plan to whole optimizer steps of the batch
    assert abs(run["D"] - answer["per_law"]["approach3"]["D"]["value"]) <= target["batch_tokens"]
    text = path.read_text()
    assert text.startswith("# the recommended run at C = ")
    plan = yaml.safe_load(text)
    assert plan["name"] == "sim-next-next" and "lr" not in plan.get("rules", {})  # nothing resizes the run
    assert plan["simulate"] == yaml.safe_load(yaml.safe_dump(PLAN["simulate"])) | {"points": plan["simulate"]["points"]}


def test_the_runs_that_would_narrow_it_round_trip(sweep, answer, tmp_path: Path) -> None:
    url, _ = sweep
    path = tmp_path / "narrow.yaml"
    out = run_main("recommend", "--db", url, "--bootstrap", BOOT, "--emit-plan", str(path), "--emit-runs", "narrow")
    assert out.code == 0, out.err
    best = answer["next_runs"][0]
    runs = planned(path)
    assert len(runs) == len(best["sizes"]) >= 3
    assert all(r["budget"] == pytest.approx(best["C"], rel=1e-6) for r in runs)  # each run's D fills the budget


def test_the_api_writes_the_same_plan(sweep, tmp_path: Path) -> None:
    import scaling

    url, _ = sweep
    path = scaling.next_plan(tmp_path / "api.yaml", db=url, bootstrap=int(BOOT))
    assert path == (tmp_path / "api.yaml").resolve()
    plan = scaling.load_plan(path)
    assert len(plan.grid) == 1 and plan.grid[0].models[0].n_layer is not None


def test_a_run_from_a_flagged_law_is_not_planned_and_the_old_file_stays(sweep, tmp_path: Path) -> None:
    from scaling.errors import UserError
    from scaling.fitting import fit_sweep
    from scaling.orchestrator.expand import stored_plan, sweep_recommendation
    from scaling.orchestrator.next_plan import write_next_plan

    url, _ = sweep
    rec = sweep_recommendation(url, fit_sweep(url, None, "all", int(BOOT), 0), None)
    flagged = dataclasses.replace(rec, target=dataclasses.replace(rec.target, flagged=True))
    path = tmp_path / "kept.yaml"
    path.write_text("name: mine\n")
    with pytest.raises(UserError, match="flagged unreliable"):
        write_next_plan(flagged, stored_plan(url, rec_sweep := "sim-next"), path, db_url=url)
    with pytest.raises(UserError, match="no stored plan"):
        write_next_plan(rec, None, path)
    assert path.read_text() == "name: mine\n" and rec_sweep
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.yaml"]  # no temporary file left


@pytest.mark.parametrize("args, says", [
    (("--emit-runs", "all"), "--emit-runs all: give run or narrow"),
    (("--csv", "x.csv"), "needs --sweep"),
])
def test_bad_emit_options_are_refused_in_one_line_before_any_fit(sweep, tmp_path: Path, args, says) -> None:
    url, _ = sweep
    out = run_main("recommend", "--db", url, "--emit-plan", str(tmp_path / "n.yaml"), *args)
    assert out.code == 2 and says in out.err and "Traceback" not in out.err
    assert not (tmp_path / "n.yaml").exists()


def test_the_plan_is_never_written_over_the_database(sweep) -> None:
    url, folder = sweep
    out = run_main("recommend", "--db", url, "--emit-plan", str(folder / "results.db"))
    assert out.code == 2 and "is the results database" in out.err


def test_the_first_screens_run_block_shows_the_sized_run_and_its_plan(sweep) -> None:
    """The report's run block (cells and "copy as plan") from the same sized recommendation the answer prints."""
    import html

    from scaling.fitting import fit_sweep
    from scaling.fitting.core.wording import run_line
    from scaling.orchestrator.expand import stored_plan, sweep_recommendation
    from scaling.orchestrator.next_plan import next_plan, plan_yaml
    from scaling.reports.next_run import PLAN_ID, next_run_block

    url, _ = sweep
    rec = sweep_recommendation(url, fit_sweep(url, None, "all", int(BOOT), 0), None)
    text = plan_yaml(next_plan(rec, stored_plan(url, "sim-next")), rec, "run")
    block = next_run_block(rec, text)
    shape = rec.run["shape"]
    line = run_line(rec.run, rec.run_source, rec.hparams)  # what the terminal prints
    assert f"n_layer {shape['n_layer']}, d_model {shape['d_model']}, n_head {shape['n_head']}" in line
    assert f"n_layer {shape['n_layer']}, d_model {shape['d_model']}, n_head {shape['n_head']}" in block
    for value in (f"{rec.run['lr']:.3g}", f"{rec.run['memory_gib']:.3g} GiB", str(rec.run["batch_tokens"])):
        assert value in block and value.split(" ")[0] in line
    pre = block.split(f'<pre id="{PLAN_ID}">', 1)[1].split("</pre>", 1)[0]
    assert yaml.safe_load(html.unescape(pre)) == yaml.safe_load(text)  # the plan, escaped once
    # a run from a flagged law: greyed, said to be unrecommended, and no plan to copy
    flagged = dataclasses.replace(rec, target=dataclasses.replace(rec.target, flagged=True))
    grey = next_run_block(flagged, text)
    assert "unrecommended" in grey and "not recommended" in grey and PLAN_ID not in grey


def test_scaling_report_shows_the_run_to_train_and_a_plan_scaling_plan_accepts(sweep, answer, tmp_path: Path) -> None:
    """The report's first screen: the sized run (shape, N, lr, batch, memory) the answer prints, under the
    headline, and its plan to copy, which `scaling plan` accepts as the same run `--emit-plan` writes."""
    import html

    from scaling.reports.next_run import PLAN_ID

    url, folder = sweep
    out = run_main("report", "--db", url, "--output", str(tmp_path / "report.html"))
    assert out.code == 0, out.err
    page = (tmp_path / "report.html").read_text()
    block = page.split('<div id="next-run" class="next-run">', 1)[1]
    assert page.index('class="headline"') < page.index('id="next-run"') < page.index('id="recommendations"')
    shape, run = answer["run"]["shape"], answer["run"]
    assert f"n_layer {shape['n_layer']}, d_model {shape['d_model']}, n_head {shape['n_head']}" in block
    assert f"{run['lr']:.3g}" in block and f"{run['memory_gib']:.3g} GiB" in block
    assert "set by the plan: the sweep has no hyperparameter groups" not in page  # the run block says lr and batch
    pre = html.unescape(block.split(f'<pre id="{PLAN_ID}">', 1)[1].split("</pre>", 1)[0])
    (tmp_path / "copied.yaml").write_text(pre)
    (copied,) = planned(tmp_path / "copied.yaml")
    (emitted,) = planned(folder / "first.yaml")  # what `scaling recommend --emit-plan` wrote
    assert {k: copied[k] for k in ("n_layer", "d_model", "n_head", "N", "D", "lr", "batch_tokens")} == \
        {k: emitted[k] for k in ("n_layer", "d_model", "n_head", "N", "D", "lr", "batch_tokens")}


def test_scaling_plan_states_two_blocks_training_one_configuration(tmp_path: Path) -> None:
    """An IsoFLOP block and a hyperparameter block at one point train the same batches (their D rounded
    differently, so two keys): `scaling plan` says so, once."""
    plan = {**PLAN, "grid": [
        {"compute": [1e12], "models": [{"n_layer": 2, "d_model": 32, "n_head": 2}, {"n_layer": 2, "d_model": 48, "n_head": 2}]},
        {"compute": [1e12], "models": [{"n_layer": 2, "d_model": 32, "n_head": 2}],
         "hparams": {"lr": {"from": "rule", "factors": [0.5, 1, 2]}, "batch_tokens": [256, 512]}}]}
    path = tmp_path / "two-blocks.yaml"
    path.write_text(yaml.safe_dump({**plan, "runs_dir": str(tmp_path / "runs")}, sort_keys=False))
    out = run_main("plan", str(path), "--format", "json")
    assert out.code == 0, out.err
    found = json.loads(out.out)
    same = [n for n in found["notes"] if "train the same configuration" in n]
    assert len(same) == 1 and "(grid.0)" in same[0] and "(grid.1)" in same[0]
    assert len(found["runs"]) == 2 + 6  # both are trained
    path.write_text(yaml.safe_dump({**PLAN, "runs_dir": str(tmp_path / "runs")}, sort_keys=False))
    assert not [n for n in json.loads(run_main("plan", str(path), "--format", "json").out)["notes"]
                if "same configuration" in n]

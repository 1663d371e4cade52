"""`scaling compare` and :func:`scaling.reports.compare_page.compare_sweeps` on real SQLite sweeps.

Sweeps are synthetic (``report_synth``: losses from a known Chinchilla law with noise, written
through the real ``Store``), fitted once with ``scaling.fitting.fit_sweep`` and stored, so each
comparison reads stored fits. Two sweeps of the same law must not differ significantly; a sweep of
a law with other exponents must.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import report_synth as S
from cli_run import run_cli
from scaling.db import Store, connect
from scaling.fitting import fit_sweep, from_dict
from scaling.fitting.core.doubts import DoubtKind
from scaling.reports.compare import EXPONENTS, MIN_COMPLETED_RUNS, convert_runs, exponent_difference, load_comparison
from scaling.reports.compare_page import compare_sweeps

BUDGETS = (1e13, 3e13, 1e14, 3e14)
#: Another law: a = beta / (alpha + beta) = 0.357 where TRUTH's is 0.5.
OTHER = dict(E=1.0, A=30.0, B=60.0, alpha=0.45, beta=0.25)


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """base and same (TRUTH, other noise), other (OTHER), total (TRUTH counted as total N and 6N +
    attention), few (3 runs), given (a sweep stored with a FLOP convention no shape can recount)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('compare') / 'compare.db'}"
    S.build(url, S.SweepSpec(sweep="base", budgets=BUDGETS, seed=0))
    S.build(url, S.SweepSpec(sweep="same", budgets=BUDGETS, seed=1))
    S.build(url, S.SweepSpec(sweep="other", budgets=BUDGETS, seed=2, truth=OTHER))
    S.build(url, S.SweepSpec(sweep="total", budgets=BUDGETS, seed=3, params_convention="total",
                             flops_convention="6N_attention"))
    S.build(url, S.SweepSpec(sweep=S.HOSTILE, budgets=BUDGETS, seed=4))
    S.build(url, S.SweepSpec(sweep="few", budgets=(1e13,), sizes_per_budget=3))
    _stored_as(url, "given", params="non_embedding", flops="given")
    _stored_as(url, "mislabelled", params="total", flops="6N")  # N stored non-embedding, sweep says total
    for sweep in ("base", "same", "other", S.HOSTILE):
        fit_sweep(url, sweep, n_bootstrap=100, save=True)
    return url


def _stored_as(url: str, sweep: str, *, params: str, flops: str) -> None:
    """Runs of TRUTH registered under the conventions given, whatever their records count."""
    specs = S.specs_for(S.SweepSpec(sweep=sweep, budgets=BUDGETS))
    store = Store(url)
    try:
        store.register(sweep, [sp.record() for sp in specs], params_convention=params, flops_convention=flops)
        for sp in specs:
            store.claim(sp.key, "host", sweep=sweep)
            loss = float(S.true_loss(float(sp.n_params), float(sp.tokens)))
            store.finish(sp.key, "completed", final_train_loss=loss, final_eval_loss=loss, sweep=sweep)
    finally:
        store.close()


def _row(rows: list[dict], law: str, exponent: str) -> dict:
    return next(r for r in rows if r["law"] == law and r["exponent"] == exponent)


def test_different_laws_differ_significantly(db: str) -> None:
    c = load_comparison(db, ["base", "other"], fit="stored")
    for law in ("approach2", "approach3"):
        d = _row(c.differences, law, "a")
        assert d["difference"].kind == "percentile" and d["significant"] is True, d
        assert d["difference"].lo <= d["difference"].value <= d["difference"].hi < 0  # OTHER's a is smaller
        assert math.isclose(d["difference"].value, _value(c, "other", law, "a") - _value(c, "base", law, "a"))
    d = _row(c.differences, "approach3", "alpha")
    assert d["significant"] is True and d["difference"].lo > 0  # 0.45 against 0.30


def test_same_law_does_not_differ(db: str) -> None:
    c = load_comparison(db, ["base", "same"], fit="stored")
    for law, exponent in (("approach2", "a"), ("approach3", "a"), ("approach3", "alpha"), ("approach3", "beta")):
        d = _row(c.differences, law, exponent)
        assert d["difference"].kind == "percentile" and d["significant"] is False, d
        assert d["difference"].lo < 0 < d["difference"].hi and d["difference"].lo <= d["difference"].value <= d["difference"].hi


def _value(c, sweep: str, law: str, exponent: str) -> float:
    return next(x["interval"].value for x in c.exponents if (x["sweep"], x["law"], x["exponent"]) == (sweep, law, exponent))


def test_interval_is_the_percentile_range_over_all_pairs_of_replicates(db: str) -> None:
    res = connect(db)
    laws = {s: from_dict(res.fits(sweep=s)["result"].iloc[-1]["laws"]["approach3"]) for s in ("base", "other")}
    assert {type(l).__name__ for l in laws.values()} == {"ChinchillaParametric"}
    first, second = laws["base"], laws["other"]
    d = exponent_difference(first, second, "alpha")
    r1, r2 = first.replicate_values("alpha"), second.replicate_values("alpha")
    pairs = (r2[None, :] - r1[:, None]).ravel()
    assert pairs.size == r1.size * r2.size >= 50 * 50
    assert np.allclose([d["difference"].lo, d["difference"].hi], np.quantile(pairs, [0.025, 0.975]))
    # a derived exponent's replicates come from the parameters' (a = beta / (alpha + beta))
    a = first.replicate_values("a")
    beta = first.replicate_values("beta")
    assert np.allclose(a, beta / (r1 + beta))


def test_an_unreliable_law_gets_no_difference(db: str) -> None:
    c = load_comparison(db, ["base", "other"], fit="stored")
    law = c.sides[1].laws["approach3"]
    law.add_unreliable(DoubtKind.COVERAGE, "the data cannot pin this law down (made so for this test)")
    from scaling.reports.compare import build_comparison

    c = build_comparison(c.sides, c.conventions)
    for exponent in EXPONENTS["approach3"]:
        d = _row(c.differences, "approach3", exponent)
        assert d["difference"].kind == "unreliable" and d["significant"] is None
        assert math.isnan(d["difference"].value) and d["difference"].interval is None
        assert "'other' is flagged unreliable" in d["reason"]
    assert all(not x["reliable"] for x in c.exponents if (x["sweep"], x["law"]) == ("other", "approach3"))
    from scaling.reports.compare_page import render

    html = render(c)
    assert "(unreliable)" in html and "flagged unreliable" in html


def test_cli_prints_tables_writes_page_and_json(db: str, tmp_path: Path) -> None:
    out, js = tmp_path / "c.html", tmp_path / "c.json"
    code, stdout, stderr = run_cli("compare", "base", "other", "--db", db, "-o", str(out), "--json", str(js),
                                   "--fit", "stored")
    assert code == 0, stderr
    assert "Differences of exponents" in stdout and "significant" in stdout and str(out) in stdout
    data = json.loads(js.read_text(), parse_constant=_no_nan)
    assert [s["sweep"] for s in data["sweeps"]] == ["base", "other"]
    assert data["conventions"] == {"params": "non_embedding", "flops": "6N"}
    lib = load_comparison(db, ["base", "other"], fit="stored").to_dict()
    assert data["differences"] == lib["differences"] and data["exponents"] == lib["exponents"]
    d = _row(data["differences"], "approach2", "a")
    assert d["significant"] is True and d["lo"] < d["value"] < d["hi"] < 0
    kaplan = [r for r in data["differences"] if r["law"] == "kaplan"]  # flagged unreliable on these sweeps
    assert kaplan and all(r["kind"] == "unreliable" and r["lo"] is None and r["value"] is None for r in kaplan)
    html = out.read_text()
    assert "Comparison: base vs other" in html and 'id="differences-table"' in html


def test_cli_json_to_stdout(db: str, tmp_path: Path) -> None:
    code, stdout, stderr = run_cli("compare", "base", "same", "--db", db, "-o", str(tmp_path / "c.html"),
                                   "--json", "-", "--fit", "stored")
    assert code == 0, stderr
    data = json.loads(stdout, parse_constant=_no_nan)
    assert _row(data["differences"], "approach3", "a")["significant"] is False


def _no_nan(token: str) -> None:
    raise AssertionError(f"non-standard JSON constant {token}")


@pytest.mark.parametrize("args, needle", [
    (["base"], "at least two sweeps, got 1"),
    (["base", "base"], "named twice"),
    (["base", "nosuch"], "no sweep named 'nosuch'"),
    (["base", "few"], f"completed run(s); comparing its laws needs at least {MIN_COMPLETED_RUNS}"),
    (["base", "given"], "sweep 'given' counts N as 'non_embedding' and C as 'given': no exact conversion"),
    (["base", "mislabelled"], "stored N and C are not what its shape gives"),
    (["base", "same", "--params", "all"], "--params 'all': use one of non_embedding, total"),
    (["base", "same", "--fit", "later"], "--fit must be one of"),
])
def test_cli_refuses_in_one_line(db: str, tmp_path: Path, args: list[str], needle: str) -> None:
    out = tmp_path / "c.html"
    code, stdout, stderr = run_cli("compare", *args, "--db", db, "-o", str(out), "--fit", "stored") \
        if "--fit" not in args else run_cli("compare", *args, "--db", db, "-o", str(out))
    assert code == 2, (stdout, stderr)
    assert needle in stderr and len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr
    assert not out.exists()


def test_no_sweeps_named_is_a_usage_error(db: str) -> None:
    code, _, stderr = run_cli("compare", "--db", db)
    assert code == 2 and "Traceback" not in stderr


def test_other_conventions_are_converted_exactly(db: str) -> None:
    c = load_comparison(db, ["base", "total"], fit="stored")
    total = c.sides[1]
    assert total.converted and total.conventions == {"params": "total", "flops": "6N_attention"}
    assert any("converted from N = total parameters, C = 6N_attention" in n for n in c.notes)
    runs = connect(db).runs(sweep="total")
    from scaling.accounting import Shape

    for _, r in runs.iterrows():  # recounted from the shape: non-embedding N, C = 6 N D
        shape = Shape(int(r.n_layer), int(r.d_model), int(r.n_head), int(r.vocab_size), int(r.context))
        mine = total.runs.set_index("run_key").loc[r.run_key]
        assert mine["N"] == shape.params_non_embedding != r.N
        assert math.isclose(mine["C"], 6 * shape.params_non_embedding * r.D, rel_tol=1e-12)
    assert "approach3" in total.laws  # refitted on the converted runs
    assert _row(c.differences, "approach3", "a")["difference"].kind in ("percentile", "unreliable")
    # the other way round: base recounted in total / 6N_attention, total read as stored
    back = load_comparison(db, ["total", "base"], fit="stored")
    assert back.conventions == {"params": "total", "flops": "6N_attention"} and back.sides[1].converted


def test_convert_runs_keeps_what_is_already_in_the_target(db: str) -> None:
    from scaling.reports.report_data import normalise_runs

    runs = normalise_runs(connect(db).runs(sweep="base"))
    same = {"params": "non_embedding", "flops": "6N"}
    out = convert_runs(runs, same, same, "base")
    assert np.allclose(out["N"], runs["N"]) and np.allclose(out["C"], runs["C"], rtol=1e-12)


def test_convert_runs_recounts_a_llama_run_by_its_family() -> None:
    """A llama run's stored spec names its family fields: its N and C are recounted for that
    model, not for a gpt2 of the same columns (which would be refused as not exact)."""
    from scaling.accounting import Shape

    model = {"n_layer": 2, "d_model": 64, "n_head": 4, "vocab_size": 256, "context": 32, "family": "llama",
             "n_kv_head": 1, "ffn": 96}
    shape = Shape(2, 64, 4, 256, 32, family="llama", n_kv_head=1, ffn=96)
    D = 1e6
    runs = pd.DataFrame([{"run_key": "k", "n_layer": 2, "d_model": 64, "n_head": 4, "vocab_size": 256, "context": 32,
                          "D": D, "N": float(shape.params_non_embedding), "C": shape.training_flops(D),
                          "spec": {"model": model}}])
    out = convert_runs(runs, {"params": "non_embedding", "flops": "6N"}, {"params": "total", "flops": "6N_attention"}, "l")
    assert out.at[0, "N"] == shape.params_total
    assert out.at[0, "C"] == pytest.approx(shape.training_flops(D, "6N_attention", "total"), rel=1e-12)


def test_library_writes_the_page(db: str, tmp_path: Path) -> None:
    c = compare_sweeps(db, ["base", "other", "same"], tmp_path / "deep" / "c.html", fit="stored",
                       json_path=tmp_path / "c.json")
    assert c.path == (tmp_path / "deep" / "c.html").resolve() and c.path.is_file()
    pairs = {(d["first"], d["second"]) for d in c.differences}
    assert pairs == {("base", "other"), ("base", "same"), ("other", "same")}
    assert json.loads((tmp_path / "c.json").read_text())["sweeps"][2]["sweep"] == "same"


# -- the page in Chromium --------------------------------------------------------------------------
@pytest.mark.browser
def test_compare_page_renders_in_chromium(db: str, browser, tmp_path: Path) -> None:
    c = compare_sweeps(db, ["base", "other", S.HOSTILE], tmp_path / "compare.html", fit="stored")
    page = browser.open(c.path, "compare")
    assert page.console_errors == [], page.console_errors
    assert page.dialogs == [], f"user text ran as script: {page.dialogs}"
    figs = page.figures
    assert set(figs) == {"fig-compare-frontiers", "fig-compare-isoflop", "fig-compare-differences"}
    # per sweep: its runs, and N* and loss lines of each reliable law (unreliable ones only in the legend)
    reliable = sum(1 for s in c.sides for law in s.laws.values() if law.reliable())
    assert figs["fig-compare-frontiers"] >= 3 + 2 * reliable
    assert figs["fig-compare-isoflop"] >= 3 * len(BUDGETS)  # points of every budget of every sweep at least
    assert figs["fig-compare-differences"] == 1
    assert S.HOSTILE in page.title and "Comparison: base vs other" in page.title
    assert "significant" in page.text and "(unreliable)" in page.text


def test_many_sweeps_give_a_bounded_summary(db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pairs of sweeps grow as their square: the terminal and the page list a bounded number of
    differences (significant first) and say what they left out; the JSON keeps every one.
    The bounds are lowered here so that four sweeps exceed them."""
    from scaling.cli import compare_cmds
    from scaling.reports import compare_page

    monkeypatch.setattr(compare_cmds, "MAX_TERMINAL_SWEEPS", 2)
    monkeypatch.setattr(compare_cmds, "MAX_TERMINAL_DIFFERENCES", 5)
    monkeypatch.setattr(compare_page, "MAX_PAGE_DIFFERENCES", 7)
    monkeypatch.setattr(compare_page, "MAX_FIGURE_SWEEPS", 2)
    monkeypatch.setenv("COLUMNS", "400")  # one line per table row
    sweeps = ["base", "same", "other", S.HOSTILE]
    out, js = tmp_path / "c.html", tmp_path / "c.json"
    code, stdout, stderr = run_cli("compare", *sweeps, "--db", db, "-o", str(out), "--json", str(js), "--fit", "stored")
    assert code == 0, stderr
    data = json.loads(js.read_text())
    total = len(data["differences"])
    assert total == 6 * sum(len(v) for v in EXPONENTS.values())  # every pair of the four, every exponent
    significant = sum(1 for d in data["differences"] if d["kind"] == "percentile" and d["significant"])
    assert significant >= 5  # base and same against other differ

    text = stdout[stdout.index("Differences of exponents"):]
    listed = [line for line in text.splitlines() if line.startswith("│")]
    assert len(listed) == 5 and all("│ yes " in line for line in listed), stdout  # the significant ones first
    summary = " ".join(stdout.split())
    assert f"{total - 5:,} more differences (of {total:,}: {significant:,} significant" in summary, stdout
    assert "exponents of 2 more sweeps" in summary and f"Every one is in the JSON {js} and on the page" in summary
    assert stdout.rstrip().endswith(str(out))

    html = out.read_text()
    table = html[html.index('id="differences-table"'):]
    table = table[:table.index("</table>")]
    assert table.count("<tr class=") == 7 and table.count('<tr class="significant">') == 7
    assert f"Listed: 7 of the {total:,} differences" in html
    assert "Drawn: the first 2 of the 4 sweeps" in html


@pytest.mark.parametrize("option", ["-o", "--json"])
@pytest.mark.parametrize("name", ["c\x1b[2J\x1b[31mred.html", "two\nlines.html", "rtl\u202elmth.html"])
def test_an_output_name_with_control_characters_is_refused(db: str, tmp_path: Path, option: str, name: str) -> None:
    """A terminal escape, newline or bidi override in the file name would make the printed path differ
    from the file written (or rewrite the terminal): refused in one line that shows it escaped."""
    bad = tmp_path / name
    args = ["-o", str(bad)] if option == "-o" else ["-o", str(tmp_path / "c.html"), "--json", str(bad)]
    code, stdout, stderr = run_cli("compare", "base", "same", "--db", db, "--fit", "stored", *args)
    assert code == 2 and stdout == "", (stdout, stderr)
    assert len(stderr.strip().splitlines()) == 1 and "control character" in stderr, stderr
    assert not any(c in stderr for c in "\x1b\u202e") and repr(name)[1:-1].split("\\")[0] in stderr
    assert list(tmp_path.iterdir()) == []  # nothing written

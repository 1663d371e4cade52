"""The answer a sweep ends with: the recommendation first, one line per law left out, the honesty rules kept."""

from __future__ import annotations

import math

from scaling.fitting.brief import brief
from scaling.fitting.core.wording import REASON_CHARS, short_reason
from scaling.fitting.core.doubts import Doubt, DoubtKind
from scaling.fitting.core.notes import Note, NoteKind
from scaling.fitting.recommend import Reach, Recommendation
from scaling.fmt import Interval

LONG = Doubt.unreliable(DoubtKind.UNDETERMINED, "the data do not determine Nc (its 95% bootstrap interval [1.36e+06, "
                        "2.69e+08] spans 2.3 orders of magnitude); Dc (its 95% bootstrap interval [1.14e+06, 8.23e+08] "
                        "spans 2.9 orders of magnitude)", ": do not trust this law's parameters or what it extrapolates")


def _iv(value: float, lo: float = math.nan, hi: float = math.nan, **extra) -> Interval:
    return Interval.of({"value": value, "lo": lo, "hi": hi, **extra})


def _point(n: float, d: float, loss: float, spread: float = 2.0, **extra) -> dict:
    return {"N": _iv(n, n / spread, n * spread, **extra), "D": _iv(d, d / spread, d * spread, **extra),
            "loss": _iv(loss, loss * 0.9, loss * 1.1, **extra)}


def _rec(**kw) -> Recommendation:
    rec = Recommendation(compute=3e11, source="sweep 'x'")
    rec.per_law = {"kaplan": _point(4.48e4, 1.12e6, 3.77, spread=30), "approach1": _point(2.2e4, 2.28e6, 3.67),
                   "approach2": _point(2.55e4, 1.96e6, 3.76, widened="backtest"), "approach3": _point(2.54e4, 1.97e6, 3.88)}
    rec.chosen, rec.chosen_why = "approach2", ("the narrowest 95% interval on N* (a factor 4 from end to end) among the "
                                               "laws the data determine (also: Chinchilla 1 (envelope))")
    rec.chosen_reason = "Chinchilla 2 (IsoFLOP): " + rec.chosen_why
    rec.unreliable = {"kaplan": LONG, "approach3": Doubt.unreliable(
        DoubtKind.PINNED, "E is pinned at its bound 0 (fitted 1e-09): the data do not separate the irreducible loss "
        "from the power-law terms")}
    rec.agreement = {"N_ratio": 1.16, "D_ratio": 1.16, "loss_spread": 0.02, "n_methods": 2.0}
    rec.across_laws = Reach(8.93e3, 5.35e4, 2)
    rec.run, rec.run_source = {"shape": {"n_layer": 2, "d_model": 32, "n_head": 4}, "n_params": 25472, "lr": 0.03,
                               "batch_tokens": 256, "memory_gib": 0.004, "strategy": "single"}, "the plan's rules"
    rec.notes = [Note(NoteKind.LEFT_OUT, "the choice, agreement and consensus leave out Kaplan, Chinchilla 3 "
                                         "(parametric) (their fit notes say the data cannot pin them down)")]
    for key, value in kw.items():
        setattr(rec, key, value)
    return rec


def test_the_recommendation_comes_first_and_each_left_out_law_gets_one_line() -> None:
    lines = brief(_rec(), budget_why="10x the largest run", skipped={"approach1": "no budget has an interior minimum"})
    assert lines[0] == "recommended next run at C = 3e+11 FLOPs (10x the largest run), from Chinchilla 2 (IsoFLOP):"
    assert lines[1] == "  N* = 25.5K [12.8K, 51.0K], D* = 1.96M [980K, 3.92M] tokens, loss 3.76 [3.384, 4.136]"
    assert "widened" in lines[2]  # the chosen law's intervals carry its extrapolation error: said so
    assert lines[3].startswith("  as a run: n_layer 2, d_model 32, n_head 4 (shape from the plan's rules), N = 25.5K")
    assert ("lr 0.03, batch 256 tokens (both from the plan's rules: the sweep has no hyperparameter groups to fit them "
            "from)") in lines[3]
    assert lines[4].startswith("  why this law: the narrowest 95% interval on N*")  # its name is not repeated
    assert "agree on N* within a factor 1.16" in lines[5] and "[8.93K, 53.5K]" in lines[5]
    left = [line for line in lines if line.startswith("left out: ")]
    assert left == lines[6:9] and len(lines) == 9  # the choice's own note is said by these lines
    assert left[0].startswith("left out: Kaplan: unreliable: the data do not determine Nc (its 95% bootstrap")
    assert left[1] == ("left out: Chinchilla 3 (parametric): unreliable: E is pinned at its bound 0 (fitted 1e-09): the "
                       "data do not separate the irreducible loss from the power-law terms")
    assert left[2] == "left out: Chinchilla 1 (envelope): not fitted: no budget has an interior minimum"
    # an unreliable law's numbers, let alone an interval, appear nowhere
    assert not any("4.48e+04" in line or "3.77" in line or "2.54e+04" in line for line in lines)


def test_a_long_reason_is_cut_to_one_line_and_says_so() -> None:
    short = short_reason(LONG)
    assert short.endswith(" …") and len(short) <= REASON_CHARS + 2 < len(LONG)
    assert short.startswith("the data do not determine Nc (its 95% bootstrap interval [1.36e+06, 2.69e+08]")
    # a doubt's reason, not its verdict ("left out" says it) nor its advice
    assert short_reason(Doubt.unreliable(DoubtKind.PINNED, "E is pinned", ": do not trust it")) == "E is pinned"
    assert short_reason("a\n  b") == "a b"


def test_no_reliable_law_no_recommendation() -> None:
    rec = _rec(chosen="approach2", chosen_reason="no law is reliable; Chinchilla 2 (IsoFLOP) has the narrowest 95% "
               "interval on N*, but its fit notes say the data cannot pin it down",
               unreliable={k: LONG for k in ("kaplan", "approach1", "approach2", "approach3")},
               agreement={}, across_laws=None, notes=[Note(NoteKind.NO_CONSENSUS,
                                                                "no law is reliable, so there is no agreement or consensus to report")])
    lines = brief(rec)
    assert lines[0] == ("no recommendation at C = 3e+11 FLOPs: no fitted law is reliable: their fit notes say the data "
                        "cannot pin them down")
    assert len(lines) == 5 and all(line.startswith("left out: ") for line in lines[1:])
    assert not any("N* =" in line or "2.55e+04" in line for line in lines)


def test_a_law_without_intervals_says_why_and_other_notes_are_kept() -> None:
    point = {"N": _iv(2.55e4, kind="biased"), "D": _iv(1.96e6), "loss": _iv(3.76, kind="no spread")}
    rec = _rec(per_law={"approach2": point}, unreliable={}, agreement={}, across_laws=None, run=None,
               chosen_reason="Chinchilla 2 (IsoFLOP): the only reliable law, though it has no bootstrap interval",
               chosen_why="the only reliable law, though it has no bootstrap interval",
               no_optimum={"kaplan": "it gives no compute-optimal point here (overflow)"},
               notes=[Note(NoteKind.NO_OPTIMUM, "Kaplan is left out: it gives no compute-optimal point here (overflow)"),
                      Note(NoteKind.RUN, "the plan's rules could not size the run (no shape); used the defaults")])
    lines = brief(rec)
    assert lines[1] == ("  N* = 25.5K (no interval: bootstrap biased), D* = 1.96M (no interval) tokens, "
                        "loss 3.76 (no interval: replicates do not vary)")
    assert not any("95% intervals" in line for line in lines)
    assert "left out: Kaplan: it gives no compute-optimal point here (overflow)" in lines
    assert lines[-1] == "note: the plan's rules could not size the run (no shape); used the defaults"


def test_each_value_of_the_run_says_where_it_comes_from_and_no_note_points_at_nothing() -> None:
    """lr from the fitted lr* law is said to be so (not "the plan's rules"); a batch the B* law withheld says
    why it is the plan's; the note that points at a hyperparameter line the brief does not print is not printed."""
    run = {"shape": {"n_layer": 1, "d_model": 192, "n_head": 3}, "n_params": 6.66e5, "lr": 0.00525,
           "lr_interval": [0.00504, 0.00568], "batch_tokens": 512, "memory_gib": 0.02, "strategy": "single"}
    hparams = {"lr": _iv(0.00525, 0.00504, 0.00568), "lr_why": "from lr* = c N^a D^b over 12 groups",
               "batch": None, "batch_why": "B* = d D^e not fitted: no groups"}
    note = "batch of the concrete run come from the plan's rules: the hyperparameter laws give no recommendation for it (see above)"
    lines = brief(_rec(run=run, hparams=hparams, notes=[Note(NoteKind.RUN_HPARAMS, note)]))
    run_line = next(line for line in lines if line.startswith("  as a run: "))
    assert "lr 0.00525 [0.00504, 0.00568] (from the fitted lr* law)" in run_line
    assert "batch 512 tokens (from the plan's rules: the B* law gives none (B* = d D^e not fitted: no groups))" in run_line
    assert not any("see above" in line or line.startswith("note: ") for line in lines), lines


def test_a_task_line_says_its_chain_and_interval_or_why_not_and_never_shows_an_impossible_accuracy() -> None:
    tasks = {"hellaswag": {"sigmoid": _iv(0.774, 0.316, 0.939, kind="percentile")},
             "next_line": {"sigmoid": _iv(0.251, kind="unreliable", note="step 1 (task loss from N, D): unreliable: "
                                          "the data do not determine E")},
             "arc": {"sigmoid": _iv(1.05, 0.528, 1.21, kind="percentile")}}
    lines = brief(_rec(tasks=tasks))
    assert "  hellaswag accuracy 0.774, by the sigmoid chain: 95% interval [0.316, 0.939]" in lines
    assert ("  next_line accuracy 0.251, by the sigmoid chain, no interval: step 1 (task loss from N, D): unreliable: "
            "the data do not determine E") in lines
    assert "  arc: no accuracy predicted: the sigmoid chain gives a value outside [0, 1], not an accuracy" in lines
    assert not any("none: law unreliable" in line or "1.05" in line or "1.21" in line for line in lines), lines


def test_with_laws_of_sparsity_each_answer_names_its_family_and_the_experts_answer_follows() -> None:
    from scaling.fitting.moe.moe_fit import fit_moe
    from scaling.fmt import flops
    from scaling.fitting.moe.moe_synthetic import as_data, sparsity_sweep

    moe = fit_moe(as_data(sparsity_sweep(seed=3)), law="moe-sparsity", n_bootstrap=20, grid="small")
    compute = 10 * moe.laws["sparsity"].c_range_[1]
    lines = brief(_rec(compute=compute), moe=moe)
    assert lines[0].endswith("from Chinchilla 2 (IsoFLOP) (dense law):")
    (head,) = [i for i, line in enumerate(lines) if line.startswith("mixture of experts at C = ")]
    assert lines[head] == (f"mixture of experts at C = {flops(compute)} FLOPs, from the moe-sparsity law (law of "
                           "sparsity; N = active parameters):")
    rec = moe.recommend(compute)[0][0]
    assert lines[head + 1] == "  " + rec.headline()
    assert "N_active* = " in lines[head + 1] and "sparsity S = " in lines[head + 1] and "D* = " in lines[head + 1]
    assert head < min(i for i, line in enumerate(lines) if line.startswith("left out: "))  # before the laws left out
    assert "(dense law)" not in brief(_rec())[0]  # a sweep without experts names no family

"""The docs' figure gallery is drawn from a plan whose hyperparameter groups bracket the simulated optimum
(docs/hooks/gallery_plan.yaml): each group's grid of batches and learning rates has values on both sides
of the simulated B* and lr*, so every group can be fitted and the gallery's "Fitted lr*(N, D) and B*(D)"
figure is drawn from them (a grid wholly below the optimum leaves every group out at its edge)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from scaling.orchestrator.expand import expand
from scaling.orchestrator.plan import load_plan
from scaling.vocab import HPARAM_GROUP_TAG

GALLERY_PLAN = Path(__file__).resolve().parents[1] / "docs" / "hooks" / "gallery_plan.yaml"


def test_every_hyperparameter_group_of_the_gallery_brackets_the_simulated_optimum() -> None:
    expansion = expand(*load_plan(GALLERY_PLAN))
    law = expansion.plan.simulate.law.hparams
    groups = defaultdict(list)
    for run in expansion.runs:
        if HPARAM_GROUP_TAG in run.spec.tags:
            groups[run.spec.tags[HPARAM_GROUP_TAG]].append(run.spec)
    assert len(groups) >= 4, list(groups)
    for label, specs in groups.items():
        N, D = specs[0].n_params, specs[0].trained_tokens
        assert all(s.n_params == N for s in specs), label
        b_star = law.batch_d * D ** law.batch_e
        lr_star = law.lr_c * N ** law.lr_a * D ** law.lr_b
        batches = sorted({s.batch_tokens for s in specs})
        lrs = sorted({s.optimizer.lr for s in specs})
        # an interior optimum: values tried on both sides of it
        assert batches[0] < b_star < batches[-1], (label, b_star, batches)
        assert lrs[0] < lr_star < lrs[-1], (label, lr_star, lrs)

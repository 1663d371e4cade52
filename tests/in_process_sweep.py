"""A plan's runs trained in the test's own process, as a sweep trains them, without Ray.

For tests whose subject is what the runs record (simulated losses, task metrics, groups), not the
scheduler: every run is registered, claimed, trained and completed through the same lifecycle
`scaling sweep` uses, one after another.
"""

from __future__ import annotations

from pathlib import Path


def train_plan(plan_path: Path, url: str, folder: Path, run_folders: bool = False) -> None:
    """Every run of the plan at ``plan_path`` registered, claimed, trained and completed in ``url``;
    with ``run_folders`` each in its own folder ``folder/<key>`` (as a sweep keeps runs that checkpoint)."""
    from scaling.db import Store
    from scaling.db.lifecycle import Lifecycle
    from scaling.orchestrator.expand import expand
    from scaling.orchestrator.plan import load_plan
    from scaling.orchestrator.sweep import register
    from scaling.trainer import train

    plan, source = load_plan(plan_path)
    expansion = expand(plan, source)
    with Store(url) as store:
        register(store, plan, expansion)
        runs = Lifecycle(store, plan.name)
        try:
            for run in expansion.runs:
                attempt = runs.claim(run.key).attempt
                run_dir = folder / run.key if run_folders else folder
                result = train(run.spec, url, run_dir, attempt=attempt, sweep=plan.name)
                runs.complete(run.key, final_train_loss=result.final_train_loss,
                              final_eval_loss=result.final_eval_loss)
        finally:
            runs.close()

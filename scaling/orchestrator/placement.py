"""Where the ranks of a tensor- or pipeline-parallel run go: one placement-group bundle per node.

The device mesh numbers ranks tensor-innermost, then data, then pipeline
(``rank = (stage * dp + replica) * tp + tensor_rank``), so the ranks of one tensor-parallel group
are consecutive. A run with tp or pp > 1 reserves one bundle per node, each holding whole
tensor-parallel groups (a bundle always sits on one node, so a TP group never spans nodes: its
all-reduces stay on NVLink), and the bundles are spread over nodes (Ray's ``SPREAD``: pipeline
stages go to different nodes where the cluster has them, and share one where it has not, rather
than waiting forever).

Ray Train builds its own placement group, one bundle per worker, and numbers ranks by node in the
order the workers were created. After the reservation is ready the scheduler reads which node each
bundle got (:func:`bundle_nodes`), releases it, and hands the trainer one node id per rank
(:func:`rank_nodes`): ``multiworker.scaling_config`` pins worker *i* to that node with a label
selector, so Ray Train's rank *i* is mesh rank *i*.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - names for type hints only
    from ray.util.placement_group import PlacementGroup

    from scaling.trainer.spec import RunSpec

#: The label Ray gives every node with its id (``ray._raylet.RAY_NODE_ID_KEY``).
NODE_ID_LABEL = "ray.io/node-id"


def node_groups(workers: int, tp: int, ranks_per_node: int) -> list[int]:
    """Ranks per node, in rank order: as many whole tensor-parallel groups as a node holds.

    Raises ValueError when a tensor-parallel group does not fit one node.
    """
    if tp > ranks_per_node:
        raise ValueError(f"tp={tp} does not fit a node of {ranks_per_node} ranks")
    if workers % tp:
        raise ValueError(f"workers ({workers}) is not a whole number of tp={tp} groups")
    per_node = (min(workers, ranks_per_node) // tp) * tp
    sizes = []
    left = workers
    while left:
        sizes.append(min(per_node, left))
        left -= sizes[-1]
    return sizes


def needs_node_bundles(spec: RunSpec) -> bool:
    """Whether a run is tensor- or pipeline-parallel (its ranks are placed per node)."""
    e = spec.execution
    return e.workers > 1 and (getattr(e, "tp", 1) > 1 or getattr(e, "pp", 1) > 1)


def bundles(spec: RunSpec, ranks_per_node: int) -> tuple[list[dict[str, float]], list[int], str]:
    """(bundles, ranks in each, Ray strategy) to reserve for ``spec``.

    A tensor- or pipeline-parallel run: one bundle per node holding its ranks' CPUs and GPUs,
    spread over nodes. Any other multi-worker run: one bundle per worker, packed.
    """
    e = spec.execution
    one = {"CPU": float(e.cpus_per_worker), **({"GPU": float(e.gpus_per_worker)} if e.gpus_per_worker else {})}
    if not needs_node_bundles(spec):
        return [dict(one) for _ in range(e.workers)], [1] * e.workers, "PACK"
    sizes = node_groups(e.workers, e.tp, ranks_per_node)
    out = [{k: v * n for k, v in one.items()} for n in sizes]
    return out, sizes, "SPREAD" if len(sizes) > 1 else "STRICT_PACK"


def bundle_nodes(pg: PlacementGroup) -> list[str]:
    """The node id of each bundle of a ready placement group, in bundle order."""
    from ray.util import placement_group_table

    table = placement_group_table(pg)["bundles_to_node_id"]
    return [table[i] for i in range(len(table))]


def rank_nodes(nodes: list[str], sizes: list[int]) -> list[str]:
    """One node id per rank: bundle *k*'s node for its ``sizes[k]`` ranks.

    Bundles that landed on the same node are made adjacent (in the order their node first
    appears), because Ray Train numbers workers node by node; each bundle holds whole
    tensor-parallel groups, so they stay consecutive and on one node either way.
    """
    first = {n: i for i, n in reversed(list(enumerate(nodes)))}
    order = sorted(range(len(nodes)), key=lambda k: first[nodes[k]])
    out: list[str] = []
    for k in order:
        out.extend([nodes[k]] * sizes[k])
    return out


def label_selectors(nodes: list[str]) -> list[dict[str, str]]:
    """Ray Train's per-worker ``label_selector``: worker *i* on ``nodes[i]``."""
    return [{NODE_ID_LABEL: n} for n in nodes]

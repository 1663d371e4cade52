"""A single-worker run holding a GPU gets a fresh Ray worker process (``max_calls=1``).

Real Ray with a declared GPU resource (Ray schedules it like a physical one; nothing touches CUDA)."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")


def test_a_gpu_task_never_reuses_a_worker_process() -> None:
    import os

    from scaling.orchestrator.tasks import SingleRunTask

    def pid() -> int:  # defined here: shipped to the workers by value
        return os.getpid()

    ray.init(num_cpus=1, num_gpus=1, include_dashboard=False, log_to_driver=False)
    try:
        task = SingleRunTask(pid)
        on_gpu = [ray.get(task.options(num_cpus=1, num_gpus=1).remote()) for _ in range(3)]
        assert len(set(on_gpu)) == 3, on_gpu  # each GPU task in a process of its own
        on_cpu = [ray.get(task.options(num_cpus=1, num_gpus=0).remote()) for _ in range(3)]
        assert len(set(on_cpu)) < 3, on_cpu  # CPU tasks reuse their worker (the cheap path)
    finally:
        ray.shutdown()

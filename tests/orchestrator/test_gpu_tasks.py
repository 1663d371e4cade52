"""A single-worker run holding a GPU gets a fresh Ray worker process (``max_calls=1``).

Real Ray with a declared GPU resource (Ray schedules it like a physical one; nothing touches CUDA)."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")


@pytest.mark.ray
def test_a_gpu_task_never_reuses_a_worker_process(no_shared_ray: None) -> None:
    """A Ray of its own: it declares a GPU for the scheduler to hand out."""
    import os

    from scaling.orchestrator.worker import SingleRunTask

    def pid() -> int:  # defined here: shipped to the workers by value
        return os.getpid()

    ray.init(address="local", num_cpus=1, num_gpus=1, include_dashboard=False, log_to_driver=False)
    try:
        task = SingleRunTask(pid)
        on_gpu = [ray.get(task.options(num_cpus=1, num_gpus=1).remote()) for _ in range(3)]
        assert len(set(on_gpu)) == 3, on_gpu  # each GPU task in a process of its own
        on_cpu = [ray.get(task.options(num_cpus=1, num_gpus=0).remote()) for _ in range(3)]
        assert len(set(on_cpu)) < 3, on_cpu  # CPU tasks reuse their worker (the cheap path)
    finally:
        ray.shutdown()


@pytest.mark.parametrize("gpus", [0.5, 2])
def test_a_multi_worker_run_takes_exactly_one_gpu_per_worker(gpus: float) -> None:
    from scaling.errors import SpecError
    from scaling.trainer.spec import RunSpec

    base = {"model": {"n_layer": 1, "d_model": 32, "n_head": 2, "context": 16}, "tokens": 640, "batch_tokens": 64}
    with pytest.raises((SpecError, ValueError), match=rf"gpus_per_worker: a multi-worker run takes exactly 1 GPU per worker, not {gpus:g}"):
        RunSpec.from_dict({**base, "execution": {"workers": 2, "gpus_per_worker": gpus}})
    RunSpec.from_dict({**base, "execution": {"workers": 1, "gpus_per_worker": gpus}})  # one process: packing is fine
    RunSpec.from_dict({**base, "execution": {"workers": 2, "gpus_per_worker": 1, "strategy": "ddp"}})


def test_cuda_with_no_gpu_reserved_is_refused_where_ray_reserves() -> None:
    from scaling.errors import SpecError
    from scaling.orchestrator.multiworker import scaling_config
    from scaling.orchestrator.worker import train_single
    from scaling.trainer.spec import RunSpec

    base = {"model": {"n_layer": 1, "d_model": 32, "n_head": 2, "context": 16}, "tokens": 640, "batch_tokens": 64}
    with pytest.raises((SpecError, ValueError), match="'cuda' with gpus_per_worker 0 reserves no GPU"):
        RunSpec.from_dict({**base, "execution": {"workers": 2, "device": "cuda"}})
    single = RunSpec.from_dict({**base, "execution": {"device": "cuda"}})  # `scaling train` runs it in place
    with pytest.raises(SpecError, match="reserves no GPU"):
        train_single(single.model_dump_json(), "", "/nonexistent", 1, "s")
    placed = scaling_config(RunSpec.from_dict({**base, "execution": {"workers": 2, "gpus_per_worker": 1, "strategy": "ddp"}}))
    assert placed.use_gpu and placed.resources_per_worker == {"CPU": 1, "GPU": 1}


def test_a_launcher_assigned_gpu_is_the_one_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    from scaling.errors import ResourceError
    from scaling.trainer.runtime import DEVICE_ENV, cuda_index

    monkeypatch.delenv(DEVICE_ENV, raising=False)
    assert cuda_index(local_rank=3, visible=2) == 1  # no launcher: local rank modulo the GPUs seen
    monkeypatch.setenv(DEVICE_ENV, "0")
    assert cuda_index(local_rank=3, visible=2) == 0  # Ray Train's assignment wins
    monkeypatch.setenv(DEVICE_ENV, "4")
    with pytest.raises(ResourceError, match="names no GPU of the 2"):
        cuda_index(local_rank=0, visible=2)


def test_cpu_offload_on_gpus_adds_a_cpu_backend_beside_nccl() -> None:
    """Offloaded parameters and gradients are CPU DTensors: the clip's norm all-reduces them,
    which an NCCL-only process group cannot."""
    from scaling.trainer.parallel.data_parallel import default_backend

    assert default_backend("cuda", cpu_offload=True) == "cpu:gloo,cuda:nccl"
    assert default_backend("cuda") == "nccl"
    assert default_backend("cpu", cpu_offload=True) == "gloo"

"""Checkpoints of a run: save one, find the newest intact one, load it.

Layout: ``<run_dir>/checkpoints/step_<8 digits>/`` holds ``state.pt`` (the loss-scaler state
dict and the trainer's own state: step, data cursor, spike window, RNG states as tensors), the
model and optimizer written by ``torch.distributed.checkpoint`` (one ``.distcp`` file per
writing rank, resharded on load, see :func:`save_sharded`), ``metadata.json`` (DCP's index of
those shards, in JSON) and ``manifest.json`` (every other file's size and sha256, written last).
Each file's sha256 is computed from the bytes as they are written (:class:`HashingFile`), never by
reading the file back; a resume verifies a checkpoint once, streaming each file through the hash in
1 MiB blocks (no copy of the state in memory), and none this process wrote or verified again.

Files read back from disk are untrusted: nothing in a checkpoint is unpickled. DCP's own
``.metadata`` is a pickle, so it is deleted at save time and its JSON twin is read instead;
``state.pt`` and the shards go through ``torch.load(weights_only=True)``. A checkpoint whose
files do not match its manifest (truncated, tampered, or with files the manifest does not list)
is set aside as ``.step_N.corrupt`` and the previous one is used (:func:`load_latest`).

A checkpoint is written into a hidden temporary folder and renamed into place, so a crash
mid-write never leaves a half checkpoint that looks complete; the last ``keep`` are kept, and
so are the steps in ``protect`` (a trunk's branch points, which its branches start from).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import sys
import warnings
from pathlib import Path
from contextlib import contextmanager
from typing import Any, Callable, Collection, Iterator

import torch
from torch.distributed.checkpoint.api import CheckpointException

from scaling.trainer.checkpoints.lineage import MANIFEST_FILE, PREFIX, checkpoint_root, step_folder, step_of
from scaling.trainer.runtime import Runtime

STATE_FILE = "state.pt"
METADATA_FILE = "metadata.json"
MANIFEST_FORMAT = 1
_DCP_PICKLE = ".metadata"  # DCP's pickled index: never kept, never read
_MAX_JSON_BYTES = 64 * 2**20  # a manifest or metadata index larger than this is not ours


class CorruptCheckpoint(Exception):
    """A checkpoint that does not verify or cannot be read; the message says what is wrong."""


_step_of = step_of


def checkpoints(run_dir: str | Path) -> list[Path]:
    """Checkpoint folders renamed into place (not yet verified), oldest first."""
    root = checkpoint_root(run_dir)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and _step_of(p) is not None]
    return sorted(found, key=lambda p: _step_of(p) or 0)


def latest(run_dir: str | Path) -> Path | None:
    """The newest checkpoint folder, unverified (:func:`load_latest` verifies)."""
    found = checkpoints(run_dir)
    return found[-1] if found else None


def rng_state(device: torch.device) -> dict[str, Any]:
    """This process's generator states: the CPU's and, on a GPU, its own device's (only that one:
    a resume may see fewer GPUs than the save did)."""
    state: dict[str, Any] = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def own_rng_state(saved: Any, rank: int, device_index: int | None) -> dict[str, Any] | None:
    """The generator states rank ``rank`` restores from a checkpoint's ``rng`` entry (None: none for it).

    The entry holds one state per saving rank (``{"ranks": [...]}``); a rank the save did not have
    (more ranks now) keeps its seeded generators. An older entry (``{"cpu": t, "cuda": [one per
    visible GPU]}``) gives its CPU state and the state of this process's GPU index if it was saved.
    Raises ValueError/TypeError on an entry of the wrong shape.
    """
    if not isinstance(saved, dict):
        raise TypeError(f"expected a dict, got {type(saved).__name__}")
    if "ranks" in saved:
        ranks = saved["ranks"]
        if not isinstance(ranks, list):
            raise TypeError("'ranks' is not a list")
        return ranks[rank] if rank < len(ranks) else None
    own: dict[str, Any] = {"cpu": saved["cpu"]}
    per_device = saved.get("cuda")
    if isinstance(per_device, list) and device_index is not None and device_index < len(per_device):
        own["cuda"] = per_device[device_index]
    return own


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    """Restore what :func:`rng_state` returned (the GPU state only on a GPU)."""
    torch.set_rng_state(state["cpu"].cpu())
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"].cpu(), device)


def restore_rng(saved: Any, rt: Runtime) -> str | None:
    """Restore this rank's generators from a checkpoint's ``rng`` entry; return why not, or None.

    Generator states are not the model: a mismatch (another number of ranks or GPUs, an entry
    of the wrong shape) leaves the generators as seeded and is reported, never taken for a
    corrupt checkpoint."""
    try:
        own = own_rng_state(saved, rt.rank, rt.device.index if rt.device.type == "cuda" else None)
        if own is None:
            return f"no generator state saved for rank {rt.rank}"
        set_rng_state(own, rt.device)
    except Exception as exc:  # noqa: BLE001 - any bad entry means: keep the seeded state
        return f"generator state not restored ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})"
    return None


# -- the manifest: every file's size and sha256 ----------------------------------------------


def sha256_of(path: Path) -> str:
    """The sha256 of the file at ``path``, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class HashingFile(io.RawIOBase):
    """A file opened for writing that passes every byte written through sha256 on its way to
    disk, so the manifest's entry needs no second read of the file (:meth:`entry`)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self._file = open(path, "wb")  # noqa: SIM115 - closed by close()
        self._digest = hashlib.sha256()
        self._size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self._digest.update(view)
        written = self._file.write(view)
        self._size += written
        return written

    def tell(self) -> int:
        return self._size

    def fileno(self) -> int:
        return self._file.fileno()

    def flush(self) -> None:
        if not self._file.closed:
            self._file.flush()

    def close(self) -> None:
        if not self.closed:
            self.flush()
            self._file.close()
        super().close()

    def sync(self) -> None:
        """Flush and fsync: the bytes are on disk before the manifest names them."""
        self.flush()
        os.fsync(self._file.fileno())

    def entry(self) -> dict[str, Any]:
        """The manifest's entry for what was written: size and sha256."""
        return {"size": self._size, "sha256": self._digest.hexdigest()}


@contextmanager
def hashed_writing(path: Path, entries: dict[str, dict[str, Any]]) -> Iterator[HashingFile]:
    """Write ``path`` through a :class:`HashingFile`, synced and closed at the end, its entry put
    in ``entries`` under the file's name."""
    with HashingFile(path) as fh:
        yield fh
        fh.sync()
    entries[path.name] = fh.entry()


def _write_json_atomically(path: Path, obj: Any) -> dict[str, Any]:
    """Write ``obj`` as JSON to ``path`` through a temporary file; return its manifest entry."""
    tmp = path.with_name(path.name + ".tmp")
    entries: dict[str, dict[str, Any]] = {}
    with hashed_writing(tmp, entries) as fh:
        fh.write(json.dumps(obj).encode())
    os.replace(tmp, path)
    return entries[tmp.name]


def _read_json(path: Path) -> Any:
    if path.stat().st_size > _MAX_JSON_BYTES:
        raise CorruptCheckpoint(f"{path.name} is larger than {_MAX_JSON_BYTES} bytes")
    try:
        return json.loads(path.read_text())
    except RecursionError:
        raise CorruptCheckpoint(f"{path.name} is nested too deeply to be a manifest") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CorruptCheckpoint(f"{path.name} is not readable JSON: {exc}") from None


def _entry(path: Path) -> dict[str, Any]:
    return {"size": path.stat().st_size, "sha256": sha256_of(path)}


def write_manifest(path: Path, step: int, known: dict[str, dict[str, Any]] | None = None) -> None:
    """Record the size and sha256 of every file in the checkpoint folder ``path`` (last write);
    ``known`` holds the entries hashed as those files were written (any other file is read)."""
    known = known or {}
    files = {p.name: known.get(p.name) or _entry(p) for p in sorted(path.iterdir()) if p.is_file()}
    _write_json_atomically(path / MANIFEST_FILE, {"format": MANIFEST_FORMAT, "step": step, "files": files})


def gather_entries(written: dict[str, dict[str, Any]], rt: Runtime) -> dict[str, dict[str, Any]]:
    """Every rank's entries of the files it wrote (hashed while writing; DCP's pickle left out,
    it goes), merged on every rank (collective)."""
    merged: dict[str, dict[str, Any]] = {}
    for part in rt.gather_object({k: v for k, v in written.items() if k != _DCP_PICKLE}):
        merged.update(part)
    return merged


def verify(path: Path, rt: Runtime | None = None) -> str | None:
    """What is wrong with the checkpoint at ``path`` (None: every file matches its manifest).

    With a distributed ``rt`` every rank calls it: rank 0 reads the manifest, each rank checks
    its share of the files, and every rank gets the same answer."""
    distributed = rt is not None and rt.distributed
    listed: dict[str, Any] | str | None = None
    if not distributed or rt.is_main:  # type: ignore[union-attr]
        listed = _listed_files(path)
    if distributed:
        listed = rt.broadcast_object(listed)  # type: ignore[union-attr]
    if isinstance(listed, str) or listed is None:
        return listed
    names = sorted(listed)
    share = names[rt.rank :: rt.world_size] if distributed else names  # type: ignore[union-attr]
    problem = next((p for p in (_file_problem(path, name, listed[name]) for name in share) if p), None)
    if distributed:
        problem = next((p for p in rt.gather_object(problem) if p), None)  # type: ignore[union-attr]
    return problem


def _listed_files(path: Path) -> dict[str, Any] | str:
    """The manifest's files of the checkpoint at ``path``, or what is wrong with the manifest."""
    manifest_path = path / MANIFEST_FILE
    if not manifest_path.is_file():
        return "no manifest.json (incomplete or not written by this version)"
    try:
        manifest = _read_json(manifest_path)
    except CorruptCheckpoint as exc:
        return str(exc)
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        return "manifest.json has an unknown format"
    files = manifest.get("files")
    if not isinstance(files, dict):
        return "manifest.json lists no files"
    if manifest.get("step") != _step_of(path):
        return f"manifest.json names step {manifest.get('step')!r}, not the folder's"
    present = {p.name for p in path.iterdir()} - {MANIFEST_FILE}
    extra = sorted(present - set(files))
    if extra:
        return f"files not in the manifest: {', '.join(extra[:5])}"
    return files


def _file_problem(path: Path, name: str, entry: Any) -> str | None:
    p = path / name
    if not isinstance(entry, dict) or not p.is_file():
        return f"{name} is missing"
    size = p.stat().st_size
    if size != entry.get("size"):
        return f"{name} has {size} bytes, the manifest says {entry.get('size')} (truncated?)"
    if sha256_of(p) != entry.get("sha256"):
        return f"{name} does not match its sha256 in the manifest"
    return None


# -- DCP's metadata as JSON (its own .metadata is a pickle) ----------------------------------


def _dtype(name: Any) -> torch.dtype:
    dtype = getattr(torch, name, None) if isinstance(name, str) else None
    if not isinstance(dtype, torch.dtype):
        raise CorruptCheckpoint(f"{METADATA_FILE}: unknown dtype {name!r}")
    return dtype


def _ints(value: Any) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise CorruptCheckpoint(f"{METADATA_FILE}: expected a list of integers, got {type(value).__name__}")
    return value


def _path_element(value: Any) -> str | int:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise CorruptCheckpoint(f"{METADATA_FILE}: bad state-dict path element {value!r}")
    return value


def metadata_to_json(md: Any) -> dict[str, Any]:
    """DCP's :class:`Metadata` as plain JSON data (tensor shapes, chunks, and where they are)."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    tensors, blobs = {}, []
    for fqn, item in md.state_dict_metadata.items():
        if isinstance(item, TensorStorageMetadata):
            if item.properties.layout != torch.strided:
                raise ValueError(f"{fqn}: only strided tensors are checkpointed")
            tensors[fqn] = {
                "dtype": str(item.properties.dtype).removeprefix("torch."),
                "size": list(item.size),
                "chunks": [{"offsets": list(c.offsets), "sizes": list(c.sizes)} for c in item.chunks],
            }
        else:
            blobs.append(fqn)
    storage = [
        {
            "fqn": idx.fqn,
            "offset": None if idx.offset is None else list(idx.offset),
            "index": idx.index,
            "file": info.relative_path,
            "start": info.offset,
            "length": info.length,
            "transforms": None if info.transform_descriptors is None else list(info.transform_descriptors),
        }
        for idx, info in (md.storage_data or {}).items()
    ]
    planner = {k: list(v) for k, v in (md.planner_data or {}).items()}
    return {"version": md.version, "tensors": tensors, "bytes": blobs, "planner_data": planner, "storage": storage}


def metadata_from_json(data: Any, folder: Path) -> Any:
    """Rebuild DCP's :class:`Metadata` from :func:`metadata_to_json`'s output, checking every type."""
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import (
        BytesStorageMetadata,
        ChunkStorageMetadata,
        Metadata,
        MetadataIndex,
        TensorProperties,
        TensorStorageMetadata,
    )

    try:
        state: dict[str, Any] = {}
        for fqn, t in data["tensors"].items():
            chunks = [ChunkStorageMetadata(torch.Size(_ints(c["offsets"])), torch.Size(_ints(c["sizes"]))) for c in t["chunks"]]
            state[str(fqn)] = TensorStorageMetadata(TensorProperties(dtype=_dtype(t["dtype"])), torch.Size(_ints(t["size"])), chunks)
        for fqn in data["bytes"]:
            state[str(fqn)] = BytesStorageMetadata()
        storage = {}
        for s in data["storage"]:
            name = s["file"]
            if not isinstance(name, str) or Path(name).name != name or not (folder / name).is_file():
                raise CorruptCheckpoint(f"{METADATA_FILE}: shard file {name!r} is not in the checkpoint")
            transforms = s["transforms"]
            if transforms is not None and not all(isinstance(x, str) for x in transforms):
                raise CorruptCheckpoint(f"{METADATA_FILE}: bad transform list")
            offset = None if s["offset"] is None else _ints(s["offset"])
            index = s["index"]
            if index is not None and (isinstance(index, bool) or not isinstance(index, int)):
                raise CorruptCheckpoint(f"{METADATA_FILE}: bad index {index!r}")
            start, length = _ints([s["start"], s["length"]])
            storage[MetadataIndex(str(s["fqn"]), offset, index)] = _StorageInfo(name, start, length, transforms)
        planner = {str(k): tuple(_path_element(e) for e in v) for k, v in data["planner_data"].items()}
        version = data["version"]
    except (KeyError, TypeError, AttributeError) as exc:
        raise CorruptCheckpoint(f"{METADATA_FILE}: malformed ({type(exc).__name__}: {exc})") from None
    return Metadata(state_dict_metadata=state, planner_data=planner, storage_data=storage,
                    version=version if isinstance(version, str) else None)


def _json_reader(path: Path) -> Any:
    """DCP's file reader, but the index comes from ``metadata.json`` (DCP's pickle is never read)."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import StorageMeta

    class JsonMetadataReader(FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            md = metadata_from_json(_read_json(path / METADATA_FILE), path)
            md.storage_meta = StorageMeta(load_id=self.load_id)
            return md

    return JsonMetadataReader(str(path))


# -- sharded model and optimizer state -------------------------------------------------------
# Model and optimizer go through torch.distributed.checkpoint (DCP) on one process and on many:
# each rank writes only what it holds (FSDP2 shards, ZeRO-1's optimizer partition; replicated
# tensors once), and DCP reshards on load, so a checkpoint written by two workers resumes on
# one and the reverse. The optimizer state is flattened to per-parameter keys (param-group
# hyperparameters included), which is what makes ZeRO-1's per-rank partitions mergeable.


def _distributed() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def _dcp_optimizer(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """The optimizer DCP can name: ZeroRedundancyOptimizer's local one (its rank's partition)."""
    zero = sys.modules.get("torch.distributed.optim")  # not imported: no optimizer can be one (0.3 s saved)
    return optimizer.optim if zero is not None and isinstance(optimizer, zero.ZeroRedundancyOptimizer) else optimizer


def _dcp_options() -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(flatten_optimizer_state_dict=True)


def _weights_only_planner() -> Any:
    """DCP's load planner, but non-tensor entries are checked by ``torch.load(weights_only=True)``
    first (DCP itself unpickles them with ``weights_only=False``)."""
    from torch.distributed.checkpoint import DefaultLoadPlanner

    class WeightsOnlyLoadPlanner(DefaultLoadPlanner):
        def load_bytes(self, read_item: Any, value: Any) -> None:
            torch.load(value, weights_only=True)  # raises on anything but plain data
            value.seek(0)
            super().load_bytes(read_item, value)

    return WeightsOnlyLoadPlanner()


def _hashing_writer(path: Path, entries: dict[str, dict[str, Any]]) -> Any:
    """DCP's file writer, but every file goes through a :class:`HashingFile` and its entry lands in ``entries``."""
    from torch.distributed.checkpoint import FileSystemWriter
    from torch.distributed.checkpoint.filesystem import FileSystem

    class HashingFileSystem(FileSystem):
        @contextmanager
        def create_stream(self, path: str | os.PathLike, mode: str) -> Iterator[Any]:
            if mode != "wb":
                with super().create_stream(path, mode) as stream:
                    yield stream
                return
            target = Path(path)
            with HashingFile(target) as fh:
                yield fh  # DCP fsyncs it through fileno() before it closes
            entries[target.name] = fh.entry()

    writer = FileSystemWriter(str(path))
    writer.fs = HashingFileSystem()
    return writer


def save_sharded(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 entries: dict[str, dict[str, Any]] | None = None) -> Any:
    """Every rank writes its part of the model and optimizer state into ``path`` (collective);
    the size and sha256 of each file this rank wrote, hashed as it was written, go in ``entries``.

    Returns DCP's global metadata (the same on every rank)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

    opt = _dcp_optimizer(optimizer)
    if opt.state:
        msd, osd = get_state_dict(model, opt, options=_dcp_options())
        state: dict[str, Any] = {"model": msd, "optim": osd}
    else:
        # Before the first step: get_state_dict would create the state by an lr=0 step, which
        # would advance Adam's step count and change the run. Save the model alone.
        state = {"model": get_model_state_dict(model, options=_dcp_options())}
    with warnings.catch_warnings():  # DCP warns on every single-process save, by design here
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        return dcp.save(state, storage_writer=_hashing_writer(path, {} if entries is None else entries),
                        no_dist=not _distributed())


def load_sharded(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Every rank reads what it holds from a DCP checkpoint of any world size (collective)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_state_dict,
        set_model_state_dict,
        set_state_dict,
    )

    reader = _json_reader(path)
    has_optim = any(k.startswith("optim.") for k in reader.read_metadata().state_dict_metadata)
    opt = _dcp_optimizer(optimizer)
    if has_optim:
        msd, osd = get_state_dict(model, opt, options=_dcp_options())
        state: dict[str, Any] = {"model": msd, "optim": osd}
    else:
        state = {"model": get_model_state_dict(model, options=_dcp_options())}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(state, storage_reader=reader, planner=_weights_only_planner(), no_dist=not _distributed())
    if has_optim:
        set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"], options=_dcp_options())
        for group in opt.param_groups:  # the kernel is this process's choice, not the writer's
            group["fused"], group["foreach"] = opt.defaults.get("fused"), opt.defaults.get("foreach")
        place_steps(opt)
    else:
        set_model_state_dict(model, state["model"], options=_dcp_options())
        opt.state.clear()  # back to a fresh optimizer, as the checkpoint was taken before step 1


def reset_optimizer(optimizer: torch.optim.Optimizer) -> None:
    """Back to a fresh optimizer: no state (ZeRO-1's shard of it included)."""
    _dcp_optimizer(optimizer).state.clear()


def place_steps(optimizer: torch.optim.Optimizer) -> None:
    """Put each parameter's Adam ``step`` where this optimizer's kernel reads it: on the
    parameter's device for the fused or capturable kernels, on the CPU otherwise.

    ``load_state_dict`` places it by the *loaded* group's flags, the writer's: a fused CUDA run's
    checkpoint resumed by a per-tensor or foreach AdamW would keep ``step`` on the GPU, and that
    kernel reads it with ``.item()``, one device sync per parameter per step."""
    for group in optimizer.param_groups:
        on_device = bool(group.get("fused") or group.get("capturable"))
        for p in group["params"]:
            state = optimizer.state.get(p)
            step = state.get("step") if state else None
            if isinstance(step, torch.Tensor):
                device = _local(p).device if on_device else torch.device("cpu")
                state["step"] = step.to(device=device, dtype=torch.float32)


def load_weights(path: str | Path, model: torch.nn.Module) -> None:
    """Read only the model's weights from the checkpoint at ``path`` into ``model``, on one process
    (whatever world size wrote it); optimizer, scaler and generators are not touched (export).

    Does not verify the manifest; raises :class:`CorruptCheckpoint` when the weights do not load."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

    path = Path(path)
    try:
        state = {"model": get_model_state_dict(model, options=_dcp_options())}
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            dcp.load(state, storage_reader=_json_reader(path), planner=_weights_only_planner(), no_dist=True)
        set_model_state_dict(model, state["model"], options=_dcp_options())
    except CorruptCheckpoint:
        raise
    except (Exception, CheckpointException) as exc:  # noqa: BLE001 - see load()
        raise CorruptCheckpoint(f"cannot load: {_reason(exc)}") from None

def _cpu_rng(device: torch.device) -> dict[str, Any]:
    """:func:`rng_state` with every tensor on the CPU (what is gathered and written)."""
    return {k: v.cpu() for k, v in rng_state(device).items()}


def save(
    run_dir: str | Path,
    step: int,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: Any,
    meta: dict[str, Any],
    keep: int,
    rt: Runtime,
    protect: Collection[int] = (),
) -> Path:
    """Write the checkpoint of ``step`` atomically and prune all but the last ``keep`` and the
    steps in ``protect``.

    ``model`` is the unwrapped model. Model and optimizer are written by every rank through
    :func:`save_sharded`; rank 0 then adds ``state.pt`` (scaler, trainer state, RNG), the JSON
    index and the manifest, and renames the folder into place.
    """
    root = checkpoint_root(run_dir)
    final = step_folder(run_dir, step)
    # One temporary folder for all ranks (rank 0's pid names it).
    tmp = root / f".{final.name}.tmp{rt.broadcast_object(os.getpid())}"
    if rt.is_main:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    rt.barrier()
    written: dict[str, dict[str, Any]] = {}
    metadata = save_sharded(tmp, model, optimizer, written)
    rngs = rt.gather_object(_cpu_rng(rt.device))
    entries = gather_entries(written, rt)  # the shards every rank wrote, hashed as they were written
    if rt.is_main:
        entries[METADATA_FILE] = _write_json_atomically(tmp / METADATA_FILE, metadata_to_json(metadata))
        (tmp / _DCP_PICKLE).unlink(missing_ok=True)
        state = {
            "scaler": scaler.state_dict(),
            "meta": {**meta, "step": step, "rng": {"ranks": rngs}},
        }
        with hashed_writing(tmp / STATE_FILE, entries) as fh:
            torch.save(state, fh)
        write_manifest(tmp, step, known=entries)
        if final.exists():  # the same step again (after a rollback): replace it
            old = root / f".{final.name}.old{os.getpid()}"
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
        for stale in checkpoints(run_dir)[:-keep]:
            if _step_of(stale) not in protect:
                shutil.rmtree(stale, ignore_errors=True)
    rt.barrier()
    return final


def load(
    path: str | Path,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: Any,
    rt: Runtime,
) -> dict[str, Any]:
    """Restore model, optimizer, scaler and RNG from the checkpoint at ``path``; return its meta.

    Does not verify the manifest (:func:`load_latest` does); raises :class:`CorruptCheckpoint`
    when a file cannot be read as what it should be."""
    path = Path(path)
    try:
        state = torch.load(path / STATE_FILE, map_location="cpu", weights_only=True)
        scaler_state, meta = state["scaler"], state["meta"]
        if not isinstance(meta, dict) or not isinstance(meta.get("step"), int):
            raise CorruptCheckpoint(f"{STATE_FILE} holds no trainer state")
        load_sharded(path, model, optimizer)
        if scaler_state:
            scaler.load_state_dict(scaler_state)
    except CorruptCheckpoint:
        raise
    # torch raises many types for a bad file; distributed checkpoint's CheckpointException is a BaseException
    except (Exception, CheckpointException) as exc:  # noqa: BLE001
        raise CorruptCheckpoint(f"cannot load: {_reason(exc)}") from None
    if "rng" in meta:
        problem = restore_rng(meta["rng"], rt)
        if problem is not None:
            print(f"checkpoint {path} (rank {rt.rank}): {problem}; continuing with the seeded generators",
                  file=sys.stderr)
    return meta


def _reason(exc: BaseException) -> str:
    """One line saying why a checkpoint file did not load, without torch's advice to load it unsafely."""
    text = " ".join(str(exc).split())
    if "weights_only" in text or "Unpickler" in text:
        return (f"{type(exc).__name__}: it holds Python objects beyond tensors and plain data, which are never "
                "loaded (loading them could run code)")
    return f"{type(exc).__name__}: {text[:300]}"


def _set_aside(path: Path) -> None:
    """Move a corrupt checkpoint out of the list (kept, hidden, for inspection)."""
    aside = path.with_name(f".{path.name}.corrupt")
    shutil.rmtree(aside, ignore_errors=True)
    os.replace(path, aside)


def load_latest(
    run_dir: str | Path,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: Any,
    rt: Runtime,
    on_corrupt: Callable[[Path, str], None],
    trusted: Collection[str] = (),
) -> tuple[Path, dict[str, Any]] | None:
    """Load the newest checkpoint that verifies and loads (collective); None if there is none.

    Each checkpoint that fails is reported to ``on_corrupt(path, problem)`` (on every rank),
    announced on stderr and set aside, and the one before it is tried. A checkpoint in
    ``trusted`` (paths this process wrote or verified, whose hashes it computed) is loaded
    without hashing its files again. When none loads, the optimizer and scaler are put back as
    they were, but the model's weights may hold part of a failed load: the caller draws the seed's
    weights again (the trainer does), rather than every rank first copying its whole part of the
    model to the host on every resume and rollback."""
    candidates = rt.broadcast_object([str(p) for p in checkpoints(run_dir)] if rt.is_main else None)
    before = _Snapshot(optimizer, scaler) if candidates else None
    for name in reversed(candidates):
        path = Path(name)
        problem = None if name in trusted else verify(path, rt)
        meta: dict[str, Any] | None = None
        if problem is None:
            try:
                meta = load(path, model=model, optimizer=optimizer, scaler=scaler, rt=rt)
            except CorruptCheckpoint as exc:
                problem = str(exc)
            failed = rt.sum(torch.tensor(0.0 if problem is None else 1.0, device=rt.device))
            if problem is None and float(failed) > 0:
                problem = "another rank could not load it"
        if problem is None and meta is not None:
            return path, meta
        assert problem is not None
        on_corrupt(path, problem)
        if rt.is_main:
            print(f"checkpoint {path}: {problem}; set aside, falling back to the previous one", file=sys.stderr)
            _set_aside(path)
        rt.barrier()
    if before is not None:
        before.restore()
    return None


class _Snapshot:
    """The optimizer's freshness and the scaler's state, to put back after loads that all failed."""

    def __init__(self, optimizer: torch.optim.Optimizer, scaler: Any) -> None:
        # A fresh optimizer goes back to empty; one with state (a rollback) has nothing to return
        # to when no checkpoint loads, and its run starts again from the seed's weights.
        self.optimizer = _dcp_optimizer(optimizer)
        self.fresh_optimizer = not self.optimizer.state
        self.scaler, self.scaler_state = scaler, scaler.state_dict()

    def restore(self) -> None:
        if self.fresh_optimizer:
            self.optimizer.state.clear()
        if self.scaler_state:
            self.scaler.load_state_dict(self.scaler_state)


def _local(t: torch.Tensor) -> torch.Tensor:
    """This rank's part of ``t`` (a DTensor's local shard; a plain tensor itself)."""
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t

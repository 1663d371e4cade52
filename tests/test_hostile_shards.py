"""Hostile token shards: crafted headers, wrong dtypes and sizes, links, and files replaced between
plans. Every shard either reads back as exactly its bytes (the fingerprint a fresh cache computes)
or is refused in one SpecError line naming it; never another exception, never a stale digest."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import yaml

from cli_run import run_main
from scaling.errors import SpecError
from scaling.trainer.data import corpus, shards
from scaling.trainer.spec import RunSpec

VOCAB = 256
TINY = {"model": {"n_layer": 1, "d_model": 32, "n_head": 2, "context": 32, "vocab_size": VOCAB},
        "tokens": 32 * 8 * 4, "batch_tokens": 32 * 8, "optimizer": {"lr": 3e-3}, "evals": {"next_line": False}}


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCALING_CACHE_DIR", str(tmp_path / "cache"))
    corpus._load.cache_clear()


def _npy(header: str, body: bytes = b"\x01\x00" * 50) -> bytes:
    """A version-1.0 .npy file with ``header`` as its header text (padded as numpy pads)."""
    raw = header.encode("latin1")
    raw += b" " * (-(len(raw) + 11) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(raw).to_bytes(2, "little") + raw + body


def _key(path: Path | list[str], **data: object) -> str:
    """The run key a plan gets for the corpus at ``path`` (a fresh read of the per-process cache)."""
    corpus._load.cache_clear()
    named = path if isinstance(path, list) else str(path)
    spec = RunSpec.from_dict({**TINY, "data": {"source": "tokens", "path": named, **data}})
    return corpus.resolve_data(spec).key


def _refused_in_one_line(action: Callable[[], object], *needles: str) -> str:
    with pytest.raises(SpecError) as info:
        action()
    text = str(info.value)
    assert "\n" not in text and " at 0x" not in text and "<ast." not in text, text
    for needle in needles:
        assert needle in text, text
    return text


GOOD_NPY = "{'descr': '<u2', 'fortran_order': False, 'shape': (50,), }"
NPY_HEADERS = [
    "{'descr': '<u2', 'fortran_order': False, 'shape': (10,",  # an unbalanced bracket
    "{'descr': \"<u2', 'fortran_order': False, 'shape': (50,), }",  # an unbalanced quote
    "{'descr': '<u2', 'fortran_order': False, 'shape': (10**30,), }",  # an expression
    "{'descr': '<u2', 'fortran_order': False, 'shape': (" + "9" * 40 + ",), }",  # a huge shape
    "{'descr': '<u2', 'fortran_order': False, 'shape': (-50,), }",
    "{'descr': '<u2', 'fortran_order': False, 'shape': (5, 10), }",
    "{'descr': '<u2', 'fortran_order': False, 'shape': " + "(" * 400 + ")" * 400 + ", }",
    "{'descr': [('a', '<u2')], 'fortran_order': False, 'shape': (50,), }",
    "{'descr': '|O', 'fortran_order': False, 'shape': (50,), }",
    "{'descr': '>u2', 'fortran_order': False, 'shape': (50,), }",
    "{'descr': '<f2', 'fortran_order': False, 'shape': (50,), }",
    "{'descr': '<u2', 'fortran_order': 1, 'shape': (50,), }",
    "{'descr': '<u2', 'fortran_order': False, 'shape': (50,), 'extra': __import__('os'), }",
    "[1, 2, 3]",
    "",
]


@pytest.mark.parametrize("header", NPY_HEADERS)
def test_a_crafted_npy_header_is_one_line(header: str, tmp_path: Path) -> None:
    path = tmp_path / "shard.npy"
    path.write_bytes(_npy(header))
    _refused_in_one_line(lambda: _key(path), str(path))


def test_npy_headers_mutated_at_random_read_or_are_refused_in_one_line(tmp_path: Path) -> None:
    """200 seeded byte mutations of a good header: each reads back as its bytes or is one line."""
    good = _npy(GOOD_NPY)
    rng = random.Random(52)
    for i in range(200):
        raw = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(6, 128)  # the version, length and header text
            raw[at] = rng.choice([rng.randrange(256), *b"()[]{}'\",:*"])
        path = tmp_path / f"m{i}.npy"
        path.write_bytes(bytes(raw))
        try:
            found = shards.read_shard(path, "uint16", None, "data.path")
        except SpecError as exc:
            assert "\n" not in str(exc) and " at 0x" not in str(exc) and str(path) in str(exc), str(exc)
            continue
        assert found.offset + found.n_tokens * 2 == len(raw) and found.n_tokens >= 1


@pytest.mark.parametrize("case", ["empty", "one byte", "odd length", "dtype", "llmc count", "llmc magic",
                                  "llmc short", "vocab"])
def test_a_bad_size_or_dtype_is_one_line(case: str, tmp_path: Path) -> None:
    path = tmp_path / "shard.bin"
    good = np.arange(100, dtype=np.uint16)
    header = np.zeros(256, dtype="<i4")
    header[:3] = (20240520, 1, 100)
    raw, dtype, needle = {
        "empty": (b"", "uint16", "0 tokens"),
        "one byte": (b"\x01", "uint16", "whole number"),
        "odd length": (good.tobytes() + b"\x01", "uint16", "whole number"),
        "dtype": (header.tobytes() + good.tobytes(), "uint32", "data.dtype is uint32"),
        "llmc count": (header.tobytes() + good[:99].tobytes(), "uint16", "announces 100 tokens"),
        "llmc magic": (np.array([20240520, 9], "<i4").tobytes() + b"\0" * 1016 + good.tobytes(), "uint16",
                       "wrong llmc header"),
        "llmc short": (np.array([20240520, 1, 3], "<i4").tobytes(), "uint16", "shorter than"),
        "vocab": ((good + VOCAB).tobytes(), "uint16", f"too small for token id {VOCAB + 99}"),
    }[case]
    path.write_bytes(raw)
    _refused_in_one_line(lambda: _key(path, dtype=dtype), str(path), needle)


@pytest.mark.parametrize("case", ["dangling", "loop", "folder", "twice"])
def test_a_bad_link_is_one_line(case: str, tmp_path: Path) -> None:
    target = tmp_path / "real.bin"
    np.arange(100, dtype=np.uint16).tofile(target)
    link = tmp_path / "link.bin"
    if case == "dangling":
        link.symlink_to(tmp_path / "gone.bin")
    elif case == "loop":
        link.symlink_to(tmp_path / "loop.bin")
        (tmp_path / "loop.bin").symlink_to(link)
    elif case == "folder":
        link.symlink_to(tmp_path)
    else:
        link.symlink_to(target)
    path: Path | list[str] = [str(target), str(link)] if case == "twice" else link
    _refused_in_one_line(lambda: _key(path), "data.path")


def _same_size_and_mtime(path: Path, like: Path) -> None:
    stat = like.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


@pytest.mark.parametrize("how", ["symlink swapped", "renamed over", "rewritten in place"])
def test_a_shard_replaced_between_plans_with_its_size_and_mtime_is_read_again(how: str, tmp_path: Path) -> None:
    """The digest cache keys on the file the name reaches (resolved path, inode, ctime), so a swapped
    or rewritten shard with the same size and mtime is hashed again: out-of-vocabulary ids are
    refused, and in-range ids give another run key (a run on A never counts as done for B)."""
    a, b = tmp_path / "A.dat", tmp_path / "B.dat"
    np.arange(1000, dtype=np.uint16).__mod__(VOCAB).astype(np.uint16).tofile(a)
    shard = tmp_path / "shard.bin"
    if how == "symlink swapped":
        shard.symlink_to(a)
    else:
        shard.write_bytes(a.read_bytes())
    first = _key(shard)
    for ids, out_of_range in ((np.arange(1000) % 300, True), ((np.arange(1000) + 1) % VOCAB, False)):
        b.write_bytes(ids.astype(np.uint16).tobytes())
        if how == "symlink swapped":
            _same_size_and_mtime(b, a)
            shard.unlink()
            shard.symlink_to(b)
        elif how == "renamed over":
            spare = tmp_path / "spare.bin"
            spare.write_bytes(b.read_bytes())
            _same_size_and_mtime(spare, shard)
            os.replace(spare, shard)
        else:
            stat = shard.stat()
            shard.write_bytes(b.read_bytes())
            os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        if out_of_range:
            _refused_in_one_line(lambda: _key(shard), f"too small for token id 299 in {shard}")
        else:
            assert _key(shard) != first


def test_a_crafted_npy_header_through_scaling_plan_is_exit_2_and_one_line(tmp_path: Path) -> None:
    path = tmp_path / "shard.npy"
    path.write_bytes(_npy(NPY_HEADERS[0]))
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({
        "name": "hostile", "data": {"source": "tokens", "path": str(path)},
        "model": {"aspect_ratio": 16, "head_size": 16, "context": 64, "vocab_size": VOCAB},
        "train": {"precision": "fp32", "batch_tokens": 2048, "optimizer": {"lr": 3e-3}},
        "resources": {"workers": 1}, "grid": [{"models": [6000], "compute": [1e12]}]}))
    out = run_main("plan", str(plan))
    assert out.code == 2 and out.err.count("\n") == 1 and "Traceback" not in out.err, out.err
    assert f"{path} has a wrong npy header (its brackets or quotes do not close)" in out.err

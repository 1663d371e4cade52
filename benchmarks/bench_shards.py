"""Hashing token shards: the digest pass (`scaling.trainer.data.digests`) against plain sha256.

Writes ``--gib`` GiB of random uint16 tokens as ``--shards`` raw shards in a temporary folder,
then times, alternately over ``--rounds`` rounds (so a drift in machine load hits both alike):

- ``hashlib.sha256`` over every shard, one after the other, in one thread (the floor);
- ``shard_digests`` with an empty cache (sha256 and the largest token in one read, several
  shards at once);
- ``shard_digests`` again (every digest from the cache).

The files stay in the page cache, so this measures the CPU's side (what disk speed needs to be
matched by); target: the digest pass at least as fast as plain sha256 (ratio >= 1.0 with one shard,
higher with several shards on several cores).

    python benchmarks/bench_shards.py [--gib 1] [--shards 4] [--rounds 3]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import numpy as np

    work = Path(tempfile.mkdtemp(prefix="bench-shards-"))
    os.environ["SCALING_CACHE_DIR"] = str(work / "cache")
    from scaling.trainer.data.digests import digests_root, shard_digests
    from scaling.trainer.data.shards import read_shard

    try:
        rng = np.random.default_rng(0)
        per = int(args.gib * 2**30 / 2 / args.shards)
        paths = []
        for i in range(args.shards):
            path = work / f"shard_{i:03d}.bin"
            rng.integers(0, 50257, size=per, dtype=np.uint16).tofile(path)
            paths.append(path)
        shards = [read_shard(p, "uint16", None, "bench") for p in paths]
        total = sum(s.size for s in shards)
        plain, cold, warm = [], [], []
        for _ in range(args.rounds):
            started = time.perf_counter()
            for path in paths:
                digest = hashlib.sha256()
                with open(path, "rb") as fh:
                    while block := fh.read(1 << 24):
                        digest.update(block)
            plain.append(time.perf_counter() - started)
            shutil.rmtree(digests_root(), ignore_errors=True)
            started = time.perf_counter()
            shard_digests(shards, progress=False)
            cold.append(time.perf_counter() - started)
            started = time.perf_counter()
            shard_digests(shards, progress=False)
            warm.append(time.perf_counter() - started)
        mb = total / 1e6
        out = {
            "bytes": total, "shards": args.shards, "cpus": os.cpu_count(),
            "sha256_MB_per_s": round(mb / statistics.median(plain)),
            "digest_pass_MB_per_s": round(mb / statistics.median(cold)),
            "ratio": round(statistics.median(plain) / statistics.median(cold), 2),
            "cached_ms": round(1e3 * statistics.median(warm), 2),
        }
        print(json.dumps(out))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

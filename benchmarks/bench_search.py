"""Exact search's memory on a million passages: retrieval/search.py's chunked search against the
plain way (every passage vector in one matrix, every score in one matrix, argsort), in
the same run, each in its own process; peak RSS of each (benchmarks/measure.py), the
time, and whether the top 100 agree.

Vectors are seeded random normals, normalised (what an encoder's output costs is the
same whatever the values): --passages x --dim float32, produced chunk by chunk for ours
(as an encoder would hand them over) and all at once for the plain way.

Run:   .venv/bin/python benchmarks/bench_search.py            (~1 minute on 2 cores, ~4 GB)
"""
from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))


def vectors(rng_seed: int, rows: int, dim: int):
    import numpy as np

    v = np.random.default_rng(rng_seed).standard_normal((rows, dim), dtype=np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def worker(args) -> None:
    import numpy as np

    queries = vectors(0, args.queries, args.dim)
    chunk = 16_384
    start = time.perf_counter()
    if args.worker == "ours":
        from bertmodel.retrieval.search import exact_search, tie_ranks

        ids = [f"p{i:07d}" for i in range(args.passages)]
        chunks = (vectors(1 + i // chunk, min(chunk, args.passages - i), args.dim)
                  for i in range(0, args.passages, chunk))
        result = exact_search(queries, chunks, tie_ranks(ids), k=100)
        top = result.indices
    else:
        passages = np.concatenate([vectors(1 + i // chunk, min(chunk, args.passages - i), args.dim)
                                   for i in range(0, args.passages, chunk)])
        scores = queries.astype(np.float64) @ passages.astype(np.float64).T
        top = np.argsort(-scores.astype(np.float32), axis=1, kind="stable")[:, :100]
    seconds = time.perf_counter() - start
    np.save(args.out, top)
    print(json.dumps({"seconds": seconds}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--worker", choices=["ours", "plain"], help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    import tempfile

    import numpy as np

    from measure import run_measured

    root = pathlib.Path(tempfile.mkdtemp(prefix="bench-search-"))
    found = {}
    for name in ("ours", "plain"):
        out = root / f"{name}.npy"
        command = [sys.executable, __file__, "--worker", name, "--out", str(out), "--passages", str(args.passages),
                   "--queries", str(args.queries), "--dim", str(args.dim)]
        wall, peak, output = run_measured(command)
        search = json.loads(output.strip().splitlines()[-1])["seconds"]
        found[name] = (peak, search, np.load(out))
        print(f"{name}: peak RSS {peak / 2**20:,.0f} MiB, search {search:.1f}s (process {wall:.1f}s)", flush=True)
    (peak_ours, time_ours, top_ours), (peak_plain, time_plain, top_plain) = found["ours"], found["plain"]
    same = float(np.mean([len(set(a) & set(b)) / 100 for a, b in zip(top_ours.tolist(), top_plain.tolist())]))
    print(f"{args.passages:,} passages x {args.dim} dims, {args.queries} queries, top 100: memory ratio ours/plain "
          f"{peak_ours / peak_plain:.3f}, search time ratio {time_ours / time_plain:.2f}, top-100 overlap {same:.4f}")


if __name__ == "__main__":
    main()

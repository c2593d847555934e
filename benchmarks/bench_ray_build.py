"""build-shards on Ray against the local executor, measured in the same run.

    python benchmarks/bench_ray_build.py [--mb 20] [--dupe 1] [--time-only]

On the same corpus (>= 20 MB of real English from ../shared/data), the same options and
an empty token cache each time: (a) the time of `--executor ray` (a local Ray started
for the run, startup included) against `--executor local`, target <= 1.25x on a 2-core
machine where Ray only adds overhead; (b) the peak RSS of the whole process tree
(driver, Ray's own processes and workers, summed) for 1x and 4x the corpus, target
<= 1.15x; (c) the driver process's own peak RSS, 1x against 4x, target <= 1.1x; (d)
where Ray's fixed cost goes: starting a local Ray, a fresh worker's first task, its
imports and tokenizer, a task's round trip, stopping Ray. `--time-only` runs (a) alone
(at a large --mb, where the fixed cost amortises, without the 4x builds).
"""
from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_corpus import shared_data_or_exit, write_corpus  # noqa: E402
from measure import _rss_bytes, tree_rss  # noqa: E402

BERTPREP = str(pathlib.Path(sys.executable).with_name("bertprep"))
MIB = 1 << 20


def build(corpus, vocab, out, cache, executor: str, dupe: int) -> tuple[float, int, int, str]:
    """(seconds, peak tree RSS, peak driver RSS, output) of one cold build."""
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
    cmd = [BERTPREP, "build-shards", str(corpus), "--tokenizer", str(vocab), "--out", str(out),
           "--dupe-factor", str(dupe), "--cache-dir", str(cache), "--executor", executor, "--quiet"]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "RAY_ADDRESS": ""})
    tree_peak = driver_peak = 0
    while proc.poll() is None:
        tree_peak = max(tree_peak, tree_rss(proc.pid))
        driver_peak = max(driver_peak, _rss_bytes(proc.pid))
        time.sleep(0.02)
    seconds = time.perf_counter() - start
    output = proc.stdout.read().decode(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{output[-2000:]}")
    return seconds, tree_peak, driver_peak, output


PER_TASK = """
import json, sys, time
import bertprep.builder.run as build
from bertprep.corpus.spec import CorpusSpec
times = {}
def timed(fn):
    def run(descriptor):
        start = time.perf_counter()
        result = fn(descriptor)
        times.setdefault(fn.__name__, []).append(time.perf_counter() - start)
        return result
    return run
for name in ("pair_partition", "scatter_partition", "gather_shard"):
    setattr(build, name, timed(getattr(build, name)))
corpus, vocab, out, cache, dupe = sys.argv[1:]
config = build.BuildConfig(workers=1, dupe_factor=int(dupe), cache_dir=cache)
result = build.build_shards(CorpusSpec(paths=(corpus,)), vocab, out, config, progress=False)
print(json.dumps({"times": times, "partition_bytes": config.partition_bytes,
                  "shard_rows": [s["rows"] for s in result.manifest["shards"]],
                  "shard_bytes": [s["bytes"] for s in result.manifest["shards"]]}))
"""


def per_task(corpus, vocab, out, cache, dupe: int) -> dict:
    """Seconds per task of each kind, one worker, in process."""
    import json

    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
    done = subprocess.run([sys.executable, "-c", PER_TASK, str(corpus), str(vocab), str(out), str(cache), str(dupe)],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def joined_cluster_seconds(corpus, vocab, out, cache, dupe: int) -> float:
    """One build joining a Ray head started beforehand (`ray start --head --block`), as on
    a real cluster where Ray is already up: Ray's startup is not part of the build."""
    ray_bin = str(pathlib.Path(sys.executable).with_name("ray"))
    # Ray >= 2.5x authenticates clients with a token by default; this head and its one
    # client are on one machine for the length of a measurement, so without.
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_ADDRESS": ""}
    head = subprocess.Popen([ray_bin, "start", "--head", "--block", "--port", "6391", "--num-cpus", str(os.cpu_count()),
                             "--include-dashboard", "false"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, env=env)
    try:
        time.sleep(8)  # the head's processes up
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)
        cmd = [BERTPREP, "build-shards", str(corpus), "--tokenizer", str(vocab), "--out", str(out), "--dupe-factor",
               str(dupe), "--cache-dir", str(cache), "--executor", "ray", "--ray-address", "127.0.0.1:6391", "--quiet"]
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, env=env)
        return time.perf_counter() - start
    finally:
        os.killpg(head.pid, 15)  # `ray start --block` stops its processes on SIGTERM
        head.wait(timeout=60)


FIXED_COSTS = """
import json, os, statistics, sys, time
import ray
from bertprep.executors.ray import shutdown_local_ray
vocab, cpus = sys.argv[1], int(sys.argv[2])
def first(): return os.getpid()
def warm(path):
    start = time.perf_counter()
    import bertprep.builder.tasks
    from bertprep.tokenizer.encoding import SentenceEncoder
    from bertprep.tokenizer import load_tokenizer
    imported = time.perf_counter()
    SentenceEncoder(load_tokenizer(path), "auto")
    return imported - start, time.perf_counter() - imported
def noop(x): return x
times = {}
start = time.perf_counter()
ray.init(address="local", num_cpus=cpus, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
times["ray.init (a local Ray started)"] = time.perf_counter() - start
start = time.perf_counter()
ray.get([ray.remote(first).remote() for _ in range(cpus)])
times["first task on each fresh worker"] = time.perf_counter() - start
imports, tokenizer = zip(*ray.get([ray.remote(warm).remote(vocab) for _ in range(cpus)]))
times["worker: import bertprep.builder.tasks"] = max(imports)
times["worker: load tokenizer + encoder"] = max(tokenizer)
remote_noop, rounds = ray.remote(noop), []
for _ in range(30):
    start = time.perf_counter()
    ray.get(remote_noop.remote(b"x" * 1000))
    rounds.append(time.perf_counter() - start)
times["one task round trip (median of 30)"] = statistics.median(rounds)
start = time.perf_counter()
shutdown_local_ray(ray)
times["stopping it (the build's way: monitor killed, then ray.shutdown)"] = time.perf_counter() - start
print(json.dumps(times))
"""


def fixed_costs(vocab) -> dict:
    """Seconds of each part of Ray's fixed cost, measured alone in a fresh process."""
    import json

    done = subprocess.run([sys.executable, "-c", FIXED_COSTS, str(vocab), str(os.cpu_count())], capture_output=True,
                          text=True, check=True, env={**os.environ, "RAY_ADDRESS": ""})
    return json.loads(done.stdout.strip().splitlines()[-1])


def time_only(small, mb: float, vocab, tmp: pathlib.Path, dupe: int) -> None:
    """Ray against local time on one corpus, each run twice, alternating."""
    runs = {"local": [], "ray": []}
    for _ in range(2):
        for executor in ("local", "ray"):
            seconds, _, _, _ = build(small, vocab, tmp / f"out-{executor}", tmp / "cache", executor, dupe)
            runs[executor].append(seconds)
            print(f"{executor:5}: {seconds:6.1f} s ({mb / seconds:.2f} MB/s)")
    same = shard_digests(tmp / "out-local") == shard_digests(tmp / "out-ray")
    tl, tr = min(runs["local"]), min(runs["ray"])
    print(f"ray and local shards identical: {same}")
    print(f"time ray/local on {mb:.0f} MB (best of 2 each): {tr / tl:.2f}x with a local Ray started for the run "
          "(target <= 1.25x)")
    joined = joined_cluster_seconds(small, vocab, tmp / "out-joined", tmp / "cache", dupe)
    print(f"time ray/local on {mb:.0f} MB, joining a running Ray (one run): {joined:.1f} s, {joined / tl:.2f}x")


def shard_digests(out: pathlib.Path) -> dict[str, str]:
    import json

    return {s["name"]: s["sha256"] for s in json.loads((out / "manifest.json").read_text())["shards"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=20.0, help="corpus size in MB (and 4x for the memory check)")
    parser.add_argument("--dupe", type=int, default=1, help="--dupe-factor of every build")
    parser.add_argument("--time-only", action="store_true", help="only Ray against local time at --mb (no 4x builds)")
    args = parser.parse_args()
    data = shared_data_or_exit()
    vocab = data / "bert-base-uncased-vocab.txt"
    print(f"load average at the start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
        tmp = pathlib.Path(tmp)
        small, large = tmp / "corpus.txt", tmp / "corpus4x.txt"
        mb = write_corpus(small, int(args.mb * 1e6)) / 1e6
        if args.time_only:
            print(f"corpus: {mb:.1f} MB of real English, dupe factor {args.dupe}, {os.cpu_count()} CPUs, cold token cache")
            time_only(small, mb, vocab, tmp, args.dupe)
            print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
            return
        write_corpus(large, int(4 * args.mb * 1e6))
        print(f"corpus: {mb:.1f} MB and {4 * mb:.1f} MB of real English, dupe factor {args.dupe}, "
              f"{os.cpu_count()} CPUs, cold token cache each build")
        figures = {}
        for executor, corpus, label in [("local", small, "1x"), ("ray", small, "1x"), ("ray", large, "4x"),
                                        ("local", large, "4x")]:
            seconds, tree, driver, output = build(corpus, vocab, tmp / f"out-{executor}-{label}", tmp / "cache",
                                                  executor, args.dupe)
            figures[executor, label] = (seconds, tree, driver)
            size = mb * (4 if label == "4x" else 1)
            print(f"{executor:5} {label}: {seconds:6.1f} s ({size / seconds:.2f} MB/s), peak RSS tree {tree / MIB:,.0f} MiB, "
                  f"driver {driver / MIB:,.0f} MiB")
        same = shard_digests(tmp / "out-local-1x") == shard_digests(tmp / "out-ray-1x")
        print(f"ray and local shards identical (1x): {same}")
        (tl, _, _), (tr, r1, d1), (_, r4, d4) = figures["local", "1x"], figures["ray", "1x"], figures["ray", "4x"]
        _, l1, ld1 = figures["local", "1x"]
        _, l4, ld4 = figures["local", "4x"]
        print(f"time ray/local on {mb:.0f} MB: {tr / tl:.2f}x with a local Ray started for the run (target <= 1.25x)")
        joined = joined_cluster_seconds(small, vocab, tmp / "out-joined", tmp / "cache", args.dupe)
        print(f"time ray/local on {mb:.0f} MB, joining a running Ray: {joined:.1f} s, {joined / tl:.2f}x")
        tasks = per_task(small, vocab, tmp / "out-tasks", tmp / "cache", args.dupe)
        for name, times in tasks["times"].items():
            print(f"per task, one worker: {name}: {len(times)} tasks, mean {sum(times) / len(times) * 1000:,.0f} ms, "
                  f"max {max(times) * 1000:,.0f} ms")
        print(f"partition {tasks['partition_bytes'] / MIB:.0f} MiB of text; shards of {max(tasks['shard_rows']):,} rows, "
              f"{max(tasks['shard_bytes']) / MIB:.1f} MiB")
        print(f"peak RSS of the process tree, 4x/1x: ray {r4 / r1:.2f}x, local {l4 / l1:.2f}x (target <= 1.15x)")
        print(f"peak RSS of the driver alone, 4x/1x: ray {d4 / d1:.2f}x, local {ld4 / ld1:.2f}x (target <= 1.1x)")
        for part, seconds in fixed_costs(vocab).items():
            print(f"Ray fixed cost, {part}: {seconds * 1000:,.0f} ms")
        print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()

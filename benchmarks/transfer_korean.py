"""What pre-training on Korean buys downstream, and what the tokenizer's default
normalisation bought: benchmarks/transfer.py's control (the same fine-tune from a random
init of the same shape and vocabulary, `--init random`, same hyperparameters and seeds)
on Korean text.

Pre-training: a tiny BERT on the Blue House petitions (../shared/data/korean/petitions,
8.6 MB of formal prose, a petition per JSON line; `--text-field content --sentences
split`), transfer.py's recipe: NSP shards of 128 tokens at dupe factor 5, dynamic masking
at 0.3, MLM only, batch 32, lr 1e-3, 5% warmup, seed 1. Fine-tuning: NSMC movie-review
sentiment (nsmc-a.tsv: informal, short), trained on the first --train-rows of its first
20,000 rows and evaluated on the other 5,000 (blank reviews dropped: NSMC has two, which
`finetune classify` refuses), lr 5e-4, batch 32, 96 tokens, 2 epochs; a run's figure is
its best dev accuracy over the epochs (transfer.py's rule, the same for every arm).

--reviews adds in-domain text to the tokenizer's and the pre-training corpus: the review
texts of NSMC's first 20,000 rows, labels dropped, 20 reviews a document (the 5,000 dev
reviews are never in it), as domain-adaptive pre-training uses a task's unlabelled text.
--adapt-steps N instead keeps the petitions' tokenizer and run and adds an arm: the last
checkpoint trained N more steps on that review text alone (task-adaptive pre-training,
Gururangan et al. 2020; rows of 64 tokens), then fine-tuned as the others.

--points 3000,6000,9000 fine-tunes the run's checkpoints at those steps too (one schedule
to --steps: what each budget buys). --architecture modernbert pre-trains a ModernBERT-style
encoder instead, and --classifier-pooling mean|cls picks what its classifier reads (the
mean of the real tokens, or [CLS], transformers' default; BERT's classifier reads [CLS]
through its pooler, as transformers' BertForSequenceClassification does).

Arms, all with one vocabulary size:
- default tokenizer (`bertprep train-tokenizer` as shipped: accents kept on Hangul, the
  alphabet by character coverage plus KS X 1001's syllables): pre-trained, and random init;
- old tokenizer (BERT-uncased's normalisation: `--strip-accents` with lower-casing, which
  decomposes every syllable into conjoining jamo, and `--limit-alphabet 1000`, what the
  options gave before): the same pipeline, pre-trained and random init, --old-seeds.

Prints NSMC's review lengths under both tokenizers (what --max-seq-length cuts), then a
table: mean ± sd over seeds per arm, the gap to the same tokenizer's random init and
whether it exceeds the spread (the sum of both sds), and CPU minutes per stage (the
commands' user + system time, children included; wall minutes beside). Everything lands
in --work and a rerun reuses what is finished (results.jsonl, stages.jsonl).

  python benchmarks/transfer_korean.py --work /tmp/transfer-korean --steps 3000 --epochs 2 --seeds 1,2,3
  python benchmarks/transfer_korean.py --work /tmp/tk --architecture modernbert --classifier-pooling mean \
      --steps 6000 --adapt-steps 1500 --epochs 2 --lr 5e-4 --seeds 1,2,3 --old-seeds=     # docs/inputs.md's recipe
  python benchmarks/transfer_korean.py --work /tmp/tk-small --steps 200 --train-rows 2000 --seeds 1   # a smoke run
"""
from __future__ import annotations

import argparse
import json
import math
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from recipes import DATA, bertprep  # noqa: E402
from transfer import cli, summary  # noqa: E402

KOREAN = DATA / "korean"
NSMC = KOREAN / "nsmc-a.tsv"
NSMC_TRAIN_ROWS = 20_000  # the first 20,000 rows train, the last 5,000 evaluate
TOKENIZERS = {"default": [], "old": ["--strip-accents", "--limit-alphabet", "1000"]}  # both lower-case (the default)
CORPUS = ["--text-field", "content", "--sentences", "split"]


def finished_runs(results_file: Path) -> dict:
    """The fine-tunes a previous invocation finished (results.jsonl), by their key."""
    if not results_file.is_file():
        return {}
    records = (json.loads(line) for line in results_file.read_text().splitlines())
    return {record["key"]: record for record in records}


def cpu_seconds() -> float:
    """User + system seconds of every finished, waited-for child and of its own waited-for
    children. build-shards' workers are children of multiprocessing's forkserver, which
    does not wait for them, so its figure counts only its main process (its wall time is
    the one to read; seconds either way)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class Stages:
    """CPU and wall minutes of each named stage, kept in work/stages.jsonl so a rerun that
    finds the stage's output reports what it cost when it ran."""

    def __init__(self, work: Path):
        self.path = work / "stages.jsonl"
        self.done = {}
        if self.path.is_file():
            for line in self.path.read_text().splitlines():
                record = json.loads(line)
                self.done[record["stage"]] = record

    def run(self, name: str, output: Path, fn) -> dict:
        """Run fn() unless `output` exists; the stage's cost (None where it ran before
        these records were kept)."""
        if output.exists():
            return self.done.get(name)
        cpu, wall = cpu_seconds(), time.perf_counter()
        fn()
        record = {"stage": name, "cpu_min": (cpu_seconds() - cpu) / 60, "wall_min": (time.perf_counter() - wall) / 60}
        self.done[name] = record
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
        return record


def nsmc_split(work: Path, train_rows: int) -> tuple[Path, Path, int, int]:
    """(train.tsv, dev.tsv, their row counts): the first `train_rows` of NSMC's first
    20,000 rows and its last 5,000, blank reviews dropped; read with quoting off, as
    NSMC's own code reads it (some reviews hold a lone ")."""
    header, *rows = NSMC.read_text(encoding="utf-8").split("\n")[:-1]
    keep = lambda part: [r for r in part if r.split("\t")[1].strip()]  # noqa: E731
    train, dev = keep(rows[:min(train_rows, NSMC_TRAIN_ROWS)]), keep(rows[NSMC_TRAIN_ROWS:])
    directory = work / "nsmc"
    directory.mkdir(parents=True, exist_ok=True)
    paths = directory / f"train-{train_rows}.tsv", directory / "dev.tsv"
    for path, part in zip(paths, (train, dev)):
        if not path.is_file():
            path.write_text(header + "\n" + "\n".join(part) + "\n", encoding="utf-8")
    return paths[0], paths[1], len(train), len(dev)


def read_split(path: Path) -> tuple[list[str], list[int]]:
    """(texts, labels) of a split nsmc_split wrote (id, document, label; a header)."""
    rows = [line.split("\t") for line in path.read_text(encoding="utf-8").split("\n")[1:-1]]
    return [r[1] for r in rows], [int(r[2]) for r in rows]


def review_lengths(tokenizer: Path, dev: Path, max_seq_length: int) -> str:
    """Percentiles of the dev reviews' lengths in tokens ([CLS] and [SEP] included) and
    the share --max-seq-length cuts."""
    import numpy as np

    from bertprep.tokenizer import load_tokenizer

    texts, _ = read_split(dev)
    tok = load_tokenizer(tokenizer)
    encodings = tok.tokenizer.encode_batch(texts, add_special_tokens=True)
    lengths = np.array([len(e.ids) for e in encodings])
    unk = np.mean([tok.special.unk in e.ids for e in encodings])
    p50, p90, p99 = np.percentile(lengths, [50, 90, 99])
    return (f"median {p50:.0f}, p90 {p90:.0f}, p99 {p99:.0f}, max {lengths.max()} tokens; "
            f"{np.mean(lengths > max_seq_length):.1%} cut at {max_seq_length}; {unk:.1%} hold an [UNK]")


def pretrain_name(args, name: str) -> str:
    corpus = "-reviews" if args.reviews else ""
    architecture = "modernbert-" if args.architecture == "modernbert" else ""
    return (f"pretrain-{name}{corpus}-{architecture}{args.preset}-{args.vocab_size}-{args.objective}-"
            f"lr{args.pretrain_lr:g}-{args.steps}")


def adapted_name(args, name: str) -> str:
    return f"{pretrain_name(args, name)}-adapt{args.adapt_steps}-lr{args.adapt_lr:g}"


REVIEWS_NOTE = " and NSMC's training reviews (labels dropped)"
REVIEWS_PER_DOCUMENT = 20  # reviews are one or two sentences: grouped so a document has pairs to draw


def review_corpus(work: Path) -> Path:
    """NSMC's first 20,000 rows' review texts (labels dropped; the 5,000 dev reviews never
    in it) as JSON Lines of `content`, REVIEWS_PER_DOCUMENT reviews a document, one per line."""
    path = work / "reviews" / "nsmc-train-reviews.jsonl"
    if not path.is_file():
        rows = NSMC.read_text(encoding="utf-8").split("\n")[1:NSMC_TRAIN_ROWS + 1]
        texts = [r.split("\t")[1].strip() for r in rows if r.split("\t")[1].strip()]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps({"content": "\n".join(texts[i:i + REVIEWS_PER_DOCUMENT])},
                                           ensure_ascii=False) + "\n"
                                for i in range(0, len(texts), REVIEWS_PER_DOCUMENT)), encoding="utf-8")
    return path


def prepare(args, work: Path, stages: Stages, name: str) -> tuple[Path, dict]:
    """The tokenizer, shards and pre-training run of one tokenizer arm; (run, costs)."""
    # JSON Lines files named without a suffix, told by their content; with --reviews, NSMC's
    # training reviews beside them (in-domain, informal text; never the dev reviews).
    text = [KOREAN / "petitions", *([review_corpus(work)] if args.reviews else [])]
    corpus = "-reviews" if args.reviews else ""
    tokenizer = work / f"tokenizer-{name}{corpus}-{args.vocab_size}"
    costs = {"tokenizer": stages.run(tokenizer.name, tokenizer / "vocab.txt", lambda: bertprep(
        "train-tokenizer", *text, *CORPUS, "--out", tokenizer, "--vocab-size", args.vocab_size, *TOKENIZERS[name],
        "--quiet"))}
    shards = work / f"shards-{name}{corpus}-{args.vocab_size}"
    costs["shards"] = stages.run(shards.name, shards / "manifest.json", lambda: bertprep(
        "build-shards", *text, *CORPUS, "--tokenizer", tokenizer, "--out", shards, "--pairs", "nsp",
        "--dupe-factor", 5, "--max-seq-length", 128, "--cache-dir", work / ".cache", "--quiet"))
    run = work / pretrain_name(args, name)
    # a checkpoint at every --points step (one schedule, to --steps: the earlier points are
    # that run part-way, not runs of their own)
    every = math.gcd(*args.points)
    costs["pretrain"] = stages.run(run.name, run / "checkpoints" / f"step-{args.steps}", lambda: cli(
        "pretrain", "--architecture", args.architecture, "--data", shards, "--out", run, "--preset", args.preset,
        "--batch-size", 32, "--max-steps", args.steps, "--lr", args.pretrain_lr, "--warmup-ratio", "0.05",
        "--save-every", every, "--keep-last", args.steps // every + 1, "--log-every", 100, "--seed", 1,
        "--masking", "dynamic", "--mask-rate", 0.3, "--objective", args.objective, "--device", "cpu",
        "--no-progress", log=run.parent / f"{run.name}.log"))
    if args.adapt_steps:
        costs["adapt"] = adapt(args, work, stages, name, tokenizer, run)
    return run, costs


ADAPT_LENGTH = 64  # rows of the adaptation shards: reviews are short (median 19 tokens), packed whole to 64


def adapt(args, work: Path, stages: Stages, name: str, tokenizer: Path, run: Path) -> dict:
    """Task-adaptive pre-training (Gururangan et al. 2020): the run's last checkpoint
    trained on, for --adapt-steps, the text of NSMC's training reviews (labels dropped;
    the dev reviews never in it) with the pre-training recipe, as RoBERTa's FULL-SENTENCES
    rows of ADAPT_LENGTH tokens. The pre-trained arm's tokenizer, so its vocabulary stays."""
    shards = work / f"shards-adapt-{name}-{args.vocab_size}-{ADAPT_LENGTH}"
    stages.run(shards.name, shards / "manifest.json", lambda: bertprep(
        "build-shards", review_corpus(work), "--text-field", "content", "--tokenizer", tokenizer, "--out", shards,
        "--pairs", "none", "--dupe-factor", 5, "--max-seq-length", ADAPT_LENGTH, "--cache-dir", work / ".cache",
        "--quiet"))
    adapted = work / adapted_name(args, name)
    return stages.run(adapted.name, adapted / "checkpoints" / f"step-{args.adapt_steps}", lambda: cli(
        "pretrain", "--init-from", run / "checkpoints" / f"step-{args.steps}", "--data", shards, "--out", adapted,
        "--batch-size", 32, "--max-steps", args.adapt_steps, "--lr", args.adapt_lr, "--warmup-ratio", "0.05",
        "--save-every", args.adapt_steps, "--log-every", 100, "--seed", 1, "--masking", "dynamic", "--mask-rate",
        0.3, "--objective", "mlm", "--device", "cpu", "--no-progress", log=adapted.parent / f"{adapted.name}.log"))


def arm_parts(arm: str) -> tuple[str, str, int | None]:
    """"default pretrained@3000" -> ("default", "pretrained", 3000); a random init has no
    point; "default adapted@3000": that checkpoint after --adapt-steps on the reviews."""
    name, init = arm.split()
    init, _, point = init.partition("@")
    return name, init, int(point) if point else None


def finetune_name(args, arm: str, seed: int) -> str:
    """Names a fine-tune by everything that decides it (the results' key, its directory)."""
    name, init, point = arm_parts(arm)
    at = f"-at{point}" if point not in (None, args.steps) else ""
    base = adapted_name(args, name) if init == "adapted" else pretrain_name(args, name)
    pooling = f"-{args.classifier_pooling}" if args.classifier_pooling else ""
    return (f"{base}{at}-{init}-nsmc{args.train_rows}x{args.epochs:g}-lr{args.lr:g}-"
            f"len{args.max_seq_length}{pooling}-seed{seed}")


def finetune(args, work: Path, arm: str, seed: int, run: Path, train: Path, dev: Path) -> dict:
    """One NSMC fine-tune (arm: "default pretrained@3000", "old random", ...): its best dev
    accuracy and CPU/wall minutes. A random init reads only the run's shape."""
    out = work / "finetune" / finetune_name(args, arm, seed)
    name, init, point = arm_parts(arm)
    model = run / "checkpoints" / f"step-{point or args.steps}"
    if init == "adapted":
        model, init = work / adapted_name(args, name) / "checkpoints" / f"step-{args.adapt_steps}", "pretrained"
    pooling = ["--classifier-pooling", args.classifier_pooling] if args.classifier_pooling else []
    cpu, wall = cpu_seconds(), time.perf_counter()
    # Always run the command: a finished run says "nothing to do", a killed one resumes.
    cli("finetune", "classify", "--model", model, "--init", init, *pooling,
        "--train", train, "--validation", dev, "--text-column", "document", "--label-column", "label",
        "--out", out, "--epochs", args.epochs, "--batch-size", 32, "--lr", args.lr, "--seed", seed,
        "--max-seq-length", args.max_seq_length, "--device", "cpu", "--no-progress", log=out.parent / f"{out.name}.log")
    return {"accuracy": json.loads((out / "best.json").read_text())["value"],
            "cpu_min": (cpu_seconds() - cpu) / 60, "wall_min": (time.perf_counter() - wall) / 60}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/bertmodel-transfer-korean"))
    ap.add_argument("--steps", type=int, default=3000, help="pre-training steps (batch 32)")
    ap.add_argument("--points", type=lambda s: sorted(int(x) for x in s.split(",")),
                    help="pre-training steps at which to fine-tune, the last --steps (comma-separated; "
                         "default: --steps only): what each budget buys, from one run")
    ap.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 3])
    ap.add_argument("--old-seeds", type=lambda s: [int(x) for x in s.split(",") if x],
                    help="seeds of the old tokenizer's arms [default: the first of --seeds; '' skips them]")
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--architecture", default="bert", choices=["bert", "modernbert"])
    ap.add_argument("--classifier-pooling", choices=["cls", "mean"],
                    help="modernbert: the fine-tune's sequence vector, [CLS] or the mean of the real tokens "
                         "[default: the model's own, cls as transformers' ModernBertConfig]")
    ap.add_argument("--adapt-steps", type=int, default=0,
                    help="also fine-tune the last checkpoint after this many steps of task-adaptive pre-training "
                         "on NSMC's 20,000 training reviews' text (labels dropped; dev never in it)")
    ap.add_argument("--adapt-lr", type=float, default=5e-4, help="peak lr of --adapt-steps")
    # The smallest size at which the default completes Hangul (the 1,076 KS X 1001 syllables
    # the petitions lack and their ## forms may take 25% of it): at 8,192 17% of NSMC reviews
    # hold an [UNK], at 10,000 2.5%, as at 16,000; and the output layer is much of a tiny
    # model's step (at 16,000 a step cost 1.5x transfer.py's at 8,192; at 10,000 about 1x).
    ap.add_argument("--vocab-size", type=int, default=10_000, help="entries of both tokenizers")
    ap.add_argument("--objective", default="mlm", choices=["mlm", "mlm+nsp"], help="pre-training objective")
    ap.add_argument("--pretrain-lr", type=float, default=1e-3)
    ap.add_argument("--train-rows", type=int, default=NSMC_TRAIN_ROWS, help="NSMC training rows (of the first 20,000)")
    ap.add_argument("--max-seq-length", type=int, default=96, help="fine-tuning tokens per review")
    # 2e-4 (transfer.py's) left a tiny model short of the data: 2,000 reviews, 3 epochs:
    # random init 0.628 at 2e-4, 0.725 at 5e-4, 0.734 at 1e-3 (docs/inputs.md).
    ap.add_argument("--lr", type=float, default=5e-4, help="fine-tuning learning rate")
    ap.add_argument("--epochs", type=float, default=2)
    ap.add_argument("--reviews", action="store_true", help="also pre-train (and train the tokenizer) on NSMC's "
                    "20,000 training reviews' text, labels dropped (in-domain text; the dev reviews never seen)")
    args = ap.parse_args()
    old_seeds = args.seeds[:1] if args.old_seeds is None else args.old_seeds
    args.points = args.points or [args.steps]
    if args.classifier_pooling and args.architecture != "modernbert":
        ap.error("--classifier-pooling is modernbert's (BertForSequenceClassification reads [CLS])")
    if args.points[-1] != args.steps or args.points[0] < 1:
        ap.error(f"--points must lie in 1..--steps and end at --steps ({args.steps})")
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    stages = Stages(work)
    train, dev, n_train, n_dev = nsmc_split(work, args.train_rows)
    arms = [(f"{name} {init}", seeds) for name, seeds in (("default", args.seeds), ("old", old_seeds)) if seeds
            for init in [*(f"pretrained@{p}" for p in args.points),
                         *([f"adapted@{args.steps}"] if args.adapt_steps else []), "random"]]
    runs, costs = {}, {}
    for name in dict.fromkeys(arm.split()[0] for arm, _ in arms):
        runs[name], costs[name] = prepare(args, work, stages, name)
    results_file = work / "results.jsonl"
    done = finished_runs(results_file)
    started = time.perf_counter()
    for arm, seeds in arms:
        for seed in seeds:
            key = finetune_name(args, arm, seed)
            if key not in done:
                record = {"key": key, "arm": arm, "seed": seed,
                          **finetune(args, work, arm, seed, runs[arm_parts(arm)[0]], train, dev)}
                done[key] = record
                with open(results_file, "a") as f:
                    f.write(json.dumps(record) + "\n")
                print(f"{arm} seed {seed}: {record['accuracy']:.3f} "
                      f"({(time.perf_counter() - started) / 60:.1f} min)", flush=True)
    table = {arm: [done[finetune_name(args, arm, seed)] for seed in seeds] for arm, seeds in arms}
    report(args, work, costs, table, n_train, n_dev, dev)


def report(args, work: Path, costs: dict, table: dict, n_train: int, n_dev: int, dev: Path) -> None:
    _, labels = read_split(dev)
    majority = max(labels.count(x) for x in set(labels)) / len(labels)
    corpus = REVIEWS_NOTE if args.reviews else ""
    architecture = "ModernBERT" if args.architecture == "modernbert" else "BERT"
    adapted = (f"; adapted: {args.adapt_steps:,} more steps on NSMC's training reviews' text (rows of {ADAPT_LENGTH}, "
               f"lr {args.adapt_lr:g})" if args.adapt_steps else "")
    pooling = f", {args.classifier_pooling} pooling" if args.classifier_pooling else ""
    print(f"\n{args.preset} {architecture} pre-trained {args.steps:,} steps on the petitions{corpus} (NSP shards of "
          f"128, dynamic masking 0.3, {args.objective}, batch 32, lr {args.pretrain_lr:g}){adapted}; vocabulary "
          f"{args.vocab_size:,}; NSMC: {n_train:,} training reviews, {n_dev:,} dev (largest class {majority:.3f}), "
          f"lr {args.lr:g}, {args.epochs:g} epochs, batch 32, {args.max_seq_length} tokens{pooling}; best dev accuracy "
          f"over the epochs")
    for name in costs:
        tokenizer = work / f"tokenizer-{name}{'-reviews' if args.reviews else ''}-{args.vocab_size}"
        print(f"NSMC dev reviews, {name} tokenizer: {review_lengths(tokenizer, dev, args.max_seq_length)}")
    print(f"\n{'arm':56} | {'seeds':>5} | {'mean ± sd':^13} | {'gap to random':^13} | {'CPU min per fine-tune':>21}")
    print("-" * 121)
    stats = {arm: (*summary([r["accuracy"] for r in records]), len(records),
                   sum(r["cpu_min"] for r in records) / len(records)) for arm, records in table.items()}
    for arm, (mean, sd, n, cpu) in stats.items():
        name, init, point = arm_parts(arm)
        gap = ""
        if init != "random":
            base, base_sd, _, _ = stats[f"{name} random"]
            gap = f"{mean - base:+.3f}{'*' if mean - base > sd + base_sd else ' '}"
        label = f"{name} tokenizer, " + ("random init" if init == "random" else f"pre-trained {point:,}" + (
            f" + {args.adapt_steps:,} on reviews" if init == "adapted" else ""))
        print(f"{label:56} | {n:>5} | {mean:.3f} ± {sd:.3f} | {gap:^13} | {cpu:>21.1f}")
    print("(gap: to the same tokenizer's random init; * where it exceeds the sum of both sds)")
    last = f"pretrained@{args.steps}"
    if f"old {last}" in stats:
        gap = stats[f"default {last}"][0] - stats[f"old {last}"][0]
        print(f"default against old tokenizer, pre-trained: {gap:+.3f}; "
              f"random init: {stats['default random'][0] - stats['old random'][0]:+.3f}")
    print("\nminutes per stage, CPU (wall); '-' where an earlier run without a record made it:")
    total = 0.0
    for name, stage_costs in costs.items():
        cells = []
        for stage, cost in stage_costs.items():
            cells.append(f"{stage} {cost['cpu_min']:.1f} ({cost['wall_min']:.1f})" if cost else f"{stage} -")
            total += cost["cpu_min"] if cost else 0.0
        print(f"  {name} tokenizer: " + ", ".join(cells))
    finetunes = sum(r["cpu_min"] for records in table.values() for r in records)
    print(f"  fine-tunes: {finetunes:.1f} CPU min ({sum(len(r) for r in table.values())} runs); all: {total + finetunes:.1f}")
    (work / "table.json").write_text(json.dumps(
        {arm: dict(zip(("mean", "sd", "seeds", "finetune_cpu_min"), v)) for arm, v in stats.items()}, indent=1))


if __name__ == "__main__":
    main()

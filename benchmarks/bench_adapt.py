"""Adapt a released model to your domain, measured: all-MiniLM-L6-v2 as it is, against the
same model continued on the domain's text (`bertmodel pretrain --init-from`), and against
that after `bertprep extend-tokenizer` added the domain's words to its vocabulary; every
arm fine-tuned with the same hyperparameters and seeds on a task of that domain.

English (the default). Domain: the standard library's docstrings (`bertprep stdlib-corpus`),
text no step of MiniLM's training saw. Task: the demo's topic task (bertmodel/demo/task.py:
which of four packages a docstring sentence documents; 1,920 training and 480 dev
sentences). The dev sentences are dropped from the adaptation corpus, so no arm read the
text it is scored on; the training sentences stay in it (unlabelled text of the task, as
task-adaptive pre-training uses it; Gururangan et al. 2020).

Arms:
1. as-is:     finetune classify --model MINILM
2. continued: build-shards CORPUS --tokenizer MINILM --pairs none --max-seq-length 64
              --dupe-factor 1, then pretrain --init-from MINILM --data SHARDS
3. extended:  extend-tokenizer MINILM CORPUS --add --add-tokens --out TOK, build-shards with
              TOK, then pretrain --init-from MINILM on them (the vocabulary grows, each
              new row the mean of the base rows of its pieces)
Continued pre-training, arms 2 and 3 alike: MLM alone, dynamic masking at 0.15 (BERT's
rate, the one MiniLM's teacher was trained at), FULL-SENTENCES rows of 64 tokens, batch
32, lr --adapt-lr, 10% warmup then linear decay, seed 1. MiniLM is a bare BertModel (no
MLM head): the head starts fresh and trains alone for the first --head-warmup-steps
(the encoder, word table included, held). Arm 3 takes the same head warmup, so it
differs from arm 2 in the vocabulary alone (pretrain gives one of --head-warmup-steps and
--new-rows-only-steps; the new rows start at their pieces' mean, not at random).

Arm 4, a control: MiniLM as-is without its pooler. Continued pre-training drops the
pooler (an MLM model has none), so arms 2 and 3 fine-tune with a fresh one where arm 1
reads MiniLM's; arm 4 fine-tunes with a fresh one too (see without_pooler).

Sizes of the defaults, chosen so that the fine-tunes of arms 1-3 and the 2 adaptations
take about 35 minutes on 2 cores shared with other work (measured first, with that work
running: a fine-tune on 640 sentences, 3 epochs, 2.7 minutes; a pre-training step of
MiniLM on 32 rows of 64 tokens, 4 seconds). Measured: under a load of 4-5 the run took 51
minutes (fine-tunes 2.3-4 minutes, adaptations 9-13); on the idle machine a fine-tune takes
0.45 minutes (0.8 CPU) and an adaptation 2.5 (4.8 CPU), about 10 minutes in all. User +
system time is not immune to contention either: it rose 2-4x under that load.
- fine-tune: the first --train-examples 480 training sentences (a quarter: the
  low-resource setting, where adaptation is said to pay most; on all 1,920 MiniLM as-is
  reached 0.940 with one seed), 3 epochs (45 steps), 64 tokens (1% of the sentences are
  longer), batch 32, lr 1e-4, every dev sentence; a run's figure is its best dev accuracy
  over the epochs (transfer.py's rule: the BERT paper's pick on dev, the same for every arm);
- adaptation: --adapt-steps 120 steps (3,840 rows of the corpus's ~5,800: two thirds of
  a pass), the first 40 the fresh head's alone; extension: --add-tokens 500.

Prints, per arm, mean ± sd over seeds, the gap to arms 1 and 4 and whether it exceeds the spread
(the sum of both sds), the CPU minutes each adaptation cost (user + system time of its
extend-tokenizer, build-shards and pretrain commands, from getrusage(RUSAGE_CHILDREN)
deltas; build-shards runs with --workers 1 so its work is all counted; wall minutes
beside) and of each fine-tune, and extend-tokenizer's own report (tokens per word on the
corpus before and after). Everything lands in --work; a rerun reuses what is finished
(stages.jsonl, results.jsonl).

--korean: MiniLM (an English vocabulary: Hangul falls apart into jamo or [UNK]) extended
with --add-tokens Korean tokens learned on the Blue House petitions (../shared/data/korean,
`--text-field content --sentences split`), continued on them (rows of 128), then
fine-tuned on NSMC half A (transfer_korean.py's split: the first --train-examples of its
first 20,000 rows, the last 5,000 to evaluate; 96 tokens, 2 epochs), against MiniLM as-is.
docs/inputs.md's tiny ModernBERT from scratch scores 0.819 (random init) / 0.833
(petitions + reviews) at 20,000 reviews and 0.747 / 0.759 at 2,000.

  python benchmarks/bench_adapt.py --work /tmp/adapt                 # the measured run
  python benchmarks/bench_adapt.py --work /tmp/adapt-smoke --seeds 1 --train-examples 64 \\
      --epochs 1 --adapt-steps 4 --head-warmup-steps 2 --add-tokens 50   # a smoke run, seconds
  python benchmarks/bench_adapt.py --korean --work /tmp/adapt-korean --adapt-steps 200   # docs/adapting.md's (23 min)
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_embed import minilm_dir  # noqa: E402
from transfer import cli, summary, task_files  # noqa: E402
from transfer_korean import CORPUS, KOREAN, Stages, cpu_seconds, finished_runs, nsmc_split  # noqa: E402

ARMS = ("as-is", "continued", "extended", "no-pooler")
ARM_LABELS = {"as-is": "MiniLM as-is", "continued": "continued", "extended": "extended + continued",
              "no-pooler": "as-is, fresh pooler"}
CONTROLS = ("as-is", "no-pooler")  # the arms without adaptation, each gap is measured against


@dataclasses.dataclass
class Domain:
    """What differs between the English and the Korean run."""
    name: str
    corpus: list[Path]  # the adaptation text
    corpus_options: list[str]  # how build-shards and extend-tokenizer read it
    row_length: int  # tokens per pre-training row
    train: Path
    dev: Path
    task_options: list[str]  # finetune classify's column options
    finetune_length: int  # tokens per fine-tuning example


def prep(*args, log: Path) -> None:
    """A bertprep command, its output kept in `log` (extend-tokenizer's report is read from it)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as f:
        subprocess.run([sys.executable, "-m", "bertprep", *map(str, args)], check=True, stdout=f,
                       stderr=subprocess.STDOUT)


def without_dev(work: Path, dev: Path) -> Path:
    """The stdlib docstring corpus with every dev sentence of the topic task dropped (the
    task's sentences are the corpus's, whitespace-normalised: bertmodel/demo/task.py)."""
    out = work / "stdlib-without-dev.txt"
    if out.is_file():
        return out
    full = work / "stdlib.txt"
    prep("stdlib-corpus", "--out", full, "--overwrite", log=work / "stdlib-corpus.log")
    held_out = {line.rsplit("\t", 1)[0] for line in dev.read_text(encoding="utf-8").splitlines()[1:]}
    kept, dropped = [], 0
    for line in full.read_text(encoding="utf-8").split("\n"):
        if line.strip() and " ".join(line.split()) in held_out:
            dropped += 1
        else:
            kept.append(line)
    print(f"adaptation corpus: {dropped:,} dev sentences of the topic task dropped from {full.name}", flush=True)
    out.write_text("\n".join(kept), encoding="utf-8")
    return out


def without_pooler(minilm: Path, work: Path) -> Path:
    """MiniLM with its pooler left out. Continued pre-training drops it (an MLM model has
    none, as transformers' BertForMaskedLM has none), so the adapted arms fine-tune with a
    fresh pooler where arm 1 reads MiniLM's (an untrained one: its bias is all zeros, its
    weights of sd 0.009 against a fresh init's 0.02); this control fine-tunes with a fresh
    one too, so the gap to it is the adaptation's alone."""
    out = work / "minilm-no-pooler"
    if (out / "model.safetensors").is_file():
        return out
    from safetensors.torch import load_file, save_file

    out.mkdir(parents=True, exist_ok=True)
    for path in minilm.iterdir():
        if path.name != "model.safetensors":
            shutil.copyfile(path, out / path.name)
    weights = {k: v for k, v in load_file(minilm / "model.safetensors").items() if not k.startswith("pooler.")}
    save_file(weights, out / ".model.safetensors.tmp", metadata={"format": "pt"})
    (out / ".model.safetensors.tmp").rename(out / "model.safetensors")  # last: its presence says the copy is whole
    return out


def english(args, work: Path) -> Domain:
    train, dev, options = task_files("topic", work)
    return Domain("stdlib docstrings", [without_dev(work, dev)], [], 64, train, dev, options, 64)


def korean(args, work: Path) -> Domain:
    train, dev, _, _ = nsmc_split(work, args.train_examples)
    return Domain("Blue House petitions", [KOREAN / "petitions"], CORPUS, 128, train, dev,
                  ["--text-column", "document", "--label-column", "label"], 96)


def adapted_name(args, arm: str) -> str:
    """Names an adaptation by everything that decides it."""
    added = f"-add{args.add_tokens}" if arm == "extended" else ""
    return f"{arm}{added}-steps{args.adapt_steps}-head{args.head_warmup_steps}-lr{args.adapt_lr:g}"


def adapt(args, work: Path, stages: Stages, domain: Domain, minilm: Path, arm: str) -> tuple[Path, dict]:
    """The checkpoint of arm 2 or 3 and what each of its stages cost (CPU and wall minutes)."""
    costs = {}
    tokenizer = minilm
    if arm == "extended":
        tokenizer = work / f"tokenizer-add{args.add_tokens}"
        costs["extend-tokenizer"] = stages.run(tokenizer.name, tokenizer / "extension.json", lambda: prep(
            "extend-tokenizer", minilm, *domain.corpus, *domain.corpus_options, "--add", args.add_tokens,
            "--out", tokenizer, log=work / f"{tokenizer.name}.log"))
    shards = work / f"shards-{tokenizer.name if arm == 'extended' else 'minilm'}-{domain.row_length}"
    costs["build-shards"] = stages.run(shards.name, shards / "manifest.json", lambda: prep(
        "build-shards", *domain.corpus, *domain.corpus_options, "--tokenizer", tokenizer, "--out", shards,
        "--pairs", "none", "--max-seq-length", domain.row_length, "--dupe-factor", 1, "--workers", 1,
        "--cache-dir", work / ".cache", "--quiet", log=work / f"{shards.name}.log"))
    run = work / adapted_name(args, arm)
    checkpoint = run / "checkpoints" / f"step-{args.adapt_steps}"
    costs["pretrain"] = stages.run(run.name, checkpoint, lambda: cli(
        "pretrain", "--init-from", minilm, "--data", shards, "--out", run, "--objective", "mlm",
        "--masking", "dynamic", "--mask-rate", 0.15, "--batch-size", 32, "--max-steps", args.adapt_steps,
        "--lr", args.adapt_lr, "--warmup-ratio", 0.1, "--head-warmup-steps", args.head_warmup_steps,
        "--save-every", args.adapt_steps, "--keep-last", 1, "--log-every", 10, "--seed", 1, "--device", "cpu",
        "--no-progress", log=work / f"{run.name}.log"))
    return checkpoint, costs


def finetune_name(args, arm: str, seed: int) -> str:
    """Names a fine-tune by everything that decides it (the results' key, its directory)."""
    source = {"as-is": "minilm", "no-pooler": "minilm-no-pooler"}.get(arm) or adapted_name(args, arm)
    return (f"{source}-ft{args.train_examples}x{args.epochs:g}-len{args.max_seq_length}-lr{args.lr:g}-"
            f"seed{seed}")


def finetune(args, work: Path, domain: Domain, model: Path, arm: str, seed: int) -> dict:
    """One fine-tune: its best dev accuracy over the epochs, CPU and wall minutes."""
    out = work / "finetune" / finetune_name(args, arm, seed)
    cpu, wall = cpu_seconds(), time.perf_counter()
    # Always run the command: a finished run says "nothing to do". One checkpoint, at the
    # end (--save-every beyond the last step): the best epoch's model is exported either way.
    cli("finetune", "classify", "--model", model, "--train", domain.train, "--validation", domain.dev,
        *domain.task_options, "--max-train-examples", args.train_examples, "--out", out, "--epochs", args.epochs,
        "--batch-size", 32, "--lr", args.lr, "--seed", seed, "--max-seq-length", args.max_seq_length,
        "--save-every", 1_000_000, "--device", "cpu", "--no-progress", log=out.parent / f"{out.name}.log")
    return {"accuracy": json.loads((out / "best.json").read_text())["value"],
            "cpu_min": (cpu_seconds() - cpu) / 60, "wall_min": (time.perf_counter() - wall) / 60}


def extension_report(work: Path, args) -> list[str]:
    """extend-tokenizer's own lines on tokens per word and the first new tokens, as it printed them."""
    log = work / f"tokenizer-add{args.add_tokens}.log"
    if not log.is_file():
        return []
    return [line.strip() for line in log.read_text(encoding="utf-8").splitlines()
            if "per word" in line or line.startswith("new tokens")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/bertmodel-adapt"))
    ap.add_argument("--korean", action="store_true", help="the Korean run: petitions -> NSMC (see above)")
    ap.add_argument("--arms", type=lambda s: s.split(","), help=f"of {','.join(ARMS)} [default: all; "
                    "--korean: as-is,extended]")
    ap.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 3])
    ap.add_argument("--train-examples", type=int, help="labelled training examples [default: 480; --korean 2000]")
    ap.add_argument("--epochs", type=float, help="fine-tuning epochs [default: 3; --korean 2]")
    ap.add_argument("--max-seq-length", type=int, help="fine-tuning tokens [default: 64; --korean 96]")
    ap.add_argument("--lr", type=float, default=1e-4, help="fine-tuning learning rate")
    ap.add_argument("--adapt-steps", type=int, default=120, help="continued pre-training steps (batch 32)")
    ap.add_argument("--head-warmup-steps", type=int, default=40, help="of them, the fresh MLM head's alone")
    ap.add_argument("--adapt-lr", type=float, default=1e-4, help="continued pre-training's peak lr")
    ap.add_argument("--add-tokens", type=int, help="tokens extend-tokenizer adds [default: 500; --korean 4000]")
    args = ap.parse_args()
    defaults = {"train_examples": (480, 2000), "epochs": (3, 2), "max_seq_length": (64, 96), "add_tokens": (500, 4000),
                "arms": (list(ARMS), ["as-is", "extended"])}
    for name, (en, ko) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, ko if args.korean else en)
    if set(args.arms) - set(ARMS):
        ap.error(f"--arms: of {', '.join(ARMS)}")
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    stages = Stages(work)
    minilm = minilm_dir()
    domain = (korean if args.korean else english)(args, work)
    models, costs = {"as-is": minilm}, {}
    for arm in args.arms:
        if arm == "no-pooler":
            models[arm] = without_pooler(minilm, work)
        elif arm != "as-is":
            models[arm], costs[arm] = adapt(args, work, stages, domain, minilm, arm)
    results_file = work / "results.jsonl"
    done = finished_runs(results_file)
    started = time.perf_counter()
    for seed in args.seeds:  # seed by seed: a run cut short leaves every arm with the same seeds done
        for arm in args.arms:
            key = finetune_name(args, arm, seed)
            if key not in done:
                done[key] = {"key": key, "arm": arm, "seed": seed,
                             **finetune(args, work, domain, models[arm], arm, seed)}
                with open(results_file, "a") as f:
                    f.write(json.dumps(done[key]) + "\n")
                print(f"{arm} seed {seed}: {done[key]['accuracy']:.3f} ({(time.perf_counter() - started) / 60:.1f} min)",
                      flush=True)
    report(args, work, domain, costs, {arm: [done[finetune_name(args, arm, s)] for s in args.seeds]
                                       for arm in args.arms})


def report(args, work: Path, domain: Domain, costs: dict, table: dict) -> None:
    labels = [line.rsplit("\t", 1)[-1] for line in domain.dev.read_text(encoding="utf-8").splitlines()[1:]]
    majority = max(labels.count(x) for x in set(labels)) / len(labels)
    print(f"\nall-MiniLM-L6-v2; adaptation on the {domain.name}: {args.adapt_steps:,} steps of 32 rows of "
          f"{domain.row_length} tokens, MLM, dynamic masking 0.15, lr {args.adapt_lr:g}, a fresh MLM head alone for the "
          f"first {args.head_warmup_steps}; extended: +{args.add_tokens:,} tokens. Fine-tune: {args.train_examples:,} "
          f"training examples, {len(labels):,} dev (largest class {majority:.3f}), {args.epochs:g} epochs, "
          f"{args.max_seq_length} tokens, batch 32, lr {args.lr:g}; best dev accuracy over the epochs")
    for line in extension_report(work, args) if "extended" in costs else []:
        print(f"extend-tokenizer: {line}")
    controls = [c for c in CONTROLS if c in table]
    print(f"\n{'arm':22} | {'seeds':>5} | {'mean ± sd':^13} | " + "".join(f"{'gap to ' + c:^18} | " for c in controls)
          + f"{'adaptation CPU min (wall)':^25} | {'CPU min per fine-tune':>21}")
    print("-" * (92 + 21 * len(controls)))
    stats = {arm: (*summary([r["accuracy"] for r in records]), len(records),
                   sum(r["cpu_min"] for r in records) / len(records)) for arm, records in table.items()}
    rows = {}
    for arm, (mean, sd, n, cpu) in stats.items():
        gaps = {}
        for control in controls:
            base, base_sd = stats[control][:2]
            gaps[control] = "" if arm in CONTROLS else f"{mean - base:+.3f}{'*' if mean - base > sd + base_sd else ' '}"
        cost = ""
        if arm in costs:
            known = [c for c in costs[arm].values() if c]
            cost = (f"{sum(c['cpu_min'] for c in known):.1f} ({sum(c['wall_min'] for c in known):.1f})"
                    + ("" if len(known) == len(costs[arm]) else " part"))
        rows[arm] = {"mean": mean, "sd": sd, "seeds": n, "gaps": {c: g.strip() for c, g in gaps.items()},
                     "adaptation": cost, "finetune_cpu_min": cpu, "stages": costs.get(arm),
                     "accuracies": [r["accuracy"] for r in table[arm]]}
        print(f"{ARM_LABELS[arm]:22} | {n:>5} | {mean:.3f} ± {sd:.3f} | " + "".join(f"{g:^18} | " for g in gaps.values())
              + f"{cost:^25} | {cpu:>21.1f}")
    print("(* where the gap exceeds the sum of both sds; 'part' where a stage ran before its cost was recorded)")
    for arm, stage_costs in costs.items():
        print(f"  {ARM_LABELS[arm]}: " + ", ".join(
            f"{stage} {c['cpu_min']:.2f} ({c['wall_min']:.2f})" if c else f"{stage} -" for stage, c in stage_costs.items()))
    (work / "table.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

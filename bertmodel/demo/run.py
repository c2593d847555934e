"""The main job end to end on a built-in corpus: what `make demo` runs.

Every step is the real command a user would type, run as a subprocess and printed
first, so the demo doubles as a transcript to copy from:

    stdlib-corpus -> train-tokenizer -> build-shards (train + held-out) -> inspect (+ plot)
    -> pretrain (tiny BERT, CPU) -> plot -> export-hf -> fill-mask
    -> finetune classify (which package a docstring sentence documents), from the pre-trained
       run and, as the control, from random weights of the same shape -> evaluate both -> predict

The corpus is the documentation strings of this Python's standard library: real
English, on every machine with Python, nothing to download. A step whose output is
already complete is skipped, so running the demo again resumes instead of redoing.
"""
from __future__ import annotations

import importlib.util
import json
import pathlib
import shlex
import subprocess
import sys
import time

import click

from bertmodel.demo.mlm_baseline import frequent_guess, last_evaluation, reading_guide

HELD_OUT_EVERY = 25  # every 25th document goes to the evaluation corpus
DEMO_STEPS = 2000  # about 5 minutes on a 2-core CPU for the tiny preset
BATCH_SIZE = 32  # pre-training rows per step, and per held-out batch
EVAL_BATCHES = 20  # held-out batches each evaluation scores

FILL_MASK_EXAMPLES = (  # a few minutes of CPU training mostly learns frequent words; these show more
    "Close the [MASK].",
    "Read data from the [MASK].",
    "Raise a [MASK] if the file does not exist.",
)


class Step:
    def __init__(self, out: pathlib.Path, verbose: bool):
        self.out = out
        self.verbose = verbose
        self.started = time.perf_counter()

    def banner(self, text: str) -> None:
        elapsed = time.perf_counter() - self.started
        click.secho(f"\n== {text}  [{elapsed:5.0f} s]", bold=True)

    def run(self, program: str, *args: str) -> str:
        """Run `program args` (bertprep or bertmodel) with this interpreter."""
        shown = " ".join(shlex.quote(a) for a in (program, *args))
        click.secho(f"$ {shown}", fg="cyan")
        module = {"bertprep": "bertprep.cli", "bertmodel": "bertmodel.cli"}[program]
        cmd = [sys.executable, "-c", f"from {module} import main; main()", *args]
        result = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
        click.echo(result.stdout, nl=False)
        if result.returncode != 0:
            raise click.ClickException(f"the demo stopped: `{shown}` failed (exit {result.returncode})")
        return result.stdout


def split_held_out(corpus: pathlib.Path, train: pathlib.Path, held_out: pathlib.Path) -> tuple[int, int]:
    """Every HELD_OUT_EVERY-th document to `held_out`, the rest to `train`."""
    documents = [d for d in corpus.read_text(encoding="utf-8").split("\n\n") if d.strip()]
    kept = [d for i, d in enumerate(documents) if i % HELD_OUT_EVERY]
    evaluation = [d for i, d in enumerate(documents) if not i % HELD_OUT_EVERY]
    train.write_text("\n\n".join(d.strip("\n") for d in kept) + "\n", encoding="utf-8")
    held_out.write_text("\n\n".join(d.strip("\n") for d in evaluation) + "\n", encoding="utf-8")
    return len(kept), len(evaluation)


def summarize_training(run: pathlib.Path) -> list[str]:
    """First and last logged training metrics, and every evaluation."""
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    train = [r for r in records if "loss" in r]
    evals = [r for r in records if "eval_mlm_acc" in r]
    lines = []
    if train:
        first, last = train[0], train[-1]
        lines.append(
            f"training: step {first['step']} loss {first['loss']:.3f}, MLM accuracy {first['mlm_acc']:.3f}"
            f"  ->  step {last['step']} loss {last['loss']:.3f}, MLM accuracy {last['mlm_acc']:.3f}"
        )
    for r in evals:
        lines.append(
            f"held-out evaluation at step {r['step']}: MLM accuracy {r['eval_mlm_acc']:.3f}, "
            f"NSP accuracy {r['eval_nsp_acc']:.3f}"
        )
    return lines


def run_demo(out, steps: int = DEMO_STEPS, preset: str = "tiny", verbose: bool = True,
             finetune_epochs: float = 3) -> None:
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    step = Step(out, verbose)
    corpus_dir = out / "corpus"
    corpus_dir.mkdir(exist_ok=True)
    corpus = corpus_dir / "stdlib-docstrings.txt"
    train_txt, eval_txt = corpus_dir / "train.txt", corpus_dir / "held-out.txt"
    tokenizer, shards, eval_shards = out / "tokenizer", out / "shards", out / "eval-shards"
    run, model = out / "run", out / "model"
    cache = out / "cache"

    step.banner("1/8 A corpus that needs no download: the standard library's docstrings")
    if not corpus.exists():
        step.run("bertprep", "stdlib-corpus", "--out", str(corpus))
    train_docs, eval_docs = split_held_out(corpus, train_txt, eval_txt)
    click.echo(f"{train_docs:,} documents for training, {eval_docs:,} held out for evaluation")

    step.banner("2/8 Train a WordPiece vocabulary")
    if not (tokenizer / "vocab.txt").exists():
        step.run("bertprep", "train-tokenizer", str(train_txt), "--out", str(tokenizer), "--vocab-size", "8000", "--quiet")
    step.run("bertprep", "encode", "--tokenizer", str(tokenizer), "Return the number of items in a sequence.")

    step.banner("3/8 Build masked next-sentence-prediction shards")
    if not (shards / "manifest.json").exists():
        step.run("bertprep", "build-shards", str(train_txt), "--tokenizer", str(tokenizer), "--out", str(shards),
                 "--dupe-factor", "5", "--cache-dir", str(cache), "--quiet")
    if not (eval_shards / "manifest.json").exists():
        step.run("bertprep", "build-shards", str(eval_txt), "--tokenizer", str(tokenizer), "--out", str(eval_shards),
                 "--dupe-factor", "1", "--seed", "7", "--cache-dir", str(cache), "--quiet")

    step.banner("4/8 Inspect them: statistics re-measured from the rows")
    plots = out / "plots"
    can_plot = importlib.util.find_spec("matplotlib") is not None
    if can_plot:
        plots.mkdir(exist_ok=True)
        step.run("bertprep", "inspect", str(shards), "--show", "1", "--plot", str(plots / "shards.png"), "--overwrite")
    else:
        step.run("bertprep", "inspect", str(shards), "--show", "1")

    step.banner(f"5/8 Pre-train a {preset} BERT on the CPU for {steps} steps")
    step.run("bertmodel", "pretrain", "--data", str(shards), "--eval-data", str(eval_shards), "--out", str(run),
             "--preset", preset, "--max-steps", str(steps), "--batch-size", str(BATCH_SIZE), "--lr", "1e-3",
             "--warmup-steps", str(max(steps // 10, 1)), "--save-every", str(max(steps // 4, 1)),
             "--eval-every", str(max(steps // 4, 1)), "--eval-batches", str(EVAL_BATCHES), "--log-every", "20",
             "--device", "cpu")
    for line in summarize_training(run):
        click.echo(line)
    guess = frequent_guess(shards, eval_shards, BATCH_SIZE, EVAL_BATCHES)
    click.echo(f"(always guessing {guess.token!r}, the training shards' most frequent masked token, would score "
               f"{guess.accuracy:.3f} MLM accuracy on the same {guess.positions:,} held-out positions)")
    if can_plot:
        step.run("bertmodel", "plot", str(run), "--out", str(plots / "training-curves.png"), "--overwrite")

    step.banner("6/8 Export a transformers BertForPreTraining directory")
    step.run("bertmodel", "export-hf", str(run), str(model), "--overwrite")  # a rerun refreshes it

    step.banner("7/8 Ask it to fill in the blanks")
    step.run("bertmodel", "fill-mask", str(model), *FILL_MASK_EXAMPLES, "--top-k", "5")
    click.echo(reading_guide(last_evaluation(run), guess))

    step.banner("8/8 Fine-tune it, and the same from random weights: which package does a docstring sentence document?")
    from bertmodel.demo.task import majority_baseline, write_topic_task

    task_dir = out / "topic-task"
    if (task_dir / "labels.txt").is_file():  # a rerun reuses the task files
        task_train, task_dev = task_dir / "train.tsv", task_dir / "dev.tsv"
        labels = (task_dir / "labels.txt").read_text(encoding="utf-8").split()
    else:
        task_train, task_dev, labels = write_topic_task(task_dir)
        (task_dir / "labels.txt").write_text("\n".join(labels) + "\n", encoding="utf-8")
    click.echo(f"labels: {', '.join(labels)}; {task_train} and {task_dev}")
    finetuned, control = out / "finetune-run", out / "finetune-random"
    # The same fine-tune twice: from the pre-trained run, and from random weights of the
    # same shape and vocabulary (--init random: same hyperparameters, same seed). Only
    # the second says what pre-training bought; the largest class says what guessing does.
    accuracy = {}
    for run_dir, init in ((finetuned, []), (control, ["--init", "random"])):
        step.run("bertmodel", "finetune", "classify", "--model", str(run), *init, "--train", str(task_train),
                 "--validation", str(task_dev), "--out", str(run_dir), "--epochs", f"{finetune_epochs:g}",
                 "--batch-size", "32", "--lr", "2e-4", "--device", "cpu", "--no-progress")
        # --overwrite: a rerun of the demo replaces its own earlier predictions
        accuracy[init != []] = json.loads(step.run("bertmodel", "evaluate", str(run_dir),
                                                   "--overwrite").splitlines()[0])["accuracy"]
    click.echo(f"validation accuracy: fine-tuned from pre-training {accuracy[False]:.3f}; from random init "
               f"{accuracy[True]:.3f}; largest class {majority_baseline(task_dev):.3f}")
    step.run("bertmodel", "predict", str(finetuned), "Return a new event loop for the current thread.",
             "Set the subject header of the message.")

    step.banner("Done")
    click.echo(f"Everything is in {out}/: corpus/, tokenizer/, shards/, eval-shards/, run/ (checkpoints, "
               "metrics.jsonl), model/, topic-task/, finetune-run/ (hf/ is a transformers "
               "BertForSequenceClassification), finetune-random/ (the same fine-tune from random weights)"
               + (", plots/" if can_plot else ""))
    if can_plot:
        click.echo(f"Plots: {plots / 'shards.png'} (lengths, masked positions, the 80/10/10 split) and "
                   f"{plots / 'training-curves.png'} (loss, learning rate, evaluation)")
    else:
        click.echo('No plots: matplotlib is not installed (pip install "bertprep[plot]")')
    click.echo("Load the model in transformers:")
    click.echo("  from transformers import BertForPreTraining, AutoTokenizer")
    click.echo(f"  model = BertForPreTraining.from_pretrained({str(model)!r})")
    click.echo(f"  tokenizer = AutoTokenizer.from_pretrained({str(model)!r})")

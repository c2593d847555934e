"""`bertmodel pretrain`, `export-hf`, `shrink`, `fill-mask`, `demo` and `plot`: parse options,
build a config, call one library function, print a summary."""
from __future__ import annotations

import dataclasses

import click

from bertmodel.cli.group import CONTEXT_SETTINGS, DIR, EXISTING, TOKENIZER_HELP, finish_run, main
from bertmodel.demo import DEMO_STEPS
from bertmodel.model.config import ARCHITECTURES, MODERNBERT_PRESETS, PRESETS
from bertmodel.train import TrainConfig
from bertmodel.training.optim import OPTIMIZERS
from bertprep.cli.kit import progress_option, user_errors

_DEFAULTS = {f.name: f.default for f in dataclasses.fields(TrainConfig)}

def _opt(name: str, **kwargs):
    """An option whose default comes from TrainConfig (defaults are defined once)."""
    field = name.lstrip("-").replace("-", "_")
    if field in _DEFAULTS and "default" not in kwargs and not kwargs.get("is_flag"):
        kwargs["default"] = _DEFAULTS[field]
        kwargs.setdefault("show_default", True)
    return click.option(name, **kwargs)


@main.command(context_settings=CONTEXT_SETTINGS)
@click.option("--data", "data", multiple=True, required=True, type=click.Path(exists=True, file_okay=False),
              help="Shard directory from `bertprep build-shards` (repeat to train on several). --objective minilm "
                   "reads the rows as plain text, every mask undone: shards built with --pairs none (and the "
                   "teacher's tokenizer) are its plain-text input.")
@click.option("--out", required=True, type=DIR, help="Run directory; rerunning the same command resumes there.")
@_opt("--architecture", type=click.Choice(list(ARCHITECTURES)), help="bert (learned positions, <= 512 tokens, "
      "MLM + NSP/SOP or MLM), modernbert (RoPE, GeGLU, pre-norm, local/global attention, <= 8,192 tokens, MLM "
      "only; exports ModernBertForMaskedLM) or roberta (BERT's network, positions past the padding id, one token "
      "type, <= 512 tokens, MLM only: pair rows read as one sequence; exports RobertaForMaskedLM; presets as "
      "bert's). Default: bert, or --init-from's.")
@_opt("--preset", type=click.Choice(list(PRESETS)), show_default=False, help="Model size (layers/hidden/heads), "
      "bert: " + ", ".join(f"{k} {a}/{b}/{c}" for k, (a, b, c) in PRESETS.items()) + "; modernbert: "
      + ", ".join(f"{k} {a}/{b}/{c}" for k, (a, b, c, _) in MODERNBERT_PRESETS.items())
      + ". Default: base (or --init-from's).")
@_opt("--layers", type=click.IntRange(min=1), help="Override the preset's number of layers.")
@_opt("--hidden", type=click.IntRange(min=1), help="Override the hidden size (intermediate follows as 4H).")
@_opt("--heads", type=click.IntRange(min=1), help="Override the number of attention heads.")
@_opt("--intermediate", type=click.IntRange(min=1), help="Override the feed-forward width.")
@_opt("--batch-size", type=click.IntRange(min=1), help="Micro-batch per device.")
@_opt("--grad-accum", type=click.IntRange(min=1), help="Micro-batches per optimizer step.")
@_opt("--lr", type=click.FloatRange(min=0, min_open=True), help="Peak learning rate.")
@_opt("--warmup-steps", type=click.IntRange(min=0), help="Warmup steps (default: --warmup-ratio x --max-steps).")
@_opt("--warmup-ratio", type=click.FloatRange(0, 1), help="Warmup as a fraction of --max-steps.")
@_opt("--max-steps", type=click.IntRange(min=1), help="Optimizer steps in the whole run (sets the schedule).")
@_opt("--schedule", type=click.Choice(["linear", "poly", "wsd"]), help="Decay after warmup: linear to 0, poly "
      "(power 0.5, NVIDIA's BERT recipe), or wsd: the peak held, then the last --decay-ratio of the steps decay to 0 "
      "(warmup-stable-decay, as ModernBERT).")
@_opt("--decay-ratio", type=click.FloatRange(0, 1, min_open=True), help="With --schedule wsd: share of --max-steps "
      "spent decaying [default: 0.1].")
@_opt("--decay-shape", type=click.Choice(["1-sqrt", "linear"]), help="With --schedule wsd: the decay's shape, "
      "peak x (1 - sqrt(progress)) (Hägele et al. 2024) or linear [default: 1-sqrt].")
@click.option("--decay-only", is_flag=True, help="Re-anneal: the lr starts at --lr at step 0 and decays to 0 over "
              "--max-steps with --decay-shape, no warmup and no stable phase (the same as --schedule wsd "
              "--warmup-steps 0 --decay-ratio 1); for a pre-decay checkpoint given to --init-from.")
@_opt("--optimizer", type=click.Choice(list(OPTIMIZERS)), help="AdamW (fused where available), LAMB, or "
      "StableAdamW (AdamW with per-tensor update clipping and fully decoupled weight decay, as ModernBERT).")
@_opt("--weight-decay", type=click.FloatRange(min=0), help="Decoupled weight decay (not on biases/LayerNorm); "
      "stable-adamw's is per step relative to the peak lr [default: 0.01; 1e-5 with stable-adamw, as ModernBERT].")
@_opt("--adam-betas", type=(click.FloatRange(0, 1, max_open=True), click.FloatRange(0, 1, max_open=True)),
      metavar="B1 B2", help="The optimizer's two betas, e.g. 0.9 0.98 (ModernBERT).")
@_opt("--adam-eps", type=click.FloatRange(min=0, min_open=True), help="The optimizer's epsilon.")
@_opt("--clip-grad", type=click.FloatRange(min=0), help="Clip the global gradient norm (0: off) [default: 1.0; 0 "
      "with stable-adamw, whose per-tensor clipping replaces it].")
@_opt("--seed", type=int, help="Seed of the initial weights, dropout and data order.")
@_opt("--device", type=click.Choice(["auto", "cuda", "cpu"]), help="auto: CUDA when available.")
@_opt("--precision", type=click.Choice(["bf16", "fp32"]), help="Default: bf16 autocast on CUDA, fp32 on CPU.")
@click.option("--compile/--no-compile", default=False, show_default=True, help="torch.compile the model.")
@_opt("--unpad", type=click.Choice(["auto", "on", "off"]), help="on: compute only the real tokens of each batch "
      "(packed; no work on padding); off: padded; auto: what measured faster on the device (padded on CPU).")
@_opt("--masking", type=click.Choice(["static", "dynamic"]), help="static: the shards' masks; dynamic: the original "
      "tokens masked afresh every epoch with bertprep's rules (RoBERTa), exact on resume.")
@_opt("--mask-rate", type=click.FloatRange(0, 1, min_open=True, max_open=True), help="With --masking dynamic: share "
      "of tokens to predict (e.g. 0.3). Default: the shards' --masked-lm-prob.")
@_opt("--max-predictions", type=click.IntRange(min=1), help="With --masking dynamic: most predicted positions per "
      "row. Default: the shards' cap scaled with the rate (20 at 0.15 -> 40 at 0.3).")
@_opt("--mask-rate-schedule", metavar="SCHEDULE", help="With --masking dynamic: the rate per step, e.g. "
      "0.3:0.15@80% (0.3, then 0.15 from 80% of --max-steps on), 0.3@0,0.15@60%,0.05@90% (phases; @N is step N) or "
      "linear:0.3@0,0.15@100% (annealed); logged as mask_rate.")
@_opt("--batch-size-warmup", metavar="START:TOKENS", help="Grow the global batch linearly in steps from START "
      "samples to --batch-size x --grad-accum x ranks over the first TOKENS tokens (k/M/B/T allowed: 768:50B; a "
      "sample counts as the shards' sequence length) or steps (768:2000steps); logged as batch_size. The lr "
      "schedule counts steps.")
@_opt("--rope-theta", metavar="G[,L]", help="ModernBERT: the RoPE base of the global (and local) layers, for a "
      "preset or --init-from (context extension: 160000). Default: the preset's 160000,10000 or --init-from's.")
@_opt("--objective", type=click.Choice(["mlm+nsp", "mlm+sop", "mlm", "rtd", "minilm"]), help="mlm+nsp (BERT), "
      "mlm+sop (ALBERT; shards built with --pairs sop), mlm alone (RoBERTa; exports BertForMaskedLM), rtd: ELECTRA's "
      "replaced-token detection (a small generator MLM fills the masked slots with samples, the discriminator learns "
      "from every token which were replaced; RUN/hf the discriminator, ElectraForPreTraining or for modernbert "
      "ModernBertForTokenClassification, RUN/generator the generator), or minilm: the student learns --teacher's "
      "self-attention relations (MiniLMv2; RUN/hf a plain encoder). Default: what the shards hold.")
@_opt("--teacher", type=EXISTING, help="minilm: the model to distil (our run or a transformers dir; its tokenizer "
      "must be the shards').")
@_opt("--teacher-layer", type=click.IntRange(min=1), help="minilm: the teacher layer (from 1) whose Q-Q, K-K and V-V "
      "relations the student's last layer learns [default: the last; an upper-middle one for large teachers].")
@_opt("--relation-heads", type=click.IntRange(min=1), help="minilm: relation heads the queries, keys and values are "
      "split into [default: the teacher's attention heads].")
@_opt("--hidden-distill-weight", type=click.FloatRange(min=0), help="minilm: add this weight x the MSE of the "
      "student's last hidden states to the teacher layer's (TinyBERT; a learnt projection where widths differ).")
@_opt("--generator-size", type=click.FloatRange(0, 1, min_open=True), help="rtd: the generator's hidden size, heads "
      "and feed-forward width as a fraction of the discriminator's [default: 1/3, ELECTRA-Base; Large used 1/4].")
@_opt("--generator-layers", type=click.FloatRange(0, 1, min_open=True), help="rtd: the generator's depth as a "
      "fraction of the discriminator's [default: 1.0, as ELECTRA].")
@_opt("--discriminator-weight", type=click.FloatRange(min=0, min_open=True), help="rtd: lambda in loss = generator "
      "MLM + lambda x discriminator BCE [default: 50, as ELECTRA].")
@_opt("--embedding-sharing", type=click.Choice(["tied", "gdes"]), help="rtd: tied (ELECTRA: one token table for "
      "both models) or gdes (DeBERTaV3's gradient-disentangled sharing: the discriminator reads stop-gradient(table) "
      "+ a delta of its own, so only the MLM loss moves the table) [default: tied].")
@_opt("--save-every", type=click.IntRange(min=1), help="Checkpoint (and refresh RUN/hf/) every N steps.")
@_opt("--keep-last", type=click.IntRange(min=1), help="Checkpoints to keep.")
@click.option("--eval-data", multiple=True, type=click.Path(exists=True, file_okay=False),
              help="Shard directory to evaluate MLM and pair-head (NSP/SOP) accuracy on (repeatable); "
                   "shards of another pairing give MLM figures only. minilm: the relation losses on their text.")
@_opt("--eval-every", type=click.IntRange(min=0), help="Evaluate every N steps (0: at the end only).")
@_opt("--eval-batches", type=click.IntRange(min=1), help="Batches per evaluation.")
@_opt("--log-every", type=click.IntRange(min=1), help="Write metrics.jsonl every N steps.")
@_opt("--init-from", type=EXISTING, help="Start from our run/checkpoint or a transformers BERT, RoBERTa, XLM-R, "
      "ModernBERT or ELECTRA dir (its tokenizer must be the shards'; its architecture, size and MLM head are kept, "
      "a fresh head said where it has none; the export is its class). A ModernBERT run at a longer "
      "--max-seq-length's shards is context extension.")
@_opt("--new-rows-only-steps", type=click.IntRange(min=0), metavar="K", help="With --init-from a model whose "
      "tokenizer the shards' extends (bertprep extend-tokenizer; the vocabulary grows, each new row the mean of its "
      "pieces' rows): the first K steps train only the new embedding rows, every other weight unchanged.")
@_opt("--init-generator", type=EXISTING, help="With --objective rtd --init-from an ELECTRA discriminator "
      "(ElectraForPreTraining, e.g. google/electra-small-discriminator): its generator's directory "
      "(ElectraForMaskedLM); the two continue as one pair, their embeddings shared.")
@_opt("--head-warmup-steps", type=click.IntRange(min=0), metavar="K", help="With --init-from: the first K steps "
      "train the head alone (a fresh one where the model has none, e.g. a sentence-transformers BertModel), the "
      "encoder keeping its weights bit for bit; then everything trains.")
@_opt("--max-bad-steps", type=click.IntRange(min=1), help="Stop after N non-finite steps in a row.")
@_opt("--stop-at", type=click.IntRange(min=1), help="Save and stop at this step; the schedule still "
      "runs to --max-steps (rerun to continue).")
@_opt("--verify", type=click.Choice(["sha256", "size"]), help="Shard check before training: sha256 of every "
      "file (split across ranks) or sizes only.")
@_opt("--tokenizer", type=EXISTING, help=f"{TOKENIZER_HELP}, for shard dirs that carry none.")
@click.option("--allow-changed-options", is_flag=True, help="On resume, continue with options that differ from "
              "the run's (each change is logged) instead of refusing.")
@click.option("--report-to", multiple=True, type=click.Choice(["none", "tensorboard", "wandb"]),
              help="Also send metrics to TensorBoard (RUN/tensorboard/) or W&B (offline without network); repeatable.")
@progress_option
@user_errors
def pretrain(**options):
    """Pre-train BERT or a ModernBERT-style encoder on shard directories; rerun the same
    command to resume.

    Runs on one device, or on many with torchrun (DDP). Writes RUN/checkpoints/step-N/,
    RUN/hf/ (a transformers BertForPreTraining, BertForMaskedLM or ModernBertForMaskedLM
    dir; with --objective rtd ELECTRA's discriminator, and its generator in
    RUN/generator/; with --objective minilm the student's plain encoder, BertModel,
    ModernBertModel or RobertaModel) and RUN/metrics.jsonl.

    \b
    Example:
      bertmodel pretrain --data shards/ --out run/ --preset base --batch-size 256 --lr 1e-4 --max-steps 100000
      bertmodel pretrain --architecture modernbert --data shards/ --out run/ --masking dynamic --mask-rate 0.3 \
          --schedule wsd --max-steps 100000
      torchrun --nproc-per-node 8 -m bertmodel.cli pretrain --data shards/ --out run/ --optimizer lamb
      bertmodel pretrain --data shards/ --out electra/ --objective rtd --masking dynamic --mask-rate 0.15
      bertprep build-shards corpus.txt --tokenizer teacher/ --pairs none --out text-shards/
      bertmodel pretrain --data text-shards/ --out student/ --objective minilm --teacher teacher/ --preset small
    """
    from bertmodel.train import train

    options["data"] = list(options["data"])
    options["eval_data"] = list(options["eval_data"])
    options["report_to"] = list(options["report_to"])
    last = train(TrainConfig(**options))
    finish_run(options["out"], last, ("step", "loss", "mlm_acc", "nsp_acc", "sop_acc", "disc_acc", "eval_mlm_acc",
                                   "eval_nsp_acc", "eval_sop_acc", "eval_disc_acc", "eval_disc_precision",
                                   "eval_disc_recall"))


@main.command("export-hf", context_settings=CONTEXT_SETTINGS)
@click.argument("checkpoint", type=EXISTING)
@click.argument("out_dir", type=DIR)
@click.option("--tokenizer", type=EXISTING, help=f"{TOKENIZER_HELP}, when the checkpoint carries none.")
@click.option("--overwrite", is_flag=True, help="Replace an earlier export in OUT_DIR (a directory holding "
              "anything an export does not write is refused).")
@click.option("--best", "which", flag_value="best", help="From a run dir: the best model by its --metric-for-best "
              "(RUN/best.json; what RUN/hf, evaluate and predict use) [default for fine-tuning runs].")
@click.option("--latest", "which", flag_value="latest", help="From a run dir: the latest checkpoint [default for "
              "runs without a best model, e.g. pre-training].")
@click.option("--step", type=click.IntRange(min=0), help="From a run dir: the checkpoint of step N.")
@user_errors
def export_hf_command(checkpoint, out_dir, tokenizer, overwrite, which, step):
    """Write a transformers directory (config.json, model.safetensors, tokenizer files)
    of the checkpoint's class (BertForPreTraining, BertForSequenceClassification, ...)
    from a run dir, a checkpoint dir or an HF dir. From a run dir: the best model of a
    fine-tuning run, else the latest checkpoint (--best, --latest or --step N to choose);
    the line printed says which step it is.

    \b
    Example:
      bertmodel export-hf run/checkpoints/step-10000 bert-mini/
      bertmodel export-hf rte-run/ rte-model/ --latest
    """
    from bertmodel.hf import export_to_dir

    if which and step is not None:
        raise click.UsageError(f"--{which} and --step both choose the checkpoint; give one")
    pre, note = export_to_dir(checkpoint, out_dir, tokenizer=tokenizer, overwrite=overwrite, which=which, step=step)
    click.echo(f"wrote {out_dir} ({pre.architecture}, {pre.config.num_hidden_layers} layers, hidden "
               f"{pre.config.hidden_size}" + (f", step {pre.step:,}" if pre.step is not None else "")
               + (f": {note}" if note else "") + ")")


@main.command("shrink", context_settings=CONTEXT_SETTINGS)
@click.argument("teacher", type=EXISTING)
@click.option("--layers", required=True, metavar="N,N,...", help="The teacher's layers the student keeps, counted "
              "from 0, ascending (e.g. 0,2,4: every other layer of a 6-layer teacher, as DistilBERT).")
@click.option("--out", required=True, type=DIR, help="The student's transformers directory.")
@click.option("--overwrite", is_flag=True, help="Replace an earlier export in --out.")
@user_errors
def shrink_command(teacher, layers, out, overwrite):
    """Write a student made of some of TEACHER's layers (DistilBERT's initialisation): the
    kept layers renumbered in order, the embeddings, final norm, pooler and heads copied,
    as TEACHER's own transformers class with its tokenizer (a sentence-transformers
    TEACHER keeps its pooling). TEACHER: a run (its RUN/hf: a fine-tuned run's best
    model, which --teacher reads too), a checkpoint or a transformers directory (bert,
    roberta, xlm-roberta, modernbert, electra).

    \b
    Example:
      bertmodel shrink sst2-run/ --layers 0,2,4 --out sst2-student/
      bertmodel finetune classify --model sst2-student/ --teacher sst2-run/ --train train.tsv --out kd-run/
    """
    from bertmodel.distill.shrink import parse_layers, shrink

    done = shrink(teacher, parse_layers(layers), out, overwrite=overwrite)
    click.echo(f"wrote {out} ({done.architecture}, layers {','.join(map(str, done.layers))} of "
               f"{done.teacher_layers}: {done.teacher_params:,} -> {done.student_params:,} parameters)")


@main.command("fill-mask", context_settings=CONTEXT_SETTINGS)
@click.argument("model", type=EXISTING)
@click.argument("texts", metavar="TEXT...", nargs=-1, required=True)
@click.option("--top-k", type=click.IntRange(min=1), default=5, show_default=True, help="Guesses per [MASK].")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
              help="Where to run the model.")
@user_errors
def fill_mask_command(model, texts, top_k, device):
    """Print the model's top guesses for each [MASK] in each TEXT (the model is loaded
    once). MODEL is a run dir, a checkpoint dir or an HF dir; the tokenizer stored with
    it is used, and its own mask token is the mask ([MASK]; RoBERTa's <mask>, which
    [MASK] also stands for).

    \b
    Example:
      bertmodel fill-mask run/ "The capital of France is [MASK]." --top-k 5
    """
    from bertmodel.inference.fill_mask import fill_masks
    from bertmodel.training.parallel import resolve_device

    for text, guesses in zip(texts, fill_masks(model, list(texts), top_k=top_k, device=resolve_device(device))):
        if len(texts) > 1:
            click.echo(text)
        for n, options in enumerate(guesses, 1):
            click.echo(f"[MASK] {n}:")
            for g in options:
                click.echo(f"  {g.token:<20} {g.prob:.4f}")



@main.command("demo", context_settings=CONTEXT_SETTINGS)
@click.option("--out", type=click.Path(file_okay=False), default="demo-output", show_default=True,
              help="Folder for every artifact (corpus, tokenizer, shards, run, model); a rerun reuses finished steps.")
@click.option("--steps", type=click.IntRange(min=1), default=DEMO_STEPS, show_default=True, help="Pre-training steps.")
@click.option("--preset", type=click.Choice(list(PRESETS)), default="tiny", show_default=True, help="Model size.")
@click.option("--finetune-epochs", type=click.FloatRange(min=0, min_open=True), default=3, show_default=True,
              help="Epochs of the closing fine-tuning step.")
def demo_command(out, steps, preset, finetune_epochs):
    """Run the whole pipeline on a built-in corpus, printing each command it runs.

    The corpus is this Python's standard-library docstrings (no download): train a
    tokenizer, build and inspect shards, pre-train a tiny BERT on the CPU, export it for
    transformers, and fill in some [MASK]s.

    \b
    Example:
      bertmodel demo --out demo-output
    """
    from bertmodel.demo import run_demo

    run_demo(out, steps=steps, preset=preset, finetune_epochs=finetune_epochs)


@main.command("plot", context_settings=CONTEXT_SETTINGS)
@click.argument("runs", nargs=-1, required=True, type=EXISTING)
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="PNG to write [default: RUN/curves.png for one run, curves.png for several].")
@click.option("--overwrite", is_flag=True, help="Replace an existing --out.")
@user_errors
def plot_command(runs, out, overwrite):
    """Plot training loss (raw and smoothed), learning rate and every eval_* metric from
    each RUN's metrics.jsonl into one PNG; several RUNs share the figure, by run name.

    \b
    Example:
      bertmodel plot run-static/ run-dynamic/ --out compare.png
    """
    from pathlib import Path

    from bertmodel.training.plot import plot_runs

    if out is None:
        out = Path(runs[0]) / "curves.png" if len(runs) == 1 and Path(runs[0]).is_dir() else Path("curves.png")
    path = plot_runs(list(runs), out, overwrite=overwrite)
    click.echo(f"wrote {path} ({len(runs)} run{'s' if len(runs) > 1 else ''})")

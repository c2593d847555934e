"""The `bertmodel` command group and what its command modules share (option types,
the run summary); the commands live in commands.py and finetune.py, which add
themselves to `main` here. Library errors (`BertmodelError`) become one-line
`click.ClickException`s (bertprep.cli.kit)."""
from __future__ import annotations

import os
import sys

import click

from bertmodel import __version__
from bertprep.cli.kit import CONTEXT_SETTINGS, OneLineErrors

DIR = click.Path(file_okay=False)
EXISTING = click.Path(exists=True)
TOKENIZER_HELP = ("vocab.txt, tokenizer.json or tokenizer dir (WordPiece; a released one's: byte-level BPE, "
                  "vocab.json + merges.txt, SentencePiece)")


@click.group(cls=OneLineErrors, context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, "--version", prog_name="bertmodel")
def main():
    """Pre-train BERT (masked LM + next sentence prediction, sentence order, or masked LM
    alone) on bertprep shards and export checkpoints that transformers loads as
    BertForPreTraining (BertForMaskedLM for masked LM alone).

    \b
    Example:
      bertmodel pretrain --data shards/ --out run/ --preset mini --max-steps 1000
      bertmodel fill-mask run/ "The capital of France is [MASK]."
    """


def finish_run(out: str, last: dict, keys) -> None:
    """The run's summary line (rank 0 only: under torchrun every rank returns here), and
    after SIGTERM/SIGINT exit 128 + the signal, so schedulers don't read it as success.
    "step" is the step the run reached; figures logged at an earlier step say so."""
    if int(os.environ.get("RANK", "0")) == 0:
        summary = ", ".join(f"{k} {last[k]:.4f}" if isinstance(last[k], float) else f"{k} {last[k]}"
                            for k in keys if k in last)
        if last.get("logged_step") and any(k in last for k in keys if k != "step"):
            summary += f" (figures of step {last['logged_step']})"
        saved = f"; checkpoint {last['checkpoint']}" if last.get("checkpoint") else ""
        click.echo(f"{out}: {summary}{saved}")
    if last.get("stopped_by"):
        sys.exit(128 + int(last["stopped_by"]))


__all__ = ["CONTEXT_SETTINGS", "DIR", "EXISTING", "TOKENIZER_HELP", "finish_run", "main"]

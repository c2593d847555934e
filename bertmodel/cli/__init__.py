"""The `bertmodel` command line: pretrain, finetune, evaluate, predict, export-hf,
fill-mask, demo, plot, eval-suite, squad-to-beir, embed, search. `main` is the group
(group.py); importing this package adds every command to it: pre-training and the tools
around it (commands.py), fine-tuning (finetune.py; the embed and rerank tasks' own
commands in finetune_embed.py and finetune_rerank.py), evaluation and prediction
(inference.py), retrieval's tools (retrieval.py), a checkpoint scored on a suite of tasks
(suite.py). `python -m bertmodel.cli` runs it (torchrun)."""
from bertmodel.cli import commands, finetune, finetune_embed, finetune_rerank, inference, retrieval, suite  # noqa: F401  (each adds its commands to main)
from bertmodel.cli.group import main

__all__ = ["main"]

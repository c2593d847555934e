"""A tiny random BERT in transformers' layout (BertForPreTraining, the "tiny" preset)
with a small w0..wN vocabulary, for the fine-tuning tests, and text over that vocabulary;
running `bertmodel` in-process and checking a one-line refusal."""
import random

import torch
from click.testing import CliRunner

from bertmodel.cli import main

from bertmodel.model.config import BertConfig
from bertmodel.data.shards import tokenizer_info
from bertmodel.hf import export_hf
from bertmodel.model import BertForPreTraining
from bertmodel.data.synthetic import write_small_vocab, write_tokenizer_files

WORDS = 60  # w0 .. w59 after the five specials


def tiny_bert(root):
    vocab = write_small_vocab(root / "vocab.txt", WORDS)
    write_tokenizer_files(root / "tok", vocab)
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.preset("tiny", vocab_size=WORDS + 5))
    return export_hf(model, root / "bert", tokenizer=tokenizer_info(root / "tok"))


def sentence(rng: random.Random, low: int = 3, high: int = 9) -> str:
    return " ".join(f"w{rng.randrange(WORDS)}" for _ in range(rng.randrange(low, high)))


def write_tsv(path, header, rows):
    path.write_text("\t".join(header) + "\n" + "".join("\t".join(map(str, r)) + "\n" for r in rows),
                    encoding="utf-8")
    return path


def invoke(*args):
    """`bertmodel ARGS` in-process; an exception other than the CLI's own exit is raised,
    not left in the result."""
    result = CliRunner().invoke(main, [str(a) for a in args])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def one_line_failure(result, out, names=()) -> str:
    """The command exited 1 with one `Error:` line holding each of `names`, no traceback,
    and left no `out` directory; returns the line."""
    assert result.exit_code == 1, result.output
    assert not (result.exception and not isinstance(result.exception, SystemExit)), repr(result.exception)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for name in names:
        assert str(name) in lines[0], (name, lines[0])
    assert not out.exists(), sorted(p.name for p in out.iterdir())
    return lines[0]

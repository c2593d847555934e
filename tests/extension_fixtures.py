"""Real inputs of the vocabulary-extension tests (test_extend_tokenizer.py,
test_vocab_growth.py): BERT-uncased's vocab.txt, the Korean petitions, WikiText and the
released tokenizers, and the corpora cut from them."""
from __future__ import annotations

import pytest

from shared_data import SHARED_DATA, TOKENIZERS

PETITIONS = SHARED_DATA / "korean" / "petitions" / "petitions_2017-08"
BERT_UNCASED = SHARED_DATA / "bert-base-uncased-vocab.txt"
WIKITEXT = SHARED_DATA / "wikitext-2-raw-train-head.txt"
KOREAN = ("--text-field", "content", "--sentences", "split")  # how the petitions' JSON Lines are read


def skip_without_inputs() -> None:
    if not (PETITIONS.is_file() and BERT_UNCASED.is_file() and WIKITEXT.is_file() and TOKENIZERS.is_dir()):
        pytest.skip(f"shared petitions, vocab, WikiText or tokenizers not found under {SHARED_DATA}",
                    allow_module_level=True)


def petitions_head(out, count: int = 60):
    """The first `count` petitions (JSON Lines; 60 are 187 kB of Korean) written to `out`."""
    out.write_text("".join(PETITIONS.read_text(encoding="utf-8").splitlines(keepends=True)[:count]),
                   encoding="utf-8")
    return out

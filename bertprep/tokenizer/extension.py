"""`bertprep extend-tokenizer`: a tokenizer's vocabulary extended with the N tokens that
save the most pieces on a corpus, every base id kept (vocab_extension.py says what an
extension is; a model trained with the base grows its vocabulary for it, bertmodel's
tasks/vocab_growth.py).

Which tokens, per kind of base:
- WordPiece: whole words and `##` pieces, by merges continued from the base's own
  segmentation of the corpus's words (extension_wordpiece.py);
- BPE: merges continued from the base's own segmentation of the corpus's words,
  appended after the base's (extension_subword.py, piece_merges.py);
- Unigram: pieces learned on the corpus, with their scores (extension_subword.py).

Where: after the base's last id, or with `reuse_unused` first in the base's reserved
`[unusedK]` slots (BERT's vocab.txt, ModernBERT's added tokens), which keep their ids and
take the new tokens in the order chosen.

The corpus is staged once, as train-tokenizer stages it (training.split_corpus, nothing
held out), and tokens per word are measured on it with the base and with the extension
(training.measure_tokens: tokens over the pre-tokenizer's words, the same words for
both). The result is a function of the base and the corpus: same inputs, same bytes
(extension.json records the figures, never a time or a path).
"""
from __future__ import annotations

import json
import pathlib
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Iterable

from tokenizers import decoders

from bertprep.errors import BertprepError
from bertprep.tokenizer.extension_subword import bpe_merges, extended_pipeline, unigram_pieces
from bertprep.tokenizer.extension_wordpiece import wordpiece_additions
from bertprep.tokenizer.files import LoadedTokenizer, build_tokenizer
from bertprep.tokenizer.load import load_tokenizer
from bertprep.tokenizer.piece_merges import count_words
from bertprep.tokenizer.released import ReleasedTokenizer
from bertprep.tokenizer.training import check_output, measure_tokens, publish, split_corpus
from bertprep.tokenizer.training_config import TokenizerTrainingConfig
from bertprep.tokenizer.vocab_extension import is_unused_slot, new_token_ids

EXTENSION_FILE = "extension.json"
SHOWN_TOKENS = 20  # new tokens a summary lists


@dataclass
class ExtensionConfig:
    add: int  # tokens to add
    reuse_unused: bool = False  # fill the base's [unusedK] slots first
    min_frequency: int = 2  # a WordPiece or BPE merge needs a pair seen this often

    def __post_init__(self):
        if self.add < 1:
            raise BertprepError("--add: must be at least 1")
        if self.min_frequency < 0:
            raise BertprepError("--min-frequency: cannot be negative")


@dataclass
class ExtensionReport:
    kind: str  # the base's model: wordpiece, bpe, unigram
    base_vocab_size: int
    vocab_size: int
    requested: int
    added: list[str]  # the new tokens, in the order chosen
    ids: list[int]  # their ids
    reused_slots: int  # of them in [unusedK] slots
    characters: int  # WordPiece: of them characters the base lacked
    tokens_per_word_before: float | None
    tokens_per_word_after: float | None
    unk_rate_before: float | None
    unk_rate_after: float | None
    words: int  # words measured (the pre-tokenizer's)
    corpus_bytes: int
    corpus_documents: int
    base_fingerprint: str
    fingerprint: str
    seconds: float = 0.0
    out_dir: str = ""
    warnings: list[str] = field(default_factory=list)
    byte_level: bool = False  # the tokens are byte-level BPE's

    def shown_tokens(self) -> str:
        """The first new tokens, readable (a byte-level token as its text, where it is whole characters)."""
        shown = [readable(token, self.byte_level) for token in self.added[:SHOWN_TOKENS]]
        more = f" and {len(self.added) - SHOWN_TOKENS:,} more" if len(self.added) > SHOWN_TOKENS else ""
        return ", ".join(shown) + more


def readable(token: str, byte_level: bool) -> str:
    """A byte-level BPE token (`Ġpetition`) as its text (`' petition'`); one that ends
    inside a character's bytes as it is."""
    if not byte_level:
        return token
    text = decoders.ByteLevel().decode([token])
    return token if "\ufffd" in text else repr(text)


def extend_tokenizer(base_path, documents: Iterable[list[str]], config: ExtensionConfig, out_dir,
                     overwrite: bool = False, progress: bool = True) -> ExtensionReport:
    """Extend the tokenizer at `base_path` with `config.add` tokens learned on `documents`
    (each a list of sentences) and write the result to `out_dir` (module docstring).
    Refuses an existing non-empty `out_dir` unless `overwrite`; writes beside it and
    renames, so a crash leaves no half TOKDIR."""
    started = time.perf_counter()
    base = load_tokenizer(base_path)
    out_dir = pathlib.Path(out_dir)
    check_output(out_dir, overwrite)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    work = pathlib.Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.work-", dir=out_dir.parent))
    try:
        split = split_corpus(documents, TokenizerTrainingConfig(heldout_fraction=0.0), work, progress)
        tokens, scores, merges, characters, warnings = _choose(base, split.train_path, config, progress)
        placed = _place(base, tokens, config.reuse_unused)
        if config.reuse_unused and not any(i < base.vocab_size for i in placed) and tokens:
            warnings.append("--reuse-unused: the base has no [unusedK] slots; every new token follows its last id")
        staged = work / "tokdir"
        _write(base, placed, merges, scores, staged)
        extended = load_tokenizer(staged)
        if new_token_ids(base, extended, str(staged), str(base_path)) != sorted(placed):
            raise RuntimeError("the extension's new ids are not the ones placed")
        before = measure_tokens(base.text_tokenizer(), base.special.unk, split.train_path)
        after = measure_tokens(extended.text_tokenizer(), extended.special.unk, split.train_path)
        report = ExtensionReport(
            kind=base.kind, base_vocab_size=base.vocab_size, vocab_size=extended.vocab_size, requested=config.add,
            added=tokens, ids=list(placed), reused_slots=sum(1 for i in placed if i < base.vocab_size),
            characters=characters, tokens_per_word_before=before[1], tokens_per_word_after=after[1],
            unk_rate_before=before[0], unk_rate_after=after[0], words=after[2], corpus_bytes=split.corpus_bytes,
            corpus_documents=split.corpus_documents, base_fingerprint=base.fingerprint(),
            fingerprint=extended.fingerprint(), warnings=warnings, byte_level=base.byte_level)
        recorded = {k: v for k, v in asdict(report).items() if k not in ("seconds", "out_dir")}
        (staged / EXTENSION_FILE).write_text(json.dumps({"config": asdict(config), "report": recorded}, indent=2,
                                                        ensure_ascii=False) + "\n", encoding="utf-8")
        publish(staged, out_dir, overwrite)
        report.seconds, report.out_dir = time.perf_counter() - started, str(out_dir)
        return report
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _choose(base: LoadedTokenizer, train_path, config: ExtensionConfig, progress: bool):
    """(tokens, Unigram scores, BPE merges, characters, warnings) for `base`'s kind."""
    if base.kind not in ("wordpiece", "bpe", "unigram"):
        raise BertprepError(f"{base.source}: a {base.kind} tokenizer; extend-tokenizer extends WordPiece, BPE and "
                            "Unigram ones")
    if base.kind != "unigram":
        with open(train_path, encoding="utf-8", errors="replace") as lines:
            counts = count_words(base, (line.rstrip("\n") for line in lines))
    if base.kind == "wordpiece":
        chosen = wordpiece_additions(base, counts, config.add, config.min_frequency)
        return chosen.tokens, None, None, chosen.characters, chosen.warnings
    if base.kind == "bpe":
        merges = bpe_merges(base, counts, config.add, config.min_frequency)
        known = set(base.tokenizer.get_vocab(with_added_tokens=True))
        tokens, scores = list(dict.fromkeys(result for _, _, result in merges if result not in known)), None
    else:
        pieces = unigram_pieces(base, train_path, config.add, progress)
        tokens, scores, merges = [piece for piece, _ in pieces], dict(pieces), None
    warnings = []
    if len(tokens) < config.add:
        warnings.append(f"added {len(tokens):,} tokens, {config.add - len(tokens):,} fewer than asked: the corpus "
                        "gave no more that the base lacks")
    return tokens, scores, merges, 0, warnings


def _place(base: LoadedTokenizer, tokens: list[str], reuse_unused: bool) -> dict[int, str]:
    """id -> new token: the reserved [unusedK] slots first (ascending ids) when asked, then
    the ids after the base's."""
    slots = [i for i, token in enumerate(base.vocab) if is_unused_slot(token)] if reuse_unused else []
    ids = slots[:len(tokens)] + list(range(base.vocab_size, base.vocab_size + max(0, len(tokens) - len(slots))))
    return dict(zip(ids, tokens))


def _write(base: LoadedTokenizer, placed: dict[int, str], merges, scores, directory: pathlib.Path) -> None:
    """The extension's files in `directory`, in the base's own layout."""
    if base.kind == "wordpiece":
        vocab = list(base.vocab) + [None] * (max(placed) + 1 - base.vocab_size)
        for i, token in placed.items():
            vocab[i] = token
        build_tokenizer(vocab, base.lowercase, base.max_chars_per_word, strip_accents=base.strip_accents).save(directory)
        return
    tokenizer = extended_pipeline(base, placed, merges, scores)
    _save_released(base, tokenizer, set(placed), directory)


def _save_released(base: ReleasedTokenizer, tokenizer, placed: set[int], directory: pathlib.Path) -> None:
    """tokenizer.json, and the base's other files that stay true: its tokenizer_config.json,
    special_tokens_map.json and added_tokens.json without the renamed slots, vocab.json and
    merges.txt rewritten from the pipeline. A SentencePiece model would say the base's
    vocabulary, so it is left out (tokenizer.json is what fast tokenizers read)."""
    directory.mkdir(parents=True, exist_ok=True)
    config = dict(base.config)
    if isinstance(config.get("added_tokens_decoder"), dict):
        config["added_tokens_decoder"] = {k: v for k, v in config["added_tokens_decoder"].items()
                                          if int(k) not in placed}
    files = {"tokenizer.json": tokenizer.to_str(pretty=True) + "\n",
             "tokenizer_config.json": json.dumps(config, indent=2, ensure_ascii=False) + "\n"}
    sources = base.source_files
    if "special_tokens_map.json" in sources:
        files["special_tokens_map.json"] = pathlib.Path(sources["special_tokens_map.json"]).read_text(encoding="utf-8")
    if "added_tokens.json" in sources:
        added = json.loads(pathlib.Path(sources["added_tokens.json"]).read_text(encoding="utf-8"))
        files["added_tokens.json"] = json.dumps({t: i for t, i in added.items() if i not in placed}, indent=2,
                                                ensure_ascii=False) + "\n"
    if "vocab.json" in sources and "merges.txt" in sources:
        model = json.loads(tokenizer.to_str())["model"]
        files["vocab.json"] = json.dumps(model["vocab"], ensure_ascii=False) + "\n"
        files["merges.txt"] = "#version: 0.2\n" + "".join(
            (m if isinstance(m, str) else " ".join(m)) + "\n" for m in model["merges"])
    for name, text in files.items():
        (directory / name).write_text(text, encoding="utf-8")

"""The tokens a BPE or Unigram tokenizer gains from a corpus, and its pipeline with them.

BPE (RoBERTa's, ModernBERT's byte-level ones): merges continued from the base's own
segmentation of the corpus's words (piece_merges.py, tokenizers' BpeTrainer over the base's
pieces), appended after the base's merges, in the order learned. Appended merges rank after
every base merge, so a word first encodes as the base encodes it and the new merges then
apply, in order, to exactly the pieces they were learned on: a base text encodes as before,
and every new merge can fire. (Merges learned from the bytes up, as a fresh BpeTrainer
would, take other paths than the base's: ranked after them, many never apply. On the
standard library's docstrings, 500 of those gave roberta-base 1.8% fewer tokens per word,
500 continued merges 3.4%.) A merge
whose result the base already has, or an earlier merge made, is appended too and costs no
new token.

Unigram (SentencePiece's, as XLM-R's and DeBERTa-v3's): UnigramTrainer on the corpus
through the base's pipeline gives pieces with scores (log probabilities on the corpus).
Each piece the base lacks is worth (how often the corpus model uses it) x (pieces the
base needs for its text - 1); the N worth most are added with their scores, rounded to
1e-6 as unigram_training.py does for its trainer's last-bit noise. Viterbi then takes a
new piece wherever its score beats the base pieces that spell the same text.

The pipeline is the base's tokenizer.json with the new tokens in its model (BPE: the
vocab and the merges; Unigram: the pieces), at the ids the caller placed them: after
the base's last id, or in an `[unusedK]` slot, whose added-token entry goes. A Unigram
model's pieces are a list indexed by id, so ids the base gives to added tokens after its
pieces become pieces too (the token's own text at the base's lowest score: the added token
is matched before the model, as before); in a BPE model such ids are entered too, as
tokenizers would otherwise renumber the added tokens after the new model tokens.
"""
from __future__ import annotations

import json
import sys
from collections import Counter

from tokenizers import Tokenizer, models, trainers

from bertprep.errors import BertprepError
from bertprep.tokenizer.guards import train_interruptibly
from bertprep.tokenizer.piece_merges import continued_merges
from bertprep.tokenizer.released import ReleasedTokenizer
from bertprep.tokenizer.unigram_training import SCORE_DECIMALS
from bertprep.tokenizer.vocab_extension import base_pieces

ENCODE_BATCH_LINES = 4096


def bpe_merges(base: ReleasedTokenizer, counts: Counter, budget: int,
               min_frequency: int) -> list[tuple[str, str, str]]:
    """(left, right, result) of the merges to append for the words `counts` (as the base's
    pipeline splits them), in order, up to the one that makes the `budget`-th new token
    (module docstring)."""
    model = json.loads(base.tokenizer.to_str())["model"]
    prefix = model.get("continuing_subword_prefix") or ""

    def spell(pieces: list[str]) -> str:  # as tokenizers' BPE joins a merge's two sides
        return pieces[0] + "".join(p[len(prefix):] if prefix and p.startswith(prefix) else p for p in pieces[1:])

    words = [([piece.value for piece in base.tokenizer.model.tokenize(word)], freq) for word, freq in counts.items()]
    known = set(base.tokenizer.get_vocab(with_added_tokens=True))
    return continued_merges(words, budget, min_frequency, known, spell)


def unigram_pieces(base: ReleasedTokenizer, train_path, budget: int, progress: bool) -> list[tuple[str, float]]:
    """Up to `budget` (piece, score) pairs learned on the lines of `train_path` that
    `base` lacks, the most pieces saved first (module docstring)."""
    scratch = Tokenizer(models.Unigram())
    scratch.normalizer, scratch.pre_tokenizer = base.tokenizer.normalizer, base.tokenizer.pre_tokenizer
    unk = base.vocab[base.special.unk] if base.special.unk is not None else None
    trainer = trainers.UnigramTrainer(vocab_size=max(4 * budget, 8_000), show_progress=progress and sys.stderr.isatty(),
                                      special_tokens=[unk] if unk else [], unk_token=unk)
    try:
        train_interruptibly(scratch, [str(train_path)], trainer)
    except Exception as exc:  # tokenizers raises plain Exceptions
        raise BertprepError(f"the Unigram trainer could not learn pieces from the corpus ({str(exc).splitlines()[0]})")
    trained = json.loads(scratch.to_str())["model"]["vocab"]
    known = set(base.tokenizer.get_vocab(with_added_tokens=True))
    candidates = {piece: round(score, SCORE_DECIMALS) for piece, score in trained if piece not in known and piece != unk}
    uses = _piece_uses(scratch, train_path)
    pieces = sorted(candidates)
    saved = {piece: uses[piece] * (len(split) - 1) for piece, split in zip(pieces, base_pieces(base, pieces))}
    ranked = sorted((piece for piece in pieces if saved[piece] > 0), key=lambda piece: (-saved[piece], piece))
    return [(piece, candidates[piece]) for piece in ranked[:budget]]


def _piece_uses(tokenizer: Tokenizer, path) -> Counter:
    """piece -> how often `tokenizer` uses it on the lines of `path`."""
    uses: Counter = Counter()
    with open(path, encoding="utf-8", errors="replace") as handle:
        lines = [line.rstrip("\n") for line in handle]
    for start in range(0, len(lines), ENCODE_BATCH_LINES):
        for encoding in tokenizer.encode_batch(lines[start:start + ENCODE_BATCH_LINES], add_special_tokens=False):
            uses.update(encoding.tokens)
    return uses


def extended_pipeline(base: ReleasedTokenizer, placed: dict[int, str], merges: list[tuple[str, str, str]] | None = None,
                      scores: dict[str, float] | None = None) -> Tokenizer:
    """The base's pipeline with `placed` (id -> new token) in its model: BPE with
    `merges` appended, Unigram with each piece's score from `scores` (module docstring)."""
    data = json.loads(base.tokenizer.to_str())
    # A renamed [unusedK] slot is no added token any more: its id is the model's.
    data["added_tokens"] = [added for added in data.get("added_tokens") or [] if added["id"] not in placed]
    model = data["model"]
    if base.kind == "bpe":
        # tokenizers gives an added token that is not in the model the next id after the
        # model's (and the added tokens before it), not the id it is saved with: with new
        # model tokens those would shift. In the model too, each keeps its id (no merge
        # makes one, so no text reaches it through the model).
        taken = set(model["vocab"].values())
        model["vocab"].update({added["content"]: added["id"] for added in data["added_tokens"]
                               if added["id"] not in taken and added["content"] not in model["vocab"]})
        model["vocab"].update({token: i for i, token in placed.items()})
        as_strings = bool(model["merges"]) and isinstance(model["merges"][0], str)
        model["merges"].extend(f"{a} {b}" if as_strings else [a, b] for a, b, _ in merges or ())
    elif base.kind == "unigram":
        _place_pieces(model["vocab"], placed, scores or {}, base)
    else:
        raise BertprepError(f"{base.source}: extending a {base.kind} tokenizer is not supported")
    return Tokenizer.from_str(json.dumps(data, ensure_ascii=False))


def _place_pieces(pieces: list, placed: dict[int, str], scores: dict[str, float], base: ReleasedTokenizer) -> None:
    """`placed` into the piece list. No score goes below the base's lowest: tokenizers'
    Unigram scores an unknown character at that minimum - 10, and a lower minimum would
    change how the base's own pieces cover text around one."""
    lowest = min(score for _, score in pieces)
    for i in range(len(pieces), max(placed, default=-1) + 1):
        if i not in placed:  # an id the base gives an added token after its pieces
            if base.vocab[i] is None:
                raise BertprepError(f"{base.source}: id {i:,} has no token; cannot place pieces after it")
            pieces.append([base.vocab[i], lowest])
        else:
            pieces.append(None)
    for i, piece in placed.items():
        pieces[i] = [piece, max(scores[piece], lowest)]

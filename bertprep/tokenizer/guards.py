"""What keeps WordPiece training bounded and stoppable.

- `LongWords` drops words longer than `max_chars_per_word` from the training text before
  the trainer counts them. WordPiece encodes such a word as [UNK] whatever the
  vocabulary holds, so it can teach nothing; yet the trainer's merge loop works on it in
  time that grows with the square of its length (one 300,000-character "word": about
  25 s; 1,000,000 characters: about 6 CPU minutes) and fills the vocabulary with its
  pieces.
- `train_interruptibly` runs the trainer where Ctrl-C reaches it. The Rust trainer
  checks no signals, so called from the main thread it holds a KeyboardInterrupt back
  until it returns.
"""
from __future__ import annotations

import os
import re
import threading

# Characters that always end a word: BertNormalizer turns each into a space (Unicode
# White_Space minus the control characters it deletes: \v, \f and U+0085 join their
# neighbours instead). tests/test_train_tokenizer_guards.py checks this against the normalizer.
WORD_BOUNDARIES = " \t\n\r\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
# Accent stripping (NFD) makes a word at most 3 times longer than its raw characters (a
# Hangul syllable becomes 3 jamo; measured over every code point with tokenizers 0.23);
# lower-casing alone at most twice ("İ" -> "i" + U+0307); the cased normalizer never
# lengthens one.
UNCASED_GROWTH = 3
LOWERCASE_GROWTH = 2


class LongWords:
    """`filter(text)`: the text without the words the tokenizer would encode as [UNK] for
    their length. Counts what it dropped (`dropped`, `longest`).

    Only runs of non-boundary characters long enough to hold such a word are looked at:
    each is normalized and pre-tokenized as the trainer would, and rewritten as its
    remaining words (normalized, which the trainer's normalizer leaves as they are).
    Runs without a long word are kept as written, so ordinary text is untouched.
    """

    def __init__(self, max_chars_per_word: int, lowercase: bool, normalizer, pre_tokenizer,
                 strip_accents: bool | None = None):
        self.max_chars = max_chars_per_word
        self.normalizer, self.pre_tokenizer = normalizer, pre_tokenizer
        strip = lowercase if strip_accents is None else strip_accents
        growth = UNCASED_GROWTH if strip else LOWERCASE_GROWTH if lowercase else 1
        shortest = max_chars_per_word // growth
        self.candidate = re.compile(f"[^{WORD_BOUNDARIES}]{{{shortest + 1},}}")
        self.dropped = 0
        self.longest = 0

    def filter(self, text: str) -> str:
        """The text without its long words; `text` itself when it has none."""
        if self.candidate.search(text) is None:
            return text
        dropped = self.dropped
        filtered = self.candidate.sub(self._without_long_words, text)
        return filtered if self.dropped > dropped else text

    def _without_long_words(self, run: re.Match) -> str:
        words = [w for w, _ in self.pre_tokenizer.pre_tokenize_str(self.normalizer.normalize_str(run.group()))]
        kept = [w for w in words if len(w) <= self.max_chars]
        if len(kept) == len(words):
            return run.group()
        self.dropped += len(words) - len(kept)
        self.longest = max(self.longest, *(len(w) for w in words))
        return " ".join(kept)

    def filter_file(self, path, chunk_chars: int = 1 << 22) -> int | None:
        """Rewrite the UTF-8 text file `path` without its long words, in chunks cut at line
        ends (no word spans one). Returns its new size in bytes, or None when it had no
        long word: then it is only read, never copied."""
        staged, target, size = f"{path}.filtered", None, 0
        try:
            with open(path, encoding="utf-8", errors="replace", newline="") as source:
                pending = ""
                while True:
                    chunk = source.read(chunk_chars)
                    pending += chunk
                    cut = len(pending) if not chunk else pending.rfind("\n") + 1
                    if cut:
                        piece, pending = pending[:cut], pending[cut:]
                        kept = self.filter(piece)
                        if kept is not piece and target is None:
                            # The first long word: what came before it is copied unchanged.
                            target = open(staged, "wb")
                            _copy_prefix(path, target, size)
                        data = kept.encode("utf-8")
                        if target is not None:
                            target.write(data)
                        size += len(data)
                    if not chunk:
                        break
        except BaseException:
            if target is not None:
                target.close()
                os.remove(staged)
            raise
        if target is None:
            return None
        target.close()
        os.replace(staged, path)
        return size

    def warning(self) -> str | None:
        if not self.dropped:
            return None
        one = self.dropped == 1
        return (f"left out {self.dropped:,} word{'' if one else 's'} longer than --max-chars-per-word "
                f"{self.max_chars:,} ({'' if one else 'the longest '}{self.longest:,} characters): "
                f"{'it encodes' if one else 'they encode'} as [UNK] anyway")


def _copy_prefix(path, target, size: int, block: int = 1 << 22) -> None:
    """Copy the first `size` bytes of the file `path` into the binary stream `target`."""
    with open(path, "rb") as source:
        while size > 0:
            data = source.read(min(block, size))
            if not data:
                break
            target.write(data)
            size -= len(data)


def train_interruptibly(tokenizer, files: list[str], trainer) -> None:
    """`tokenizer.train(files, trainer)`, stopped by Ctrl-C within a fraction of a second.

    The trainer releases the GIL, so it runs in a daemon thread while the main thread
    waits and takes the signal. On KeyboardInterrupt the thread is abandoned (nothing can
    stop it): the command exits and it dies with the process; a library caller that
    carries on leaves it to finish on its own, its result unused.
    """
    failure: list[BaseException] = []

    def run():
        try:
            tokenizer.train(files, trainer)
        except BaseException as exc:  # re-raised in the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=run, name="wordpiece-trainer", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.1)
    if failure:
        raise failure[0]

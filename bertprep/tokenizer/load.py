"""`load_tokenizer`: any tokenizer a released encoder or bertprep brings, by its files.

A Google `vocab.txt`, a WordPiece `tokenizer.json` or a TOKDIR go to the WordPiece loader
(files.py: behaviour and fingerprints as they always were); a `tokenizer.json` of another
model type, `vocab.json` + `merges.txt` or a SentencePiece model go to released.py.
"""
from __future__ import annotations

import pathlib

from bertprep.errors import BertprepError, describe_path
from bertprep.tokenizer.files import LoadedTokenizer, load_wordpiece
from bertprep.tokenizer.released import is_released_tokenizer, load_released


def load_tokenizer(path, lowercase: bool | None = None, max_chars_per_word: int | None = None,
                   strip_accents: bool | None = None) -> LoadedTokenizer:
    """The tokenizer in `path` (a directory or a file). `lowercase`, `strip_accents` and
    `max_chars_per_word` override what WordPiece files say; other kinds carry their
    normalisation in their files, and an override is refused rather than ignored."""
    path = pathlib.Path(path)
    if path.exists() and is_released_tokenizer(path):
        overrides = [name for name, value in (("lowercase", lowercase), ("strip_accents", strip_accents),
                                              ("max_chars_per_word", max_chars_per_word)) if value is not None]
        if overrides:
            raise BertprepError(f"{describe_path(path)}: {overrides[0]} applies to WordPiece tokenizers only; "
                                f"this one's normalisation is in its files")
        return load_released(path)
    return load_wordpiece(path, lowercase=lowercase, max_chars_per_word=max_chars_per_word,
                          strip_accents=strip_accents)

"""What bertmodel keeps of a tokenizer (`TokenizerInfo`: its size, special ids, kind,
fingerprint and the files a run copies into its checkpoints and exports) and the readers
that fill it from a shard, checkpoint or transformers directory, a tokenizer.json or a
bare vocab file.

A WordPiece tokenizer is read as it always was: the manifest's fields, else vocab.txt and
tokenizer_config.json, with BERT's special token names. Any other kind (byte-level BPE
as RoBERTa's and ModernBERT's, SentencePiece Unigram as DeBERTa-v3's) is read by
bertprep's loader, which takes the special tokens, templates and normalisation from the
files; nothing about it is assumed from BERT. Its files are the ones a released directory
holds (bertprep's RELEASED_FILES and tokenizer.json), as bertprep's `save` writes them:
a tokenizer.json and a tokenizer_config.json that names the special tokens and a class
AutoTokenizer resolves without the source's config.json (roberta-base's says neither;
a copy in a checkpoint or beside a BERT-architecture model must still load as a RoBERTa
tokenizer). A directory that already is such a copy (an export, a shard set, a
ModernBERT release) is used in place; any other is saved once to a scratch folder named
by its contents (the fingerprint and the config).
"""
from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from bertmodel.errors import BertmodelError
from bertprep.errors import BertprepError
from bertprep.storage import sha256_file
from bertprep.tokenizer import (RELEASED_FILES, SPECIAL_TOKENS_BY_KEY, LoadedTokenizer, ReleasedTokenizer,
                                infer_lowercase, is_released_tokenizer, load_tokenizer, resolve_strip_accents)
from bertprep.tokenizer import TOKENIZER_FILES as WORDPIECE_FILES

# Every file a tokenizer of any kind is made of: what checkpoints copy and exports may hold.
TOKENIZER_FILES = tuple(dict.fromkeys((*WORDPIECE_FILES, "tokenizer.json", *RELEASED_FILES)))


@dataclass
class TokenizerInfo:
    vocab_size: int
    special_ids: dict[str, int]  # pad, unk, cls, sep, mask: those the tokenizer has
    fingerprint: str | None = None  # the manifest's; for other kinds than WordPiece, also the files'
    vocab_sha256: str | None = None  # of vocab.txt, when there is one
    lowercase: bool | None = None
    strip_accents: bool | None = None  # None: follows lowercase (Google's convention)
    files: dict[str, Path] = field(default_factory=dict)  # name -> path, for copying into RUN/hf
    kind: str = "wordpiece"  # "wordpiece" | "bpe" | "unigram" | "wordlevel" (bertprep's LoadedTokenizer.kind)

    def same_as(self, other: "TokenizerInfo") -> str | None:
        """None when the two are the same tokenizer, else what differs (one line)."""
        if self.vocab_size != other.vocab_size:
            return f"vocab size {self.vocab_size:,} vs {other.vocab_size:,}"
        if self.kind != other.kind:
            return f"a {self.kind} tokenizer vs a {other.kind} one"
        if self.fingerprint and other.fingerprint and self.fingerprint != other.fingerprint:
            return f"tokenizer fingerprint {self.fingerprint[:12]} vs {other.fingerprint[:12]}"
        if self.vocab_sha256 and other.vocab_sha256 and self.vocab_sha256 != other.vocab_sha256:
            return "vocab.txt contents differ"
        if self.lowercase is not None and other.lowercase is not None and self.lowercase != other.lowercase:
            return f"lowercase {self.lowercase} vs {other.lowercase}"
        if self.strips_accents is not None and other.strips_accents is not None \
                and self.strips_accents != other.strips_accents:
            return f"strip_accents {self.strips_accents} vs {other.strips_accents}"
        return None

    @property
    def strips_accents(self) -> bool | None:
        """Whether accents are stripped (strip_accents, else as lowercase; None: unknown)."""
        return self.lowercase if self.strip_accents is None else self.strip_accents

    def load(self) -> LoadedTokenizer:
        """The tokenizer itself (bertprep's loader on these files), for its templates,
        special tokens and encodings."""
        return loaded_tokenizer(tokenizer_path(self))

    def require_mask(self, where: str) -> int:
        """The mask token's id, or the one-line error a masked-LM use of a tokenizer without
        one needs (`where`: what is being asked of it, e.g. the model directory)."""
        if "mask" not in self.special_ids:
            raise BertmodelError(f"{where}: the tokenizer has no mask token ([MASK] / <mask>); masked language "
                                 "modelling needs one")
        return self.special_ids["mask"]


def read_json(path: Path, what: str) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BertmodelError(f"{path} is missing: {what}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BertmodelError(f"{path} is not valid JSON ({exc})") from None


# Loaded tokenizers by path and the files' sizes and times: a 50,000-token BPE takes about
# a second to load (a SentencePiece model's conversion several), and every encode call
# of a run or of an embedder names its tokenizer by path.
_LOADED: dict[tuple, LoadedTokenizer] = {}


def loaded_tokenizer(path) -> LoadedTokenizer:
    """bertprep's loader on `path`, once per version of its files; its errors as ours."""
    path = Path(path)
    key = (str(path.resolve()), _stamp(path))
    if key not in _LOADED:
        try:
            _LOADED[key] = load_tokenizer(path)
        except BertprepError as exc:
            raise BertmodelError(str(exc)) from None
    return _LOADED[key]


def _stamp(path: Path) -> tuple:
    paths = [path / n for n in (*TOKENIZER_FILES, "config.json")] if path.is_dir() else [path]
    return tuple((p.name, s.st_size, s.st_mtime_ns) for p in paths if p.is_file() and (s := p.stat()))


def has_tokenizer(directory: Path) -> bool:
    """Whether a model or checkpoint directory holds a tokenizer of any kind (a vocab.txt,
    a tokenizer.json, vocab.json + merges.txt or a SentencePiece model)."""
    directory = Path(directory)
    return (any((directory / name).is_file() for name in ("vocab.txt", "tokenizer.json"))
            or (directory.is_dir() and is_released_tokenizer(directory)))


def tokenizer_info(directory: Path, manifest: dict | None = None) -> TokenizerInfo:
    """The tokenizer of a shard, checkpoint or Hugging Face directory (or a tokenizer
    file): a WordPiece one from the manifest when it says, else from the vocab.txt stored
    there; any other kind from its files (module docstring)."""
    directory = Path(directory)
    tok = (manifest or {}).get("tokenizer") or {}
    if directory.exists() and is_released_tokenizer(directory):
        return _released_info(directory, tok)
    if directory.is_dir() and not (directory / "vocab.txt").is_file() and (directory / "tokenizer.json").is_file():
        # A model directory saved by transformers 5 holds tokenizer.json and no vocab.txt.
        directory = directory / "tokenizer.json"
    if directory.is_file() and directory.suffix == ".json":
        # A tokenizer.json: bertprep reads it (and refuses one that isn't); its files,
        # saved by bertprep, are what RUN/hf gets. The fingerprint covers the vocabulary
        # and settings, all that `save` writes from.
        loaded = loaded_tokenizer(directory)
        directory, _ = _scratch_copy(loaded, f"wordpiece-{loaded.fingerprint()[:32]}")
    if directory.is_file():  # a bare vocabulary file, whatever its name: used as vocab.txt
        files = {"vocab.txt": directory}
    else:
        files = {n: directory / n for n in WORDPIECE_FILES if (directory / n).is_file()}
    vocab = files.get("vocab.txt")
    tokens = vocab.read_text(encoding="utf-8").splitlines() if vocab else None
    if tokens is not None and not any(t.strip() for t in tokens):
        raise BertmodelError(f"{vocab}: empty vocabulary")
    vocab_size = tok.get("vocab_size") or (len(tokens) if tokens else None)
    if vocab_size is None:
        raise BertmodelError(f"{directory}: no tokenizer: the manifest names none and there is no "
                             "vocab.txt, tokenizer.json or SentencePiece model (pass --tokenizer)")
    special = {k: v for k, v in (tok.get("special_ids") or {}).items() if v is not None}
    if tokens and len(special) < len(SPECIAL_TOKENS_BY_KEY):
        index = {t: i for i, t in enumerate(tokens)}
        for key, token in SPECIAL_TOKENS_BY_KEY.items():
            if key not in special and token in index:
                special[key] = index[token]
    if tokens is not None:
        missing = [token for key, token in SPECIAL_TOKENS_BY_KEY.items() if key not in special and key != "pad"]
        if missing:
            raise BertmodelError(f"{vocab}: vocabulary lacks {', '.join(missing)}")
    special.setdefault("pad", 0)
    lowercase, strip_accents = _casing(tok, files, tokens)
    return TokenizerInfo(
        vocab_size=int(vocab_size), special_ids={k: int(v) for k, v in special.items()},
        fingerprint=tok.get("fingerprint"), vocab_sha256=sha256_file(vocab) if vocab else None,
        lowercase=lowercase, strip_accents=strip_accents, files=files, kind=tok.get("kind") or "wordpiece")


def _released_info(path: Path, manifest_tokenizer: dict) -> TokenizerInfo:
    loaded = loaded_tokenizer(path)
    fingerprint = loaded.fingerprint()
    return TokenizerInfo(
        vocab_size=loaded.vocab_size,
        special_ids={k: int(v) for k, v in loaded.special.as_dict().items() if v is not None},
        # A shard set's own record first: the files' pipeline, serialised by another
        # `tokenizers` release, may hash otherwise and the shards are what they are.
        fingerprint=manifest_tokenizer.get("fingerprint") or fingerprint,
        lowercase=loaded.lowercase, strip_accents=loaded.strip_accents,
        files=_saved_files(path, loaded, fingerprint), kind=loaded.kind)


def _saved_files(path: Path, loaded: ReleasedTokenizer, fingerprint: str) -> dict[str, Path]:
    """The tokenizer's files as bertprep's `save` writes them: the directory's own when
    it already holds that (tokenizer.json and a tokenizer_config.json naming what `save`
    names), else a copy saved under the temporary folder, named by its contents."""
    if path.is_dir() and (path / "tokenizer.json").is_file() and (path / "tokenizer_config.json").is_file():
        try:
            config = json.loads((path / "tokenizer_config.json").read_text(encoding="utf-8"))
        except ValueError:
            config = None
        if config == loaded.config:
            return {n: path / n for n in TOKENIZER_FILES if (path / n).is_file()}
    # Named by what it holds: the pipeline and the config (two sources may differ in
    # tokenizer_config.json alone, e.g. model_max_length, and must not share a copy).
    config_hash = hashlib.sha256(json.dumps(loaded.config, sort_keys=True).encode("utf-8")).hexdigest()
    copy, names = _scratch_copy(loaded, f"{fingerprint[:20]}-{config_hash[:12]}")
    return {n: copy / n for n in names}


def _scratch_copy(loaded: LoadedTokenizer, name: str) -> tuple[Path, list[str]]:
    """A tokenizer's files saved to a folder under the temporary one, named by `name`
    (returned with the files' names),
    which the caller derives from what the files hold: loading the same tokenizer again
    rewrites the same folder rather than leaving one more behind. Each file is written
    atomically, so concurrent loads (the ranks of one run) write the same bytes safely."""
    copy = Path(tempfile.gettempdir()) / f"bertmodel-tokenizer-{name}"
    return copy, loaded.save(copy)


def tokenizer_path(tok: TokenizerInfo) -> Path:
    """A path bertprep's loader reads for this tokenizer (the directory when it holds
    tokenizer_config.json, so lower-casing and a released tokenizer's special tokens are
    read from it)."""
    for name in ("tokenizer.json", "vocab.txt", *RELEASED_FILES):
        if name in tok.files:
            path = Path(tok.files[name])
            return path.parent if "tokenizer_config.json" in tok.files or tok.kind != "wordpiece" else path
    raise BertmodelError("the tokenizer has no vocab.txt, tokenizer.json or SentencePiece model")


def _casing(tok: dict, files: dict[str, Path], tokens: list[str] | None) -> tuple[bool | None, bool | None]:
    """(lowercase, strip_accents): the manifest's, else tokenizer_config.json's, else as
    bertprep's loader reads these files (a bare vocab.txt is uncased when no token has an
    upper-case letter, and strips accents exactly when uncased, as Google's tokenizer), so
    an export and fill-mask normalise exactly as training did."""
    lowercase, strip = tok.get("lowercase"), tok.get("strip_accents")
    if "tokenizer_config.json" in files:
        config = read_json(files["tokenizer_config.json"], "")
        if lowercase is None:
            lowercase = config.get("do_lower_case")
        if strip is None and isinstance(config.get("strip_accents"), bool):
            strip = config["strip_accents"]
    if lowercase is not None and strip is not None:
        return lowercase, strip
    if "tokenizer.json" in files:
        loaded = loaded_tokenizer(files["tokenizer.json"])
        file_lowercase, file_strip = loaded.lowercase, loaded.strip_accents
    elif tokens is not None:
        file_lowercase, file_strip = infer_lowercase(tokens), None
    else:
        return lowercase, strip
    return (file_lowercase if lowercase is None else lowercase,
            resolve_strip_accents(file_lowercase, file_strip, lowercase, strip))

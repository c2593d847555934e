"""Load, build and save a BERT WordPiece tokenizer (the reference is `tokenizers`).

A `LoadedTokenizer` wraps a `tokenizers.Tokenizer` whose pipeline is rebuilt from four
things only: the vocabulary (id -> token), `lowercase`, `strip_accents` and
`max_chars_per_word`. So a Google `vocab.txt`, a `tokenizer.json` and a TOKDIR all give
the same pipeline:

- `BertNormalizer(clean_text, handle_chinese_chars, strip_accents, lowercase)`. Google's
  tokenizer strips accents exactly when it lower-cases, and so does a bare vocab.txt
  here; a TOKDIR may say otherwise (tokenizer.json's normalizer, tokenizer_config.json's
  `strip_accents`, which transformers' BertTokenizer reads): accent stripping turns
  Hangul into jamo and deletes letters of other scripts (scripts.py);
- `BertPreTokenizer` (whitespace, then every punctuation char on its own);
- `WordPiece(unk_token="[UNK]", continuing_subword_prefix="##",
  max_input_chars_per_word=max_chars_per_word)`, default 200 as Google's tokenizer
  (the `tokenizers` default is 100);
- the `WordPiece` decoder and a `[CLS] $A [SEP]` / `[CLS] $A [SEP] $B:1 [SEP]:1`
  post-processor whose ids are looked up in the vocabulary;
- `encode_special_tokens = True`: a literal "[MASK]" in text is tokenized as text
  (`[`, `mask`, `]`), as Google's tokenizer does.

Known remaining differences from Google's `tokenization.py` (REFERENCE.md §6); on
ordinary English the two agree token for token (tests/test_tokenizer_google.py checks
every line of the shared corpora, including words of 101-200 characters):

- private-use characters, CJK Extension E (U+2B820-2B91F) and about 500 characters added
  to Unicode after Python's/Rust's tables diverged are classified differently;
- Greek final sigma: Python's `str.lower()` maps a word-final "Σ" to "ς", the Rust
  normalizer maps every "Σ" to "σ";
- `encode_special_tokens` is not stored in `tokenizer.json`: a `tokenizers.Tokenizer`
  loaded with `from_file`, and transformers' `BertTokenizer`, treat a literal "[MASK]" in
  text as the special token. `load_tokenizer` sets it back.
- transformers 5's `BertTokenizer` (what `AutoTokenizer.from_pretrained(TOKDIR)` gives)
  rebuilds its WordPiece model with `max_input_chars_per_word=100`, whatever
  `tokenizer.json` says: it maps words of 101-200 characters to `[UNK]`.

The fingerprint (`LoadedTokenizer.fingerprint`) is the sha256 of the UTF-8 JSON text
`["bertprep-tokenizer/1", lowercase, max_chars_per_word, [token0, token1, ...]]` written
with `ensure_ascii=False` and separators `(",", ":")` when accents are stripped exactly
when lower-casing (every tokenizer before the two were separate keeps its fingerprint),
else of `["bertprep-tokenizer/2", lowercase, strip_accents, max_chars_per_word, [...]]`:
two tokenizers with the same fingerprint encode every text identically.
"""
from __future__ import annotations

import hashlib
import json
import pathlib
import unicodedata
from dataclasses import asdict, dataclass

import numpy as np
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from bertprep.storage import stores as storage
from bertprep.storage import write_bytes_atomic
from bertprep.errors import BertprepError, describe_path
from bertprep.tokenizer.templates import Template, bert_template

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# The same five by SpecialIds' field names (pad, unk, ...), and by transformers' names in the
# order its special_tokens_map.json lists them (what `save` and every export write).
SPECIAL_TOKENS_BY_KEY = dict(zip(("pad", "unk", "cls", "sep", "mask"), SPECIAL_TOKENS))
SPECIAL_TOKENS_MAP = {f"{key}_token": SPECIAL_TOKENS_BY_KEY[key] for key in ("unk", "sep", "pad", "cls", "mask")}
DEFAULT_MAX_CHARS_PER_WORD = 200  # Google's tokenization.py; `tokenizers` defaults to 100
FINGERPRINT_VERSION = "bertprep-tokenizer/1"
FINGERPRINT_VERSION_STRIP = "bertprep-tokenizer/2"  # strip_accents differs from lowercase
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


@dataclass(frozen=True)
class SpecialIds:
    """Ids of the five special tokens, looked up in the vocabulary (a released
    tokenizer may lack some: None; WordPiece vocabularies always have all five)."""

    pad: int | None
    unk: int | None
    cls: int
    sep: int
    mask: int | None

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def is_bracketed_special(token: str) -> bool:
    """`[PAD]`, `[unused7]`, `[foo]`: tokens that are never ordinary text pieces.

    Text can never produce them: BertPreTokenizer splits `[` and `]` off every word.
    """
    return len(token) > 2 and token.startswith("[") and token.endswith("]")


@dataclass
class LoadedTokenizer:
    tokenizer: Tokenizer  # the full pipeline (see the module docstring)
    vocab: list[str]  # id -> token
    lowercase: bool
    max_chars_per_word: int
    source: pathlib.Path | None  # what it was loaded from (None when built in memory)
    special: SpecialIds
    strip_accents: bool  # NFD + delete Mn marks (BERT-uncased's second step)
    template: Template | None = None  # the special tokens around one text or a pair (templates.py)
    kind: str = "wordpiece"  # the tokenizer.json model: "wordpiece", "bpe", "unigram"
    byte_level: bool = False  # tokens carry their word's leading space (byte-level BPE)

    def __post_init__(self):
        if self.template is None:
            self.template = bert_template(self.special.cls, self.special.sep)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def require_mask(self, where: str) -> int:
        """The mask token's id, or the one-line error MLM needs when there is none."""
        if self.special.mask is None:
            raise BertprepError(f"{where}: the tokenizer has no mask token ([MASK] / <mask>); masked language "
                                f"modelling needs one (name it mask_token in tokenizer_config.json)")
        return self.special.mask

    def text_tokenizer(self) -> Tokenizer:
        """The pipeline for corpus text, where a literal special token is text
        (encode_special_tokens is already set on WordPiece's)."""
        return self.tokenizer

    def encode_words(self, words: list[str], pair: list[str] | None = None, add_special_tokens: bool = True):
        """Pre-split words (transformers' `is_split_into_words=True`)."""
        return self.tokenizer.encode(words, pair, is_pretokenized=True, add_special_tokens=add_special_tokens)

    def fingerprint(self) -> str:
        """sha256 hex of the vocabulary and settings (format in the module docstring)."""
        if self.strip_accents == self.lowercase:
            payload = [FINGERPRINT_VERSION, self.lowercase, self.max_chars_per_word, self.vocab]
        else:
            payload = [FINGERPRINT_VERSION_STRIP, self.lowercase, self.strip_accents, self.max_chars_per_word,
                       self.vocab]
        text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def ordinary_ids(self) -> np.ndarray:
        """Sorted int32 ids of every token that is not a bracketed special.

        This is the pool random MLM replacement draws from (DESIGN.md: never [PAD],
        [UNK], [CLS], [SEP], [MASK] or a reserved [unusedN] slot).
        """
        ids = [i for i, token in enumerate(self.vocab) if not is_bracketed_special(token)]
        return np.asarray(ids, dtype=np.int32)

    def encoder_json(self) -> str:
        """tokenizer.json text for a bulk encoder (nanotoken): the same normalizer,
        pre-tokenizer and model, but no added tokens and no post-processor, so a literal
        "[MASK]" in text is text and no [CLS]/[SEP] are added."""
        bare = _pipeline(self.vocab, self.lowercase, self.max_chars_per_word, self.strip_accents)
        return bare.to_str()

    def save(self, directory) -> list[str]:
        """Write vocab.txt, tokenizer.json, tokenizer_config.json and
        special_tokens_map.json into `directory` (created if missing). Each file is
        written to a temporary name and renamed (a local path or an object-store URL).
        Returns the file names."""
        directory = storage.path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        # What transformers' BertTokenizer reads: it rebuilds its BertNormalizer from
        # do_lower_case and strip_accents (None would mean "follow do_lower_case").
        config = {"tokenizer_class": "BertTokenizer", "do_lower_case": self.lowercase,
                  "tokenize_chinese_chars": True, "strip_accents": self.strip_accents,
                  "model_max_length": 512, "clean_up_tokenization_spaces": False, **SPECIAL_TOKENS_MAP}
        contents = {
            "vocab.txt": "".join(token + "\n" for token in self.vocab),
            "tokenizer.json": self.tokenizer.to_str(pretty=True) + "\n",
            "tokenizer_config.json": json.dumps(config, indent=2) + "\n",
            "special_tokens_map.json": json.dumps(SPECIAL_TOKENS_MAP, indent=2) + "\n",
        }
        for name, text in contents.items():
            write_bytes_atomic(directory / name, text.encode("utf-8"))
        return list(contents)


def span_end(text: str, end: int) -> int:
    """`end` moved past the combining marks right after it: accent stripping deletes them
    (a Devanagari anusvara, an Arabic haraka), so the last token's offsets stop before
    them and a span cut from the user's text at `end` would lose the letter's marks."""
    while end < len(text) and unicodedata.category(text[end])[0] == "M":
        end += 1
    return end


def build_tokenizer(vocab: list[str], lowercase: bool,
                    max_chars_per_word: int = DEFAULT_MAX_CHARS_PER_WORD,
                    source=None, strip_accents: bool | None = None) -> LoadedTokenizer:
    """The BERT pipeline over `vocab` (id -> token); `strip_accents` None follows
    `lowercase` (Google's convention). Raises BertprepError for an empty vocabulary,
    duplicate or empty tokens, or a missing special token."""
    where = describe_path(source) if source is not None else "vocabulary"
    vocab = list(vocab)
    _validate_vocab(vocab, where)
    if max_chars_per_word < 1:
        raise BertprepError(f"{where}: max_chars_per_word must be at least 1, got {max_chars_per_word}")
    token_to_id = {token: i for i, token in enumerate(vocab)}
    special = SpecialIds(*(token_to_id[token] for token in SPECIAL_TOKENS))
    strip_accents = bool(lowercase if strip_accents is None else strip_accents)
    tokenizer = _pipeline(vocab, lowercase, max_chars_per_word, strip_accents)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", special.cls), ("[SEP]", special.sep)],
    )
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tokenizer.encode_special_tokens = True  # literal "[MASK]" in text is text (as Google)
    return LoadedTokenizer(
        tokenizer=tokenizer, vocab=vocab, lowercase=bool(lowercase),
        max_chars_per_word=int(max_chars_per_word),
        source=pathlib.Path(source) if source is not None else None, special=special,
        strip_accents=strip_accents,
    )


def load_wordpiece(path, lowercase: bool | None = None,
                   max_chars_per_word: int | None = None, strip_accents: bool | None = None) -> LoadedTokenizer:
    """Load a TOKDIR (tokenizer.json and/or vocab.txt), a tokenizer.json or a bare
    vocab.txt such as Google's. `lowercase`/`strip_accents`/`max_chars_per_word` override
    what the files say; for a bare vocab.txt, `lowercase=None` means uncased when no token
    (other than bracketed specials) has an upper-case letter (`infer_lowercase`), and
    accents are stripped exactly when lower-casing (`resolve_strip_accents`)."""
    path = pathlib.Path(path)
    if not path.exists():
        raise BertprepError(f"{describe_path(path)}: no such file or directory")
    config_casing = (None, None)
    if path.is_dir():
        # transformers' BertTokenizer rebuilds its normalizer from tokenizer_config.json's
        # do_lower_case / strip_accents, over what tokenizer.json says: so do we.
        config_casing = _config_casing(path / "tokenizer_config.json")
        if (path / "tokenizer.json").is_file():
            path = path / "tokenizer.json"
        elif (path / "vocab.txt").is_file():
            path = path / "vocab.txt"
        else:
            raise BertprepError(f"{describe_path(path)}: directory has no tokenizer.json or vocab.txt")
    text = _read_text(path)
    file_lowercase, file_strip = config_casing
    # JSON by name, or by content ("{" then more on the line; a vocab.txt line is one token).
    if path.suffix == ".json" or (text.lstrip().startswith("{") and text.lstrip().split("\n", 1)[0] != "{"):
        vocab, (json_lowercase, json_strip), json_max_chars = _parse_tokenizer_json(text, path)
        if file_lowercase is None:
            file_lowercase = json_lowercase
        if file_strip is None and config_casing[1] is None:
            file_strip = json_strip
        if max_chars_per_word is None:
            max_chars_per_word = json_max_chars
    else:
        vocab = _parse_vocab_txt(text, path)
    if file_lowercase is None:
        file_lowercase = infer_lowercase(vocab)
    if max_chars_per_word is None:
        max_chars_per_word = DEFAULT_MAX_CHARS_PER_WORD
    strip = resolve_strip_accents(file_lowercase, file_strip, lowercase, strip_accents)
    return build_tokenizer(vocab, file_lowercase if lowercase is None else lowercase, max_chars_per_word,
                           source=path, strip_accents=strip)


def resolve_strip_accents(file_lowercase: bool, file_strip: bool | None, lowercase: bool | None = None,
                          strip_accents: bool | None = None) -> bool:
    """Accent stripping from what the files say (`file_strip` None: they follow their
    casing) and the caller's overrides. Overriding only the casing moves stripping with it
    when the files strip exactly when they lower-case (BERT's convention, a bare
    vocab.txt): `--cased` on BERT-uncased's files gives BERT-cased; files that chose
    otherwise (lower-case, accents kept) keep their choice."""
    if strip_accents is not None:
        return bool(strip_accents)
    follows = file_strip is None or file_strip == file_lowercase
    if follows:
        return bool(file_lowercase if lowercase is None else lowercase)
    return bool(file_strip)


def infer_lowercase(vocab: list[str]) -> bool:
    """Uncased when lower-casing changes no token other than the bracketed specials.

    "Has an upper-case letter" is almost that, but Google's uncased vocabulary holds
    "ℝ" (DOUBLE-STRUCK CAPITAL R), which is upper-case and has no lower-case form.
    """
    return all(token.lower() == token for token in vocab if not is_bracketed_special(token))


def _pipeline(vocab: list[str], lowercase: bool, max_chars_per_word: int, strip_accents: bool) -> Tokenizer:
    """Normalizer, pre-tokenizer, model and decoder; no post-processor, no added tokens."""
    model = models.WordPiece(
        vocab={token: i for i, token in enumerate(vocab)}, unk_token="[UNK]",
        continuing_subword_prefix="##", max_input_chars_per_word=max_chars_per_word,
    )
    tokenizer = Tokenizer(model)
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=bool(strip_accents),
        lowercase=bool(lowercase),
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    return tokenizer


def _validate_vocab(vocab: list[str], where: str) -> None:
    if not vocab:
        raise BertprepError(f"{where}: empty vocabulary")
    seen: dict[str, int] = {}
    for i, token in enumerate(vocab):
        if not token or token != token.strip() or "\n" in token:
            raise BertprepError(f"{where}: token {i} ({token!r}) is empty or contains whitespace")
        if token in seen:
            raise BertprepError(f"{where}: duplicate token {token!r} (ids {seen[token]} and {i})")
        seen[token] = i
    missing = [token for token in SPECIAL_TOKENS if token not in seen]
    if missing:
        raise BertprepError(f"{where}: vocabulary lacks {', '.join(missing)}")


def _read_text(path: pathlib.Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BertprepError(f"{describe_path(path)}: not a tokenizer (not UTF-8 text: byte {exc.start})") from None
    except OSError as exc:
        raise BertprepError(f"{describe_path(path)}: cannot read ({exc.strerror})") from None


def _parse_vocab_txt(text: str, path: pathlib.Path) -> list[str]:
    """One token per line, line number = id (Google's load_vocab strips each line)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    vocab = [line.strip() for line in lines]
    for i, token in enumerate(vocab):
        if not token:
            raise BertprepError(f"{describe_path(path)}: line {i + 1} is empty (expected one token per line)")
    return vocab


def _parse_tokenizer_json(text: str, path: pathlib.Path) -> tuple[list[str], tuple[bool | None, bool | None], int]:
    where = describe_path(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BertprepError(f"{where}: not a tokenizer (invalid JSON: {exc.msg} at line {exc.lineno})") from None
    model = data.get("model") if isinstance(data, dict) else None
    if not isinstance(model, dict) or model.get("type", "WordPiece") != "WordPiece" or "vocab" not in model:
        kind = model.get("type") if isinstance(model, dict) else None
        raise BertprepError(f"{where}: not a WordPiece tokenizer (model type {kind!r})")
    if model.get("continuing_subword_prefix", "##") != "##":
        raise BertprepError(f"{where}: continuing_subword_prefix is "
                            f"{model['continuing_subword_prefix']!r}; BERT needs '##'")
    token_to_id = model["vocab"]
    if not isinstance(token_to_id, dict) or not token_to_id:
        raise BertprepError(f"{where}: empty vocabulary")
    vocab: list[str | None] = [None] * len(token_to_id)
    for token, i in token_to_id.items():
        if not isinstance(i, int) or not 0 <= i < len(vocab) or vocab[i] is not None:
            raise BertprepError(f"{where}: vocabulary ids are not 0..{len(vocab) - 1} (token {token!r} has id {i!r})")
        vocab[i] = token
    max_chars = int(model.get("max_input_chars_per_word", DEFAULT_MAX_CHARS_PER_WORD))
    return vocab, _normalizer_casing(data.get("normalizer")), max_chars


def _normalizer_casing(normalizer) -> tuple[bool | None, bool | None]:
    """(`lowercase`, `strip_accents`) of a BertNormalizer (possibly inside a Sequence);
    None where absent (strip_accents null: it follows lowercase)."""
    if not isinstance(normalizer, dict):
        return None, None
    if normalizer.get("type") == "BertNormalizer":
        strip = normalizer.get("strip_accents")
        return bool(normalizer.get("lowercase", True)), strip if isinstance(strip, bool) else None
    for inner in normalizer.get("normalizers") or []:
        found = _normalizer_casing(inner)
        if found[0] is not None:
            return found
    return None, None


def _config_casing(config_path: pathlib.Path) -> tuple[bool | None, bool | None]:
    """(`do_lower_case`, `strip_accents`) from a transformers tokenizer_config.json, None
    where it has none (or there is no such file)."""
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, None
    if not isinstance(config, dict):
        return None, None
    lower, strip = config.get("do_lower_case"), config.get("strip_accents")
    return lower if isinstance(lower, bool) else None, strip if isinstance(strip, bool) else None


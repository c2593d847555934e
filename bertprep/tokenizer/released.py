"""Tokenizers of released encoders that are not WordPiece: byte-level BPE (RoBERTa,
ModernBERT, Ettin), SentencePiece Unigram or BPE (DeBERTa-v3, XLM-R), anything else a
`tokenizer.json` describes.

The reference is transformers' fast tokenizer on the same files, so the pipeline is the
files' own: a `tokenizer.json` is loaded as it is (normalizer, pre-tokenizer, model,
post-processor, added tokens); `vocab.json` + `merges.txt` become the byte-level BPE
transformers builds from them (RoBERTa's `<s> A </s></s> B </s>`); a SentencePiece model
is converted by transformers' own converter (the `sentencepiece` extra). What the rest of
bertprep and bertmodel needs is read from the files, never assumed from BERT:

- the special tokens: `tokenizer_config.json` / `special_tokens_map.json` names, else the
  conventional names present in the vocabulary (`[CLS]` or `<s>`, ...);
- the templates (templates.py), from the post-processor;
- the random-replacement pool: every id but the special tokens (added tokens marked
  special, and the five named ones);
- words: `Encoding.word_ids` (the pre-tokenizer's words), for whole-word masking and for
  labelling the first piece of a word.

Byte-level BPE marks a word's leading space in the token (`Ġworld`): a text's first word
has none unless the pre-tokenizer adds one (`add_prefix_space`). `encode_words` encodes
pre-split words as transformers' `tokenizer(words, is_split_into_words=True)` does with
`add_prefix_space=True`, the setting transformers requires of RoBERTa for pre-split words:
every word carries its space, as it does inside running text.

The fingerprint is the sha256 of `["bertprep-tokenizer/3", kind, pipeline]`, where
pipeline is the tokenizer's JSON (`Tokenizer.to_str()`) re-dumped with sorted keys and
`ensure_ascii=False`: equal fingerprints, equal encodings. A saved copy (`save`) writes
that JSON as tokenizer.json, so the copy has its source's fingerprint.
"""
from __future__ import annotations

import functools
import hashlib
import json
import pathlib
from dataclasses import dataclass, field

import numpy as np
from tokenizers import Tokenizer
from tokenizers.models import Unigram

from bertprep.errors import BertprepError, describe_path
from bertprep.storage import stores as storage
from bertprep.storage import write_bytes_atomic
from bertprep.tokenizer.files import LoadedTokenizer, SpecialIds
from bertprep.tokenizer.templates import template_of

FINGERPRINT_VERSION_ANY = "bertprep-tokenizer/3"
SENTENCEPIECE_FILES = ("spm.model", "sentencepiece.bpe.model", "tokenizer.model")
# Files a released tokenizer directory may hold, copied as they are into a saved copy.
RELEASED_FILES = ("tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.json",
                  "merges.txt", *SENTENCEPIECE_FILES)
# Conventional names, BERT's first: what a directory without a special-token map uses.
SPECIAL_NAMES = {"cls": ("[CLS]", "<s>"), "sep": ("[SEP]", "</s>"), "pad": ("[PAD]", "<pad>"),
                 "unk": ("[UNK]", "<unk>"), "mask": ("[MASK]", "<mask>")}
CONFIG_KEYS = {"cls": ("cls_token", "bos_token"), "sep": ("sep_token", "eos_token"), "pad": ("pad_token",),
               "unk": ("unk_token",), "mask": ("mask_token",)}
# transformers' slow class for a SentencePiece file, by config.json's model_type.
SPM_CLASSES = {"deberta-v2": "DebertaV2Tokenizer", "xlm-roberta": "XLMRobertaTokenizer",
               "camembert": "CamembertTokenizer", "albert": "AlbertTokenizer"}
SPM_CLASS_BY_FILE = {"spm.model": "DebertaV2Tokenizer", "sentencepiece.bpe.model": "XLMRobertaTokenizer"}


@dataclass
class ReleasedTokenizer(LoadedTokenizer):
    kind: str = "bpe"  # "bpe" | "unigram" | "wordlevel": the tokenizer.json model's type
    byte_level: bool = False  # a ByteLevel pre-tokenizer (tokens carry their leading space)
    special_token_ids: frozenset = frozenset()  # never drawn as a random replacement
    config: dict = field(default_factory=dict)  # tokenizer_config.json as saved (specials named)
    source_files: dict = field(default_factory=dict)  # name -> path of the files copied by save
    _words_tokenizer: Tokenizer | None = None

    def fingerprint(self) -> str:
        return _pipeline_fingerprint(self.kind, self.tokenizer.to_str())

    def ordinary_ids(self) -> np.ndarray:
        ids = [i for i, token in enumerate(self.vocab) if token is not None and i not in self.special_token_ids]
        return np.asarray(ids, dtype=np.int32)

    def encoder_json(self) -> str:
        raise BertprepError(f"{self.kind} tokenizers are encoded with tokenizers, not nanotoken")

    def text_tokenizer(self) -> Tokenizer:
        """The pipeline for corpus text: a literal `<mask>` or `[SEP]` in a document is
        text, never the special token (a shard must not hold unlabelled mask ids).

        A Unigram model converted from SentencePiece keeps its control symbols
        (`[CLS]`, `[SEP]`, `<s>` ...) as pieces with the best score, so with the special
        tokens split as text it would still make `[SEP]` of the literal "[SEP]"; SentencePiece
        never emits a control symbol from text. Here those pieces are renamed to strings
        no text holds (ids and scores unchanged), so "[SEP]" is `▁[ SEP ]`, as in
        SentencePiece itself (transformers' `split_special_tokens=True` gives `[SEP]`)."""
        serialised = self.tokenizer.to_str()
        if isinstance(self.tokenizer.model, Unigram):
            serialised = _control_symbols_renamed(serialised, tuple(sorted(self.special_token_ids)))
        tokenizer = Tokenizer.from_str(serialised)
        tokenizer.encode_special_tokens = True
        return tokenizer

    def encode_words(self, words: list[str], pair: list[str] | None = None, add_special_tokens: bool = True):
        """Pre-split words encoded as transformers' `is_split_into_words=True` with
        `add_prefix_space=True` for byte-level BPE (module docstring)."""
        if self._words_tokenizer is None:
            self._words_tokenizer = _with_prefix_space(self.tokenizer) if self.byte_level else self.tokenizer
        return self._words_tokenizer.encode(words, pair, is_pretokenized=True, add_special_tokens=add_special_tokens)

    def save(self, directory) -> list[str]:
        """tokenizer.json (the pipeline), the source's other tokenizer files as they
        are, and a tokenizer_config.json that names the special tokens."""
        directory = storage.path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        contents = {name: pathlib.Path(path).read_bytes() for name, path in self.source_files.items()
                    if name not in ("tokenizer.json", "tokenizer_config.json")}
        contents["tokenizer.json"] = (self.tokenizer.to_str(pretty=True) + "\n").encode("utf-8")
        contents["tokenizer_config.json"] = (json.dumps(self.config, indent=2, ensure_ascii=False) + "\n").encode()
        for name, data in contents.items():
            write_bytes_atomic(directory / name, data)
        return sorted(contents)


# The pipelines of one process's few tokenizers (a build, its reloads and its copies ask
# again and again): parsing and re-dumping a 128,000-piece vocabulary takes a third of a
# second, a lookup by the serialised text a few milliseconds.
@functools.lru_cache(maxsize=4)
def _pipeline_fingerprint(kind: str, serialised: str) -> str:
    text = json.dumps([FINGERPRINT_VERSION_ANY, kind, json.loads(serialised)], ensure_ascii=False,
                      separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@functools.lru_cache(maxsize=4)
def _control_symbols_renamed(serialised: str, special_ids: tuple[int, ...]) -> str:
    """A Unigram pipeline whose special tokens' pieces are renamed (text_tokenizer)."""
    data = json.loads(serialised)
    vocab = data["model"]["vocab"]
    for i in special_ids:
        if i < len(vocab):
            vocab[i][0] = f"\u0000special-{i}"
    return json.dumps(data)


def is_released_tokenizer(path: pathlib.Path) -> bool:
    """Whether `path` (a file or directory) holds a tokenizer that is not WordPiece."""
    if path.is_dir():
        if any((path / name).is_file() for name in SENTENCEPIECE_FILES):
            return not (path / "tokenizer.json").is_file() or _json_model_type(path / "tokenizer.json") != "WordPiece"
        if (path / "tokenizer.json").is_file():
            return _json_model_type(path / "tokenizer.json") not in ("WordPiece", None)
        return (path / "vocab.json").is_file() and (path / "merges.txt").is_file()
    if path.name in SENTENCEPIECE_FILES or path.suffix == ".model":
        return True
    if path.suffix == ".json":
        return _json_model_type(path) not in ("WordPiece", None)
    return False


def load_released(path) -> ReleasedTokenizer:
    """A released tokenizer from a directory, a tokenizer.json or a SentencePiece model."""
    path = pathlib.Path(path)
    directory = path if path.is_dir() else path.parent
    where = describe_path(path)
    files = {name: directory / name for name in (*RELEASED_FILES, "tokenizer.json") if (directory / name).is_file()}
    if not path.is_dir():
        files = {name: p for name, p in files.items() if name not in ("tokenizer.json", *SENTENCEPIECE_FILES)}
        files["tokenizer.json" if path.suffix == ".json" else path.name] = path
    config = _read_json(files.get("tokenizer_config.json"))
    names = _special_names(config, _read_json(files.get("special_tokens_map.json")))
    if "tokenizer.json" in files:
        tokenizer = _from_json(files["tokenizer.json"])
    elif any(name in files for name in SENTENCEPIECE_FILES):
        spm = next(files[name] for name in SENTENCEPIECE_FILES if name in files)
        tokenizer, spm_names, spm_class = _from_sentencepiece(spm, directory, config)
        names = {**spm_names, **names}
        config = {**config, "tokenizer_class": config.get("tokenizer_class", spm_class)}
    elif "vocab.json" in files and "merges.txt" in files:
        tokenizer = _byte_level_bpe(files["vocab.json"], files["merges.txt"], config, names, where)
    else:
        raise BertprepError(f"{where}: no tokenizer.json, vocab.json + merges.txt or SentencePiece model")
    where = describe_path(files.get("tokenizer.json", path))
    vocab = _id_to_token(tokenizer, where)
    token_to_id = {token: i for i, token in enumerate(vocab) if token is not None}
    special = {role: _find_special(role, names, token_to_id) for role in SPECIAL_NAMES}
    if special["cls"] is None or special["sep"] is None:
        raise BertprepError(f"{where}: no [CLS]/<s> or [SEP]/</s> token: an encoder's sequences need both")
    template = template_of(tokenizer, where)
    added_special = {i for i, added in tokenizer.get_added_tokens_decoder().items() if added.special}
    config = _saved_config(config, names, special, vocab, directory)
    lowercase, strip_accents = _casing(_step_json(tokenizer.normalizer))
    return ReleasedTokenizer(
        tokenizer=tokenizer, vocab=vocab, lowercase=lowercase, max_chars_per_word=0,
        source=path, special=SpecialIds(**special), strip_accents=strip_accents,
        template=template, kind=type(tokenizer.model).__name__.lower(),
        byte_level=_is_byte_level(_step_json(tokenizer.pre_tokenizer)),
        special_token_ids=frozenset(added_special | {i for i in special.values() if i is not None}),
        config=config, source_files=files)


def _casing(normalizer) -> tuple[bool, bool]:
    """(lowercase, strip_accents) of a normalizer: a Lowercase / StripAccents step, or a
    BertNormalizer's switches (train-tokenizer's subword models use one), at any depth
    of a Sequence; BertNormalizer's strip_accents null follows its lowercase."""
    lowercase = strip = False
    steps = [normalizer]
    while steps:
        step = steps.pop()
        if not isinstance(step, dict):
            continue
        kind = step.get("type")
        if kind == "Lowercase":
            lowercase = True
        elif kind == "StripAccents":
            strip = True
        elif kind == "BertNormalizer":
            bert_lower = bool(step.get("lowercase", True))
            bert_strip = step.get("strip_accents")
            lowercase = lowercase or bert_lower
            strip = strip or bool(bert_lower if bert_strip is None else bert_strip)
        steps.extend(step.get("normalizers") or [])
    return lowercase, strip


def _json_model_type(path: pathlib.Path) -> str | None:
    try:
        model = json.loads(path.read_text(encoding="utf-8")).get("model")
    except (OSError, ValueError, AttributeError):
        return None  # the WordPiece loader says what is wrong with it
    if not isinstance(model, dict):
        return None
    return model.get("type") or ("WordPiece" if "max_input_chars_per_word" in model else
                                 "BPE" if "merges" in model else None)


def _step_json(step) -> dict | None:
    """A normalizer or pre-tokenizer as tokenizer.json writes it (its pickled state is
    that JSON), read without serialising the whole vocabulary."""
    return None if step is None else json.loads(step.__getstate__())


def _read_json(path) -> dict:
    if path is None:
        return {}
    try:
        data = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    except ValueError as exc:
        raise BertprepError(f"{describe_path(path)}: invalid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise BertprepError(f"{describe_path(path)}: expected a JSON object")
    return data


def _from_json(path: pathlib.Path) -> Tokenizer:
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises plain Exceptions for malformed files
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BertprepError(f"{describe_path(path)}: not a tokenizer tokenizers can load ({reason})") from None


def _special_names(config: dict, special_map: dict) -> dict[str, str]:
    """role -> token text named by tokenizer_config.json / special_tokens_map.json."""
    names = {}
    for role, keys in CONFIG_KEYS.items():
        for source in (config, special_map):
            for key in keys:
                value = source.get(key)
                if isinstance(value, dict):
                    value = value.get("content")
                if isinstance(value, str) and role not in names:
                    names[role] = value
    return names


def _find_special(role: str, names: dict, token_to_id: dict) -> int | None:
    for token in ((names[role],) if role in names else SPECIAL_NAMES[role]):
        if token in token_to_id:
            return token_to_id[token]
    return None


def _id_to_token(tokenizer: Tokenizer, where: str) -> list:
    """id -> token over the model's and the added tokens; None where an id has no token."""
    token_to_id = tokenizer.get_vocab(with_added_tokens=True)
    if not token_to_id:
        raise BertprepError(f"{where}: empty vocabulary")
    vocab: list = [None] * (max(token_to_id.values()) + 1)
    for token, i in token_to_id.items():
        vocab[i] = token
    return vocab


def _is_byte_level(pre_tokenizer: dict | None) -> bool:
    pre = pre_tokenizer or {}
    steps = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
    return any(step and step.get("type") == "ByteLevel" for step in steps)


def _with_prefix_space(tokenizer: Tokenizer) -> Tokenizer:
    data = json.loads(tokenizer.to_str())

    def set_prefix(node):
        if isinstance(node, dict):
            if node.get("type") in ("ByteLevel", "RobertaProcessing") and "add_prefix_space" in node:
                node["add_prefix_space"] = True
            for value in node.values():
                set_prefix(value)
        elif isinstance(node, list):
            for value in node:
                set_prefix(value)

    set_prefix(data.get("pre_tokenizer"))
    set_prefix(data.get("post_processor"))
    return Tokenizer.from_str(json.dumps(data))


def _byte_level_bpe(vocab_path, merges_path, config: dict, names: dict, where: str) -> Tokenizer:
    """vocab.json + merges.txt as transformers' RobertaTokenizer builds them."""
    from tokenizers import AddedToken, decoders, models, pre_tokenizers, processors

    try:
        model = models.BPE.from_file(str(vocab_path), str(merges_path))
    except Exception as exc:
        raise BertprepError(f"{where}: vocab.json + merges.txt do not load ({str(exc).splitlines()[0]})") from None
    tokenizer = Tokenizer(model)
    prefix_space = bool(config.get("add_prefix_space", False))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix_space)
    tokenizer.decoder = decoders.ByteLevel()
    vocab = model.get_vocab() if hasattr(model, "get_vocab") else tokenizer.get_vocab()
    cls = names.get("cls", "<s>")
    sep = names.get("sep", "</s>")
    if cls not in vocab or sep not in vocab:
        raise BertprepError(f"{where}: vocab.json has no {cls!r} / {sep!r} to wrap sequences in")
    tokenizer.post_processor = processors.RobertaProcessing((sep, vocab[sep]), (cls, vocab[cls]),
                                                            trim_offsets=True, add_prefix_space=prefix_space)
    specials = [names.get(role, SPECIAL_NAMES[role][1]) for role in ("cls", "pad", "sep", "unk", "mask")]
    tokenizer.add_special_tokens([AddedToken(t, special=True, lstrip=(t == names.get("mask", "<mask>")))
                                  for t in specials if t in vocab])
    return tokenizer


def _from_sentencepiece(spm: pathlib.Path, directory: pathlib.Path, config: dict) -> tuple[Tokenizer, dict, str]:
    """A SentencePiece model through transformers' slow tokenizer class and its
    converter (the class from tokenizer_config.json, config.json's model_type, or the
    file's conventional name)."""
    where = describe_path(spm)
    try:
        import sentencepiece  # noqa: F401
        import transformers
    except ImportError as exc:
        raise BertprepError(f"{where}: a SentencePiece model; reading it needs the {exc.name} package "
                            f"(pip install 'bertprep[sentencepiece]')") from None
    model_type = _read_json(directory / "config.json").get("model_type") if (directory / "config.json").is_file() else None
    name = config.get("tokenizer_class") or SPM_CLASSES.get(model_type) or SPM_CLASS_BY_FILE.get(spm.name)
    name = (name or "").removesuffix("Fast")
    cls = getattr(transformers, name, None) if name else None
    if cls is None:
        raise BertprepError(f"{where}: cannot tell which transformers tokenizer class reads this SentencePiece "
                            f"model (set tokenizer_class in tokenizer_config.json)")
    expected = getattr(cls, "vocab_files_names", {}).get("vocab_file")
    if expected and spm.name != expected:
        raise BertprepError(f"{where}: {name} reads its SentencePiece model from a file named {expected}")
    try:
        slow = cls.from_pretrained(str(directory))
    except Exception as exc:
        raise BertprepError(f"{where}: {name} cannot read it ({str(exc).splitlines()[0]})") from None
    names = {role: getattr(slow, key) for role, keys in CONFIG_KEYS.items() for key in keys[:1]
             if isinstance(getattr(slow, key, None), str)}
    return Tokenizer.from_str(slow.backend_tokenizer.to_str()), names, name


def _saved_config(config: dict, names: dict, special: dict, vocab: list, directory: pathlib.Path) -> dict:
    """The source's tokenizer_config.json with the special tokens named (transformers
    reads them from here when there is no config.json beside the tokenizer) and a class
    that AutoTokenizer resolves without one."""
    saved = dict(config)
    for role, keys in CONFIG_KEYS.items():
        if special[role] is not None and not any(k in saved for k in keys[:1]):
            saved[keys[0]] = vocab[special[role]]
    if vocab[special["cls"]] == "<s>" and "bos_token" not in saved:
        saved["bos_token"], saved["eos_token"] = "<s>", vocab[special["sep"]]
    if "tokenizer_class" not in saved:
        model_type = _read_json(directory / "config.json").get("model_type") if (directory / "config.json").is_file() else None
        saved["tokenizer_class"] = {"roberta": "RobertaTokenizer", **SPM_CLASSES}.get(model_type,
                                                                                     "PreTrainedTokenizerFast")
    return saved

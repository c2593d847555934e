"""Token classification (named-entity recognition, POS tagging): a label per word from
its first token (transformers' BertForTokenClassification and its twins), with any
tokenizer (WordPiece, byte-level BPE, SentencePiece).

Reading (CoNLL text or tag-list tables, IOB1/BIOES -> IOB2): data/tagged.py; words to
token windows, labels on first pieces: data/word_windows.py; the entity metric as
CoNLL's conlleval computes it: metrics/entities.py. Each evaluation predicts every word of
the validation set and reports entity precision, recall and F1 (overall and per type)
and token accuracy; plain tags (no B-/I- entities) report token accuracy alone.

The tag set and its order come from the training data (a dataset's ClassLabel order,
else "O" first and the rest sorted) and travel in the checkpoint and config.json.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import torch

from bertmodel.data.tagged import TaggedSentences, read_tagged
from bertmodel.data.classification import as_tokenizer
from bertmodel.data.word_windows import IGNORE_INDEX, WordWindows, windows_of_pieces, word_pieces
from bertmodel.errors import BertmodelError
from bertmodel.metrics.entities import entity_metrics, to_iob2
from bertmodel.model import HeadModel
from bertmodel.model.config import BertConfig, config_from_dict
from bertmodel.training.metrics import encoder_flops
from bertmodel.training.batched_forward import forward_all
from bertmodel.tasks.finetuning import (FinetuningTask, best_metric, split_identity,
                                        start_from)
from bertmodel.tasks.entity_text import group_entities, text_word_pieces
from bertmodel.tasks.task_defaults import task_default


@dataclass(frozen=True)
class TagSet:
    tags: tuple[str, ...]  # id -> tag
    entities: bool  # B-/I- entity tags (entity metrics), or plain labels (accuracy only)

    @classmethod
    def from_data(cls, data: TaggedSentences) -> "TagSet":
        seen = {t for tags in data.tags for t in tags}
        if data.label_names and seen <= set(data.label_names):
            order = tuple(data.label_names)  # the dataset's own ids: exports match its ClassLabel
        else:
            order = tuple(sorted(seen, key=lambda t: (t != "O", t[2:] if t[1:2] == "-" else t, t)))
        return cls(order, data.scheme != "plain")

    @property
    def ids(self) -> dict[str, int]:
        return {t: i for i, t in enumerate(self.tags)}

    def to_dict(self) -> dict:
        return {"tags": list(self.tags), "entities": self.entities}

    @classmethod
    def from_dict(cls, data: dict) -> "TagSet":
        return cls(tuple(data["tags"]), bool(data["entities"]))


def read_split(cfg, which: str, tags_required: bool = True, tag_names=None) -> TaggedSentences | None:
    path = getattr(cfg, which)
    split = getattr(cfg, f"{which}_split")
    if not path and not cfg.dataset:
        return None
    data = read_tagged(path, dataset=None if path else cfg.dataset, dataset_config=cfg.dataset_config, split=split,
                       tokens_column=cfg.tokens_column, tags_column=cfg.tags_column, tags_required=tags_required,
                       tag_names=tag_names)
    return cfg.first(data, which)


def unknown_tag_words(data: TaggedSentences, tag_set: TagSet, log, training: bool, allowed: bool) -> int:
    """How many words of `data` have a gold tag outside the tag set. They are never
    predicted, so they count as missed entities and wrong words, and a loss has no term
    for them: training warns (its eval_loss is over the other words), evaluation refuses
    unless `allowed` (then it warns and reports no loss)."""
    if data.tags is None:
        return 0
    known = set(tag_set.tags)
    counts = Counter(t for tags in data.tags for t in tags if t not in known)
    if not counts:
        return 0
    words, total = sum(counts.values()), sum(map(len, data.tags))
    listed = ", ".join(f"{t} ({n:,})" for t, n in counts.most_common(8)) + (
        f" and {len(counts) - 8:,} more" if len(counts) > 8 else "")
    lacking = "training data does not have" if training else "model does not know"
    what = f"{words:,} of {total:,} words carry gold tags the {lacking}: {listed}"
    if not training and not allowed:
        raise BertmodelError(f"{data.source}: {what} (the model's tags: {', '.join(tag_set.tags)}); evaluate on data "
                             "tagged as the model was trained, or pass --allow-unknown-tags to score them as missed "
                             "(no loss is reported then)")
    log(f"warning: {data.source}: {what}; never predicted, they count as missed entities and wrong words"
        + (", and eval_loss leaves them out" if training else "; no loss is reported"))
    return words


class WindowSet:
    """Windows + the padding policy: what the loader collates from."""

    def __init__(self, windows: WordWindows, pad_id: int, multiple: int):
        self.windows, self.pad_id, self.multiple = windows, pad_id, multiple

    def __len__(self) -> int:
        return len(self.windows)

    def collate(self, rows, max_len: int | None = None) -> dict[str, np.ndarray]:
        return self.windows.collate(rows, self.pad_id, self.multiple)


class TokenStats:
    """Loss and accuracy over the scored pieces, per logging interval (device sums)."""

    def __init__(self, device: torch.device):
        self.sums = torch.zeros(4, dtype=torch.float64, device=device)  # loss, correct, scored, micro-batches

    @torch.no_grad()
    def add(self, out, tensors: dict) -> None:
        labels = tensors["labels"]
        scored = labels != IGNORE_INDEX
        correct = ((out.logits.argmax(-1) == labels) & scored).sum()
        one = torch.ones((), dtype=torch.float64, device=self.sums.device)
        self.sums += torch.stack([out.loss.detach().double(), correct.double(), scored.sum().double(), one])

    def totals(self) -> torch.Tensor:
        return self.sums.clone()

    @staticmethod
    def summarize(totals: torch.Tensor) -> dict:
        loss, correct, scored, n = totals.tolist()
        return {"loss": loss / max(1.0, n), "accuracy": correct / max(1.0, scored)}

    def reset(self) -> None:
        self.sums.zero_()


class TokenClassificationTask(FinetuningTask):
    name = "token_classification"
    head_kind = "tokens"  # BertForTokenClassification, or its ModernBERT twin (model.HEADS)

    def __init__(self, cfg, d, log, tag_set: TagSet | None = None, allow_unknown_tags: bool = False):
        """tag_set given (a trained model's): evaluation only, no training data read; gold
        tags the model lacks are then refused, unless allow_unknown_tags."""
        super().__init__(cfg, d, log)
        train = None
        if tag_set is None:
            train = read_split(cfg, "train")
            if train is None:
                raise BertmodelError("give the training data: --train FILE or --dataset NAME")
            tag_set = TagSet.from_data(train)
            if len(tag_set.tags) < 2:
                raise BertmodelError(f"{train.source}: every word has the tag {tag_set.tags[0]!r}; there is nothing "
                                     "to learn")
        self.tags = tag_set
        self.check_teacher_labels()
        self.loaded = as_tokenizer(self.tok)  # loaded once: a SentencePiece model takes seconds to convert
        if train is not None:
            self.train_set = WindowSet(self._windows(train), self.pad, self.multiple)
        # Integer tags without names of their own are ids of this tag set (a trained model's).
        validation = read_split(cfg, "validation", tags_required=train is not None, tag_names=tag_set.tags)
        self.validation_sentences = validation
        self.validation = None
        self.training, self.unknown_gold_words = train is not None, 0
        if validation is not None:
            self.validation = WindowSet(self._windows(validation), self.pad, self.multiple)
            self.unknown_gold_words = unknown_tag_words(validation, tag_set, log, self.training, allow_unknown_tags)
        seen = (f"{len(validation):,} sentences from {validation.source} ({self.validation.windows.fit_note()})"
                if validation is not None else "")
        if train is not None:
            scheme = f"{train.scheme} tags read as IOB2" if train.scheme not in ("IOB2", "plain") else \
                ("plain labels" if train.scheme == "plain" else "IOB2 tags")
            log(f"train: {len(train):,} sentences from {train.source} ({len(tag_set.tags)} tags, {scheme}; "
                f"{self.train_set.windows.fit_note()})" + (f"; validation: {seen}" if seen else ""))
        elif seen:
            log(f"validation: {seen}")
        for name, data in (("train", getattr(self, "train_set", None)), ("validation", self.validation)):
            if data is not None and data.windows.cut_words:  # the only thing a window ever cuts
                log(f"warning: {name}: {data.windows.cut_words:,} words longer than a window of "
                    f"{cfg.max_seq_length} tokens lost their last pieces (each is still predicted from its first)")
        self.best_metric = best_metric(cfg.metric_for_best,
                                       task_default("metric_for_best", "tokens") if tag_set.entities else "accuracy",
                                       self.metric_names())

    def _windows(self, data: TaggedSentences) -> WordWindows:
        return windows_of_pieces(self.loaded, word_pieces(self.loaded, data.words), self.cfg.max_seq_length,
                                 data.tags, self.tags.ids, self.cfg.label_all_tokens)

    def metric_names(self) -> list[str]:
        """The eval_* metrics each evaluation reports (without the prefix); per entity type
        `<TYPE>_f1` too, for the types of the tag set."""
        if not self.tags.entities:
            return ["accuracy", "loss"]
        types = sorted({t[2:] for t in self.tags.tags if t != "O"})
        return ["f1", "precision", "recall", "accuracy", "loss", *(f"{t}_f1" for t in types)]

    @property
    def has_eval(self) -> bool:
        return self.validation is not None

    # -- the model -------------------------------------------------------------------
    def head_labels(self) -> list[str]:
        return list(self.tags.tags)

    def fresh_model(self, log) -> HeadModel:
        return start_from(self.model_class, self.pre, log, init=self.cfg.init, labels=self.head_labels(),
                          num_labels=len(self.tags.tags))

    def model_for_checkpoint(self, resume: dict) -> HeadModel:
        model = self.model_class(config_from_dict(resume["config"]), len(self.tags.tags))
        model.load_state_dict(resume["model"])
        return model

    # -- per step ----------------------------------------------------------------------
    def new_stats(self, device: torch.device) -> TokenStats:
        return self.distilling(TokenStats(device))

    @staticmethod
    def logit_pairs(out, taught, batch) -> list:
        """Distillation compares the labelled pieces' tag logits, the positions the task's loss scores."""
        scored = batch["labels"] != IGNORE_INDEX
        return [(out.logits[scored], taught.logits[scored])]

    def flops(self, config: BertConfig, tensors: dict, extent: dict | None = None) -> float:
        B, T = tensors["input_ids"].shape
        rows = (extent or {}).get("tokens", B * T)
        return encoder_flops(config, B, T, **(extent or {})) + 6 * rows * config.hidden_size * len(self.tags.tags)

    # -- evaluation and prediction -------------------------------------------------------
    def window_logits(self, model, data: WindowSet, device, autocast, batch_size: int,
                      on_batch=None) -> list[np.ndarray]:
        """Logits (length, C) of every window of `data`, in order."""
        lengths = np.diff(data.windows.offsets)
        out_rows: list[np.ndarray] = []

        def batch_of(rows):
            batch = data.collate(rows)
            batch.pop("labels", None)
            return batch

        for rows, out in forward_all(model, len(data), batch_of, batch_size, device, autocast, on_batch):
            logits = out.logits.float().cpu().numpy()
            out_rows.extend(logits[i, :lengths[row]] for i, row in enumerate(rows))
        return out_rows

    def word_logits(self, windows: WordWindows, logits: list[np.ndarray], sentences: list) -> list[np.ndarray]:
        """Per sentence (a list of its words, or of their pieces), (words, C) logits: each
        word's first piece, gathered from its window."""
        out = [np.zeros((len(s), len(self.tags.tags)), np.float32) for s in sentences]
        for w, window_logits in enumerate(logits):
            words, rows = windows.word_predictions(w, window_logits)
            out[windows.sentence[w]][words] = rows
        return out

    def predict(self, model, sentences: list[list[str]], device, autocast, batch_size: int,
                on_batch=None, warn=None, what: str = "sentence") -> list[np.ndarray]:
        """Per sentence, the (words, C) logits of each word (from its first piece);
        `warn(message)` hears of sentences (`what`) cut into windows."""
        return self.predict_pieces(model, word_pieces(self.loaded, sentences), device, autocast, batch_size,
                                   on_batch, warn, what)

    def predict_pieces(self, model, pieces: list[list[np.ndarray]], device, autocast, batch_size: int,
                       on_batch=None, warn=None, what: str = "sentence") -> list[np.ndarray]:
        """`predict` for sentences given as each word's token ids."""
        windows = windows_of_pieces(self.loaded, pieces, self.cfg.max_seq_length)
        if warn is not None:
            self._report_windows(windows, what, warn)
        data = WindowSet(windows, self.pad, self.multiple)
        return self.word_logits(windows, self.window_logits(model, data, device, autocast, batch_size, on_batch),
                                pieces)

    def _report_windows(self, windows: WordWindows, what: str, warn) -> None:
        """Prediction reads a sentence longer than a window in windows cut at word
        boundaries, each word seeing only its own window (transformers' pipeline reads a
        whole text, up to the tokenizer's model_max_length): said, with the way round."""
        positions, split = self.pre.config.max_sequence_length, windows.split_sentences
        if split:
            more = (f"--max-seq-length up to the model's {positions:,} positions reads more at once"
                    if windows.max_seq_length < positions else f"the model reads at most {positions:,} tokens at once")
            warn(f"{split:,} {what}{'s' if split != 1 else ''} longer than --max-seq-length {windows.max_seq_length} "
                 f"read in windows cut at word boundaries ({windows.fit_note()}): each word is predicted once, from "
                 f"its own window's context only; {more}")
        if windows.cut_words:
            warn(f"{windows.cut_words:,} words longer than a window of {windows.max_seq_length} tokens lost their "
                 "last pieces (each is still predicted from its first)")

    def scores(self, word_logits: list[np.ndarray], gold: list[list[str]], window_logits: list[np.ndarray],
               windows: WordWindows) -> dict:
        predicted = [[self.tags.tags[i] for i in logits.argmax(-1)] for logits in word_logits]
        if self.tags.entities and any(t[:2] in ("E-", "S-", "L-", "U-") for t in self.tags.tags):
            # a BIOES model (a transformers one: ours learn IOB2): its tags read as the gold's IOB2
            predicted = [to_iob2(p, "BIOES") for p in predicted]
        labels = windows.labels
        flat = np.concatenate(window_logits) if window_logits else np.zeros((0, len(self.tags.tags)), np.float32)
        scored = labels != IGNORE_INDEX
        # A loss has no term for a gold tag the model lacks: over the other words it is a
        # subset's, which training says in its warning and evaluation does not report;
        # over no words at all there is none.
        loss = {"loss": float(torch.nn.functional.cross_entropy(torch.from_numpy(flat[scored]),
                                                                torch.from_numpy(labels[scored])))
                } if scored.any() and (self.training or not self.unknown_gold_words) else {}
        if not self.tags.entities:
            correct = sum(p == g for ps, gs in zip(predicted, gold) for p, g in zip(ps, gs))
            return {"accuracy": correct / max(1, sum(map(len, gold))), **loss}
        m = entity_metrics(gold, predicted)
        out = {"f1": m["f1"], "precision": m["precision"], "recall": m["recall"], "accuracy": m["accuracy"], **loss}
        for kind, figures in m["per_type"].items():
            for name in ("precision", "recall", "f1"):
                out[f"{kind}_{name}"] = figures[name]
        return out

    def evaluate(self, model, d, autocast, on_batch=None) -> dict:
        """Entity metrics (or accuracy) over every word of the validation set; the word
        logits are kept for `bertmodel evaluate` to write."""
        data, sentences = self.validation, self.validation_sentences
        window_logits = self.window_logits(model, data, d.device, autocast, self.cfg.eval_batch_size, on_batch)
        word_logits = self.word_logits(data.windows, window_logits, sentences.words)
        self.last_word_logits = word_logits
        if sentences.tags is None:
            return {}
        return {f"eval_{k}": float(v) for k, v in self.scores(word_logits, sentences.tags, window_logits,
                                                              data.windows).items()}

    def prediction_records(self, word_logits: list[np.ndarray]) -> list[dict]:
        """One record per validation sentence: its words, the predicted tags (and each
        one's probability) and the gold tags when known."""
        data = self.validation_sentences
        records = []
        for i, logits in enumerate(word_logits):
            probs = torch.softmax(torch.from_numpy(logits).double(), -1).numpy()
            ids = probs.argmax(-1)
            record = {"tokens": data.words[i], "tags": [self.tags.tags[j] for j in ids],
                      "probabilities": [round(float(p), 6) for p in probs[np.arange(len(ids)), ids]]}
            if data.tags is not None:
                record["gold"] = data.tags[i]
            records.append(record)
        return records

    def predict_entities(self, model, texts: list[str], device, autocast=None, warn=None) -> list[list[dict]]:
        """The entities of each text with their characters and scores, as transformers'
        pipeline("token-classification", aggregation_strategy="first") gives them for a
        text within --max-seq-length: the text tokenized whole, its tokens grouped into
        words as the pipeline groups them (text_word_pieces), each word labelled from its
        first token, the label's probability its score. A longer text is read in windows
        (`warn` hears)."""
        import contextlib

        read = [text_word_pieces(self.loaded, text) for text in texts]
        spans = [words for words, _ in read]
        present = [i for i, words in enumerate(spans) if words]  # a blank text has no words
        logits = self.predict_pieces(model, [read[i][1] for i in present], device,
                                     autocast or contextlib.nullcontext(), self.cfg.eval_batch_size, warn=warn,
                                     what="text")
        out: list[list[dict]] = [[] for _ in texts]
        for i, word_logits in zip(present, logits):
            probs = torch.softmax(torch.from_numpy(word_logits).double(), -1).numpy()
            ids = probs.argmax(-1)
            out[i] = group_entities(spans[i], [self.tags.tags[j] for j in ids],
                                    probs[np.arange(len(ids)), ids].tolist(), texts[i])
        return out

    def predict_sentences(self, model, sentences: list[list[str]], device, warn=None) -> list[dict]:
        """A record per sentence of given words: the words, their predicted tags and each
        tag's probability."""
        import contextlib

        logits = self.predict(model, sentences, device, contextlib.nullcontext(), self.cfg.eval_batch_size,
                              warn=warn)
        records = []
        for words, word_logits in zip(sentences, logits):
            probs = torch.softmax(torch.from_numpy(word_logits).double(), -1).numpy()
            ids = probs.argmax(-1)
            records.append({"tokens": words, "tags": [self.tags.tags[j] for j in ids],
                            "probabilities": [round(float(p), 6) for p in probs[np.arange(len(ids)), ids]]})
        return records

    def inputs(self) -> dict:
        """What this run trains and evaluates on (compared on resume: training/run_dir.py)."""
        cfg = self.cfg
        return {"train": split_identity(cfg, "train"), "validation": split_identity(cfg, "validation"),
                "columns": {"tokens": cfg.tokens_column, "tags": cfg.tags_column},
                "label_all_tokens": cfg.label_all_tokens, "labels": self.tags.to_dict(), **self.teacher_input()}

    def state(self) -> dict:
        tags = self.tags.tags
        return {"name": self.name, "architecture": self.architecture, "tag_set": self.tags.to_dict(),
                "hf_config": {"num_labels": len(tags), "id2label": dict(enumerate(tags)),
                              "label2id": {t: i for i, t in enumerate(tags)}},
                "options": self.cfg.data_options()}

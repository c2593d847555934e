"""`bertmodel evaluate` and `bertmodel predict` on a fine-tuned model: a RUN dir (its
hf/, the best model) or any exported directory of ours or of transformers.

Prediction takes texts, questions and contexts, or a file of them (`predict_file`): any
table format `data/tables.py` reads, in the columns the run was trained on (or, for a
classifier, the usual names as finetune finds them, e.g. "text" and "text_pair";
"question", "context" and an optional "id" for QA), or SQuAD JSON.

Evaluation reads the data options the run was trained with (bertmodel_task.json beside
config.json) unless told otherwise (a classifier's data without the run's text column is
read by the usual names), prints the task's metrics and writes predictions:
predictions.jsonl (classification) or predictions.json + nbest_predictions.json in the
official SQuAD format (QA).
"""
from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import torch

from bertmodel.training import parallel
from bertmodel.errors import BertmodelError
from bertmodel.hf import load_into, load_pretrained, model_dir
from bertmodel.model import KIND_OF

TASK_OF = {architecture: kind for architecture, kind in KIND_OF.items()  # either architecture's fine-tuned heads
           if kind in ("classify", "qa", "tokens", "choice")}
# What evaluate and predict take, said where a model is none of it: an encoder (a
# starting model) is scored as an embedder on a BEIR directory (inference/rank.py).
NOT_FINETUNED = ("evaluate and predict take classify, qa, tokens, choice and rerank models fine-tuned by `bertmodel "
                 "finetune` (evaluate also embed runs); an encoder is scored as an embedder by `bertmodel evaluate "
                 "{model} --data BEIR_DIR`")


def _setup(model, options: dict, device: str, read_validation: bool = True, unpad: str = "auto", log=None,
           allow_unknown_tags: bool = False):
    """(task object, model on device, device) for a fine-tuned model and data options;
    `unpad` as the fine-tuning option (auto: what measured faster on the device); `log`
    hears what the task reports of the data (lines as training logs them)."""
    from bertmodel.model.unpad import resolve as resolve_unpad
    from bertmodel.model.unpad import set_unpad

    from bertmodel.data.labels import LabelSpace
    from bertmodel.finetune import FinetuneConfig
    from bertmodel.tasks.finetuning import source_labels

    directory = model_dir(model)
    pre = load_pretrained(directory)
    task_name = TASK_OF.get(pre.architecture)
    if pre.head.get("name") == "rerank":  # a cross-encoder: the classification head, read as a reranker
        task_name = "rerank"
    if pre.head.get("name") == "embed":
        raise BertmodelError(f"{model}: an embed run (a bi-encoder): `bertmodel embed {model} --file F --out "
                             f"X.parquet` embeds texts, `bertmodel search` searches, `bertmodel evaluate {model} "
                             "--data BEIR_DIR` scores it")
    if pre.head.get("name") == "pretraining":  # an ELECTRA discriminator has a token classifier's shape, and is none
        raise BertmodelError(f"{model}: a pre-training run ({pre.architecture}), not a fine-tuned model; fine-tune it "
                             f"first (bertmodel finetune classify|qa|tokens|choice --model {model} ...), or score it "
                             f"as an embedder (bertmodel evaluate {model} --data BEIR_DIR)")
    if task_name is None:
        raise BertmodelError(f"{model}: a {pre.architecture} model, not a fine-tuned one; "
                             f"{NOT_FINETUNED.format(model=model)}")
    saved = dict(pre.head.get("options") or {})
    saved.update({k: v for k, v in options.items() if v is not None})
    saved.pop("train", None)
    if options.get("validation") or options.get("dataset") or options.get("validation_split"):
        saved.pop("max_eval_examples", None)  # other data is evaluated whole
    if not read_validation:
        saved.update(validation=None, dataset=None)
    fields = {k: v for k, v in saved.items() if k in FinetuneConfig.__dataclass_fields__}
    # The run's text columns where the data has them, else the usual names; --text-column wins.
    fields["run_columns"] = options.get("text_column") is None
    cfg = FinetuneConfig(task=task_name, model=str(directory), out=str(directory), **fields)
    d = parallel.Dist(device=torch.device(parallel.resolve_device(device)))
    log = log or (lambda *a: None)
    if task_name == "qa":
        from bertmodel.tasks.qa import QATask

        task = QATask(cfg, d, log, evaluation_only=True)
        net = task.model_class(pre.config)
    elif task_name == "tokens":
        from bertmodel.tasks.tokens import TagSet, TokenClassificationTask

        saved_tags = pre.head.get("tag_set")
        if saved_tags:
            tags = TagSet.from_dict(saved_tags)
        else:  # a transformers token classifier: its id2label is the tag set
            names = tuple(source_labels(pre) or ())
            tags = TagSet(names, any(n[:2] in ("B-", "I-", "E-", "S-") for n in names))
        task = TokenClassificationTask(cfg, d, log, tag_set=tags, allow_unknown_tags=allow_unknown_tags)
        net = task.model_class(pre.config, len(tags.tags))
    elif task_name == "rerank":
        from bertmodel.tasks.rerank import RerankTask

        task = RerankTask(cfg, d, log, evaluation_only=True)
        net = task.model_class(pre.config)
    elif task_name == "choice":
        from bertmodel.tasks.choice import MultipleChoiceTask

        task = MultipleChoiceTask(cfg, d, log, evaluation_only=True)
        net = task.model_class(pre.config)
    else:
        from bertmodel.tasks.classification import ClassificationTask

        space = pre.head.get("label_space")
        if space:
            labels = LabelSpace.from_dict(space)
        else:  # a transformers classifier: its id2label is the label set
            labels = LabelSpace("str", tuple(source_labels(pre) or ()))
        task = ClassificationTask(cfg, d, log, label_space=labels)
        net = task.model_class(pre.config, labels.num_labels)
    load_into(net, pre)
    set_unpad(net, resolve_unpad(unpad, d.device, net))  # only how it computes: the weights are the same
    task.trained_options = pre.head.get("options")  # the run's data options; None: a transformers dir
    return task, net.to(d.device).eval(), d


def load_task_model(model, options: dict, device: str = "cpu", read_validation: bool = True, unpad: str = "auto",
                    log=None):
    """(task object, model on device and in eval mode, Dist) of a fine-tuned model: what
    evaluation, prediction and the retrieval evaluation (inference/rank.py) score with."""
    return _setup(model, options, device, read_validation=read_validation, unpad=unpad, log=log)


PREDICTION_FILES = {"classify": ("predictions.jsonl",), "qa": ("predictions.json", "nbest_predictions.json")}


def _task_of_export(model) -> str | None:
    """The fine-tuning task of a model directory by its config.json's class, without
    loading it (None where that does not say)."""
    try:
        config = json.loads((model_dir(model) / "config.json").read_text())
        return TASK_OF.get((config.get("architectures") or [None])[0])
    except (OSError, ValueError, AttributeError):
        return None


def _refuse_earlier_predictions(out_dir: Path, task: str | None) -> None:
    names = PREDICTION_FILES["qa" if task == "qa" else "classify"] if task else ()
    if existing := next((out_dir / n for n in names if (out_dir / n).exists()), None):
        raise BertmodelError(f"{existing}: already exists (an earlier evaluation's predictions); pass --overwrite "
                             "to replace it, or --out DIR")


def evaluate_model(model, options: dict, out_dir=None, device: str = "cpu", unpad: str = "auto",
                   overwrite: bool = False, log=None, allow_unknown_tags: bool = False) -> tuple[dict, list[Path]]:
    """The task's metrics on the validation data (0-100 for SQuAD, as the official script)
    and the prediction files written into out_dir (default: the model's run dir); no
    metrics ({}) for classification data without its label column. Files
    an earlier evaluation left there are replaced only with `overwrite`, and that is
    checked before any work: they may be another data set's predictions. `log` hears
    what was read and how it was fitted to --max-seq-length (truncated rows, sentences
    split into windows), as training reports it. Gold tags a token classifier does not
    know are refused unless `allow_unknown_tags` (then they count as missed, and no
    loss is reported)."""
    out_dir = Path(out_dir) if out_dir else Path(model)
    if not overwrite:  # before the data is read: the task is known from config.json
        _refuse_earlier_predictions(out_dir, _task_of_export(model))
    task, net, d = _setup(model, options, device, unpad=unpad, log=log, allow_unknown_tags=allow_unknown_tags)
    if task.validation is None:
        raise BertmodelError(f"{model}: no evaluation data; pass --data FILE (or --dataset NAME)")
    qa = hasattr(task, "validation_windows")
    paths = [out_dir / name for name in PREDICTION_FILES["qa" if qa else "classify"]]
    if not overwrite:
        _refuse_earlier_predictions(out_dir, "qa" if qa else "classify")
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if d.device.type == "cuda" else contextlib.nullcontext()
    if qa:
        from bertmodel.tasks.qa import write_qa_outputs

        metrics = task.evaluate(net, d, autocast)
        write_qa_outputs(paths, *task.last_predictions)
    elif task.name == "rerank":  # labelled pairs: a JSON line per pair, its score and gold label
        logits = task.predict(net, task.validation, d.device, autocast, task.cfg.eval_batch_size)
        metrics = task.evaluate(net, d, autocast, logits=logits)
        _write_jsonl(paths[0], task.prediction_records(logits))
    elif _is_tokens(task):  # a JSON line per sentence: its words, predicted and gold tags
        metrics = task.evaluate(net, d, autocast)
        _write_jsonl(paths[0], task.prediction_records(task.last_word_logits))
    else:  # classification and multiple choice alike: logits (N, C), a JSON line per example
        logits = task.predict(net, task.validation, d.device, autocast, task.cfg.eval_batch_size)
        # Unlabelled data (no label column): batch prediction, so predictions and no metrics.
        metrics = (task.evaluate(net, d, autocast, logits=logits) if task.validation_texts.labels is not None
                   else {})
        _write_jsonl(paths[0], task.prediction_records(logits))
    return {k.removeprefix("eval_"): v for k, v in metrics.items()}, paths


def predict_texts(model, texts: list[str], pairs: list[str] | None = None, device: str = "cpu",
                  unpad: str = "auto", warn=None, max_seq_length: int | None = None) -> list[dict]:
    """Label and probabilities for each text (pair) with a fine-tuned classifier, or a
    token classifier's entities; `warn(message)` hears of pairs given to a model trained
    on single texts (or the reverse), and of texts longer than `max_seq_length` (default:
    the run's; at most the model's positions): truncated by a classifier, read in windows
    by a token classifier."""
    task, net, d = _setup(model, {"max_seq_length": max_seq_length}, device, read_validation=False, unpad=unpad)
    if _is_qa(task):
        raise BertmodelError(f"{model}: a question-answering model; pass --question and --context")
    if _is_choice(task):
        raise BertmodelError(_CHOICE_NEEDS_FILE.format(model=model))
    if _is_tokens(task):
        if pairs:
            raise BertmodelError(f"{model}: a token classifier labels the words of single texts; --pair does not "
                                 "apply")
        return [{"text": t, "entities": e} for t, e in zip(texts, task.predict_entities(net, texts, d.device,
                                                                                           warn=warn))]
    _check_pairing(model, task, pairs is not None, warn, "pass --pair for each text")
    return _classify(task, net, d, texts, pairs, warn)


def predict_answers(model, questions: list[str], contexts: list[str], device: str = "cpu",
                    unpad: str = "auto", max_seq_length: int | None = None) -> list[dict]:
    """The predicted answer span ("" for no answer, SQuAD v2.0) and its probability among
    the n-best for each question (`unpad` is accepted for symmetry: QA always runs padded,
    see model/unpad.py; a context longer than `max_seq_length` is read in windows, as
    evaluation reads it)."""
    from bertmodel.data.squad import SquadExample

    task, net, d = _setup(model, {"max_seq_length": max_seq_length}, device, read_validation=False, unpad=unpad)
    if _is_choice(task):
        raise BertmodelError(_CHOICE_NEEDS_FILE.format(model=model))
    if not _is_qa(task):
        raise BertmodelError(f"{model}: a classifier, not a question-answering model; pass texts")
    examples = [SquadExample(str(i), "", q, c, [], False, "command line") for i, (q, c) in
                enumerate(zip(questions, contexts))]
    return _answer(task, net, d, examples)


def predict_file(model, path, device: str = "cpu", unpad: str = "auto", warn=None,
                 max_seq_length: int | None = None) -> list[dict]:
    """One prediction record per record of `path` (JSONL, CSV, TSV, Parquet, a save_to_disk
    dir; for QA also SQuAD JSON, answers optional), in order: predict_texts' records for a
    classifier (text in the run's --text-column, its pair in its --text-pair-column, or
    the usual names: data/tables.TEXT_LAYOUTS), predict_answers' for a QA model ("question",
    "context"; "id", when the file has one, goes first in each record). `warn` and
    `max_seq_length` as predict_texts'."""
    task, net, d = _setup(model, {"max_seq_length": max_seq_length}, device, read_validation=False, unpad=unpad)
    if _is_qa(task):
        examples, ids = _read_questions(path)
        records = _answer(task, net, d, examples)
        return records if ids is None else [{"id": i, **r} for i, r in zip(ids, records)]
    if _is_tokens(task):
        return _tag_file(task, net, d, path, warn)
    if _is_choice(task):  # the run's context, question, choices (and label, as "gold") columns
        return task.predict_table(net, d, _open_table(path, header=not task.cfg.no_header), warn)
    texts, pairs, pair_column = _read_texts(task, path)
    _check_pairing(model, task, pairs is not None, warn,
                   f"{path} has no {pair_column!r} column" if pair_column else f"{path} has no text pair column")
    return _classify(task, net, d, texts, pairs, warn)


def write_predictions(path, records: list[dict], overwrite: bool = False) -> None:
    """`records` as JSON lines at `path`, atomically; an existing file only with `overwrite`."""
    path = Path(path)
    if path.is_dir():
        raise BertmodelError(f"{path}: a directory; give a file name")
    if path.exists() and not overwrite:
        raise BertmodelError(f"{path}: already exists; pass --overwrite to replace it")
    _write_jsonl(path, records)


def _is_qa(task) -> bool:
    return hasattr(task, "validation_windows")


def _is_tokens(task) -> bool:
    return task.name == "token_classification"


def _tag_file(task, net, d, path, warn=None) -> list[dict]:
    """A token classifier's records for a file: sentences of given words (CoNLL text, or
    the run's tokens column) get a tag per word; a table with a "text" column gets the
    entities of each text."""
    from bertmodel.data.tagged import TABLE_SUFFIXES, read_tagged

    path = Path(path)
    if path.is_dir() or path.suffix.lower() in TABLE_SUFFIXES | {".csv", ".tsv"}:
        table = _open_table(path)
        words = table.has(task.cfg.tokens_column) and path.suffix.lower() not in (".csv", ".tsv")  # lists of words
        if not words:
            if not table.has("text"):
                raise BertmodelError(f"{path}: no {task.cfg.tokens_column!r} column of word lists and no 'text' "
                                     "column; give texts in 'text', or words as CoNLL lines or JSONL lists")
            texts = table.texts("text", blank_ok=True)
            return [{"text": t, "entities": e}
                    for t, e in zip(texts, task.predict_entities(net, texts, d.device, warn=warn))]
    data = read_tagged(path, tokens_column=task.cfg.tokens_column, tags_column=task.cfg.tags_column,
                       tags_required=False, tag_names=task.tags.tags)
    records = task.predict_sentences(net, data.words, d.device, warn)
    if data.tags is not None:
        for record, gold in zip(records, data.tags):
            record["gold"] = gold
    return records


def _is_choice(task) -> bool:
    return task.name == "multiple_choice"


_CHOICE_NEEDS_FILE = ("{model}: a multiple-choice model; pass --file with a context and the choices of each "
                      "record (in the run's columns)")


def _check_pairing(model, task, given_pairs: bool, warn, hint: str) -> None:
    """Warn when the input's kind (pairs or single texts) is not what the run was trained on."""
    trained = task.trained_options
    if warn is None or trained is None:  # a transformers dir does not say what it saw
        return
    if trained.get("text_pair_column") is not None and not given_pairs:
        warn(f"{model} was trained on text pairs ({trained.get('text_column')!r} + "
             f"{trained['text_pair_column']!r}) but is given single texts; {hint}")
    elif trained.get("text_pair_column") is None and given_pairs:
        warn(f"{model} was trained on single texts but is given text pairs; its predictions for a second "
             "segment it never saw mean little")


def _classify(task, net, d, texts: list[str], pairs: list[str] | None, warn=None) -> list[dict]:
    from bertmodel.data.classification import encode_texts, truncation_warning
    from bertmodel.tasks.classification import EncodedSet

    encoded = EncodedSet(encode_texts(task.tok, texts, pairs, task.cfg.max_seq_length), task.pad, task.multiple)
    if warn is not None and encoded.encoded.truncated:
        warn(truncation_warning(len(texts), "pair" if pairs else "text", encoded.encoded.fit_note(),
                                task.cfg.max_seq_length, task.pre.config.max_sequence_length))
    logits = torch.from_numpy(task.predict(net, encoded, d.device, contextlib.nullcontext(),
                                           task.cfg.eval_batch_size))
    inputs = [{"text": t} if pairs is None else {"text": t, "text_pair": pair}
              for t, pair in zip(texts, pairs or texts)]
    if task.labels.regression:
        return [{**given, "prediction": float(v)} for given, v in zip(inputs, logits[:, 0])]
    probs = torch.softmax(logits.double(), -1).numpy()
    names = [str(n) for n in task.labels.decode(list(range(task.labels.num_labels)))]
    return [{**given, "label": names[int(p.argmax())], "probability": float(p.max()),
             "probabilities": dict(zip(names, map(float, p)))} for given, p in zip(inputs, probs)]


def _answer(task, net, d, examples) -> list[dict]:
    from bertmodel.data.qa_features import prepare_qa_features
    from bertmodel.tasks.qa import WindowSet

    cfg = task.cfg
    windows = WindowSet(prepare_qa_features(examples, task.loaded, cfg.max_seq_length, cfg.doc_stride,
                                            cfg.max_query_length, training=False), 0, 1)
    predictions, nbest = task.predict(net, examples, windows, d.device, contextlib.nullcontext(), cfg.eval_batch_size)
    out = []
    for e in examples:
        # The answer evaluate scores (v2.0: "" when the null score beats the best span by
        # the run's --null-threshold), with its probability among the n-best.
        answer = predictions.get(e.id, "")
        score = next((c["probability"] for c in nbest.get(e.id, ()) if c["text"] == answer), 0.0)
        out.append({"question": e.question, "answer": answer, "score": float(score)})
    return out


def _open_table(path, header: bool = True):
    """A table reader's view of a prediction file; a file of any other suffix is read as
    JSON lines (what predict --file took before it read tables)."""
    from bertmodel.data.tables import SUFFIX_FORMATS, open_table

    path = Path(path)
    jsonl = path.is_file() and path.suffix.lower() not in SUFFIX_FORMATS
    return open_table(path, header=header, file_format="jsonl" if jsonl else None)


def _read_texts(task, path) -> tuple[list[str], list[str] | None, str | None]:
    """(texts, pairs or None, the pair column looked for) of a file to classify: the
    run's columns where the file has its text column, else the usual names, as evaluate
    reads them (data/tables.text_columns)."""
    from bertmodel.data.tables import USUAL_TEXT_COLUMNS, text_columns

    cfg = task.cfg
    table = _open_table(path, header=not cfg.no_header)
    # Not the table reader's --no-header hint: predict reads files as the run read its own.
    table.hint = f" (predict reads the run's text column, {cfg.text_column!r}, or the usual {USUAL_TEXT_COLUMNS})"
    columns = text_columns(table, cfg.text_column, cfg.text_pair_column, fallback=True)
    text_column, pair_column = columns.text, columns.pair
    texts = table.texts(text_column, blank_ok=True)
    if pair_column is None or not table.has(pair_column):
        return texts, None, pair_column
    values = table.get(table.column(pair_column, "text-pair"))
    first = {}  # the first record without (False) / with (True) a pair
    for i, value in enumerate(values):
        first.setdefault(isinstance(value, str), i)
    if len(first) == 2:  # a pair on some records only would be dropped or misread
        raise BertmodelError(f"{table.source}: {table.record(first[False])} has no \"{pair_column}\" string, but "
                             f"{table.record(first[True])} has one; give every record a {pair_column}, or none")
    return texts, (values if True in first else None), pair_column


def _read_questions(path) -> tuple[list, list | None]:
    """(SquadExamples, the file's ids or None) of a file of questions to answer."""
    from bertmodel.data.squad import SquadExample, read_squad_document

    path = Path(path)
    if path.is_file() and path.suffix.lower() == ".json" and (examples := read_squad_document(path)):
        return examples, [e.id for e in examples]
    table = _open_table(path)
    table.hint = " (predict reads the questions from 'question', their contexts from 'context')"
    questions, contexts = table.texts("question", "question"), table.texts("context", "context")
    ids = None
    if table.has("id"):
        ids = table.get(table.column("id", "id"))
        for i, value in enumerate(ids):
            if not isinstance(value, (str, int)) or isinstance(value, bool):
                raise BertmodelError(f"{table.source}: {table.record(i)}: id {value!r} is not text or a number")
    # Our ids are the record numbers: the file's may repeat, and the answers are by id.
    return [SquadExample(str(i), "", q, c, [], False, table.source)
            for i, (q, c) in enumerate(zip(questions, contexts))], ids


def _write_jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    tmp.replace(path)

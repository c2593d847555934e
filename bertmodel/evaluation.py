"""`bertmodel evaluate` and `bertmodel predict` on a fine-tuned model: a RUN dir (its
hf/, the best model) or any exported directory of ours or of transformers.

Evaluation reads the data options the run was trained with (bertmodel_task.json beside
config.json) unless told otherwise, prints the task's metrics and writes predictions:
predictions.jsonl (classification) or predictions.json + nbest_predictions.json in the
official SQuAD format (QA).
"""
from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import numpy as np
import torch

from bertmodel import parallel
from bertmodel.errors import BertmodelError
from bertmodel.hf import load_into, load_pretrained

TASK_OF = {"BertForSequenceClassification": "classify", "BertForQuestionAnswering": "qa"}


def model_dir(path) -> Path:
    path = Path(path)
    if (path / "hf" / "config.json").is_file():
        return path / "hf"
    return path


def _setup(model, options: dict, device: str, read_validation: bool = True, unpad: str = "auto"):
    """(task object, model on device, device) for a fine-tuned model and data options;
    `unpad` as the fine-tuning option (auto: what measured faster on the device)."""
    from bertmodel.model.unpad import resolve as resolve_unpad
    from bertmodel.model.unpad import set_unpad

    from bertmodel.data.labels import LabelSpace
    from bertmodel.finetune import FinetuneConfig

    directory = model_dir(model)
    pre = load_pretrained(directory)
    task_name = TASK_OF.get(pre.architecture)
    if task_name is None:
        raise BertmodelError(f"{model}: a {pre.architecture} model is not a fine-tuned classifier or QA model")
    saved = dict(pre.head.get("options") or {})
    saved.update({k: v for k, v in options.items() if v is not None})
    saved.pop("train", None)
    if not read_validation:
        saved.update(validation=None, dataset=None)
    fields = {k: v for k, v in saved.items() if k in FinetuneConfig.__dataclass_fields__}
    cfg = FinetuneConfig(task=task_name, model=str(directory), out=str(directory), **fields)
    d = parallel.Dist(device=torch.device(parallel.resolve_device(device)))
    log = lambda *a: None  # noqa: E731
    if task_name == "qa":
        from bertmodel.model import BertForQuestionAnswering
        from bertmodel.tasks.qa import QATask

        task = QATask(cfg, d, log, evaluation_only=True)
        net = BertForQuestionAnswering(pre.config)
    else:
        from bertmodel.model import BertForSequenceClassification
        from bertmodel.tasks.classification import ClassificationTask

        space = pre.head.get("label_space")
        if space:
            labels = LabelSpace.from_dict(space)
        else:  # a transformers classifier: its id2label is the label set
            id2label = pre.head.get("id2label") or {}
            labels = LabelSpace("str", tuple(id2label[i] for i in sorted(id2label)))
        task = ClassificationTask(cfg, d, log, label_space=labels)
        net = BertForSequenceClassification(pre.config, labels.num_labels)
    load_into(net, pre)
    set_unpad(net, resolve_unpad(unpad, d.device, net))  # only how it computes: the weights are the same
    return task, net.to(d.device).eval(), d


PREDICTION_FILES = {"classify": ("predictions.jsonl",), "qa": ("predictions.json", "nbest_predictions.json")}


def evaluate_model(model, options: dict, out_dir=None, device: str = "cpu", unpad: str = "auto",
                   overwrite: bool = False) -> tuple[dict, list[Path]]:
    """The task's metrics on the validation data (0-100 for SQuAD, as the official script)
    and the prediction files written into out_dir (default: the model's run dir). Files
    an earlier evaluation left there are replaced only with `overwrite`, and that is
    checked before any work: they may be another data set's predictions."""
    task, net, d = _setup(model, options, device, unpad=unpad)
    if task.validation is None:
        raise BertmodelError(f"{model}: no evaluation data; pass --data FILE (or --dataset NAME)")
    out_dir = Path(out_dir) if out_dir else Path(model)
    qa = hasattr(task, "validation_windows")
    paths = [out_dir / name for name in PREDICTION_FILES["qa" if qa else "classify"]]
    if not overwrite and (existing := next((p for p in paths if p.exists()), None)):
        raise BertmodelError(f"{existing}: already exists (an earlier evaluation's predictions); pass --overwrite "
                             "to replace it, or --out DIR")
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if d.device.type == "cuda" else contextlib.nullcontext()
    if qa:
        from bertmodel.tasks.qa import write_qa_outputs

        metrics = task.evaluate(net, d, autocast)
        write_qa_outputs(paths, *task.last_predictions)
    else:
        logits = task.predict(net, task.validation, d.device, autocast, task.cfg.eval_batch_size)
        metrics = task.evaluate(net, d, autocast, logits=logits)
        _write_jsonl(paths[0], task.prediction_records(logits))
    return {k.removeprefix("eval_"): v for k, v in metrics.items()}, paths


def predict_texts(model, texts: list[str], pairs: list[str] | None = None, device: str = "cpu",
                  unpad: str = "auto") -> list[dict]:
    """Label and probabilities for each text (pair) with a fine-tuned classifier."""
    from bertmodel.data.classification import encode_texts, pad_batch

    task, net, d = _setup(model, {}, device, read_validation=False, unpad=unpad)
    if hasattr(task, "validation_windows"):
        raise BertmodelError(f"{model}: a question-answering model; pass --question and --context")
    encoded = encode_texts(task.tok, texts, pairs, task.cfg.max_seq_length)
    batch = {k: torch.from_numpy(v).to(d.device) for k, v in pad_batch(encoded, np.arange(len(texts)), task.pad,
                                                                         task.multiple).items()}
    with torch.no_grad():
        logits = net(**batch).logits.float().cpu()
    inputs = [{"text": t} if pairs is None else {"text": t, "text_pair": pair}
              for t, pair in zip(texts, pairs or texts)]
    if task.labels.regression:
        return [{**given, "prediction": float(v)} for given, v in zip(inputs, logits[:, 0])]
    probs = torch.softmax(logits.double(), -1).numpy()
    names = [str(n) for n in task.labels.decode(list(range(task.labels.num_labels)))]
    return [{**given, "label": names[int(p.argmax())], "probability": float(p.max()),
             "probabilities": dict(zip(names, map(float, p)))} for given, p in zip(inputs, probs)]


def predict_answers(model, questions: list[str], contexts: list[str], device: str = "cpu",
                    unpad: str = "auto") -> list[dict]:
    """The predicted answer span ("" for no answer, SQuAD v2.0) and its probability among
    the n-best for each question (`unpad` is accepted for symmetry: QA always runs padded,
    see model/unpad.py)."""
    from bertmodel.data.qa_features import prepare_qa_features
    from bertmodel.data.squad import SquadExample
    from bertmodel.tasks.qa import WindowSet

    task, net, d = _setup(model, {}, device, read_validation=False, unpad=unpad)
    if not hasattr(task, "validation_windows"):
        raise BertmodelError(f"{model}: a classifier, not a question-answering model; pass texts")
    examples = [SquadExample(str(i), "", q, c, [], False, "command line") for i, (q, c) in
                enumerate(zip(questions, contexts))]
    cfg = task.cfg
    windows = WindowSet(prepare_qa_features(examples, task.tok, cfg.max_seq_length, cfg.doc_stride,
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


def _write_jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    tmp.replace(path)

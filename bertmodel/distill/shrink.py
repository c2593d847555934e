"""`bertmodel shrink`: a student made of some of its teacher's layers, DistilBERT's
initialisation (Sanh et al. 2019, arXiv 1910.01108, §3: "initialize the student from the
teacher by taking one layer out of two").

The kept layers are renumbered in order (teacher layers 0, 2, 4 become the student's 0, 1,
2); everything outside the layer stack (embeddings, ModernBERT's final norm, the pooler,
an MLM or task head) is copied as it is, and config.json's num_hidden_layers says the new
depth. The student is written as the teacher's own transformers class (hf.export_hf), with
the teacher's tokenizer files, so `finetune --model STUDENT` (and `--teacher TEACHER`) take
it like any other model. A sentence-transformers teacher keeps its pooling, normalisation
and prompts (hf.sentence_settings), so SentenceTransformer(STUDENT) is an embedder of the
same kind.

ModernBERT: each layer's attention kind (global or local: config.json's layer_types, which
ours and transformers' ModernBertConfig read per layer) goes with it. Its layer 0 has no
attention norm (the embeddings' norm has just normalised its input; transformers builds it
as nn.Identity), so a student whose first layer were another teacher layer would lose that
layer's norm: such a choice is refused.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

from bertmodel.errors import BertmodelError
from bertmodel.hf import TIED_KEYS, check_export_dir, export_hf, load_pretrained, model_dir
from bertmodel.hf_tokenizer import reading_length
from bertmodel.retrieval.sentence_files import read_sentence_settings

# A layer's tensors: `bert.encoder.layer.3.` (BERT, RoBERTa/XLM-R as roberta., ELECTRA as
# electra.) or `model.layers.3.` (ModernBERT), as load_pretrained names them for any head.
LAYER_KEY = re.compile(r"^(?P<stack>(?:bert|roberta|electra)\.encoder\.layer|model\.layers)\.(?P<index>\d+)\.")


@dataclass
class Shrunk:
    """What shrink wrote: the student's directory and class, and the counts its summary gives."""

    out: Path
    architecture: str
    teacher_layers: int
    layers: list[int]
    teacher_params: int
    student_params: int


def parse_layers(text: str) -> list[int]:
    """--layers "0,2,4" -> [0, 2, 4] (check_layers says whether they make a student)."""
    parts = [p.strip() for p in str(text).split(",")]
    if not any(parts):
        return []
    if not all(p.isdigit() for p in parts):
        raise BertmodelError(f"--layers {text}: not a comma-separated list of layer numbers counted from 0 "
                             "(e.g. 0,2,4)")
    return [int(p) for p in parts]


def check_layers(layers: list[int]) -> None:
    """At least one layer, each once, ascending (the student keeps them in the teacher's order)."""
    if not layers:
        raise BertmodelError("--layers: name at least one teacher layer to keep (e.g. 0,2,4)")
    given = ",".join(map(str, layers))
    twice = sorted({n for n in layers if layers.count(n) > 1})
    if twice:
        raise BertmodelError(f"--layers {given}: layer {', '.join(map(str, twice))} named twice; each teacher layer "
                             "is kept at most once")
    if list(layers) != sorted(layers):
        raise BertmodelError(f"--layers {given}: not in ascending order; the student keeps the teacher's layers in "
                             f"their order, so list them as {','.join(map(str, sorted(layers)))}")


def _check_apart(out: Path, sources: list[Path]) -> None:
    """out is not, and does not hold or lie inside, the model read: writing it would replace that."""
    out_abs = out.resolve()
    for source in sources:
        src = Path(source).resolve()
        if out_abs == src or src in out_abs.parents or out_abs in src.parents:
            raise BertmodelError(f"{out}: is (or contains, or lies inside) the teacher {sources[0]}; choose "
                                 "another --out")


def _check_range(teacher, layers: list[int], count: int) -> None:
    outside = [n for n in layers if n >= count]
    if outside:
        raise BertmodelError(f"--layers: {teacher} has {count} layers (0 to {count - 1}); "
                             f"{', '.join(map(str, outside))} {'is' if len(outside) == 1 else 'are'} out of range")


def kept_layers(state_dict: dict, layers: list[int]) -> dict:
    """The state dict with only `layers` of the stack, renumbered 0, 1, ... in order;
    every other tensor as it is."""
    new_index = {old: new for new, old in enumerate(layers)}
    out = {}
    for key, value in state_dict.items():
        match = LAYER_KEY.match(key)
        if match is None:
            out[key] = value
        elif int(match["index"]) in new_index:
            out[f"{match['stack']}.{new_index[int(match['index'])]}.{key[match.end():]}"] = value
    return out


def _student_config(config, layers: list[int], teacher):
    fields = {"num_hidden_layers": len(layers)}
    if config.model_type == "modernbert":
        if layers[0] != 0:
            raise BertmodelError(f"--layers {','.join(map(str, layers))}: {teacher} is a ModernBERT, whose layer 0 "
                                 "alone has no attention norm (its embeddings' norm stands in for it), so a student's "
                                 "first layer must be the teacher's layer 0: start --layers with 0")
        fields["layer_types"] = [config.layer_types[n] for n in layers]  # each layer keeps its attention kind
    return dataclasses.replace(config, **fields)


def _student_task(pre) -> dict:
    """The task record the student's directory carries: the teacher's class and head fields,
    the length a fine-tuned teacher read, an ELECTRA model's part, and a sentence-transformers
    teacher's pooling, normalisation and prompts (its own files, or our embed run's record)."""
    task = {"architecture": pre.architecture, "hf_config": pre.head.get("hf_config")}
    length = reading_length(pre.head)
    if length is not None:
        task["options"] = {"max_seq_length": length}
    task.update({k: pre.head[k] for k in ("name", "objective", "part", "embedding", "sentence_transformers")
                 if k in pre.head})
    files = read_sentence_settings(pre.source) if "sentence_transformers" not in task else None
    if files is not None:  # SentenceTransformer(out) pools and normalises as SentenceTransformer(teacher)
        task["sentence_transformers"] = {
            "pooling": files["pooling"], "normalize": files["normalize"], "dimension": pre.config.hidden_size,
            "query_prefix": files["query_prefix"], "passage_prefix": files["passage_prefix"],
            "max_seq_length": files.get("max_passage_length"), "similarity": files["similarity"]}
    return task


def _params(state_dict: dict) -> int:
    """Parameters written (a tied decoder counted once, as export_hf writes it)."""
    return sum(v.numel() for k, v in state_dict.items() if k not in TIED_KEYS)


def shrink(teacher, layers: list[int], out, overwrite: bool = False) -> Shrunk:
    """Write to `out` a transformers directory of `teacher`'s class holding only its
    `layers` (counted from 0, ascending), with everything else and its tokenizer copied.
    `teacher`: our run (its RUN/hf, a fine-tuned run's best model; its latest checkpoint
    before it has one) or checkpoint, or a transformers directory of any family we read."""
    out = Path(out)
    check_layers(layers)
    _check_apart(out, [Path(teacher)])
    check_export_dir(out, overwrite)
    pre = load_pretrained(model_dir(teacher))  # a run's RUN/hf (a fine-tuned run's best), as --teacher reads it
    _check_apart(out, [Path(teacher), Path(pre.source)])
    count = pre.config.num_hidden_layers
    _check_range(teacher, layers, count)
    if pre.tokenizer is None:
        raise BertmodelError(f"{teacher}: no tokenizer files stored with it; a student reads its teacher's tokens, "
                             "so the teacher must carry them")
    config = _student_config(pre.config, layers, teacher)
    state = kept_layers(pre.state_dict, layers)
    export_hf({"model": state, "config": config.to_dict(), "task": _student_task(pre)}, out, tokenizer=pre.tokenizer,
              overwrite=overwrite)
    return Shrunk(out, pre.architecture, count, list(layers), _params(pre.state_dict), _params(state))

"""The one place that maps to and from transformers directories (our state dicts
already use transformers' names).

`export_hf` writes what `save_pretrained` of the head's transformers class plus a
tokenizer's `save_pretrained` would: config.json (with the architecture and the head's
fields, e.g. id2label), model.safetensors (every tensor except the tied decoder entries
cls.predictions.decoder.weight/bias; metadata {"format": "pt"}) and the tokenizer files,
so `AutoModelFor....from_pretrained(dir)` loads with no missing or unexpected keys and
`AutoTokenizer.from_pretrained(dir)` works (the tokenizer's files and lengths:
hf_tokenizer.py).

Every architecture (config.json's model_type "bert", "modernbert" or "roberta"; the tied
decoder is cls.predictions.decoder.* for BERT, decoder.weight for ModernBERT,
lm_head.decoder.* for RoBERTa), XLM-R (model_type "xlm-roberta": RoBERTa's network, read
and written back under its XLMRoberta* names) and ELECTRA (model_type "electra": the BERT
encoder under `electra.`, ElectraModel, ElectraForPreTraining or any ElectraFor... head in,
the fine-tuning heads out).

Loading: `load_pretrained(path)` reads a RUN dir (its latest checkpoint), a checkpoint
dir, or a Hugging Face BERT, ModernBERT, RoBERTa, XLM-R or ELECTRA dir of any head
(BertModel, BertForPreTraining, BertForMaskedLM, ModernBertModel, ModernBertForMaskedLM,
RobertaModel, RobertaForMaskedLM, the fine-tuning heads; model.safetensors or
pytorch_model.bin, old gamma/beta LayerNorm names accepted), and
`load_into(model, pretrained)` puts the encoder (and the head, where the source has the
same one) into any of our head models, returning what it initialised anew or left out.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from bertmodel.training.checkpoint import (choose_from_run, is_disk_full, is_run_dir, latest_checkpoint,
                                           load_checkpoint, unwrap_state_dict)
from bertmodel.training.run_dir import RUN_FILE
from bertmodel.model.config import BertConfig, ModernBertConfig, config_from_dict
from bertmodel.model.rtd import discriminator_state, generator_state, generator_task
from bertmodel.errors import BertmodelError
from bertmodel.data.tokenizer_info import TOKENIZER_FILES, TokenizerInfo, has_tokenizer, tokenizer_info
from bertmodel.retrieval.sentence_files import SENTENCE_FILES, read_projection, write_sentence_files
from bertmodel.hf_tokenizer import input_names, reading_length, special_ids, write_tokenizer

TIED_KEYS = ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias", "decoder.weight",
             "generator_lm_head.weight", "lm_head.decoder.weight", "lm_head.decoder.bias")
TIED_SOURCES = {"cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
                "cls.predictions.decoder.bias": "cls.predictions.bias",
                "decoder.weight": "model.embeddings.tok_embeddings.weight",
                "generator_lm_head.weight": "electra.embeddings.word_embeddings.weight",
                "lm_head.decoder.weight": "roberta.embeddings.word_embeddings.weight",
                "lm_head.decoder.bias": "lm_head.bias"}
# A tied entry is filled in only where the source has the head it belongs to (a bare
# encoder or a classifier gets no decoder).
TIED_HEAD = {"cls.predictions.decoder.weight": "cls.predictions.bias", "cls.predictions.decoder.bias":
             "cls.predictions.bias", "decoder.weight": "decoder.bias",
             "generator_lm_head.weight": "generator_lm_head.bias", "lm_head.decoder.weight": "lm_head.bias",
             "lm_head.decoder.bias": "lm_head.bias"}


# BertModel's, ModernBertModel's, ElectraModel's, RobertaModel's place in heads
ENCODER_PREFIXES = ("bert.", "model.", "electra.", "roberta.")
POOLER_PREFIXES = ("bert.pooler.", "roberta.pooler.")  # the encoders' part some of their heads lack
# A bare encoder's own names (no head prefix), per model_type
BARE_ENCODER = {"bert": (("embeddings.", "encoder.", "pooler."), "bert."),
                "modernbert": (("embeddings.", "layers.", "final_norm."), "model."),
                "electra": (("embeddings.", "embeddings_project.", "encoder."), "electra."),
                "roberta": (("embeddings.", "encoder.", "pooler."), "roberta."),
                "xlm-roberta": (("embeddings.", "encoder.", "pooler."), "roberta.")}


@dataclass
class Pretrained:
    config: BertConfig | ModernBertConfig
    state_dict: dict  # transformers' names, tied keys filled in where the source has an MLM head
    tokenizer: TokenizerInfo | None
    source: Path
    step: int | None = None  # our checkpoints only
    architecture: str = "BertForPreTraining"  # the transformers class the weights are for
    head: dict = field(default_factory=dict)  # the head's settings (num_labels, id2label, task options)
    tied: bool = True
    """Whether its MLM decoder is its word-embedding table, as every model here ties it: false
    where config.json says tie_word_embeddings false or the file's decoder differs from the
    table (transformers then keeps the two apart too)."""


class UnsupportedModel(BertmodelError):
    """A transformers directory of a model type bertmodel does not read (config.json's
    model_type, e.g. deberta-v2); `model_type` lets a command say what it trains instead."""

    def __init__(self, path: Path, model_type):
        self.path, self.model_type = path, model_type
        super().__init__(f"{path}: is a {model_type} model (config.json's model_type); bertmodel reads "
                         f"{', '.join(BARE_ENCODER)} models")


def hf_tensors(state_dict: dict) -> dict[str, torch.Tensor]:
    """The tensors save_pretrained writes: tied decoder entries dropped, fp32, contiguous."""
    sd = unwrap_state_dict(state_dict)
    return {k: v.detach().to("cpu", torch.float32).contiguous().clone()
            for k, v in sd.items() if k not in TIED_KEYS}


RTD_GENERATOR_DIR = "generator"  # RUN/generator: an ELECTRA run's generator, beside RUN/hf (its discriminator)
TASK_FILE = "bertmodel_task.json"  # our task's settings beside config.json (transformers ignores it)
# Every name an export may write at the top of its directory, whatever the task (an
# exporter that writes more, e.g. sentence-transformers' modules.json and 1_Pooling/,
# adds its names here: export_hf refuses to write any other). An export replaces a
# directory only when it holds nothing but these, which it or an earlier export wrote:
# never a user's files, a shard set or a run.
EXPORT_FILES = frozenset({"config.json", "model.safetensors", TASK_FILE, *TOKENIZER_FILES, *SENTENCE_FILES})
# A bare encoder's export (an embed run's) keeps its tensors under the encoder's own names,
# as save_pretrained of BertModel / ModernBertModel writes them.
BARE_ARCHITECTURES = {"BertModel": "bert.", "ModernBertModel": "model.", "RobertaModel": "roberta.",
                      "XLMRobertaModel": "roberta."}
SHARD_SET_FILES = ("manifest.json", "state.json", "dataset_info.json")  # bertprep build-shards' own


def model_dir(path) -> Path:
    """A run directory's export (RUN/hf) when it has one, else the directory itself."""
    path = Path(path)
    if (path / "hf" / "config.json").is_file():
        return path / "hf"
    return path


def check_export_dir(out_dir, overwrite: bool = True) -> None:
    """out_dir is new, empty, or holds only what an export writes (EXPORT_FILES), which
    it may replace with `overwrite`. Anything else (a user's notes, a shard set, a run)
    is refused in one line naming it: an export swaps in a whole directory."""
    out_dir = Path(out_dir)
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise BertmodelError(f"{out_dir}: exists and is a file")
    names = sorted(p.name for p in out_dir.iterdir())
    foreign = [n for n in names if n not in EXPORT_FILES]
    if foreign:
        listed = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5:,} more" if len(foreign) > 5 else "")
        if any(n in SHARD_SET_FILES or n.endswith(".arrow") for n in foreign):
            what = "a shard set (bertprep build-shards)"
        elif is_run_dir(out_dir) or RUN_FILE in foreign:
            what = "a run directory"
        else:
            what = "files an export never writes"
        raise BertmodelError(f"{out_dir}: holds {what} ({listed}); an export replaces only its own files "
                             f"({', '.join(sorted(EXPORT_FILES))}), so choose another directory")
    if names and not overwrite:
        raise BertmodelError(f"{out_dir}: holds an earlier export; pass --overwrite to replace it")


def export_hf(source, out_dir, tokenizer: TokenizerInfo | None = None,
              config: BertConfig | ModernBertConfig | None = None,
              architecture: str | None = None, head_config: dict | None = None, task: dict | None = None,
              overwrite: bool = True) -> Path:
    """Write a Hugging Face directory of the head's class, atomically (tmp dir + rename).

    source: a checkpoint dict (ours), a RUN or checkpoint dir, an HF dir, or a model.
    tokenizer / config / architecture / head_config (extra config.json fields such as
    num_labels, id2label, label2id): needed only when `source` does not carry them.
    out_dir may hold only an earlier export (check_export_dir), replaced whole (so a
    file the earlier one wrote and this one does not goes too) unless overwrite is False."""
    out_dir = Path(out_dir)
    if isinstance(source, torch.nn.Module):
        state_dict, config = source.state_dict(), config or source.config
        architecture = architecture or getattr(source, "hf_architecture", None)
    elif isinstance(source, dict):
        state_dict = source["model"]
        config = config or config_from_dict(source["config"])
        task = task or source.get("task") or {}
        architecture = architecture or task.get("architecture")
        head_config = head_config if head_config is not None else task.get("hf_config")
    else:
        pre = load_pretrained(source)
        state_dict, config, tokenizer = pre.state_dict, pre.config, tokenizer or pre.tokenizer
        architecture = architecture or pre.architecture
        head_config = head_config if head_config is not None else pre.head.get("hf_config")
    if config is None:
        raise BertmodelError("export_hf needs a config for a bare state dict")
    architecture = architecture or config.to_hf_dict()["architectures"][0]
    check_export_dir(out_dir, overwrite)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.with_name(f".{out_dir.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        tmp.mkdir()
        tensors = hf_tensors(state_dict)
        # Tensors that train beside the model and are no part of it (MiniLM's hidden-state
        # projection onto the teacher's width): the task names their prefixes.
        train_only = tuple((task or {}).get("train_only", ()))
        tensors = {k: v for k, v in tensors.items() if not (train_only and k.startswith(train_only))}
        # A bi-encoder's projection is sentence-transformers' Dense module, not the encoder's
        projection = {k.removeprefix("projection."): tensors.pop(k) for k in list(tensors) if k.startswith("projection.")}
        if projection and not (task or {}).get("sentence_transformers"):
            raise BertmodelError(f"{out_dir}: the model has a projection (projection.*), which only a "
                                 "sentence-transformers export carries (a Dense module); export it with its embed "
                                 "settings")
        if architecture in BARE_ARCHITECTURES:
            prefix = BARE_ARCHITECTURES[architecture]
            tensors = {k.removeprefix(prefix): v for k, v in tensors.items()}
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        os.chmod(tmp / "model.safetensors", 0o666 & ~_umask())  # safetensors writes 0600; match the others
        hf_config = {**config.to_hf_dict(), "architectures": [architecture], **(head_config or {})}
        if tokenizer is not None:
            hf_config.update(special_ids(tokenizer, config))
        (tmp / "config.json").write_text(json.dumps(hf_config, indent=2, sort_keys=True) + "\n")
        write_tokenizer(tmp, tokenizer, config.max_sequence_length, reading_length(task), input_names(config))
        if task and task.get("sentence_transformers"):  # an embed run's: SentenceTransformer(dir) loads it
            write_sentence_files(tmp, task["sentence_transformers"], projection)
        if task:
            (tmp / TASK_FILE).write_text(json.dumps(task, indent=2, sort_keys=True) + "\n")
        unlisted = sorted(p.name for p in tmp.iterdir() if p.name not in EXPORT_FILES)
        if unlisted:  # the next export would refuse this directory as the user's
            raise RuntimeError(f"export_hf wrote {', '.join(unlisted)}, which EXPORT_FILES does not list")
        check_export_dir(out_dir, overwrite)  # again: nothing of the user's arrived while it wrote
    except BaseException as exc:
        full = is_disk_full(out_dir.parent, exc)
        shutil.rmtree(tmp, ignore_errors=True)  # never leave half an export behind
        if full:
            kept = "the previous export is unchanged" if out_dir.exists() else "nothing was exported"
            raise BertmodelError(f"{out_dir}: disk full while exporting; {kept}") from None
        raise
    old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
    if out_dir.exists():
        os.replace(out_dir, old)
    os.replace(tmp, out_dir)
    if old.exists():
        shutil.rmtree(old)
    return out_dir


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _hf_state_dict(directory: Path, model_type: str = "bert") -> dict:
    names = [n for n in ("model.safetensors", "pytorch_model.bin") if (directory / n).is_file()]
    if not names:
        raise BertmodelError(f"{directory}: no model.safetensors or pytorch_model.bin")
    path = directory / names[0]
    try:
        if path.suffix == ".safetensors":
            sd = load_file(str(path))
        else:
            sd = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a truncated or foreign file: name it instead of a library traceback
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise BertmodelError(f"{path}: cannot read the weights ({first})") from None
    out = {}
    for k, v in sd.items():
        k = k.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        bare, prefix = BARE_ENCODER[model_type]
        if k.startswith(bare):  # a bare BertModel's or ModernBertModel's names
            k = prefix + k
        if k.endswith(("position_ids", "token_type_ids")) and "embeddings." in k:
            continue  # buffers older transformers persisted
        out[k] = v
    return out


def complete_state_dict(state_dict: dict) -> dict:
    """Fill in the tied decoder entries save_pretrained leaves out (where there is an
    MLM head to tie: a bare encoder gets no decoder)."""
    sd = dict(state_dict)
    for key, src in TIED_SOURCES.items():
        if key not in sd and src in sd and TIED_HEAD[key] in sd:
            sd[key] = sd[src]
    return sd


def _decoder_is_table(state_dict: dict) -> bool:
    """No decoder of its own in the file (save_pretrained leaves a tied one out), or one
    equal to the table it is tied to (older exports wrote both)."""
    return all(torch.equal(state_dict[key], state_dict[TIED_SOURCES[key]]) for key in TIED_KEYS
               if key in state_dict and TIED_SOURCES[key] in state_dict)


def _architecture(config: dict, sd: dict, path: Path) -> str:
    archs = config.get("architectures") or []
    if archs:
        return archs[0]
    # No architectures field (older exports): tell the head by its weights.
    if config.get("model_type") == "modernbert":
        return "ModernBertForMaskedLM" if "decoder.bias" in sd or "decoder.weight" in sd else "ModernBertModel"
    if config.get("model_type") in ("roberta", "xlm-roberta"):
        prefix = config_from_dict(config).hf_prefix
        for key, head in (("lm_head.bias", "ForMaskedLM"), ("classifier.out_proj.weight", "ForSequenceClassification"),
                          ("qa_outputs.weight", "ForQuestionAnswering")):
            if key in sd:
                return prefix + head
        return prefix + "Model"
    if config.get("model_type") == "electra":
        for key, arch in (("discriminator_predictions.dense.weight", "ElectraForPreTraining"),
                          ("generator_lm_head.bias", "ElectraForMaskedLM")):
            if key in sd:
                return arch
        return "ElectraModel"
    for key, arch in (("cls.seq_relationship.weight", "BertForPreTraining"), ("cls.predictions.bias", "BertForMaskedLM"),
                      ("classifier.weight", "BertForSequenceClassification"),
                      ("qa_outputs.weight", "BertForQuestionAnswering")):
        if key in sd:
            return arch
    return "BertModel"


def _hf_head(config: dict, architecture: str) -> dict:
    """The head settings a transformers config.json carries (for our task objects)."""
    head = {}
    if architecture.endswith(("ForSequenceClassification", "ForTokenClassification")):  # any model type's
        id2label = {int(k): v for k, v in (config.get("id2label") or {}).items()}
        head["num_labels"] = int(config.get("num_labels") or len(id2label) or 2)
        head["id2label"] = id2label
        head["problem_type"] = config.get("problem_type")
    return head


def load_pretrained(path, part: str = "discriminator") -> Pretrained:
    """Read a RUN dir, a checkpoint dir (ours) or a Hugging Face BertForPreTraining dir.

    `part`: of an ELECTRA (replaced-token detection) run, which of its two models: the
    "discriminator" (the model the run is for, what fine-tuning reads) or the "generator"
    (an MLM model: fill-mask's); from an export, RUN/hf is the one and RUN/generator the
    other. Any other model is what it is, whatever `part` says."""
    path = Path(path)
    if not path.exists():
        raise BertmodelError(f"{path}: no such model directory")
    if is_run_dir(path):
        ckpt = latest_checkpoint(path)
        if ckpt is None:
            if (path / "hf" / "config.json").is_file():
                return load_pretrained(path / "hf", part)
            raise BertmodelError(f"{path}: a run directory without a complete checkpoint")
        path = ckpt
    if (path / "state.pt").is_file():
        state = load_checkpoint(path)
        tok_dir = path / "tokenizer"
        tok = tokenizer_info(tok_dir) if has_tokenizer(tok_dir) else None
        task = state.get("task") or {}  # checkpoints written before tasks existed are pre-training ones
        if task.get("objective") == "rtd" and part == "generator":
            return Pretrained(config_from_dict(task["generator_config"]), complete_state_dict(generator_state(
                state["model"])), tok, path, step=int(state["step"]), architecture=task["generator_architecture"],
                head=generator_task(task))
        if task.get("objective") == "rtd":  # ELECTRA's pair: the discriminator is the model the run is for
            state["model"] = discriminator_state(state["model"])
        return Pretrained(config_from_dict(state["config"]), complete_state_dict(state["model"]),
                          tok, path, step=int(state["step"]),
                          architecture=task.get("architecture", "BertForPreTraining"), head=task)
    if (path / "config.json").is_file():
        try:
            config = json.loads((path / "config.json").read_text())
        except (ValueError, UnicodeDecodeError) as exc:
            raise BertmodelError(f"{path}/config.json: not valid JSON ({exc})") from None
        if config.get("model_type") not in BARE_ENCODER:
            raise UnsupportedModel(path, config.get("model_type"))
        try:
            cfg = config_from_dict(config)
        except BertmodelError as exc:
            raise BertmodelError(f"{path}/config.json: {exc}") from None
        raw = {**_hf_state_dict(path, config["model_type"]), **read_projection(path)}  # (a Dense module's)
        sd = complete_state_dict(raw)
        tok = tokenizer_info(path) if has_tokenizer(path) else None
        arch = _architecture(config, sd, path)
        head = {"hf_config": _hf_head(config, arch), **_hf_head(config, arch)}
        if (path / TASK_FILE).is_file():  # one of our exports: the task's own settings
            head.update(json.loads((path / TASK_FILE).read_text()))
        if head.get("objective") == "rtd" and part == "generator" and head.get("part") != "generator":
            # RUN/hf of an ELECTRA run is its discriminator; the generator was exported beside it
            if not (path.parent / RTD_GENERATOR_DIR / "config.json").is_file():
                raise BertmodelError(f"{path}: the discriminator of an ELECTRA run, which has no MLM head; its "
                                     f"generator is {path.parent / RTD_GENERATOR_DIR}, which is missing")
            return load_pretrained(path.parent / RTD_GENERATOR_DIR)
        tied = config.get("tie_word_embeddings", True) is not False and _decoder_is_table(raw)
        return Pretrained(cfg, sd, tok, path, architecture=arch, head=head, tied=tied)
    raise BertmodelError(f"{path}: not a run, checkpoint or Hugging Face model directory")


def _is_head(key: str) -> bool:
    """A head's tensor (or the pooler, which some heads lack), not the shared encoder's."""
    return not key.startswith(ENCODER_PREFIXES) or key.startswith(POOLER_PREFIXES)


def group_names(keys: list[str]) -> str:
    # "cls.predictions.*" rather than every tensor of a module
    groups = sorted({".".join(k.split(".")[:2]) + ".*" if k.count(".") > 1 else k for k in keys})
    return ", ".join(groups)


def load_into(model, pretrained: Pretrained) -> list[str]:
    """Load the encoder (and the head, where the source has it) into `model`.

    The encoder must fit exactly. Head tensors the source lacks keep their fresh init,
    head tensors the model has no use for are left out, and a head of another shape
    (another number of labels) starts anew: each is returned as a line to report, never
    done silently."""
    fresh, unused = load_weights(model, pretrained)
    notes = []
    if fresh:
        notes.append(f"newly initialised (not in {pretrained.source}): {group_names(fresh)}")
    if unused:
        notes.append(f"not used from {pretrained.source}: {group_names(unused)}")
    return notes


def load_weights(model, pretrained: Pretrained) -> tuple[list[str], list[str]]:
    """load_into's loading: returns the model's tensors that keep their fresh init (the
    source lacks them, or has them in another shape) and the source's tensors left out,
    both sorted; tied decoder entries are neither."""
    own = model.state_dict()
    sd, reshaped = {}, []
    for key, value in pretrained.state_dict.items():
        if key in own and own[key].shape != value.shape:
            if not _is_head(key):
                raise BertmodelError(f"{pretrained.source}: weights do not fit the model (size mismatch for {key}: "
                                     f"{tuple(value.shape)} in the source, {tuple(own[key].shape)} here)")
            reshaped.append(key)
            continue
        sd[key] = value
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [k for k in missing if k not in TIED_KEYS]
    bad_missing = [k for k in missing if not _is_head(k) and k not in reshaped]
    bad_unexpected = [k for k in unexpected if not _is_head(k)]
    if bad_missing or bad_unexpected:
        parts = []
        if bad_missing:
            parts.append(f"missing {', '.join(bad_missing[:4])}{' ...' if len(bad_missing) > 4 else ''}")
        if bad_unexpected:
            parts.append(f"unexpected {', '.join(bad_unexpected[:4])}{' ...' if len(bad_unexpected) > 4 else ''}")
        raise BertmodelError(f"{pretrained.source}: weights do not fit the model ({'; '.join(parts)})")
    model.tie_weights()
    return sorted(set(missing) | set(reshaped)), sorted(unexpected)


def _inside(a: Path, b: Path) -> bool:
    """Whether a is b or lies inside b (both resolved)."""
    return a == b or b in a.parents


def export_to_dir(source, out_dir, tokenizer=None, overwrite: bool = False, which: str | None = None,
                  step: int | None = None) -> tuple[Pretrained, str]:
    """`bertmodel export-hf`: export `source` (run, checkpoint or HF dir) to out_dir,
    which must be new or empty, or hold an earlier export and overwrite be given
    (check_export_dir), and may never be (or hold, or lie inside) the source itself:
    replacing it would delete what is being exported.
    From a run, `which` ("best", "latest") or `step` picks the model (choose_from_run).
    Returns the model exported and what it is in words ("" for a checkpoint or HF dir)."""
    out_dir, src = Path(out_dir), Path(source)
    note = ""
    if is_run_dir(src):
        chosen, chosen_step, note = choose_from_run(src, which, step)
    elif which is not None or step is not None:
        raise BertmodelError(f"{source}: --best, --latest and --step choose among a run directory's "
                             "checkpoints; this is a checkpoint or model directory, exported as it is")
    else:
        chosen, chosen_step = src, None
    pre = load_pretrained(chosen)
    if chosen_step is not None:
        pre.step = chosen_step  # RUN/hf records no step; best.json does
    out_abs, src_abs, ckpt_abs = out_dir.resolve(), src.resolve(), Path(pre.source).resolve()
    for origin in {src_abs, ckpt_abs}:
        if _inside(out_abs, origin) or _inside(origin, out_abs):
            raise BertmodelError(f"{out_dir}: is (or contains, or lies inside) the model being exported "
                                 f"({source}); choose another directory")
    check_export_dir(out_dir, overwrite)
    tok = tokenizer_info(Path(tokenizer)) if tokenizer else pre.tokenizer
    if tok is None:
        raise BertmodelError(f"{source}: no tokenizer files stored with it; pass --tokenizer")
    task = {"architecture": pre.architecture, "hf_config": pre.head.get("hf_config")}
    length = reading_length(pre.head)
    if length is not None:  # a fine-tuned model's export reads what its run read (write_tokenizer)
        task["options"] = {"max_seq_length": length}
    if pre.head.get("train_only"):  # a distilled encoder's checkpoint: its projection stays out of the export
        task["train_only"] = pre.head["train_only"]
    if pre.head.get("objective") == "rtd":  # an ELECTRA model says so: evaluate/predict refuse it, fill-mask finds its part
        task.update({k: pre.head[k] for k in ("name", "objective", "part") if k in pre.head})
    if pre.head.get("sentence_transformers"):  # an embedder keeps its sentence-transformers files (and projection)
        task.update({k: pre.head[k] for k in ("name", "embedding", "sentence_transformers") if k in pre.head})
    export_hf({"model": pre.state_dict, "config": pre.config.to_dict(), "task": task},
              out_dir, tokenizer=tok, overwrite=overwrite)
    return pre, note

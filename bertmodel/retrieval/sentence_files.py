"""The sentence-transformers files of an embed run's export, beside transformers' own
(hf.export_hf writes both), so `SentenceTransformer(dir)` loads it as we encode:

  modules.json                      Transformer (this directory) -> Pooling -> Normalize
  sentence_bert_config.json         the Transformer module: last_hidden_state as token_embeddings
  1_Pooling/config.json             mean or cls, over the prompt's tokens too (as we pool)
  2_Dense/config.json, model.safetensors
                                    only where the bi-encoder has a projection (a distilled student
                                    whose teacher's width is not its own): Linear, no activation;
                                    Normalize is then 3_Normalize
  2_Normalize/config.json           unit vectors (what the cosine and our search use)
  config_sentence_transformers.json the prompts ("query", "document": our --query-prefix and
                                    --passage-prefix, which encode_query / encode_document
                                    prepend), cosine similarity
  tokenizer_config.json             model_max_length = the passage length (hf_tokenizer.write_tokenizer
                                    writes it, as for every fine-tuned model's export):
                                    sentence-transformers has one length for every text (ours
                                    cuts queries at --max-query-length, so a query longer than
                                    that is read whole there)
This is sentence-transformers 6's layout (its own `save` writes the same files).
"""
from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path

from bertmodel.errors import BertmodelError

MODULES = "modules.json"
DENSE_DIR = "2_Dense"
SENTENCE_FILES = frozenset({MODULES, "sentence_bert_config.json", "config_sentence_transformers.json", "1_Pooling",
                            "2_Normalize", DENSE_DIR, "3_Normalize"})
# The Dense activation our projection is (none); a Dense module with another is refused.
IDENTITY = "torch.nn.modules.linear.Identity"
DENSE_WEIGHTS = ("model.safetensors", "pytorch_model.bin")


def _dump(path: Path, value) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _versions() -> dict:
    out = {}
    for key, package in (("pytorch", "torch"), ("transformers", "transformers"),
                         ("sentence_transformers", "sentence-transformers")):
        try:
            out[key] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    return out


def write_sentence_files(out_dir, settings: dict, projection: dict | None = None) -> None:
    """settings: {"pooling", "dimension", "normalize", "query_prefix", "passage_prefix",
    "max_seq_length"} and optionally "similarity" ("cosine", the default, or "dot": a shrunk
    sentence-transformers model's own) (what tasks/embed.py records in its state; the length goes into
    tokenizer_config.json, which hf_tokenizer.write_tokenizer writes). projection: the
    bi-encoder's {"weight": (D, H), "bias": (D,)} tensors, written as a Dense module."""
    out_dir = Path(out_dir)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.transformer.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling",
                "type": "sentence_transformers.sentence_transformer.modules.pooling.Pooling"}]
    if projection:
        modules.append({"idx": 2, "name": "2", "path": DENSE_DIR, "type": "sentence_transformers.base.modules.dense.Dense"})
        _write_dense(out_dir / DENSE_DIR, projection)
    if settings.get("normalize", True):
        index = len(modules)
        modules.append({"idx": index, "name": str(index), "path": f"{index}_Normalize",
                        "type": "sentence_transformers.base.modules.normalize.Normalize"})
        _dump(out_dir / f"{index}_Normalize" / "config.json",
              {"module_input_name": "sentence_embedding", "module_output_name": "sentence_embedding"})
    _dump(out_dir / MODULES, modules)
    _dump(out_dir / "sentence_bert_config.json",
          {"transformer_task": "feature-extraction", "module_output_name": "token_embeddings",
           "modality_config": {"text": {"method": "forward", "method_output_name": "last_hidden_state"}}})
    _dump(out_dir / "1_Pooling" / "config.json",
          {"embedding_dimension": int(settings["dimension"]), "pooling_mode": settings["pooling"],
           "include_prompt": True})
    _dump(out_dir / "config_sentence_transformers.json",
          {"__version__": _versions(), "model_type": "SentenceTransformer", "default_prompt_name": None,
           "prompts": {"query": settings.get("query_prefix") or "", "document": settings.get("passage_prefix") or ""},
           "similarity_fn_name": settings.get("similarity", "cosine")})


def _write_dense(path: Path, projection: dict) -> None:
    """Dense's files as sentence-transformers saves them: its config and `linear.*` tensors."""
    from safetensors.torch import save_file

    weight, bias = projection["weight"], projection.get("bias")
    _dump(path / "config.json", {"in_features": int(weight.shape[1]), "out_features": int(weight.shape[0]),
                                 "bias": bias is not None, "activation_function": IDENTITY,
                                 "module_input_name": "sentence_embedding",
                                 "module_output_name": "sentence_embedding"})
    tensors = {"linear.weight": weight.contiguous()}
    if bias is not None:
        tensors["linear.bias"] = bias.contiguous()
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})


def _dense_problem(directory: Path) -> tuple[Path | None, str | None]:
    """(the Dense module's directory or None, why a bi-encoder cannot read it or None): it
    projects linearly, once, so an activation, a residual or a second Dense is not its."""
    if not (directory / MODULES).is_file():
        return None, None
    dense = [m for m in json.loads((directory / MODULES).read_text(encoding="utf-8"))
             if m.get("type", "").endswith(".Dense")]
    if not dense:
        return None, None
    if len(dense) > 1:
        return None, f"{directory / MODULES}: {len(dense)} Dense modules; an embedder here projects once"
    path = directory / dense[0]["path"]
    config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    if config.get("activation_function", IDENTITY) != IDENTITY or config.get("use_residual"):
        return path, (f"{path / 'config.json'}: a Dense module with activation {config.get('activation_function')}"
                      f"{' and a residual' if config.get('use_residual') else ''}; an embedder here reads a linear "
                      f"projection only ({IDENTITY})")
    return path, None


def read_projection(directory) -> dict:
    """A sentence-transformers directory's Dense module as a bi-encoder's projection
    tensors ({"projection.weight", "projection.bias"}); {} where it has none, or one the
    bi-encoder cannot be (read_sentence_settings refuses that directory as an embedder;
    its encoder serves any other head)."""
    path, problem = _dense_problem(Path(directory))
    if path is None or problem:
        return {}
    weights = next((path / name for name in DENSE_WEIGHTS if (path / name).is_file()), None)
    if weights is None:
        raise BertmodelError(f"{path}: no {' or '.join(DENSE_WEIGHTS)} (the Dense module's weights)")
    import torch
    from safetensors.torch import load_file

    tensors = load_file(str(weights)) if weights.suffix == ".safetensors" else \
        torch.load(weights, map_location="cpu", weights_only=True)
    return {f"projection.{k.removeprefix('linear.')}": v for k, v in tensors.items() if k.startswith("linear.")}


def read_sentence_settings(directory) -> dict | None:
    """A sentence-transformers directory's pooling, normalisation, prompts, length and
    similarity, in write_sentence_files' terms (plus "similarity": "cosine" or "dot");
    None where the directory has no modules.json; a Dense module other than a linear
    projection (read_projection's) refused. What SentenceTransformer(dir) reads:
    the length is sentence_bert_config.json's max_seq_length, else the tokenizer's
    model_max_length, for queries and passages alike; the similarity is
    config_sentence_transformers.json's similarity_fn_name (cosine where unset)."""
    directory = Path(directory)
    if not (directory / MODULES).is_file():
        return None
    modules = json.loads((directory / MODULES).read_text(encoding="utf-8"))
    settings = {"pooling": "mean", "normalize": False, "query_prefix": "", "passage_prefix": "",
                "similarity": "cosine"}
    include_prompt = True
    for module in modules:
        kind = module.get("type", "")
        if kind.endswith("Pooling"):
            path = directory / module["path"] / "config.json"
            config = json.loads(path.read_text(encoding="utf-8"))
            settings["pooling"] = _pooling_mode(config, path)
            include_prompt = config.get("include_prompt", True)
        elif kind.endswith("Normalize"):
            settings["normalize"] = True
    st_config = directory / "config_sentence_transformers.json"
    if st_config.is_file():
        config = json.loads(st_config.read_text(encoding="utf-8"))
        prompts = config.get("prompts") or {}
        settings["query_prefix"] = prompts.get("query", "")
        settings["passage_prefix"] = prompts.get("document", prompts.get("passage", ""))
        settings["similarity"] = {None: "cosine", "cos_sim": "cosine", "dot_score": "dot"}.get(
            config.get("similarity_fn_name"), config.get("similarity_fn_name"))
        if settings["similarity"] not in ("cosine", "dot"):
            raise BertmodelError(f"{st_config}: similarity {settings['similarity']!r}; a search ranks by cosine or "
                                 "dot product")
    _, problem = _dense_problem(directory)
    if problem:
        raise BertmodelError(problem)
    if not include_prompt and (settings["query_prefix"] or settings["passage_prefix"]):
        raise BertmodelError(f"{directory}: its pooling leaves the prompt's tokens out (include_prompt false); embed "
                             "pools over every token, prompt included")
    length = _max_seq_length(directory)
    if length:
        settings["max_query_length"] = settings["max_passage_length"] = length
    return settings


def _pooling_mode(config: dict, path: Path) -> str:
    """"mean" or "cls" from a Pooling config: pooling_mode (sentence-transformers 5+) or the
    older pooling_mode_*_tokens flags; any other pooling is refused."""
    mode = config.get("pooling_mode")
    if mode is None:
        flags = [name for name in ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens",
                                   "weightedmean_tokens", "lasttoken") if config.get(f"pooling_mode_{name}")]
        mode = {("cls_token",): "cls", ("mean_tokens",): "mean", (): "mean"}.get(tuple(flags), "+".join(flags))
    if mode not in ("mean", "cls"):
        raise BertmodelError(f"{path}: pooling {mode!r}; embed reads mean or cls pooling")
    return mode


def _max_seq_length(directory: Path) -> int | None:
    """sentence_bert_config.json's max_seq_length, else tokenizer_config.json's
    model_max_length (load_embedder caps either at the model's positions)."""
    for name, key in (("sentence_bert_config.json", "max_seq_length"), ("tokenizer_config.json", "model_max_length")):
        path = directory / name
        if path.is_file():
            value = json.loads(path.read_text(encoding="utf-8")).get(key)
            if isinstance(value, int) and value > 0:
                return value
    return None

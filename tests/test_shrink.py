"""`bertmodel shrink` (distill/shrink.py): a student of some of the teacher's layers.

The reference is transformers' own: the teacher loaded as its transformers class, the
layers not kept deleted from its layer list (each keeps the module, and for ModernBERT
the attention kind, transformers built it with). The shrunk directory, loaded by
transformers' Auto class with no key missing or left over, must compute what that model
computes: its hidden states at every layer and its head's logits, in float64. The two
run transformers' code on the same weights, so the only difference left is summation
order a memory layout may change (~1e-16 relative); 1e-12 bounds that and is far below
what a wrong layer, a lost norm or a wrong attention kind moves a value (1e-4 and more
in these tiny random models).
Tiny random models (width 32): BERT, RoBERTa and ModernBERT, and a sentence-transformers
embedder, which keeps its pooling and normalisation.
"""
from __future__ import annotations

import json

import pytest
import torch

from bertmodel.data.shards import tokenizer_info
from bertmodel.data.synthetic import write_small_vocab, write_tokenizer_files
from bertmodel.distill.shrink import check_layers, parse_layers, shrink
from bertmodel.errors import BertmodelError
from bertmodel.hf import export_hf
from bertmodel.model import BertConfig, BertForPreTraining, ModernBertConfig, ModernBertForMaskedLM, RobertaConfig
from bertmodel.model.config import vocabulary_ids
from bertmodel.model.roberta_heads import RobertaForMaskedLM

transformers = pytest.importorskip("transformers")

WORDS = 60
CLOSE = dict(atol=1e-12, rtol=1e-12)  # module docstring


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    root = tmp_path_factory.mktemp("tok")
    write_tokenizer_files(root / "tok", write_small_vocab(root / "vocab.txt", WORDS))
    return tokenizer_info(root / "tok")


def export(model, path, tok):
    torch.manual_seed(0)
    return export_hf(model, path, tokenizer=tok)


@pytest.fixture(scope="module")
def bert(tmp_path_factory, tok):
    torch.manual_seed(0)
    config = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64)
    return export(BertForPreTraining(config), tmp_path_factory.mktemp("bert") / "teacher", tok)


@pytest.fixture(scope="module")
def modernbert(tmp_path_factory, tok):
    torch.manual_seed(0)
    # 4 layers: global, local, local, global; a window of 8 (4 either side), shorter than the batch's rows
    config = ModernBertConfig.preset("tiny", hidden_size=32, num_attention_heads=4, intermediate_size=48,
                                     local_attention=8, **vocabulary_ids(tok, "modernbert"))
    return export(ModernBertForMaskedLM(config), tmp_path_factory.mktemp("modernbert") / "teacher", tok)


def batch(vocab: int, B: int = 3, T: int = 20):
    g = torch.Generator().manual_seed(1)
    lengths = torch.tensor([T, 11, 6])[:B]
    mask = (torch.arange(T)[None] < lengths[:, None]).long()
    return {"input_ids": torch.randint(5, vocab, (B, T), generator=g) * mask, "attention_mask": mask}


def outputs(model, inputs) -> list[torch.Tensor]:
    """Every hidden state (embeddings and each layer) and the logits, float64, eval mode."""
    with torch.no_grad():
        out = model.double().eval()(**inputs, output_hidden_states=True)
    logits = out.prediction_logits if hasattr(out, "prediction_logits") else out.logits
    return [*out.hidden_states, logits]


def load_student(hf_class, path):
    model, info = hf_class.from_pretrained(path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert not info["mismatched_keys"], info
    return model


def reference(hf_class, teacher, layers: list[int]):
    """transformers' teacher with the other layers deleted from its layer list."""
    model = hf_class.from_pretrained(teacher)
    stack = model.model.layers if hasattr(model, "model") else model.base_model.encoder.layer
    kept = torch.nn.ModuleList([stack[i] for i in layers])
    if hasattr(model, "model"):
        model.model.layers = kept
    else:
        model.base_model.encoder.layer = kept
    return model


def assert_same_outputs(student, ref, inputs):
    ours, theirs = outputs(student, inputs), outputs(ref, inputs)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, **CLOSE)


@pytest.mark.parametrize("layers", [[1, 3], [0, 2, 3], [2]])
def test_a_bert_student_computes_the_teacher_without_the_other_layers(bert, tmp_path, layers):
    out = tmp_path / "student"
    done = shrink(bert, layers, out)
    assert (done.teacher_layers, done.layers, done.architecture) == (4, layers, "BertForPreTraining")
    student = load_student(transformers.AutoModelForPreTraining, out)
    assert student.config.num_hidden_layers == len(layers)
    ref = reference(transformers.BertForPreTraining, bert, layers)
    inputs = batch(student.config.vocab_size)
    assert_same_outputs(student, ref, inputs)
    # and not the teacher itself: the layers left out did something (far beyond the tolerance)
    teacher = outputs(transformers.BertForPreTraining.from_pretrained(bert), inputs)
    assert float((teacher[-1] - outputs(student, inputs)[-1]).abs().max()) > 1e-4
    assert done.student_params == sum(p.numel() for p in student.parameters())  # the tied decoder once
    assert {p.name for p in bert.iterdir()} <= {p.name for p in out.iterdir()}  # the tokenizer's files too


def test_keeping_every_layer_gives_the_teacher_itself(bert, tmp_path):
    out = tmp_path / "student"
    shrink(bert, [0, 1, 2, 3], out)
    from safetensors.torch import load_file

    ours, theirs = load_file(out / "model.safetensors"), load_file(bert / "model.safetensors")
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert json.loads((out / "config.json").read_text()) == json.loads((bert / "config.json").read_text())
    inputs = batch(ours["bert.embeddings.word_embeddings.weight"].shape[0])
    assert_same_outputs(load_student(transformers.AutoModelForPreTraining, out),
                        transformers.BertForPreTraining.from_pretrained(bert), inputs)


def test_a_modernbert_student_keeps_each_layers_attention_kind(modernbert, tmp_path):
    out = tmp_path / "student"
    shrink(modernbert, [0, 2, 3], out)
    student = load_student(transformers.AutoModelForMaskedLM, out)
    assert student.config.layer_types == ["full_attention", "sliding_attention", "full_attention"]
    ref = reference(transformers.ModernBertForMaskedLM, modernbert, [0, 2, 3])
    assert_same_outputs(student, ref, batch(student.config.vocab_size))
    # the kinds matter: the same layers read as the default pattern (global every third) differ
    config = json.loads((out / "config.json").read_text())
    config.pop("layer_types")
    (out / "config.json").write_text(json.dumps(config))
    default = transformers.AutoModelForMaskedLM.from_pretrained(out)
    assert default.config.layer_types[2] == "sliding_attention"
    inputs = batch(student.config.vocab_size)
    assert float((outputs(default, inputs)[-1] - outputs(student, inputs)[-1]).abs().max()) > 1e-4


def test_a_modernbert_student_must_start_with_layer_0(modernbert, tmp_path):
    with pytest.raises(BertmodelError, match=r"--layers 1,3: .*layer 0 alone has no attention norm.*start --layers "
                                             r"with 0"):
        shrink(modernbert, [1, 3], tmp_path / "student")
    assert not (tmp_path / "student").exists()


def test_a_roberta_student_computes_the_teacher_without_the_other_layers(tok, tmp_path):
    torch.manual_seed(0)
    config = RobertaConfig.preset("tiny", hidden_size=32, num_attention_heads=4, intermediate_size=64,
                                  num_hidden_layers=3, **vocabulary_ids(tok, "roberta"))
    teacher = export(RobertaForMaskedLM(config), tmp_path / "teacher", tok)
    shrink(teacher, [0, 2], tmp_path / "student")
    student = load_student(transformers.AutoModelForMaskedLM, tmp_path / "student")
    assert_same_outputs(student, reference(transformers.RobertaForMaskedLM, teacher, [0, 2]),
                        batch(student.config.vocab_size))


@pytest.mark.parametrize("layout", ["cls-normalised-prompts", "mean-dot"])
def test_a_sentence_transformers_teacher_gives_an_embedder_of_the_same_kind(bert, tmp_path, layout):
    """Directories SentenceTransformer.save writes (CLS pooling, Normalize, query and document
    prompts; mean pooling, no Normalize, dot-product similarity) shrink to ones
    SentenceTransformer loads with the same modules, prompts and similarity, whose vectors
    are the teacher's without the other layers."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    teacher_dir = tmp_path / "embedder"
    if layout == "cls-normalised-prompts":
        modules = [Transformer(str(bert)), Pooling(32, pooling_mode="cls"), Normalize()]
        options = {"prompts": {"query": "query: ", "document": "passage: "}, "similarity_fn_name": "cosine"}
    else:
        modules = [Transformer(str(bert)), Pooling(32, pooling_mode="mean")]
        options = {"similarity_fn_name": "dot"}
    SentenceTransformer(modules=modules, device="cpu", **options).save(str(teacher_dir))
    shrink(teacher_dir, [1, 2], tmp_path / "student")
    student = SentenceTransformer(str(tmp_path / "student"), device="cpu")
    reference_model = SentenceTransformer(str(teacher_dir), device="cpu")
    assert [type(m).__name__ for m in student] == [type(m).__name__ for m in modules]
    assert student[1].pooling_mode == modules[1].pooling_mode
    assert student.similarity_fn_name == options["similarity_fn_name"]
    assert student.prompts == reference_model.prompts
    encoder = reference_model[0].auto_model
    encoder.encoder.layer = torch.nn.ModuleList([encoder.encoder.layer[i] for i in (1, 2)])
    texts = ["w1 w2 w3", "w7 w8 w9 w10 w11 w12", "w40"]
    ours, theirs = (m.double().encode(texts, prompt_name="query" if m.prompts.get("query") else None,
                                      convert_to_tensor=True) for m in (student, reference_model))
    torch.testing.assert_close(ours, theirs, **CLOSE)


# -- the refusals -----------------------------------------------------------------------

@pytest.mark.parametrize("text, error", [
    ("", r"--layers: name at least one teacher layer"),
    ("0,2,2", r"--layers 0,2,2: layer 2 named twice"),
    ("2,0", r"--layers 2,0: not in ascending order; .* list them as 0,2"),
    ("0,x", r"--layers 0,x: not a comma-separated list"),
    ("-1", r"--layers -1: not a comma-separated list"),
])
def test_layers_that_make_no_student(text, error):
    with pytest.raises(BertmodelError, match=error):
        check_layers(parse_layers(text))


def test_layers_out_of_range_name_the_teacher_and_its_layer_count(bert, tmp_path):
    with pytest.raises(BertmodelError, match=rf"--layers: {bert} has 4 layers \(0 to 3\); 4, 6 are out of range"):
        shrink(bert, [0, 4, 6], tmp_path / "student")
    assert not (tmp_path / "student").exists()


def test_an_existing_out_needs_overwrite_and_out_never_lies_in_the_teacher(bert, tmp_path):
    out = tmp_path / "student"
    shrink(bert, [0], out)
    with pytest.raises(BertmodelError, match=f"{out}: holds an earlier export; pass --overwrite"):
        shrink(bert, [1], out)
    shrink(bert, [1], out, overwrite=True)
    assert json.loads((out / "config.json").read_text())["num_hidden_layers"] == 1
    for inside in (bert / "student", bert, bert.parent):
        with pytest.raises(BertmodelError, match="is \\(or contains, or lies inside\\) the teacher"):
            shrink(bert, [0], inside, overwrite=True)
    assert (bert / "model.safetensors").is_file() and not (bert / "student").exists()

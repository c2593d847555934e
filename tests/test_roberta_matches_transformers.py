"""Every RoBERTa head computes and trains as its transformers class: MLM pre-training
(RobertaForMaskedLM), classification and regression (RobertaForSequenceClassification),
question answering, token classification, multiple choice (RobertaForQuestionAnswering,
...ForTokenClassification, ...ForMultipleChoice), the bi-encoder (RobertaModel read by
sentence-transformers) and the cross-encoder (RobertaForSequenceClassification with one
label, read by CrossEncoder).

Each step test runs ours (our AdamW groups, schedule and clipping) against the
transformers class (the Trainer's groups, torch's AdamW, clip_grad_norm_) or
sentence-transformers' loss, from the same weights on the same batches, for 8 steps in
float64: the loss and gradient norm of every step and the final weights equal
(tests/head_steps.py says why float64 and how closely). Every batch is padded, so
RoBERTa's positions (counted past the padding id, the padding itself at row pad) and its
position table's padding row (no gradient) are exercised: with pad 1 as roberta-base's
where the data allows (our WordPiece vocabularies pad with 0, which still shifts every
position by one). Ours is given the BERT collators' segment ids (1 for a pair's second
part), transformers none, as RoBERTa's tokenizer gives none: one token type, not read.
"""
from __future__ import annotations

import json

import pytest
import torch

from bertmodel.data import ShardDataset
from bertmodel.data.shards import tokenizer_info
from bertmodel.hf import export_hf, load_into, load_pretrained
from bertmodel.model import HEADS, RobertaConfig, XLMRobertaConfig
from bertmodel.model.bi_encoder import BI_ENCODERS
from bertmodel.model.config import vocabulary_ids
from bertmodel.model.linear import cpu_matmul
from bertmodel.model.rerank_heads import RERANKERS
from bertmodel.model.roberta import position_ids
from bertmodel.model.unpad import resolve, set_unpad
from bertmodel.tasks.rerank import cross_encoder_config
from qa_fixtures import tiny_tokenizer

transformers = pytest.importorskip("transformers")

from head_steps import (FLOAT64_TOL, STEPS, choice_batches, classification_batches,  # noqa: E402
                        first_step_in_fp32, fp32_rounding, pretraining_batches, qa_batches, step_shards,
                        token_batches, train_both)

VOCAB = 120
HF_CLASSES = {"mlm": "ForMaskedLM", "classify": "ForSequenceClassification", "qa": "ForQuestionAnswering",
              "tokens": "ForTokenClassification", "choice": "ForMultipleChoice"}


def tiny(vocab_size: int = VOCAB, pad: int = 1, config_class=RobertaConfig) -> RobertaConfig:
    # No dropout: the two draw their masks differently. 64 tokens past the padding id.
    return config_class.preset("tiny", hidden_size=32, num_attention_heads=4, intermediate_size=64,
                               vocab_size=vocab_size, pad_token_id=pad, max_position_embeddings=64 + pad + 1,
                               hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def hf_config(config: RobertaConfig, **options):
    config_class = transformers.XLMRobertaConfig if config.model_type == "xlm-roberta" else transformers.RobertaConfig
    return config_class(**config.to_hf_dict(), **options)


def twin(ours: torch.nn.Module, hf_class, **hf_options) -> torch.nn.Module:
    """The transformers model `hf_class` holding exactly our weights (no key missing or left over)."""
    theirs = hf_class(hf_config(ours.config, **hf_options))
    missing, unexpected = theirs.load_state_dict(ours.state_dict(), strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    return theirs


def roberta_batches(batches, pad: int):
    """(ours, theirs) pairs with the padding set to `pad`; ours with segment ids (the
    batch's own, else 1 at every real token), which it does not read, theirs with none."""
    for ours, theirs in batches:
        real = ours["attention_mask"].bool()
        ids = torch.where(real, ours["input_ids"], pad)
        assert not ids[real].eq(pad).any()  # pad only at padding
        yield ({"token_type_ids": ours["attention_mask"], **ours, "input_ids": ids},
               {**{k: v for k, v in theirs.items() if k != "token_type_ids"}, "input_ids": ids})


def mixed_batch(B: int, T: int, pad: int = 1, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Ids and a right-padded mask: one row full, the others from 3 tokens up."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, T + 1, (B,), generator=g)
    lengths[0] = T
    mask = (torch.arange(T)[None] < lengths[:, None]).long()
    return torch.where(mask.bool(), torch.randint(5, VOCAB, (B, T), generator=g), pad), mask


# -- names, positions, logits --------------------------------------------------------------

@pytest.mark.parametrize("model_type", ["roberta", "xlm-roberta"])
def test_every_transformers_head_has_ours_with_its_names(model_type):
    prefix = "XLMRoberta" if model_type == "xlm-roberta" else "Roberta"
    config = tiny(config_class=XLMRobertaConfig if model_type == "xlm-roberta" else RobertaConfig)
    for kind, suffix in HF_CLASSES.items():
        ours_class = HEADS[model_type][kind]
        assert ours_class.hf_architecture == prefix + suffix
        labels = (3,) if kind in ("classify", "tokens") else ()
        ours = ours_class(config, *labels)
        theirs = getattr(transformers, prefix + suffix)(hf_config(config, **({"num_labels": 3} if labels else {})))
        assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == \
            {k: tuple(v.shape) for k, v in theirs.state_dict().items()}, kind
    assert BI_ENCODERS[model_type].hf_architecture == prefix + "Model"
    assert RERANKERS[model_type].hf_architecture == prefix + "ForSequenceClassification"


def test_positions_are_transformers_counted_past_the_padding_id():
    ids = torch.tensor([[0, 7, 8, 2, 1, 1], [0, 9, 2, 2, 10, 2], [0, 2, 1, 1, 1, 1]])
    expected = transformers.models.roberta.modeling_roberta.RobertaEmbeddings.create_position_ids_from_input_ids(ids, 1)
    assert position_ids(ids, 1).tolist() == expected.tolist() == [[2, 3, 4, 5, 1, 1], [2, 3, 4, 5, 6, 7],
                                                                  [2, 3, 1, 1, 1, 1]]
    config = tiny()
    assert (config.max_sequence_length, RobertaConfig.preset("base").max_position_embeddings) == (64, 514)
    assert RobertaConfig.preset("tiny", pad_token_id=0).max_sequence_length == 512  # a WordPiece [PAD] of 0


@pytest.mark.parametrize("kernel", [None, "repad"], ids=["padded", "packed"])
def test_logits_equal_transformers_at_mixed_lengths(kernel):
    """Eval-mode logits of every head (float64) at real tokens, and at padding where the
    head reads it (QA's softmax over the whole window); ours given segment ids of 1."""
    torch.manual_seed(0)
    config = tiny()
    ids, mask = mixed_batch(6, 20)
    real, segments = mask.bool(), torch.ones_like(ids)
    for kind, suffix in HF_CLASSES.items():
        labels = (3,) if kind in ("classify", "tokens") else ()
        ours = HEADS["roberta"][kind](config, *labels).double().eval()
        theirs = twin(ours, getattr(transformers, "Roberta" + suffix), **({"num_labels": 3} if labels else {}))
        theirs.double().eval()
        set_unpad(ours, kernel)
        with torch.no_grad():
            if kind == "mlm":  # every real token a slot (a row's last one repeated to fill its 20)
                slots = torch.minimum(torch.arange(20), mask.sum(1, keepdim=True) - 1)
                out = ours(ids, segments, mask, slots).mlm_logits
                ref = theirs(input_ids=ids, attention_mask=mask).logits.gather(1, slots[..., None].expand_as(out))
            elif kind == "choice":
                out = ours(ids.view(2, 3, 20), segments.view(2, 3, 20), mask.view(2, 3, 20)).logits
                ref = theirs(input_ids=ids.view(2, 3, 20), attention_mask=mask.view(2, 3, 20)).logits
            elif kind == "qa":
                a, b = ours(ids, segments, mask), theirs(input_ids=ids, attention_mask=mask)
                out, ref = torch.stack([a.start_logits, a.end_logits]), torch.stack([b.start_logits, b.end_logits])
            else:
                out, ref = ours(ids, segments, mask).logits, theirs(input_ids=ids, attention_mask=mask).logits
                out, ref = (out[real], ref[real]) if kind == "tokens" else (out, ref)
        torch.testing.assert_close(out, ref, atol=FLOAT64_TOL, rtol=FLOAT64_TOL, msg=kind)


# -- export and import --------------------------------------------------------------------

def their_outputs(model, ids, mask) -> torch.Tensor:
    """A transformers head's logits (start and end stacked for QA, the hidden states for a bare encoder)."""
    if ids.shape[0] == 2 and isinstance(model, (transformers.RobertaForMultipleChoice,
                                                transformers.XLMRobertaForMultipleChoice)):
        return model(input_ids=ids[None], attention_mask=mask[None]).logits
    out = model(input_ids=ids, attention_mask=mask)
    if hasattr(out, "start_logits"):
        return torch.stack([out.start_logits, out.end_logits])
    return out.logits if hasattr(out, "logits") else out.last_hidden_state


def our_outputs(model, ids, mask) -> torch.Tensor:
    segments = torch.ones_like(ids)  # not read: one token type
    if model.hf_architecture.endswith("ForMultipleChoice"):
        return model(ids[None], segments[None], mask[None]).logits
    if model.hf_architecture.endswith("ForMaskedLM"):
        return model(ids, segments, mask, torch.arange(ids.shape[1]).expand_as(ids)).mlm_logits
    if model.hf_architecture.endswith("Model"):
        return model.roberta(ids, segments, mask)
    out = model(ids, segments, mask)
    return torch.stack([out.start_logits, out.end_logits]) if hasattr(out, "start_logits") else out.logits


@pytest.mark.parametrize("model_type", ["roberta", "xlm-roberta"])
def test_export_loads_in_transformers_with_no_missing_keys_and_equal_logits(model_type, tmp_path):
    """Every head and the bare encoder exported, read by transformers' Auto classes as
    the Roberta* (or XLMRoberta*) class with no missing, unexpected or mismatched keys,
    equal outputs in float64 at every position of two full rows; read back by us as the
    same class and config."""
    config = tiny(config_class=XLMRobertaConfig if model_type == "xlm-roberta" else RobertaConfig)
    ids, mask = mixed_batch(2, 12)
    mask[:] = 1  # every position compared (padding's outputs are no head's)
    ids = torch.where(ids == 1, 5, ids)
    autos = {"mlm": "AutoModelForMaskedLM", "classify": "AutoModelForSequenceClassification",
             "qa": "AutoModelForQuestionAnswering", "tokens": "AutoModelForTokenClassification",
             "choice": "AutoModelForMultipleChoice", "embed": "AutoModel"}
    for kind, auto in autos.items():
        torch.manual_seed(0)
        labels = (3,) if kind in ("classify", "tokens") else ()
        ours = (BI_ENCODERS[model_type] if kind == "embed" else HEADS[model_type][kind])(config, *labels)
        out = tmp_path / kind
        export_hf(ours, out, head_config={"num_labels": 3} if labels else None)
        written = json.loads((out / "config.json").read_text())
        assert (written["model_type"], written["architectures"]) == (model_type, [ours.hf_architecture])
        theirs, info = getattr(transformers, auto).from_pretrained(out, output_loading_info=True)
        assert not any(info.values()), (kind, info)
        assert type(theirs).__name__ == ours.hf_architecture
        pre = load_pretrained(out)
        assert pre.architecture == ours.hf_architecture and pre.config == config
        again = type(ours)(pre.config, *labels)
        assert load_into(again, pre) == []
        again.double().eval(), theirs.double().eval()
        with torch.no_grad():
            torch.testing.assert_close(our_outputs(again, ids, mask), their_outputs(theirs, ids, mask),
                                       atol=FLOAT64_TOL, rtol=FLOAT64_TOL, msg=kind)


def test_a_transformers_roberta_dir_becomes_our_model(tmp_path):
    """save_pretrained of transformers' classes (roberta-base's config.json, made tiny:
    transformers.RobertaConfig's own defaults are BERT's 512 / 2 / 1e-12): the classifier
    and a bare encoder load into ours, nothing left over, equal logits."""
    hf = transformers.RobertaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                    intermediate_size=64, num_labels=2, max_position_embeddings=514,
                                    type_vocab_size=1, layer_norm_eps=1e-5)
    torch.manual_seed(1)
    transformers.RobertaForSequenceClassification(hf).save_pretrained(tmp_path / "classify")
    transformers.RobertaModel(hf).save_pretrained(tmp_path / "bare")
    pre = load_pretrained(tmp_path / "classify")
    assert pre.architecture == "RobertaForSequenceClassification" and pre.config.max_sequence_length == 512
    assert (pre.config.pad_token_id, pre.config.type_vocab_size, pre.config.layer_norm_eps) == (1, 1, 1e-5)
    ours = HEADS["roberta"]["classify"](pre.config, 2).double().eval()
    assert load_into(ours, pre) == []
    theirs = transformers.RobertaForSequenceClassification.from_pretrained(tmp_path / "classify").double().eval()
    ids, mask = mixed_batch(4, 30)
    with torch.no_grad():
        torch.testing.assert_close(ours(ids, None, mask).logits, theirs(input_ids=ids, attention_mask=mask).logits,
                                   atol=FLOAT64_TOL, rtol=FLOAT64_TOL)
    bare = load_pretrained(tmp_path / "bare")
    assert bare.architecture == "RobertaModel" and all(k.startswith("roberta.") for k in bare.state_dict)


# -- training steps ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> ShardDataset:
    """NSP pair rows (segment ids 0 and 1) over a WordPiece vocabulary whose [PAD] is 0."""
    return step_shards(tmp_path_factory.mktemp("shards"))


def test_mlm_pretraining_steps_equal_transformers(shards):
    """Our sparse MLM head at the slots against transformers' dense logits over the label
    map; a pair row read as one sequence (ours gets its segment ids, and its NSP label)."""
    config = tiny(shards.tokenizer.vocab_size, pad=shards.tokenizer.special_ids["pad"])
    torch.manual_seed(0)
    ours = HEADS["roberta"]["mlm"](config)
    theirs = twin(ours, transformers.RobertaForMaskedLM)
    assert theirs.lm_head.decoder.weight is theirs.roberta.embeddings.word_embeddings.weight  # tied, as ours
    assert ours.lm_head.decoder.weight is ours.roberta.embeddings.word_embeddings.weight
    batches = list(roberta_batches(pretraining_batches(shards, with_pair=False), config.pad_token_id))
    assert any(not bool(b["attention_mask"].all()) for b, _ in batches)  # some rows are padded
    assert any(bool(b["token_type_ids"].any()) for b, _ in batches)  # pair rows: segment ids ours ignores
    train_both(ours, theirs, batches, clip=None)


@pytest.mark.parametrize("num_labels,kernel", [(3, None), (3, "repad"), (1, "repad")],
                         ids=["classification", "classification-packed", "regression-packed"])
def test_sequence_classification_steps_equal_transformers(num_labels, kernel):
    """The first token through dense, tanh and out_proj; regression (num_labels 1) on MSE;
    packed as --unpad auto trains it on the CPU."""
    config = tiny()
    torch.manual_seed(0)
    ours = HEADS["roberta"]["classify"](config, num_labels)
    if kernel is not None:
        assert resolve("auto", torch.device("cpu"), ours) == kernel
    theirs = twin(ours, transformers.RobertaForSequenceClassification, num_labels=num_labels)
    set_unpad(ours, kernel)
    train_both(ours, theirs, roberta_batches(classification_batches(VOCAB, regression=num_labels == 1), 1), clip=None)
    if num_labels == 1:
        assert theirs.config.problem_type == "regression"


def test_a_first_step_in_fp32_is_within_fp32_rounding_of_float64():
    """One packed classification step in fp32, as --unpad auto trains it here (the oneDNN
    linear, model/linear.py), against transformers' in float64."""
    config = tiny()
    torch.manual_seed(0)
    ours = HEADS["roberta"]["classify"](config, 3)
    theirs = twin(ours, transformers.RobertaForSequenceClassification, num_labels=3)
    set_unpad(ours, "repad")
    assert cpu_matmul() == "onednn" or not torch.backends.mkldnn.is_available()
    batch_ours, batch_theirs = next(roberta_batches(classification_batches(VOCAB, regression=False), 1))
    (B, T), classes = batch_ours["input_ids"].shape, 3
    # A key bias b shifts every attention score of a query q alike (q.b): no gradient but rounding.
    key_biases = tuple(f"roberta.encoder.layer.{i}.attention.self.key.bias" for i in range(config.num_hidden_layers))
    first_step_in_fp32(ours, theirs, batch_ours, batch_theirs, fp32_rounding(config, T, B, classes), key_biases)


def test_question_answering_steps_equal_transformers():
    """QA windows from prepare_qa_features (padded; the softmax runs over the padding too,
    whose position is row pad of the table)."""
    tok = tiny_tokenizer()
    config = tiny(tok.vocab_size, pad=tok.special.pad)
    torch.manual_seed(0)
    ours = HEADS["roberta"]["qa"](config)
    theirs = twin(ours, transformers.RobertaForQuestionAnswering)
    batches = list(roberta_batches(qa_batches(config.vocab_size), config.pad_token_id))
    assert any(not bool(b["attention_mask"].all()) for b, _ in batches)
    # Each shifts all T start (or end) logits of a window alike: the softmax does not see it.
    shifts = ("qa_outputs.bias", f"roberta.encoder.layer.{config.num_hidden_layers - 1}.output.LayerNorm.bias")
    train_both(ours, theirs, batches, clip=None, loss_free=shifts)


@pytest.mark.parametrize("kernel", [None, "repad"], ids=["padded", "packed"])
def test_token_classification_steps_equal_transformers(kernel):
    torch.manual_seed(0)
    ours = HEADS["roberta"]["tokens"](tiny(), 5)
    theirs = twin(ours, transformers.RobertaForTokenClassification, num_labels=5)
    set_unpad(ours, kernel)
    train_both(ours, theirs, roberta_batches(token_batches(VOCAB), 1), clip=None)


@pytest.mark.parametrize("kernel", [None, "repad"], ids=["padded", "packed"])
def test_multiple_choice_steps_equal_transformers(kernel):
    """Each choice's first token through RobertaModel's pooler (transformers' class reads
    pooler_output, unlike its sequence classifier), dropout, classifier."""
    torch.manual_seed(0)
    ours = HEADS["roberta"]["choice"](tiny())
    theirs = twin(ours, transformers.RobertaForMultipleChoice)
    set_unpad(ours, kernel)
    # classifier.bias shifts every choice's score alike: the softmax over choices does not see it.
    train_both(ours, theirs, roberta_batches(choice_batches(VOCAB), 1), clip=None, loss_free=("classifier.bias",))


# -- retrieval: the bi-encoder and the cross-encoder against sentence-transformers --------

st = pytest.importorskip("sentence_transformers")
from sentence_transformers.cross_encoder import CrossEncoder  # noqa: E402
from sentence_transformers.sentence_transformer import losses as st_losses  # noqa: E402

import test_embed_steps as embed_steps  # noqa: E402
import test_rerank_steps as rerank_steps  # noqa: E402
from embed_fixtures import distinct_rows, minilm_path, needs_squad  # noqa: E402
from rerank_fixtures import as_pairs, squad_groups  # noqa: E402


CLIP_BCE, CLIP_LISTWISE = 0.55, 0.004  # between the smallest and largest gradient norm of each run


@pytest.fixture(scope="module")
def minilm():
    return minilm_path()


def small_roberta(minilm) -> RobertaConfig:
    """A small random RoBERTa (dropout 0) over all-MiniLM-L6-v2's WordPiece vocabulary ([PAD] 0)."""
    return RobertaConfig.preset("tiny", hidden_size=64, num_attention_heads=4, intermediate_size=128,
                                hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                **vocabulary_ids(tokenizer_info(minilm), "roberta"))


@needs_squad
def test_embed_steps_equal_multiple_negatives_ranking_loss(minilm, tmp_path):
    """A random RoBERTa bi-encoder exported as an embed run exports it, read by
    SentenceTransformer (RobertaModel + mean pooling): 8 steps on real SQuAD pairs."""
    torch.manual_seed(0)
    settings = {"pooling": "mean", "normalize": True, "dimension": 64, "query_prefix": "", "passage_prefix": "",
                "max_seq_length": 128}
    export_hf(BI_ENCODERS["roberta"](small_roberta(minilm)), tmp_path / "hf", tokenizer=tokenizer_info(minilm),
              architecture="RobertaModel", task={"name": "embed", "architecture": "RobertaModel",
                                                 "sentence_transformers": settings})
    pre = load_pretrained(tmp_path / "hf")
    ours = BI_ENCODERS["roberta"](pre.config)
    assert load_into(ours, pre) == []
    theirs = st.SentenceTransformer(str(tmp_path / "hf"), device="cpu")
    assert type(theirs[0].auto_model).__name__ == "RobertaModel"
    theirs = st.SentenceTransformer(modules=[theirs[0], theirs[1]], device="cpu")  # MNRL's cosine normalises
    rows = distinct_rows(embed_steps.STEPS * embed_steps.B, skip=3 * embed_steps.STEPS * embed_steps.B)
    batches = embed_steps.batches_of(minilm, rows)
    assert any(not bool(b["attention_mask"].all()) for b in batches)
    embed_steps.train_against_st(ours, theirs, st_losses.MultipleNegativesRankingLoss(theirs), batches, "roberta.")


@pytest.fixture(scope="module")
def reranker_dir(minilm, tmp_path_factory):
    """A random RoBERTa reranker exported as a rerank run exports it."""
    torch.manual_seed(0)
    model = RERANKERS["roberta"](small_roberta(minilm))
    out = tmp_path_factory.mktemp("roberta-rerank") / "hf"
    export_hf(model, out, tokenizer=tokenizer_info(minilm), head_config=cross_encoder_config(),
              task={"name": "rerank", "architecture": model.hf_architecture})
    return out


def cross_encoder_pair(reranker_dir):
    pre = load_pretrained(reranker_dir)
    assert pre.architecture == "RobertaForSequenceClassification"
    ours = RERANKERS["roberta"](pre.config)
    assert load_into(ours, pre) == []
    theirs = CrossEncoder(str(reranker_dir), device="cpu")
    assert theirs.num_labels == 1 and isinstance(theirs.activation_fn, torch.nn.Identity)
    # The export's tokenizer gives no segment ids (one token type), so CrossEncoder's pairs fit RobertaModel.
    assert "token_type_ids" not in theirs.tokenizer.model_input_names
    return ours, theirs


@needs_squad
def test_rerank_bce_steps_equal_binary_cross_entropy_loss(minilm, reranker_dir):
    ours, theirs = cross_encoder_pair(reranker_dir)
    groups = squad_groups(rerank_steps.STEPS * rerank_steps.PAIRS_PER_STEP // 4, skip=80, words=rerank_steps.WORDS)
    batches = rerank_steps.pair_batches(minilm, as_pairs(groups))
    assert all(bool(b["token_type_ids"].any()) for b in batches)  # ours is given the pairs' second type
    rerank_steps.check_tokens(theirs, batches, listwise=False)
    rerank_steps.train_against_st(ours, theirs, rerank_steps.bce_of(theirs), batches, clip=CLIP_BCE, lr=1e-3)


@needs_squad
def test_rerank_listwise_steps_equal_multiple_negatives_ranking_loss(minilm, reranker_dir):
    ours, theirs = cross_encoder_pair(reranker_dir)
    batches = rerank_steps.group_batches(minilm, rerank_steps.varied_groups(
        rerank_steps.STEPS * rerank_steps.QUERIES_PER_STEP, skip=100))
    rerank_steps.check_tokens(theirs, batches, listwise=True)
    # lr 1e-4: out_proj.bias shifts every candidate of a query alike, so its gradient is
    # rounding, which AdamW turns into steps of up to lr x rounding / eps; at 1e-4 eight of
    # them stay well inside the comparison's 1e-10 (6e-12 measured at 1e-3).
    rerank_steps.train_against_st(ours, theirs, rerank_steps.listwise_of(theirs), batches, clip=CLIP_LISTWISE)

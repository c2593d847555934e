"""ELECTRA's replaced-token detection trains as transformers' classes do, step by step.

BERT architecture: our generator + discriminator against transformers'
ElectraForMaskedLM + ElectraForPreTraining holding the same weights, their embeddings
shared as ours are (one `embeddings` module, the generator's lm head tied to its word
table). ModernBERT architecture: against transformers' ModernBertForTokenClassification
(one label: the discriminator) and a ModernBertForMaskedLM's encoder and head fed the
shared table through the generator's projection (`inputs_embeds`), the decoder tied to the
projected table. The generator's samples come from a torch.Generator seeded alike on both
sides, so both discriminators read the same corruption; transformers' side samples,
corrupts and labels with its own code here (ELECTRA's Gumbel-max, argmax(logits + G)).
With DeBERTaV3's gradient-disentangled sharing (gdes) transformers' discriminator reads
stop-gradient(the generator's table) + a delta (`Disentangled`), the rest as above.
8 steps of AdamW over the decay groups, the loop's clip_and_step against clip_grad_norm_:
the loss, its two parts, the gradient norm and the final weights equal in float64
(tests/head_steps.py says why and how closely), dropout 0, in train mode."""
from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bertmodel.data import ShardDataset
from bertmodel.data.shards import open_shard_dir
from bertmodel.data.synthetic import small_shard_dir
from bertmodel.model.config import ElectraConfig, ModernBertConfig
from bertmodel.model.heads import IGNORE_INDEX
from bertmodel.model.rtd import ReplacedTokenDetection, discriminator_state, generator_config, generator_state
from bertmodel.model.unpad import set_unpad
from bertmodel.training.optim import Schedule, build_optimizer, clip_and_step, set_lr

transformers = pytest.importorskip("transformers")

from head_steps import FLOAT64_TOL, STEPS, in_float64  # noqa: E402

LR, DECAY, LAMBDA = 3e-3, 0.01, 50.0


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> ShardDataset:
    path = small_shard_dir(tmp_path_factory.mktemp("shards") / "data", rows=STEPS * 8, words=120, num_shards=1,
                           max_seq_length=32, max_predictions=5, batch_rows=8)
    return ShardDataset([open_shard_dir(path)])


def batches(shards: ShardDataset) -> list[dict]:
    out = [{k: torch.from_numpy(v) for k, v in shards.collate(np.arange(s * 8, s * 8 + 8)).items()}
           for s in range(STEPS)]
    assert any(not bool(b["attention_mask"].all()) for b in out)  # padded rows: the BCE must skip them
    assert any(bool((b["masked_lm_labels"] == IGNORE_INDEX).any()) for b in out)  # padded prediction slots
    return out


class Disentangled(torch.nn.Module):
    """DeBERTaV3's discriminator table for transformers' side: stop-gradient(E) + delta."""

    def __init__(self, shared: torch.nn.Embedding):
        super().__init__()
        self.shared, self.delta = shared, torch.nn.Parameter(torch.zeros_like(shared.weight))

    def forward(self, input_ids):
        return F.embedding(input_ids, self.shared.weight.detach() + self.delta, self.shared.padding_idx)


def bert_pair(vocab: int, generator_size: float, sharing: str = "tied"):
    config = ElectraConfig.preset("tiny", hidden_size=32, num_attention_heads=4, intermediate_size=64,
                                  vocab_size=vocab, max_position_embeddings=64, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    ours = ReplacedTokenDetection(config, generator_config(config, generator_size), LAMBDA, sharing)
    hf = lambda c: transformers.ElectraConfig(**{k: v for k, v in c.to_hf_dict().items()  # noqa: E731
                                                 if k not in ("architectures", "dtype")})
    gen = transformers.ElectraForMaskedLM(hf(ours.generator_config))
    disc = transformers.ElectraForPreTraining(hf(config))
    for model, state in ((gen, generator_state(ours.state_dict())), (disc, discriminator_state(ours.state_dict()))):
        missing, unexpected = model.load_state_dict(state, strict=False)
        assert not unexpected and set(missing) <= {"generator_lm_head.weight"}, (missing, unexpected)
    if sharing == "tied":
        gen.electra.embeddings = disc.electra.embeddings  # one module, as ELECTRA's "electra/embeddings" scope
        gen.generator_lm_head.weight = disc.electra.embeddings.word_embeddings.weight
    else:  # the generator's word table; the discriminator's stop-gradient(it) + delta; the rest one module each
        for name in ("position_embeddings", "token_type_embeddings", "LayerNorm"):
            setattr(gen.electra.embeddings, name, getattr(disc.electra.embeddings, name))
        disc.electra.embeddings.word_embeddings = Disentangled(gen.electra.embeddings.word_embeddings)
        gen.generator_lm_head.weight = gen.electra.embeddings.word_embeddings.weight

    def forward(batch, noise):
        logits = gen(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
                     attention_mask=batch["attention_mask"]).logits  # (B, T, V)
        corrupted, replaced, mlm_loss = electra_corruption(logits, batch, noise)
        disc_logits = disc(input_ids=corrupted, token_type_ids=batch["token_type_ids"],
                           attention_mask=batch["attention_mask"]).logits  # (B, T)
        return mlm_loss, active_bce(disc_logits, replaced, batch["attention_mask"])

    return ours, forward, (gen, disc), distinct(gen, disc)


def modernbert_pair(vocab: int, generator_size: float, sharing: str = "tied"):
    config = ModernBertConfig.preset("tiny", hidden_size=32, num_attention_heads=2, intermediate_size=48,
                                     vocab_size=vocab, max_position_embeddings=64, local_attention=16)
    torch.manual_seed(0)
    ours = ReplacedTokenDetection(config, generator_config(config, generator_size), LAMBDA, sharing)
    hf = lambda c, **kw: transformers.ModernBertConfig(**{k: v for k, v in c.to_hf_dict().items()  # noqa: E731
                                                          if k not in ("architectures", "dtype")}, **kw)
    disc = transformers.ModernBertForTokenClassification(hf(config, num_labels=1))
    disc.load_state_dict(discriminator_state(ours.state_dict()), strict=True)
    shared = disc.model.embeddings.tok_embeddings  # the generator's table
    if sharing == "gdes":
        disc.model.embeddings.tok_embeddings = Disentangled(shared)
    gen = transformers.ModernBertForMaskedLM(hf(ours.generator_config))
    state = ours.generator.state_dict()
    narrower = generator_size < 1
    if narrower:
        project = torch.nn.Parameter(state.pop("model.embeddings.tok_embeddings.project.weight").clone())
        state.pop("model.embeddings.tok_embeddings.table.weight")
    else:  # the same width: the table itself, no projection
        project = torch.nn.Parameter(torch.eye(config.hidden_size), requires_grad=False)
        state.pop("model.embeddings.tok_embeddings.weight")
    state["decoder.bias"] = state.pop("decoder_bias")
    missing, unexpected = gen.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) == {"model.embeddings.tok_embeddings.weight", "decoder.weight"}
    table = shared.weight

    def forward(batch, noise):
        # The shared table, projected where the generator is narrower; the decoder tied to what it reads.
        embeds = F.embedding(batch["input_ids"], table)
        embeds, tied = (F.linear(embeds, project), table @ project.t()) if narrower else (embeds, table)
        hidden = gen.head(gen.model(inputs_embeds=embeds, attention_mask=batch["attention_mask"]).last_hidden_state)
        logits = F.linear(hidden, tied, gen.decoder.bias)
        corrupted, replaced, mlm_loss = electra_corruption(logits, batch, noise)
        disc_logits = disc(input_ids=corrupted, attention_mask=batch["attention_mask"]).logits.squeeze(-1)
        return mlm_loss, active_bce(disc_logits, replaced, batch["attention_mask"])

    # The generator's own token table and its tied decoder are not used: the shared table is.
    params = {n: p for n, p in distinct(gen, disc).items() if "gen.model.embeddings.tok_embeddings" not in n
              and n != "gen.decoder.weight"}
    params |= {"project": project} if narrower else {}
    return ours, forward, (gen, disc, project), params


def active_bce(logits, replaced, attention_mask):
    """ElectraForPreTraining's loss, BCEWithLogitsLoss over the tokens whose attention_mask
    is 1, written out: transformers casts the labels with `.float()`, which would take a
    float64 run's loss down to fp32."""
    real = attention_mask == 1
    return torch.nn.BCEWithLogitsLoss()(logits[real], replaced[real].to(logits.dtype))


def distinct(*models) -> dict[str, torch.nn.Parameter]:
    """Every parameter once (the shared embeddings appear in both models)."""
    out, seen = {}, set()
    for prefix, model in zip(("gen", "disc"), models):
        for name, p in model.named_parameters():
            if id(p) not in seen:
                seen.add(id(p))
                out[f"{prefix}.{name}"] = p
    return out


def electra_corruption(logits, batch, noise: torch.Generator):
    """ELECTRA's run_pretraining._get_fake_data, written from the paper's code: the MLM loss
    over the labelled slots; the originals restored, a Gumbel-max sample put at each
    labelled slot; labels = sampled != original."""
    positions, labels = batch["masked_lm_positions"].long(), batch["masked_lm_labels"].long()
    slot_logits = logits.gather(1, positions[..., None].expand(-1, -1, logits.shape[-1]))  # (B, P, V)
    mlm_loss = F.cross_entropy(slot_logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)
    u = torch.rand(slot_logits.shape, generator=noise, dtype=torch.float32)
    sampled = (slot_logits.detach() + (-torch.log(-torch.log(u + 1e-9) + 1e-9)).to(logits.dtype)).argmax(-1)
    original, corrupted = batch["input_ids"].clone(), batch["input_ids"].clone()
    for b, p in zip(*torch.nonzero(labels != IGNORE_INDEX, as_tuple=True)):
        original[b, positions[b, p]] = labels[b, p]
        corrupted[b, positions[b, p]] = sampled[b, p]
    return corrupted, corrupted != original, mlm_loss


def decay_groups(params: dict) -> list[dict]:
    """The Trainer's rule: no decay on biases and LayerNorm weights (1-D here), decay on the rest."""
    return [{"params": [p for p in params.values() if p.dim() >= 2], "weight_decay": DECAY},
            {"params": [p for p in params.values() if p.dim() < 2], "weight_decay": 0.0}]


def middle_norm(ours, data) -> float:
    """The median gradient norm of a copy of ours trained on `data` without clipping: a clip
    that catches some steps of the clipped run and not others (AdamW is blind to a scale
    that is the same at every step)."""
    model = copy.deepcopy(ours).double().train()
    opt = build_optimizer(model, "adamw", LR, DECAY, torch.device("cpu"), eps=1e-8)
    norms = []
    for step, batch in enumerate(data):
        set_lr(opt, Schedule(LR, 0, STEPS, kind="linear")(step))
        model(**batch, sample_generator=torch.Generator().manual_seed(step)).loss.backward()
        norms.append(clip_and_step(opt, [p for p in model.parameters() if p.requires_grad], math.inf))
        opt.zero_grad(set_to_none=True)
    return float(np.median(norms))


def run_steps(ours, forward, theirs, params, data, kernel=None) -> list[float]:
    set_unpad(ours, kernel)
    clip = middle_norm(ours, data)
    with in_float64([ours, *[m for m in theirs if isinstance(m, torch.nn.Module)]], [(b, b) for b in data]) as pairs:
        for p in theirs:
            if isinstance(p, torch.nn.Parameter):
                p.data = p.data.double()
        data = [b for b, _ in pairs]
        ours.train(), [m.train() for m in theirs if isinstance(m, torch.nn.Module)]
        opt_ours = build_optimizer(ours, "adamw", LR, DECAY, torch.device("cpu"), eps=1e-8)
        opt_theirs = torch.optim.AdamW(decay_groups(params), lr=LR, eps=1e-8)
        schedule = Schedule(LR, 0, STEPS, kind="linear")
        norms, first = [], None
        for step, batch in enumerate(data):
            lr = schedule(step)
            set_lr(opt_ours, lr)
            for group in opt_theirs.param_groups:
                group["lr"] = lr
            out = ours(**batch, sample_generator=torch.Generator().manual_seed(step))
            mlm, disc = forward(batch, torch.Generator().manual_seed(step))
            loss = mlm + LAMBDA * disc
            assert int(out.replaced.sum()) > 0, step  # the discriminator has replaced tokens to find
            assert out.mlm_loss.item() == pytest.approx(mlm.item(), rel=FLOAT64_TOL), f"step {step}"
            assert out.disc_loss.item() == pytest.approx(disc.item(), rel=FLOAT64_TOL), f"step {step}"
            assert out.loss.item() == pytest.approx(loss.item(), rel=FLOAT64_TOL), f"step {step}"
            first = first if first is not None else (batch, out.loss.item())
            out.loss.backward(), loss.backward()
            norm_ours = clip_and_step(opt_ours, [p for p in ours.parameters() if p.requires_grad], clip)
            norm_theirs = float(torch.nn.utils.clip_grad_norm_(list(params.values()), clip))
            opt_theirs.step()
            assert norm_ours == pytest.approx(norm_theirs, rel=FLOAT64_TOL), f"step {step}"
            norms.append(norm_theirs)
            opt_ours.zero_grad(set_to_none=True), opt_theirs.zero_grad(set_to_none=True)
        assert min(norms) < clip < max(norms), norms  # some steps clipped, some not
        with torch.no_grad():  # it learnt: not two idle models compared
            assert ours(**first[0], sample_generator=torch.Generator().manual_seed(0)).loss.item() < first[1] - 0.01
    return norms


def assert_same_weights(ours: ReplacedTokenDetection, named: dict[str, torch.Tensor]) -> None:
    for name, theirs in named.items():
        torch.testing.assert_close(ours[name], theirs, atol=FLOAT64_TOL, rtol=FLOAT64_TOL,
                                   msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("generator_size,kernel,sharing", [(0.5, None, "tied"), (1.0, None, "tied"),
                                                            (0.5, "repad", "tied"), (0.5, None, "gdes")],
                         ids=["narrow-generator", "same-width", "packed", "gradient-disentangled"])
def test_bert_rtd_steps_equal_electra_classes(shards, generator_size, kernel, sharing):
    ours, forward, (gen, disc), params = bert_pair(shards.tokenizer.vocab_size, generator_size, sharing)
    assert ("embeddings_project" in dict(gen.electra.named_children())) == (generator_size < 1)
    run_steps(ours, forward, (gen, disc), params, batches(shards), kernel=kernel)
    theirs_disc = discriminator_state({f"discriminator.{k}": v for k, v in disc.state_dict().items()})
    assert_same_weights(discriminator_state(ours.state_dict()), theirs_disc)
    theirs = {k: v for k, v in gen.state_dict().items() if k != "generator_lm_head.weight"}
    assert_same_weights(generator_state(ours.state_dict()), theirs)
    mine = ours.discriminator.electra.embeddings
    if sharing == "tied":  # the generator's table is the discriminator's, on both sides
        assert ours.generator.electra.embeddings is mine
    else:  # the delta learnt, and only the MLM loss moved the shared table (the generator's is E itself)
        assert float(mine.word_embeddings.delta.detach().abs().max()) > 1e-4
        assert mine.word_embeddings.shared is ours.generator.electra.embeddings.word_embeddings
        assert mine.position_embeddings is ours.generator.electra.embeddings.position_embeddings


@pytest.mark.parametrize("generator_size,sharing", [(0.5, "tied"), (1.0, "tied"), (0.5, "gdes")],
                         ids=["projected-table", "same-width", "gradient-disentangled"])
def test_modernbert_rtd_steps_equal_transformers_modules(shards, generator_size, sharing):
    ours, forward, (gen, disc, project), params = modernbert_pair(shards.tokenizer.vocab_size, generator_size,
                                                                  sharing)
    run_steps(ours, forward, (gen, disc, project), params, batches(shards))
    theirs_disc = discriminator_state({f"discriminator.{k}": v for k, v in disc.state_dict().items()})
    assert_same_weights(discriminator_state(ours.state_dict()), theirs_disc)
    mine = ours.generator.state_dict()
    assert_same_weights({"decoder.bias": mine["decoder_bias"]}, {"decoder.bias": gen.decoder.bias})
    if generator_size < 1:
        assert_same_weights({"project": mine["model.embeddings.tok_embeddings.project.weight"]}, {"project": project})
    elif sharing == "tied":  # the generator reads the discriminator's own table
        assert ours.generator.model.embeddings.tok_embeddings is ours.discriminator.model.embeddings.tok_embeddings
    theirs = gen.state_dict()
    rest = [k for k in mine if not k.startswith(("model.embeddings.tok_embeddings", "decoder_bias"))]
    assert len(rest) > 10
    assert_same_weights({k: mine[k] for k in rest}, {k: theirs[k] for k in rest})

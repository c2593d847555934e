"""Where the shared real data lives: ../shared/data beside the checkout (CI has it
there too). Tests that read it skip with a reason when it is absent."""
import pathlib

SHARED_DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data"
TOKENIZERS = SHARED_DATA / "tokenizers"  # released tokenizers' files: roberta-base, modernbert-base, deberta-v3-base


def released_reference(family: str):
    """transformers' own tokenizer on a released family's files: AutoTokenizer, except for
    deberta-v3-base, whose spm.model has no config.json beside it to tell AutoTokenizer
    the class (transformers converts the SentencePiece model itself)."""
    import transformers

    directory = TOKENIZERS / family
    if family == "deberta-v3-base":
        return transformers.DebertaV2Tokenizer.from_pretrained(directory)
    return transformers.AutoTokenizer.from_pretrained(directory)

"""Where the shared real data lives: ../shared/data beside the checkout (CI has it
there too). Tests that read it skip with a reason when it is absent."""
import functools
import pathlib

SHARED_DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data"
TOKENIZERS = SHARED_DATA / "tokenizers"  # released tokenizers' files: roberta-base, modernbert-base, deberta-v3-base


@functools.lru_cache(maxsize=None)
def released_reference(family: str):
    """transformers' own tokenizer on a released family's files: AutoTokenizer, except for
    deberta-v3-base, whose spm.model has no config.json beside it to tell AutoTokenizer
    the class (transformers converts the SentencePiece model itself). One per process
    (a load takes seconds): a call sets its truncation and padding afresh, so the tests
    that share it see no state from each other."""
    import transformers

    directory = TOKENIZERS / family
    if family == "deberta-v3-base":
        return transformers.DebertaV2Tokenizer.from_pretrained(directory)
    return transformers.AutoTokenizer.from_pretrained(directory)

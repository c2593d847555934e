"""Small question-answering inputs the QA tests build themselves: a tokenizer with a
few whole words and every single letter (so any lower-case text tokenizes without
[UNK]), and SquadExamples made from a context and an answer."""
from bertmodel.data.squad import SquadExample
from bertprep.tokenizer import build_tokenizer

WORDS = ["the", "cat", "sat", "on", "mat", "who", "where", "did", "what", "cafe", "muller",
         "istanbul", "angstrom", "in", "hosted", "a", "an"]
LETTERS = [chr(c) for c in range(ord("a"), ord("z") + 1)] + list("0123456789")
PUNCT = list(".,?!'-")


def tiny_tokenizer(lowercase: bool = True):
    """[PAD] [UNK] [CLS] [SEP] [MASK] (ids 0-4), then words, letters, ##letters, punctuation."""
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab += [w for w in WORDS if w not in LETTERS] + LETTERS + ["##" + c for c in LETTERS] + PUNCT
    return build_tokenizer(vocab, lowercase=lowercase)


def example(context: str, question: str, answer: str | None = None, start: int | None = None,
            qid: str = "q1", source: str = "test.json") -> SquadExample:
    """An answerable example (answer found in context unless `start` is given), or an
    impossible one when `answer` is None."""
    if answer is None:
        return SquadExample(qid, "T", question, context, [], True, source)
    if start is None:
        start = context.index(answer)
    return SquadExample(qid, "T", question, context, [(answer, start)], False, source)

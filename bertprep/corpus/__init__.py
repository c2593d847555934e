"""What a corpus is and how it is read: input files (files, directories, globs, object
stores), readers per format, prose and sentence splitting, document boundaries,
Hugging Face datasets, the standard-library corpus, sampling and mixes of sources.
"""
from bertprep.corpus.bottom_sample import BottomSample
from bertprep.corpus.boundaries import find_cut, sniff_layout
from bertprep.corpus.input_files import resolve_input_files
from bertprep.corpus.mix import SIZE_UNIT, MixPlan, MixSource, mix_summary, parse_mix
from bertprep.corpus.prose import KnownWord, join_is_one_word, join_paragraph, vocabulary_lookup
from bertprep.corpus.readers import decode_utf8
from bertprep.corpus.sentences import split_sentences
from bertprep.corpus.spec import (CorpusSpec, ReadStats, SENTENCE_MODES, format_size, iter_documents,
                                  iter_piece_documents, measure_input, mix_inputs, no_text_error, plan_mix, plural)
from bertprep.corpus.stdlib_corpus import (MIN_SENTENCES, docstring_sentences, iter_stdlib_documents,
                                           iter_stdlib_modules, module_documents, stdlib_dir, write_stdlib_corpus)

__all__ = ["BottomSample", "CorpusSpec", "KnownWord", "MIN_SENTENCES", "MixPlan", "MixSource", "ReadStats",
           "SENTENCE_MODES", "SIZE_UNIT", "decode_utf8", "measure_input", "mix_inputs", "mix_summary", "parse_mix",
           "plan_mix",
           "docstring_sentences", "find_cut", "format_size", "iter_documents", "iter_piece_documents",
           "iter_stdlib_documents", "iter_stdlib_modules", "join_is_one_word", "join_paragraph", "module_documents",
           "no_text_error", "plural", "resolve_input_files", "sniff_layout", "split_sentences", "stdlib_dir",
           "vocabulary_lookup", "write_stdlib_corpus"]

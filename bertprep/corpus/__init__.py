"""What a corpus is and how it is read: input files (files, directories, globs, object
stores), readers per format, prose and sentence splitting, document boundaries,
Hugging Face datasets, the standard-library corpus and sampling.
"""
from bertprep.corpus.bottom_sample import BottomSample
from bertprep.corpus.boundaries import find_cut, sniff_layout
from bertprep.corpus.input_files import resolve_input_files
from bertprep.corpus.prose import KnownWord, join_is_one_word, join_paragraph, vocabulary_lookup
from bertprep.corpus.readers import decode_utf8
from bertprep.corpus.sentences import split_sentences
from bertprep.corpus.spec import (CorpusSpec, ReadStats, SENTENCE_MODES, format_size, iter_documents,
                                  iter_piece_documents, no_text_error, plural)
from bertprep.corpus.stdlib_corpus import (MIN_SENTENCES, docstring_sentences, iter_stdlib_documents,
                                           iter_stdlib_modules, module_documents, stdlib_dir, write_stdlib_corpus)

__all__ = ["BottomSample", "CorpusSpec", "KnownWord", "MIN_SENTENCES", "ReadStats", "SENTENCE_MODES", "decode_utf8",
           "docstring_sentences", "find_cut", "format_size", "iter_documents", "iter_piece_documents",
           "iter_stdlib_documents", "iter_stdlib_modules", "join_is_one_word", "join_paragraph", "module_documents",
           "no_text_error", "plural", "resolve_input_files", "sniff_layout", "split_sentences", "stdlib_dir",
           "vocabulary_lookup", "write_stdlib_corpus"]

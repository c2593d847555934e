"""What turns a trained encoder into a search: embedding texts with a bi-encoder run or a
sentence-transformers directory (embedder.py) and the sentence-transformers files an
export writes beside the transformers ones (sentence_files.py)."""

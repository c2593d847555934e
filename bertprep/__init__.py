"""bertprep: turn a text corpus into BERT pre-training data.

train-tokenizer -> build-shards -> (bertmodel) pretrain. See README.md.
"""
__version__ = "0.1.0"

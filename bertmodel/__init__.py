"""bertmodel: a BERT (MLM + NSP) pre-trainer that reads bertprep shards and writes
checkpoints transformers loads as BertForPreTraining."""
from bertprep import __version__

__all__ = ["__version__"]

"""The error a user sees from bertmodel: a one-line message naming the file and problem.

It subclasses bertprep's error so one handler at the CLI boundary turns either into a
`click.ClickException` (one line on stderr, exit 1, no traceback).
"""
from bertprep.errors import BertprepError


class BertmodelError(BertprepError):
    """A problem the user can fix: bad shards, bad options, an incompatible checkpoint."""

"""The one exception type a user sees.

Library code raises `BertprepError` with a one-line message that names the file and the
problem; the CLI turns it into a `click.ClickException` (one line on stderr, exit 1),
so users get no traceback for mistakes they can fix.
"""


class BertprepError(Exception):
    """A problem the user can fix: bad input, bad option, existing output."""


def describe_path(path) -> str:
    """How error messages name a file: as the user gave it."""
    return str(path)

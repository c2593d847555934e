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


def check_parent_is_directory(path) -> None:
    """Raise when an output path cannot be created because a file is in the way: the
    nearest existing ancestor of `path` must be a directory."""
    from pathlib import Path

    path = Path(path)
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if ancestor.exists() and not ancestor.is_dir():
        raise BertprepError(f"{describe_path(ancestor)}: is a file, so {describe_path(path)} cannot be created in it")

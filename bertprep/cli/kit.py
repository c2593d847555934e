"""What both command lines share: one-line errors, the progress option and the context
settings.

A library error (`BertprepError`, and bertmodel's subclass) or an OSError that escapes
the library becomes one line on stderr and exit 1; a usage error one line and exit 2.
`bertprep.cli` and `bertmodel.cli` both take these from here, so neither CLI imports
the other.
"""
from __future__ import annotations

import functools

import click

from bertprep.errors import BertprepError

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def user_errors(fn):
    """Turn library errors into one-line CLI errors (exit 1, no traceback).

    An OSError that escapes the library (a full disk, a path under a file, a permission
    the library did not foresee) is also the user's to fix: it becomes one line naming
    the file too, rather than a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except BertprepError as exc:
            raise click.ClickException(str(exc)) from None
        except OSError as exc:
            raise click.ClickException(describe_os_error(exc)) from None

    return wrapper


def describe_os_error(exc: OSError) -> str:
    """"PATH: No space left on device" (the file first, as every error names it)."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    return f"{exc.filename}: {reason}" if exc.filename is not None else reason


def progress_option(fn):
    """--progress/--no-progress, and -q/--quiet for --no-progress: the one progress option
    of every long command of both CLIs (the command gets `progress`, a bool)."""
    return click.option("--progress/--no-progress", " /-q", " /--quiet", "progress", default=True, show_default=True,
                        help="Show progress on stderr: a bar on a terminal, a line every 30 s in a log. -q and "
                             "--quiet are --no-progress.")(fn)


class _OneLineUsageError(click.ClickException):
    exit_code = 2  # click's code for usage errors


# A bare `bertprep` prints its help through this UsageError (click >= 8.2): keep it.
_HELP_ERRORS = tuple(e for e in [getattr(click.exceptions, "NoArgsIsHelpError", None)] if e)


def _one_line(exc: click.UsageError) -> click.ClickException:
    return exc if isinstance(exc, _HELP_ERRORS) else _OneLineUsageError(exc.format_message())


class OneLineErrors(click.Group):
    """A command group whose usage errors (a bad option value, a missing option) print
    as one line, "Error: ...", like every other error: no usage block, no traceback."""

    def make_context(self, *args, **kwargs):
        try:
            return super().make_context(*args, **kwargs)
        except click.UsageError as exc:
            raise _one_line(exc) from None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            raise _one_line(exc) from None

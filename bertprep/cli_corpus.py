"""Commands of bertprep (registered in bertprep.cli)."""
from bertprep.cli import main, user_errors  # noqa: F401

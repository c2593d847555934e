"""Progress bars on stderr, silent when asked (tests, --quiet) or not on a terminal."""
from __future__ import annotations

import sys

from tqdm.auto import tqdm


def progress_bar(enabled: bool = True, **kwargs) -> tqdm:
    return tqdm(disable=not enabled, file=sys.stderr, dynamic_ncols=True, mininterval=0.5, **kwargs)

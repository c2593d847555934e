"""A 100 MB file that is one line with no newline: read with bounded memory.

The line is cut into pieces of at most 1M characters (readers.MAX_LINE_CHARS) at a
space, and a document closes at 10M characters or 100,000 sentences, so memory stays at
a few tens of MB whatever the file size (corpus.py explains the limits).
"""
from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc

import pytest

from bertprep.corpus import CorpusSpec, ReadStats, iter_documents

PATTERN = b"Hello world. This is text. "  # 27 bytes, two sentences
REPEATS = 3_703_704  # 100,000,008 bytes


@pytest.fixture(scope="module")
def one_line_100mb(tmp_path_factory):
    path = tmp_path_factory.mktemp("large") / "one-line.txt"
    block = PATTERN * 37_037  # about 1 MB
    with open(path, "wb") as stream:
        for _ in range(REPEATS // 37_037):
            stream.write(block)
        stream.write(PATTERN * (REPEATS % 37_037))
    assert path.stat().st_size == 100_000_008
    return path


def test_100mb_line_lines_mode(one_line_100mb):
    """About 1 s: a piece per 1M characters, traced peak well under the file size."""
    stats = ReadStats()
    tracemalloc.start()
    try:
        documents = 0
        longest = 0
        for document in iter_documents(CorpusSpec(paths=(str(one_line_100mb),)), stats):
            documents += 1
            longest = max(longest, max(map(len, document)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (stats.bytes, stats.long_lines, stats.invalid_bytes) == (100_000_008, 1, 0)
    assert (stats.documents, stats.sentences, stats.long_documents) == (documents, 101, 9) == (10, 101, 9)
    # cut after the last space before 1M characters: index 999,998 (999,998 % 27 == 26, a
    # space), so the piece is 999,999 characters, 999,998 once stripped
    assert longest == 999_998
    assert peak < 40_000_000, f"peak {peak:,} bytes traced"


_CHILD = """
import json, resource, sys
from bertprep.corpus.spec import CorpusSpec, ReadStats, iter_documents
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
stats = ReadStats()
for _ in iter_documents(CorpusSpec(paths=(sys.argv[1],), sentences="split"), stats):
    pass
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"grew_kb": after - before, "documents": stats.documents, "sentences": stats.sentences,
                  "long_lines": stats.long_lines, "long_documents": stats.long_documents}))
"""


@pytest.mark.slow
def test_100mb_line_split_mode(one_line_100mb):
    """About 20 s (7.4M sentences of 13 bytes: the splitter's worst case). Run in a fresh
    process so its peak RSS is its own; growth past the imports stays under 150 MB."""
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, str(one_line_100mb)], capture_output=True, text=True, check=True
    )
    figures = json.loads(result.stdout)
    assert figures["long_lines"] == 1
    assert figures["sentences"] == 2 * REPEATS
    assert figures["documents"] == 75  # closed every 100,000 sentences
    assert figures["long_documents"] == 74
    assert figures["grew_kb"] < 150_000, figures

"""The default demo corpus: the docstrings of the Python standard library.

Real English prose, available offline wherever Python is: the stdlib sources are parsed
with `ast` (never imported), in sorted path order, skipping test suites, idlelib and
demos. Per module, one document holds the module docstring and the docstrings of its
functions and small classes, in source order; a class whose own docstrings (class +
methods) make at least `MIN_SENTENCES` sentences becomes a document of its own, so each
document stays on one topic (what next-sentence prediction learns from).

Each docstring is cleaned (`inspect.cleandoc` rules, via `ast.get_docstring`) and cut
into paragraphs at blank lines. Dropped: doctest examples (`>>>` to the end of the
paragraph), indented lines (code samples, argument tables), reST field lines
(`:param x:`), underlines, and, after sentence splitting with bertprep.corpus.sentences,
sentences that are short (< 4 words or < 20 characters), look like code (under 85%
letters, spaces and ordinary punctuation) or do not end like a sentence. Documents with
fewer than `MIN_SENTENCES` sentences are dropped.

The output is in the reference layout (a sentence per line, a blank line between
documents) and is deterministic for a given Python version. With `max_bytes` it is a
prefix of the full corpus, cut at a sentence.
"""
from __future__ import annotations

import ast
import os
import re
import sys
import sysconfig
from pathlib import Path
from typing import Iterator

from bertprep.errors import BertprepError, describe_path
from bertprep.corpus.sentences import split_sentences

SKIP_DIRS = {"test", "tests", "idle_test", "idlelib", "turtledemo", "site-packages", "dist-packages", "__pycache__"}
MIN_SENTENCES = 3
MIN_WORDS = 4
MIN_CHARS = 20
MIN_PROSE_FRACTION = 0.85
_PROSE_CHARS = re.compile(r"[A-Za-z\s.,;:'\"!?()\-]")
_ENDS_SENTENCE = re.compile(r"[.!?:][\"')\]]*\Z")
_UNDERLINE = re.compile(r"[-=~^*#]{3,}\Z")


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def iter_stdlib_modules(root: Path | None = None) -> Iterator[Path]:
    """Every .py file under the stdlib directory, sorted, test suites and demos skipped."""
    root = root or stdlib_dir()
    found = []
    for directory, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith(".")]
        found.extend(Path(directory, n) for n in names if n.endswith(".py") and not n.startswith("test_"))
    yield from sorted(found, key=lambda p: p.relative_to(root).parts)


def _docstring_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """Functions and classes under node, in source order, not entering classes."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield child
            if isinstance(child, ast.ClassDef):
                continue
        yield from _docstring_nodes(child)


def _class_docstrings(node: ast.ClassDef) -> list[str]:
    docs = [ast.get_docstring(node)]
    docs.extend(ast.get_docstring(n) for n in ast.walk(node) if n is not node and isinstance(
        n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))
    return [d for d in docs if d]


def docstring_sentences(docstring: str) -> list[str]:
    """The prose sentences of one cleaned docstring."""
    sentences = []
    for block in re.split(r"\n\s*\n", docstring):
        kept = []
        for line in block.split("\n"):
            stripped = line.strip()
            if stripped.startswith(">>>"):
                break  # a doctest example runs to the end of the paragraph
            if line[:1].isspace() or stripped.startswith((":", "@", "..")) or _UNDERLINE.match(stripped):
                continue
            kept.append(stripped)
        paragraph = " ".join(" ".join(kept).split())
        sentences.extend(s for s in split_sentences(paragraph) if _is_prose(s))
    return sentences


def _is_prose(sentence: str) -> bool:
    if len(sentence) < MIN_CHARS or len(sentence.split()) < MIN_WORDS:
        return False
    if not _ENDS_SENTENCE.search(sentence) or not sentence[0].isupper():
        return False
    return len(_PROSE_CHARS.findall(sentence)) >= MIN_PROSE_FRACTION * len(sentence)


def module_documents(path: Path) -> list[list[str]]:
    """The documents of one module: its own, then one per large class."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError, UnicodeDecodeError):
        return []  # a file this Python cannot parse (e.g. lib2to3 fixtures): skip it
    if path.parent.name == "pydoc_data" and path.name == "topics.py":
        return _topic_documents(tree)
    module: list[str] = []
    classes: list[list[str]] = []
    seen: set[str] = set()  # platform variants repeat docstrings

    def sentences_of(docstrings) -> list[str]:
        out = []
        for docstring in docstrings:
            if docstring and docstring not in seen:
                seen.add(docstring)
                out.extend(docstring_sentences(docstring))
        return out

    module.extend(sentences_of([ast.get_docstring(tree)]))
    for node in _docstring_nodes(tree):
        if isinstance(node, ast.ClassDef):
            sentences = sentences_of(_class_docstrings(node))
            if len(sentences) >= MIN_SENTENCES:
                classes.append(sentences)
            else:
                module.extend(sentences)
        else:
            module.extend(sentences_of([ast.get_docstring(node)]))
    return [doc for doc in [module, *classes] if len(doc) >= MIN_SENTENCES]


def _topic_documents(tree: ast.Module) -> list[list[str]]:
    """pydoc_data/topics.py holds the language reference as `topics = {name: text}`
    (what `help("assert")` shows): one document per topic, in source order."""
    documents = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for value in node.values:
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    document = docstring_sentences(value.value)
                    if len(document) >= MIN_SENTENCES:
                        documents.append(document)
    return documents


def iter_stdlib_documents(root: Path | None = None) -> Iterator[tuple[Path, list[str]]]:
    """(module path, document) for the whole corpus, in order."""
    for path in iter_stdlib_modules(root):
        for document in module_documents(path):
            yield path, document


def _within(documents: Iterator[tuple[Path, list[str]]], max_bytes: int | None):
    """The longest prefix of documents, cut after a sentence, that fits in max_bytes when
    written in the reference layout; a cut document is kept if it keeps MIN_SENTENCES."""
    if max_bytes is None:
        yield from documents
        return
    used = 0
    for path, document in documents:
        separator = 1 if used else 0  # the blank line before every document but the first
        kept, size = [], separator
        for sentence in document:
            cost = len(sentence.encode("utf-8")) + 1
            if used + size + cost > max_bytes:
                break
            kept.append(sentence)
            size += cost
        if len(kept) >= MIN_SENTENCES:
            yield path, kept
            used += size
        if len(kept) < len(document):
            return


def write_stdlib_corpus(path, max_bytes: int | None = None, overwrite: bool = True) -> dict:
    """Write the stdlib docstring corpus to path (reference layout); returns its figures:
    {"path", "bytes", "documents", "sentences", "modules", "python", "stdlib"}.

    With max_bytes the file is the longest prefix of the full corpus, cut after a
    sentence, that fits. Written to a temporary name, then renamed."""
    out = Path(path)
    if out.exists() and not overwrite:
        raise BertprepError(f"{describe_path(out)}: already exists (use --overwrite to replace it)")
    root = stdlib_dir()
    if not any(root.glob("*.py")):
        raise BertprepError(f"{describe_path(root)}: no standard library sources (.py) to read here")
    documents = sentences = 0
    modules: set[Path] = set()
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as stream:
            for module_path, document in _within(iter_stdlib_documents(root), max_bytes):
                stream.write(("\n" if documents else "") + "".join(s + "\n" for s in document))
                documents += 1
                sentences += len(document)
                modules.add(module_path)
        if not documents:
            raise BertprepError(f"max-bytes {max_bytes:,} is too small for even one document")
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return {"path": str(out), "bytes": out.stat().st_size, "documents": documents, "sentences": sentences,
            "modules": len(modules), "python": sys.version.split()[0], "stdlib": str(root)}

"""Hugging Face datasets as corpus input: a saved directory (memory-mapped) or a dataset
by name (streamed). Imported only when a dataset is read, since `datasets` is slow to load.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

from bertprep.errors import BertprepError, describe_path
from bertprep.corpus.readers import FileCounts, field_error, one_line, record_text, hash_files, is_dataset_dir


def _dataset_name(name_or_dir: str | Path) -> str:
    return f"dataset {describe_path(name_or_dir)}"


def load_dataset_split(name_or_dir: str | Path, config: str | None, split: str):
    """A `datasets` Dataset (a save_to_disk directory, memory-mapped) or IterableDataset
    (a dataset by name, streamed) for one split."""
    try:
        import datasets
    except ImportError:  # pragma: no cover - datasets is a dependency
        raise BertprepError(f"{_dataset_name(name_or_dir)}: needs the datasets package") from None
    path = Path(name_or_dir)
    if is_dataset_dir(path):
        if config is not None:
            raise BertprepError(f"{_dataset_name(path)}: a saved dataset directory takes no config")
        try:
            loaded = datasets.load_from_disk(str(path))
        except Exception as exc:  # datasets raises many types for a broken directory
            raise BertprepError(f"{_dataset_name(path)}: cannot load: {one_line(exc)}") from None
        if isinstance(loaded, datasets.DatasetDict):
            if split not in loaded:
                raise BertprepError(
                    f"{_dataset_name(path)}: no split {split!r} (splits: {', '.join(sorted(loaded))})"
                )
            loaded = loaded[split]
        return loaded
    try:
        return datasets.load_dataset(str(name_or_dir), config, split=split, streaming=True)
    except Exception as exc:  # network, missing dataset, bad config: all one line to the user
        raise BertprepError(
            f"{_dataset_name(name_or_dir)}: cannot load ({type(exc).__name__}: {one_line(exc)})"
        ) from None


def check_split_applies(split: str, sources: list) -> None:
    """--split chooses a split of a saved DatasetDict or of a dataset by name. Refuse it,
    rather than ignore it, when no input (the saved dataset directories among the inputs,
    and --dataset) has one to choose: a single saved Dataset is read whole, so --split
    only fits it when it names the split the Dataset was saved as."""
    singles = []
    for source in sources:
        path = Path(source)
        if not is_dataset_dir(path) or (path / "dataset_dict.json").is_file():
            return  # a dataset by name, or a DatasetDict
        try:
            saved = json.loads((path / "state.json").read_text(encoding="utf-8")).get("_split")
        except (OSError, ValueError, AttributeError):
            saved = None  # reading it reports a broken directory
        if saved == split:
            return
        singles.append((path, saved))
    if not singles:
        raise BertprepError(f"--split {split!r} does not apply: no input is a dataset "
                            "(it chooses a split of a saved DatasetDict or of --dataset NAME)")
    path, saved = singles[0]
    what = f"its split is {saved!r}" if saved else "it has no split name"
    raise BertprepError(f"{_dataset_name(path)}: --split {split!r} does not apply: the directory holds one "
                        f"Dataset, not a DatasetDict, and {what}; drop --split to read it")


def saved_text_rows(path: Path, split: str, text_field: str | None) -> tuple[int, int]:
    """(rows, bytes of the text column) of a saved dataset split, from its memory-mapped
    table's sizes: no row is read."""
    dataset = load_dataset_split(path, None, split)
    field = text_field or "text"
    if field not in dataset.column_names:
        raise field_error(_dataset_name(path), text_field, dataset.column_names)
    return dataset.num_rows, dataset.data.column(field).nbytes


def iter_dataset_texts(
    name_or_dir: str | Path, config: str | None, split: str, text_field: str | None, counts: FileCounts,
    rows: tuple[int, int] | None = None,
) -> Iterator[str]:
    """The text_field (default "text") of each row of a Hugging Face dataset split; of
    rows [start, end) only, when given (a saved dataset)."""
    dataset = load_dataset_split(name_or_dir, config, split)
    field = text_field or "text"
    columns = dataset.column_names  # None for some streamed datasets until read
    if columns is not None and field not in columns:
        raise field_error(_dataset_name(name_or_dir), text_field, columns)
    if columns is not None:
        dataset = dataset.select_columns([field])
    row = 0
    if rows is not None:
        dataset = dataset.select(range(*rows))  # contiguous: a slice of the memory map
        row = rows[0]
    for batch in dataset.iter(batch_size=1000):
        if field not in batch:
            raise field_error(f"{_dataset_name(name_or_dir)} row {row}", text_field, batch)
        for text in batch[field]:
            row += 1
            text = record_text(f"{_dataset_name(name_or_dir)} row {row}", text, field)
            if text:
                counts.bytes += len(text.encode("utf-8", "surrogatepass"))
                yield text


def dataset_fingerprint(name_or_dir: str | Path, config: str | None, split: str) -> dict:
    """What identifies a dataset input in a build manifest. A saved directory: the
    fingerprint `datasets` wrote in state.json plus the size and sha256 of its Arrow
    files (the content, wherever the directory lives); a dataset by name: its builder's
    name, config and version."""
    info = {"dataset": str(name_or_dir), "config": config, "split": split}
    path = Path(name_or_dir)
    if is_dataset_dir(path):
        directory = path
        if (path / "dataset_dict.json").is_file():
            load_dataset_split(path, config, split)  # the same errors as reading it
            directory = path / split
        try:
            state = json.loads((directory / "state.json").read_text(encoding="utf-8"))
            files = [directory / entry["filename"] for entry in state["_data_files"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise BertprepError(f"{_dataset_name(path)}: unreadable state.json ({one_line(exc)})") from None
        return {**info, "fingerprint": state.get("_fingerprint"), **hash_files(files)}
    dataset = load_dataset_split(name_or_dir, config, split)
    version = getattr(dataset.info, "version", None)
    fingerprint = getattr(dataset, "_fingerprint", None)  # None when streamed
    return {**info, "fingerprint": fingerprint or f"{dataset.info.dataset_name}/{dataset.info.config_name}@{version}"}

"""Test helpers live beside the tests (tests/shard_fixtures.py); make them importable."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

"""`bertmodel demo`: the whole pipeline on the standard library's docstrings (run.py),
closed by a fine-tuning task built from the same corpus (task.py)."""
from bertmodel.demo.run import DEMO_STEPS, run_demo

__all__ = ["DEMO_STEPS", "run_demo"]

"""The generic training side, which knows nothing of MLM, labels or spans: options
(options.py), building a run and resuming it (run.py), the step loop with logging,
evaluation cadence and checkpoints (loop.py). An objective comes in as a task
(bertmodel/tasks)."""

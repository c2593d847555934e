"""The generic training side, which knows nothing of MLM, labels or spans: options
(options.py), building a run and resuming it (run.py), the step loop with logging,
evaluation cadence and checkpoints (loop.py), and a model over a whole set in order,
dropout off (batched_forward.py: every evaluation pass, in training or after it). An
objective comes in as a task (bertmodel/tasks)."""

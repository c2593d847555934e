"""Distillation: a smaller student from a teacher's layers (shrink), and the losses that
make a student learn a teacher: softened logits for a fine-tuned task, an embedder's
vectors or a cross-encoder's margins, and MiniLMv2's self-attention relations for a
task-agnostic student. The tasks (tasks/) train with them; nothing here imports a task."""

"""One module per objective; a task is the only thing that knows its objective (base.py
says what the trainer asks of it): pre-training (pretraining.py), sequence
classification and regression (classification.py), extractive QA (qa.py), token
classification such as NER (tokens.py; a raw text's words and entities as transformers'
pipeline finds them: entity_text.py), multiple choice (choice.py), and what the
fine-tuning tasks share (finetuning.py)."""

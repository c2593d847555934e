"""A trained model run over data, above the tasks (it loads their models): a fine-tuned
classifier, QA, token, multiple-choice or rerank model scored on labelled data and
predicting on texts or files (predict.py: `evaluate`, `predict`), an embed or rerank run
ranking a collection (rank.py: `evaluate RUN --data BEIR_DIR`, `search`), and a
pre-trained model's guesses for [MASK] (fill_mask.py: `fill-mask`)."""

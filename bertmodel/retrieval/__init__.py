"""What turns an encoder into a search, below the tasks that train one (tasks/embed.py and
tasks/rerank.py import it; nothing here imports a task): embedding texts with a bi-encoder
run or a sentence-transformers directory (embedder.py), exact search over a corpus in
bounded memory (search.py), BM25 as a first stage (bm25.py), a file's texts and corpora
read for embedding and search (texts.py), and the sentence-transformers files an export
writes beside the transformers ones (sentence_files.py). A whole run ranking a
collection is inference/rank.py."""

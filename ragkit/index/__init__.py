"""Documents in, chunks and vectors stored: ingestion, chunking, the FAISS + bm25s index, retrieval."""

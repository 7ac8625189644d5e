"""Why ragkit keeps its own FAISS index instead of faiss-haystack's FAISSDocumentStore: memory and disk.

Each store runs in its own subprocess (so one's garbage cannot hide the other's growth) on the same
random 384-d unit vectors and ~140-word texts; reported: resident MB held after the input Documents
are freed, on-disk MB after saving, and build + save seconds.

    .venv/bin/python bench/faiss_store_memory.py [chunks]
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def measure(kind: str, n: int) -> dict:
    import numpy as np
    import psutil
    from haystack import Document

    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(n, 384)).astype("float32")
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    process = psutil.Process()
    gc.collect()
    base = process.memory_info().rss
    docs = [Document(content=f"paragraph {i} " + "lorem ipsum dolor sit amet " * 20, meta={"source": f"s{i % 50}.md"}, embedding=v) for i, v in enumerate(vectors.tolist())]
    out = Path(tempfile.mkdtemp())
    t0 = time.perf_counter()
    if kind == "faiss-haystack":
        from haystack_integrations.document_stores.faiss import FAISSDocumentStore

        store = FAISSDocumentStore(embedding_dim=384, index_string="Flat")
        store.write_documents(docs)
        del docs
        gc.collect()
        held = process.memory_info().rss
        store.save(out / "store")
    else:
        from ragkit.index.store import RagIndex

        index = RagIndex(embedder="x", dim=384, dense_index="flat")
        index.add(docs)
        del docs
        gc.collect()
        held = process.memory_info().rss
        index.save(out / "index")
    seconds = time.perf_counter() - t0
    disk = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    return {"resident_mb": round((held - base) / 2**20, 1), "disk_mb": round(disk / 2**20, 1), "build_and_save_s": round(seconds, 2)}


def main() -> int:
    if len(sys.argv) > 2:  # child process
        print(json.dumps(measure(sys.argv[1], int(sys.argv[2]))))
        return 0
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    results = {}
    for kind in ("faiss-haystack", "ragkit"):
        done = subprocess.run([sys.executable, __file__, kind, str(n)], capture_output=True, text=True, check=True)
        results[kind] = json.loads(done.stdout.strip().splitlines()[-1])
    out = {
        "chunks": n,
        "stores": results,
        "note": "ragkit's figure includes its bm25s index and chunk table; faiss-haystack has no sparse side",
        "command": f"python bench/faiss_store_memory.py {n}",
    }
    (ROOT / "bench" / "results" / "faiss_store_memory.json").write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

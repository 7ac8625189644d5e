"""The corpora and question sets the experiments of :mod:`ragkit.eval.experiments` run on.

* SQuAD as a corpus: :func:`load_squad_corpus` (paragraphs → Documents, questions with the id of
  the paragraph that answers them) and :func:`index_documents` (one chunk per paragraph).
* The labelled routing set: :func:`load_labelled_routes`.
* A labelled set for a hallucination judge: :func:`judge_items` (supported / contradicted /
  unsupported answers built from SQuAD).
* A small live ablation that separates its configurations: :func:`differing_questions`.

Apart from the measuring code because building a set runs no component under test;
:mod:`ragkit.eval.experiments` re-exports all of these, and the notebooks import them from there.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path
from typing import Iterable

from haystack import Document

from ragkit.eval.metrics import normalize_answer


# -- SQuAD as a corpus ----------------------------------------------------------------------------
def load_squad_corpus(path: str | Path, titles: Iterable[str] | None = None, n_articles: int | None = None, seed: int = 0) -> tuple[list[Document], list[dict]]:
    """SQuAD v1.1 paragraphs as Documents (id ``"<article>-<paragraph>"``) and its questions
    (``{"id", "question", "answers", "doc_id", "context", "title"}``). ``titles`` keeps some
    articles; ``n_articles`` a seeded sample of them (the notebooks' small corpora)."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        articles = list(enumerate(json.load(fh)["data"]))
    if titles is not None:
        wanted = {t.replace(" ", "_") for t in titles}
        articles = [(a, art) for a, art in articles if art["title"] in wanted]
    if n_articles is not None and n_articles < len(articles):
        articles = sorted(random.Random(seed).sample(articles, n_articles), key=lambda x: x[0])
    docs, questions = [], []
    for a, article in articles:
        title = article["title"].replace("_", " ")
        for p, para in enumerate(article["paragraphs"]):
            doc_id = f"{a}-{p}"
            docs.append(Document(id=doc_id, content=para["context"], meta={"title": title, "source": f"squad:{article['title']}"}))
            for qa in para["qas"]:
                questions.append({
                    "id": qa["id"], "question": qa["question"], "answers": [x["text"] for x in qa["answers"]],
                    "doc_id": doc_id, "context": para["context"], "title": title,
                })
    return docs, questions


def index_documents(docs: list[Document], index_dir: str | Path, embedder: str = "all-MiniLM-L6-v2", progress: bool = True):
    """A saved :class:`~ragkit.index.store.RagIndex` holding ``docs`` as they are (one chunk each),
    reused when ``index_dir`` already holds exactly these ids and this embedder."""
    from ragkit.config import ModelConfig
    from ragkit.index.store import RagIndex
    from ragkit.llm.generators import build_document_embedder
    from ragkit.llm.models import quiet_weight_loading

    index_dir = Path(index_dir)
    if RagIndex.exists(index_dir):
        try:
            index = RagIndex.load(index_dir, expected_embedder=embedder)
            if set(index.chunks) == {d.id for d in docs}:
                return index
        except Exception:  # stale, foreign or damaged: rebuild below
            pass
    embed = build_document_embedder(ModelConfig(embedder=embedder), progress_bar=progress, batch_size=64)
    with quiet_weight_loading():
        embed.warm_up()
    embedded = embed.run(documents=[Document(id=d.id, content=d.content, meta=dict(d.meta)) for d in docs])["documents"]
    index = RagIndex(embedder=embedder, dim=len(embedded[0].embedding))
    index.add(embedded)
    index.save(index_dir)
    return index


# -- routing --------------------------------------------------------------------------------------
def load_labelled_routes(path: str | Path) -> list[dict]:
    """The labelled routing set: one ``{"question", "label"}`` JSON object per line."""
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


# -- hallucination --------------------------------------------------------------------------------
_WH = ("how many", "how much", "what year", "when", "who", "where", "which", "what", "why", "how")


def _wh_type(question: str) -> str:
    q = question.lower()
    return next((w for w in _WH if w in q), "other")


def judge_items(docs: list[Document], questions: list[dict], n_supported: int, seed: int = 13) -> list[dict]:
    """A labelled set for a hallucination judge, from SQuAD (seeded). Per question, its paragraph
    plus a neighbouring one of the same article (shuffled) are the sources, and the answer is:

    * ``supported`` — the gold answer;
    * ``contradicted`` — the gold answer of *another* question on the same paragraph: stated in
      the sources, but a different fact from the one asked for;
    * ``unsupported`` — a gold answer of the same question type (who/when/how many/...) from
      another article, absent from the sources: plausible, but nothing supports it.

    ``n_supported`` supported items and half as many of each negative kind."""
    by_id = {d.id: d for d in docs}
    by_doc: dict[str, list[dict]] = {}
    by_type: dict[str, list[dict]] = {}
    for q in questions:
        by_doc.setdefault(q["doc_id"], []).append(q)
        by_type.setdefault(_wh_type(q["question"]), []).append(q)
    rng = random.Random(seed)
    order = list(range(len(questions)))
    rng.shuffle(order)
    items, kinds = [], {"supported": 0, "contradicted": 0, "unsupported": 0}
    n_negative = n_supported // 2
    used_docs = set()
    for i in order:
        q = questions[i]
        if q["doc_id"] in used_docs:
            continue
        article, para = q["doc_id"].split("-")
        neighbours = [d for d in (f"{article}-{int(para) + 1}", f"{article}-{int(para) - 1}") if d in by_id]
        if not neighbours:
            continue
        sources = [by_id[q["doc_id"]], by_id[neighbours[0]]]
        rng.shuffle(sources)
        context_norm = " " + normalize_answer(" ".join(d.content for d in sources)) + " "
        gold_norm = {normalize_answer(a) for a in q["answers"]}
        candidates = []
        if kinds["contradicted"] < n_negative:
            others = [o for o in by_doc[q["doc_id"]] if o["id"] != q["id"]]
            others.sort(key=lambda o: _wh_type(o["question"]) != _wh_type(q["question"]))
            for o in others:
                a_norm = normalize_answer(o["answers"][0])
                if a_norm and not (set(a_norm.split()) & set(" ".join(gold_norm).split())):
                    candidates.append(("contradicted", o["answers"][0]))
                    break
        if not candidates and kinds["unsupported"] < n_negative:
            pool = [o for o in by_type.get(_wh_type(q["question"]), []) if not o["doc_id"].startswith(article + "-")]
            for o in rng.sample(pool, min(50, len(pool))):
                a_norm = normalize_answer(o["answers"][0])
                if a_norm and f" {a_norm} " not in context_norm:
                    candidates.append(("unsupported", o["answers"][0]))
                    break
        if kinds["supported"] < n_supported:
            candidates.append(("supported", q["answers"][0]))
        for kind, answer in candidates:
            items.append({"kind": kind, "question": q["question"], "answer": answer, "sources": [d.id for d in sources], "squad_id": q["id"], "documents": sources})
            kinds[kind] += 1
        used_docs.add(q["doc_id"])
        if kinds["supported"] >= n_supported and kinds["contradicted"] >= n_negative and kinds["unsupported"] >= n_negative:
            break
    return items


# -- a live set where configurations differ --------------------------------------------------------
def differing_questions(
    answers_path: str | Path,
    questions: list[dict],
    documents: dict[str, str] | None = None,
    a: str = "plain",
    b: str = "full",
    min_gap: float = 0.1,
    n: int = 6,
    seed: int = 0,
) -> list[dict]:
    """Questions for a small live ablation, by a fixed rule: those in a committed benchmark's
    per-answer rows (``bench/results/agentic_squad.answers.jsonl``: ``config``, ``id``, ``f1``)
    where configurations ``a`` and ``b`` got F1 at least ``min_gap`` apart, and — when
    ``documents`` (``{title: text}``) is given — whose gold answer is in their article's text, so an
    index of those documents holds it. A seeded sample of ``n`` (sorted by id first, so the draw
    does not depend on file order), each with ``committed_f1 = {a: …, b: …}``.

    Twelve random questions mostly give every configuration the same F1 (0 on the ones none can
    answer); these are the questions where the committed run says the features matter."""
    f1: dict[tuple[str, str], float] = {}
    for line in Path(answers_path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            if row.get("config") in (a, b):
                f1[(row["config"], row["id"])] = float(row.get("f1") or 0.0)
    picked = []
    for q in sorted(questions, key=lambda q: q["id"]):
        if (a, q["id"]) not in f1 or (b, q["id"]) not in f1:
            continue
        if abs(f1[(a, q["id"])] - f1[(b, q["id"])]) < min_gap:
            continue
        if documents is not None and not any(ans in documents.get(q.get("title", ""), "") for ans in q["answers"]):
            continue
        picked.append({**q, "committed_f1": {a: f1[(a, q["id"])], b: f1[(b, q["id"])]}})
    if len(picked) > n:
        picked = random.Random(seed).sample(picked, n)
    return picked

"""The measured experiments behind the walkthrough notebooks (and some benchmarks).

A notebook cell calls one of these and shows what it returns; the tests call the same functions,
so anything a notebook shows is checked. Every function takes the components to measure and a
question set, runs them in one process, and returns plain rows (lists of dicts) that
:mod:`ragkit.ui.plots` draws and pandas-free notebooks print as tables.

* SQuAD as a corpus: :func:`load_squad_corpus` (paragraphs → Documents, questions with the id of
  the paragraph that answers them) and :func:`index_documents` (one chunk per paragraph).
* Retrieval: :func:`retrieval_ranks` (rank of the gold paragraph per mode), :func:`recall_table`,
  :func:`wins` (the questions one mode gets and another misses), :func:`hyde_ranks`.
* Routing: :func:`load_labelled_routes`, :func:`router_accuracy`.
* Reranking and grading: :func:`rerank_and_grade`.
* Hallucination: :func:`judge_items` (supported / contradicted / unsupported answers built from
  SQuAD), :func:`judge_scores`.
* A small live ablation that separates its configurations: :func:`differing_questions`.

Rank-based retrieval metrics are a few lines over ragkit's own retrievers and need the gold
paragraph id per question, which Haystack's evaluators (document MRR/recall over ``Document``
equality) would make us rebuild as Documents anyway — so they are written here.
"""

from __future__ import annotations

import gzip
import json
import random
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

from haystack import Document

from ragkit.eval.metrics import normalize_answer


def _progress(items, desc: str, progress: bool):
    if not progress:
        return items
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc)


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

    index_dir = Path(index_dir)
    if RagIndex.exists(index_dir):
        try:
            index = RagIndex.load(index_dir, expected_embedder=embedder)
            if set(index.chunks) == {d.id for d in docs}:
                return index
        except Exception:  # stale, foreign or damaged: rebuild below
            pass
    embed = build_document_embedder(ModelConfig(embedder=embedder), progress_bar=progress, batch_size=64)
    embed.warm_up()
    embedded = embed.run(documents=[Document(id=d.id, content=d.content, meta=dict(d.meta)) for d in docs])["documents"]
    index = RagIndex(embedder=embedder, dim=len(embedded[0].embedding))
    index.add(embedded)
    index.save(index_dir)
    return index


# -- retrieval ------------------------------------------------------------------------------------
def gold_rank(documents: list[Document], doc_id: str) -> int | None:
    """1-based rank of the gold paragraph (or a chunk of it) among ``documents``; None if absent."""
    for rank, d in enumerate(documents, 1):
        if d.id == doc_id or d.meta.get("parent_id") == doc_id:
            return rank
    return None


def retrieval_ranks(retriever, questions: list[dict], modes: Iterable[str] = ("dense", "sparse", "hybrid"), depth: int = 20, progress: bool = True) -> list[dict]:
    """Per question, the gold paragraph's rank in each retrieval mode's top ``depth`` and the
    milliseconds each mode took (the query is embedded once, outside the timings)."""
    rows = []
    for q in _progress(questions, "retrieval", progress):
        embedding = retriever.embed(q["question"])
        row = {"question": q["question"], "doc_id": q["doc_id"], "ranks": {}, "ms": {}}
        for mode in modes:
            t0 = time.perf_counter()
            docs = retriever.retrieve(q["question"], top_k=depth, mode=mode, query_embedding=embedding).documents
            row["ms"][mode] = (time.perf_counter() - t0) * 1000
            row["ranks"][mode] = gold_rank(docs, q["doc_id"])
        rows.append(row)
    return rows


def recall_at(rows: list[dict], mode: str, k: int) -> float:
    return sum(1 for r in rows if r["ranks"][mode] is not None and r["ranks"][mode] <= k) / max(len(rows), 1)


def mrr(rows: list[dict], mode: str) -> float:
    return sum(1 / r["ranks"][mode] for r in rows if r["ranks"][mode]) / max(len(rows), 1)


def recall_table(rows: list[dict], ks: Iterable[int] = (1, 3, 5, 10)) -> list[dict]:
    """One row per mode: recall@k, MRR and median milliseconds."""
    modes = list(rows[0]["ranks"]) if rows else []
    table = []
    for mode in modes:
        entry: dict[str, Any] = {"mode": mode}
        entry.update({f"R@{k}": round(recall_at(rows, mode, k), 3) for k in ks})
        entry["MRR"] = round(mrr(rows, mode), 3)
        ms = [r["ms"][mode] for r in rows if mode in r.get("ms", {})]
        if ms:
            entry["ms p50"] = round(statistics.median(ms), 2)
        table.append(entry)
    return table


def wins(rows: list[dict], better: str, worse: str, n: int = 5) -> list[dict]:
    """Questions where ``better`` ranks the gold paragraph strictly higher than ``worse`` (a miss
    counts as rank infinity), biggest gaps first."""
    inf = float("inf")
    gaps = []
    for r in rows:
        a, b = r["ranks"][better] or inf, r["ranks"][worse] or inf
        if a < b:
            gaps.append(((b == inf), b - a if b != inf else 0, r))
    gaps.sort(key=lambda x: (x[0], x[1]), reverse=True)  # misses first, then the biggest gaps
    return [{"question": r["question"], better: r["ranks"][better], worse: r["ranks"][worse] or "miss"} for _, _, r in gaps[:n]]


def hyde_ranks(retriever, hyde, questions: list[dict], depth: int = 20, progress: bool = True) -> list[dict]:
    """Gold rank with the question's own embedding and with HyDE's (passage(s) averaged with the
    question, as in the HyDE paper), dense and hybrid; plus HyDE's seconds and its passage."""
    rows = []
    for q in _progress(questions, "HyDE", progress):
        embedding = retriever.embed(q["question"])
        t0 = time.perf_counter()
        out = hyde.run(query=q["question"], query_embedding=embedding)
        seconds = time.perf_counter() - t0
        ranks = {}
        for mode in ("dense", "hybrid"):
            ranks[mode] = gold_rank(retriever.retrieve(q["question"], top_k=depth, mode=mode, query_embedding=embedding).documents, q["doc_id"])
            ranks[mode + "+hyde"] = gold_rank(retriever.retrieve(q["question"], top_k=depth, mode=mode, query_embedding=out["embedding"]).documents, q["doc_id"])
        passages = out["hyde"].get("passages") or []
        rows.append({"question": q["question"], "doc_id": q["doc_id"], "ranks": ranks, "hyde_s": seconds, "passage": passages[0] if passages else None, "hyde": out["hyde"]})
    return rows


# -- routing --------------------------------------------------------------------------------------
def load_labelled_routes(path: str | Path) -> list[dict]:
    """The labelled routing set: one ``{"question", "label"}`` JSON object per line."""
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def router_accuracy(router, rows: list[dict], progress: bool = False) -> dict:
    """Accuracy (overall and per class), latency, fallbacks and confusions of one router backend."""
    from ragkit.components.query_router import ROUTES

    router.warm_up()
    router.run(query="warm up")
    correct, times, fallbacks = 0, [], 0
    confusion: Counter = Counter()
    per_class: Counter = Counter()
    for row in _progress(rows, f"router ({router.backend})", progress):
        t0 = time.perf_counter()
        out = router.run(query=row["question"])
        times.append((time.perf_counter() - t0) * 1000)
        fallbacks += "fallback" in out["routing"]
        confusion[(row["label"], out["route"])] += 1
        if out["route"] == row["label"]:
            correct += 1
            per_class[row["label"]] += 1
    counts = Counter(r["label"] for r in rows)
    return {
        "accuracy": round(correct / len(rows), 4),
        "per_class_accuracy": {label: round(per_class[label] / counts[label], 4) for label in ROUTES if counts[label]},
        "ms_p50": round(statistics.median(times), 2),
        "ms_p95": round(sorted(times)[int(0.95 * (len(times) - 1))], 2),
        "fallbacks": fallbacks,
        "confusion": {f"{gold}->{pred}": n for (gold, pred), n in sorted(confusion.items()) if gold != pred},
    }


# -- reranking and grading ------------------------------------------------------------------------
def rerank_and_grade(retriever, reranker, graders: dict[str, Any], questions: list[dict], candidates: int = 10, top_k: int = 3, progress: bool = True) -> list[dict]:
    """Per question: the gold paragraph's rank among ``candidates`` hybrid results before and after
    reranking (and the reranker's ms); then each grader on the reranked top ``top_k``: what it
    kept and dropped, whether it dropped the gold paragraph, its ms."""
    rows = []
    for q in _progress(questions, "rerank + grade", progress):
        docs = retriever.retrieve(q["question"], top_k=candidates, mode="hybrid").documents
        t0 = time.perf_counter()
        reranked = reranker.run(query=q["question"], documents=docs, top_k=candidates)["documents"] if reranker is not None else docs
        row = {
            "question": q["question"], "doc_id": q["doc_id"],
            "rank_before": gold_rank(docs, q["doc_id"]), "rank_after": gold_rank(reranked, q["doc_id"]),
            "rerank_ms": (time.perf_counter() - t0) * 1000, "graders": {},
        }
        top = reranked[:top_k]
        for name, grader in graders.items():
            t0 = time.perf_counter()
            out = grader.run(query=q["question"], documents=top)
            kept = {d.id for d in out["documents"]}
            row["graders"][name] = {
                "ms": (time.perf_counter() - t0) * 1000,
                "scores": list(out["grading"].get("scores", [])),
                "kept": len(kept), "dropped": len(top) - len(kept),
                "gold_in_top": any(d.id == q["doc_id"] for d in top),
                "gold_dropped": any(d.id == q["doc_id"] for d in top) and q["doc_id"] not in kept,
                "others_dropped": sum(1 for d in top if d.id != q["doc_id"] and d.id not in kept),
                "fallback": out["grading"].get("fallback"),
            }
        rows.append(row)
    return rows


def grading_summary(rows: list[dict]) -> list[dict]:
    """Per grader: how much it dropped, how often it dropped the paragraph with the answer, ms."""
    names = list(rows[0]["graders"]) if rows else []
    out = []
    for name in names:
        g = [r["graders"][name] for r in rows]
        with_gold = [x for x in g if x["gold_in_top"]]
        others = sum(len(x["scores"]) - (1 if x["gold_in_top"] else 0) for x in g)
        out.append({
            "grader": name,
            "chunks dropped": f"{sum(x['dropped'] for x in g)}/{sum(len(x['scores']) for x in g)}",
            "gold dropped": f"{sum(x['gold_dropped'] for x in with_gold)}/{len(with_gold)}",
            "distractors dropped": f"{sum(x['others_dropped'] for x in g)}/{others}",
            "ms p50": round(statistics.median(x["ms"] for x in g), 1),
            "fallbacks": sum(1 for x in g if x["fallback"]),
        })
    return out


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


def judge_scores(detector, items: list[dict], with_question: bool = True, progress: bool = True) -> list[dict]:
    """The detector's P(supported) for every labelled item, with its milliseconds."""
    rows = []
    for item in _progress(items, "judge", progress):
        t0 = time.perf_counter()
        out = detector.run(answer=item["answer"], documents=item["documents"], question=item["question"] if with_question else None)
        rows.append({"kind": item["kind"], "question": item["question"], "answer": item["answer"], "score": out["score"], "ms": (time.perf_counter() - t0) * 1000})
    return rows


def balanced_accuracy(rows: list[dict], threshold: float) -> float:
    """Mean of the recall on supported items and on the others, at ``threshold``."""
    pos = [r["score"] for r in rows if r["kind"] == "supported" and r["score"] is not None]
    neg = [r["score"] for r in rows if r["kind"] != "supported" and r["score"] is not None]
    if not pos or not neg:
        raise ValueError("balanced accuracy needs scored supported and unsupported items")
    return (sum(s >= threshold for s in pos) / len(pos) + sum(s < threshold for s in neg) / len(neg)) / 2


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


def compare_answer_modes(rags: dict[str, Any], questions: list[dict]) -> tuple[list[dict], dict[str, Any]]:
    """Each question answered by every engine in ``rags`` (e.g. ``{"free": …, "grounded": …}``, same
    model and index): per question the answers and their F1 against gold, and the last results per
    mode (to show one with its evidence). Questions need ``question`` and ``answers``."""
    from ragkit.eval.metrics import f1_score
    from ragkit.llm.generators import reset_prompt_cache

    rows, last = [], {}
    for q in questions:
        row: dict[str, Any] = {"question": q["question"], "gold": q["answers"][0]}
        for name, rag in rags.items():
            reset_prompt_cache(rag.generator)  # each mode from a cold cache, so the seconds compare
            result = rag.ask(q["question"])
            row[name] = result.answer
            row[f"{name} F1"] = round(0.0 if result.declined else f1_score(result.answer, q["answers"]), 2)
            row[f"{name} s"] = round(result.seconds, 1)
            last.setdefault(name, []).append(result)
        rows.append(row)
    return rows, last

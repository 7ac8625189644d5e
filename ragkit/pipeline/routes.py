"""The route tables of the graph's ``ConditionalRouter`` s, built from a :class:`~ragkit.pipeline.features.Features`.

* ``route_policy`` (routing on): the router's label → no retrieval (``direct_query``), or retrieval
  with or without HyDE, each with its own ``top_k``, answer mode and grader (``Features.route_policy``);
* ``context_check``: documents go on to the answer only when there are any.

Every output is a plain value (a string, an int) or a passthrough, so the routers never need
Haystack's unsafe mode, which ``Pipeline.load`` refuses by default.

Usage::

    ConditionalRouter(routes=policy_routes(Features(routing=True, hyde=True)))
"""

from __future__ import annotations

from typing import Any

from haystack import Document

from ragkit.pipeline.features import Features


def policy_routes(features: Features) -> list[dict[str, Any]]:
    """``route_policy``'s branches: no retrieval (SIMPLE), retrieval with HyDE, retrieval without."""
    routes = []
    for name, policy in features.route_policy.items():
        condition = f"{{{{ route == {name!r} }}}}"
        if not policy["retrieve"]:
            routes.append({"condition": condition, "output": "{{ query }}", "output_name": "direct_query", "output_type": str})
            continue
        branch = "hyde_query" if features.hyde and policy.get("hyde", True) and features.retrieval_mode != "sparse" else "search_query"
        top_k = int(policy.get("top_k") or features.top_k)
        routes.append(_retrieving_route(features, condition, branch, top_k, features.answer_mode_for(name), features.grader_for(name)))
    # a route the policy does not know (a custom router): retrieve as plain RAG would
    fallback_mode = features.answer_mode if features.answer_mode != "auto" else "free"
    routes.append(_retrieving_route(features, "{{ true }}", "search_query", features.top_k, fallback_mode, features.grader_backend))
    return routes


def _retrieving_route(features: Features, condition: str, branch: str, top_k: int, mode: str, grader: str) -> dict[str, Any]:
    # `query` goes to retrieval itself: it arrives only on a retrieving branch, so retrieval never
    # runs when the route answers without sources; `branch` feeds the embedder of that branch
    route = {
        "condition": condition, "output": ["{{ query }}", "{{ query }}", str(top_k), mode],
        "output_name": [branch, "query", "top_k", "answer_mode"], "output_type": [str, str, int, str],
    }
    if features.grading:  # the route's grader (a policy may cap a route at the no-LLM one)
        route["output"].append(grader)
        route["output_name"].append("grader_backend")
        route["output_type"].append(str)
    return route


def selector_policy(features: Features) -> dict[str, str]:
    """Without a router, the rules-read route → answer mode; SIMPLE questions still retrieve there, so
    they get the fact lookup's mode."""
    policy = {route: features.answer_mode_for(route) for route in features.route_policy}
    policy["SIMPLE"] = features.answer_mode_for("FACTUAL")
    return policy


def context_routes() -> list[dict[str, Any]]:
    """Documents go on to the answer only when there are any (a passthrough route keeps them Documents
    without the router's unsafe mode)."""
    return [
        {"condition": "{{ documents | length > 0 }}", "output": "documents", "output_passthrough": True, "output_name": "context", "output_type": list[Document]},
        {"condition": "{{ true }}", "output": "{{ documents | length }}", "output_name": "no_context", "output_type": int},
    ]

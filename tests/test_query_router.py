import pytest
from haystack import Pipeline
from haystack.components.generators.chat import MockChatGenerator

from ragkit.components.query_router import ROUTES, QueryRouter, route_by_rules
from ragkit.pipeline.trace import RagkitTracer


def failing_llm(messages):
    raise TimeoutError("llm took too long")


@pytest.mark.parametrize(
    "query, route",
    [
        ("hello!", "SIMPLE"),
        ("what is 12 * 7?", "SIMPLE"),
        ("Where was Nikola Tesla born?", "FACTUAL"),
        ("Why did Tesla's AC system win over DC?", "ANALYTICAL"),
        ("How does lru_cache differ from cache?", "COMPARISON"),
        ("Give me an overview of the Yuan dynasty", "SUMMARY"),
    ],
)
def test_rules(query, route):
    assert route_by_rules(query) == route
    assert QueryRouter(backend="rules").run(query=query)["route"] == route


def test_llm_backend_uses_the_constrained_label():
    router = QueryRouter(backend="llm", chat_generator=MockChatGenerator(responses="COMPARISON"))
    out = router.run(query="Rhine vs Amazon?")
    assert out["route"] == "COMPARISON" and "fallback" not in out["routing"]


def test_llm_reply_in_json_or_with_noise_is_still_parsed():
    assert QueryRouter(backend="llm", chat_generator=MockChatGenerator(responses='{"label": "summary"}')).run(query="x")["route"] == "SUMMARY"
    assert QueryRouter(backend="llm", chat_generator=MockChatGenerator(responses="Label: FACTUAL.")).run(query="x")["route"] == "FACTUAL"


@pytest.mark.parametrize("reply", ["I think it is probably a question", "FACTUAL or COMPARISON", ""])
def test_unparseable_reply_falls_back_to_rules_and_says_so(reply):
    router = QueryRouter(backend="llm", chat_generator=MockChatGenerator(responses=reply))
    out = router.run(query="Why did the Yuan dynasty fall?")
    assert out["route"] == "ANALYTICAL"  # the rules' answer, not a guess
    assert out["routing"]["fallback"].startswith("parse_failed")
    assert out["routing"]["fallback_route_from"] == "rules"


def test_llm_exception_falls_back_and_is_traced():
    router = QueryRouter(backend="llm", chat_generator=MockChatGenerator(response_fn=failing_llm))
    pipeline = Pipeline()
    pipeline.add_component("router", router)
    with RagkitTracer().collect() as trace:
        out = pipeline.run({"router": {"query": "Summarize the Rhine article"}})
    assert out["router"]["route"] == "SUMMARY"
    step = trace.step("router")
    assert step.llm_calls == 1 and step.decision["route"] == "SUMMARY"
    assert "llm_error: " in step.fallbacks[0] and "did not answer in time (TimeoutError" in step.fallbacks[0]


def test_round_trip_with_generator():
    router = QueryRouter(backend="llm", chat_generator=MockChatGenerator(responses="SIMPLE"))
    again = QueryRouter.from_dict(router.to_dict())
    assert again.backend == "llm" and again.run(query="hi")["route"] == "SIMPLE"
    rules = QueryRouter.from_dict(QueryRouter(backend="rules").to_dict())
    assert rules.backend == "rules" and rules.chat_generator is None


def test_bad_configuration_is_refused():
    with pytest.raises(ValueError):
        QueryRouter(backend="llm")
    with pytest.raises(ValueError):
        QueryRouter(backend="magic")
    with pytest.raises(ValueError):
        QueryRouter(prototypes={"SIMPLE": ["hi"]})


@pytest.mark.integration
def test_embedding_backend_routes_by_prototype():
    router = QueryRouter(backend="embedding")
    router.warm_up()
    out = router.run(query="Summarise the article about the Rhine")
    assert out["route"] == "SUMMARY" and set(out["routing"]["scores"]) == set(ROUTES)
    assert router.run(query="good morning!")["route"] == "SIMPLE"

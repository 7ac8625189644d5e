"""bench/scale.py's measurement keeps what a server answered before it stopped, and never turns a dead
client into a throughput figure (a Milvus Lite 1M run once recorded 0.0 q/s that way)."""

import threading
import types

import pytest

from conftest import bench_module


@pytest.fixture(scope="module")
def scale():
    with bench_module("scale") as module:
        yield module


class ServerThatStops:
    """Answers ``answers`` searches, then fails as a gone server does."""

    def __init__(self, answers: int):
        self.left, self.lock = answers, threading.Lock()

    def retrieve(self, text, top_k, mode, query_embedding, filters=None):
        with self.lock:
            self.left -= 1
            if self.left < 0:
                raise ConnectionError("Fail connecting to server on 127.0.0.1:19530")
        return types.SimpleNamespace(documents=[types.SimpleNamespace(id=f"c{i:07d}") for i in range(10)])


QUESTIONS = [(f"question {i}", None) for i in range(2)]
EXACT = [{f"c{i:07d}" for i in range(10)}] * 2


def test_a_client_that_dies_in_the_throughput_stage_fails_the_measure_and_the_finished_stages_are_kept(scale):
    measured = {}
    with pytest.raises(RuntimeError, match="clients failed: ConnectionError"):
        scale.measure(None, ServerThatStops(answers=2 * 3 + 2 * 2), QUESTIONS, None, EXACT, into=measured)
    assert measured["stage"] == "search: 4 clients" and "hybrid_qps_4_clients" not in measured
    assert measured["dense_recall@10"] == 1.0 and measured["searches"] == {"unfiltered": 2, "filtered_10%": 2, "filtered_1%": 2}
    assert set(measured["latency_ms"]) == {"dense", "sparse", "hybrid"} and set(measured["filtered"]) == {"10%", "1%"}


def test_a_server_that_stops_mid_way_leaves_the_stage_it_was_in(scale):
    measured = {}
    with pytest.raises(ConnectionError):
        scale.measure(None, ServerThatStops(answers=2 * 3 + 1), QUESTIONS, None, EXACT, into=measured)
    assert measured["stage"] == "search: filtered 10%" and "latency_ms" in measured and measured["filtered"] == {}

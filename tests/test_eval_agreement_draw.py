"""bench/eval_agreement.py's real questions: a larger set keeps the committed runs' draw and adds to it."""

from pathlib import Path

import pytest

from conftest import bench_module

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def agreement():
    with bench_module("eval_agreement") as module:
        yield module


@pytest.mark.parametrize("set_name", ["squad_dev", "new_wiki"])
def test_a_larger_real_set_holds_the_committed_one_and_adds_other_questions_of_the_same_paragraphs(agreement, set_name):
    from ragkit.eval.testset import load_testset

    _, chosen = agreement.sampled_paragraphs(set_name, 300)
    committed = [item.id for item in load_testset(ROOT / "bench" / "results" / "eval_agreement" / f"{set_name}.real.jsonl")[0]]
    assert [item.id for item in agreement.real_questions(set_name, set(chosen), 120)] == committed  # the runs' own draw
    larger = agreement.real_questions(set_name, set(chosen), 480)
    assert [item.id for item in larger[:120]] == committed
    assert len({item.id for item in larger}) == 480
    assert all(item.chunks[0] in set(chosen) for item in larger)
    assert [item.id for item in agreement.real_questions(set_name, set(chosen), 480)] == [item.id for item in larger]  # seeded

"""The public question corpus (benchmarks/questions/questions.json) as a regression test.

Each question is a thread's real outcome (a start-up log, an error, a measurement); the
answers are servefit's own commands, run in process. ``RIGHT_AT_LEAST`` is the score of the
commit that last improved it: an answer that turns wrong fails here, and a fix that turns one
right raises it (``python benchmarks/questions.py --write`` rewrites docs/questions.md).
"""

from __future__ import annotations

from functools import cache

from benchmarks.questions import load_questions, score

RIGHT_AT_LEAST = 37


@cache
def _answers():
    questions = load_questions()
    return questions, score(questions)


def test_the_corpus_is_sourced_and_checkable():
    questions, _ = _answers()
    assert len(questions) >= 40
    for q in questions:
        assert q["source"].startswith("https://"), q["id"]
        assert q["outcome_quote"].strip(), q["id"]
        assert q["argv"][0] == "plan", q["id"]
        assert q["expect"]["kind"] in {
            "fits",
            "does_not_fit",
            "number",
            "max_model_len_at_most",
            "faster",
        }, q["id"]


def test_no_question_crashes_servefit():
    _, answers = _answers()
    assert [a for a in answers if a.outcome == "crash"] == []


def test_what_servefit_cannot_express_is_never_counted_right():
    questions, answers = _answers()
    for q, a in zip(questions, answers, strict=True):
        if q.get("cannot"):
            assert a.outcome == "cannot", q["id"]


def test_the_score_does_not_fall():
    _, answers = _answers()
    right = sum(a.outcome == "right" for a in answers)
    wrong = [f"{a.id}: {a.detail}" for a in answers if a.outcome == "wrong"]
    assert right >= RIGHT_AT_LEAST, "\n".join(wrong)

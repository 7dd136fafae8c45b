"""The eval scorers and intervals (core/evals.py): goldens from published worked examples
and hand calculations written out here."""

from __future__ import annotations

import math

import pytest

from servefit.core.bootstrap import Interval, bootstrap, mean
from servefit.core.evals import (
    EvalItem,
    beyond_noise,
    extract_choice,
    extract_number,
    is_correct,
    normalise,
    paired_difference,
    parse_number,
    unpaired_difference,
    wilson_interval,
)
from servefit.errors import InvalidArgumentError


def item(reference: str, scorer: str = "exact", choices: tuple[str, ...] = ()) -> EvalItem:
    return EvalItem(
        item_id="x", task="t", prompt="p", reference=reference, scorer=scorer, choices=choices
    )


# --- scorers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "number"),
    [
        # GSM8K's solutions end "#### N": the strict match wins over any later number
        ("She has 3 + 4 = 7 apples.\n#### 7\n\nQuestion: 12", 7.0),
        ("#### 1,000", 1000.0),
        ("#### $18", 18.0),
        # without "####", the last number (the harness's flexible extract)
        ("He pays 5 dollars, then 12 more: 17.", 17.0),
        ("The answer is -3.5", -3.5),
        ("no digits here", None),
    ],
)
def test_extract_number(answer, number):
    assert extract_number(answer) == number


@pytest.mark.parametrize(
    ("text", "number"),
    [
        *[("7.", 7.0), (".5", 0.5), ("1,000", 1000.0), ("$12", 12.0), ("18.50", 18.5)],
        *[("inf", None), ("nan", None), ("seven", None), ("", None)],
    ],
)
def test_parse_number_reads_decimal_texts_only(text, number):
    assert parse_number(text) == number


def test_number_scorer_drops_commas_currency_and_a_full_stop():
    assert is_correct(item("1,000", "number"), " The total is $1000.")
    assert is_correct(item("72", "number"), "48 + 24 = 72\n#### 72")
    assert not is_correct(item("72", "number"), "#### 71")
    assert not is_correct(item("72", "number"), "seventy-two")  # no number: wrong, not an error
    # the strict match decides, even when the answer ends on another number
    assert not is_correct(item("5", "number"), "#### 4\nQuestion: what is 5?")


@pytest.mark.parametrize(
    ("answer", "letter"),
    [
        (" B", "B"),
        ("(C) because it is even", "C"),
        ("A. Paris", "A"),
        ("The answer is (D).", "D"),
        ("the answer is b", "B"),
        ("Because all the others are odd", None),  # "B" of a word is not a choice
        (" E", None),  # only four choices
    ],
)
def test_extract_choice(answer, letter):
    assert extract_choice(answer, "ABCD") == letter


def test_choice_scorer_reads_the_letter_not_the_text():
    pick = item("B", "choice", ("red", "blue"))
    assert is_correct(pick, "(B) because it is blue")  # the exact text is not "B"
    assert not is_correct(pick, "(A) because it is red")
    assert not is_correct(pick, "blue")  # a choice's text is not its letter


def test_exact_scorer_normalises_case_spaces_quotes_and_a_full_stop():
    assert normalise('  "Paris."  ') == "paris"
    assert normalise("New   York\n City") == "new york city"
    assert normalise("Xerox") == "xerox"  # only quotes are stripped from the ends
    assert is_correct(item("Paris"), " paris.")
    assert is_correct(item("New  York"), "new york")
    assert not is_correct(item("Paris"), "Paris, France")


def test_an_item_refuses_what_cannot_be_scored():
    with pytest.raises(InvalidArgumentError) as err:
        item("E", "choice", ("a", "b"))
    assert str(err.value) == "item x: the answer 'E' is not one of its choices' letters (A, B)"
    with pytest.raises(InvalidArgumentError, match=r"letters \(no choices given\)"):
        item("A", "choice")
    with pytest.raises(InvalidArgumentError, match="the reference 'seven' is not a number"):
        item("seven", "number")
    with pytest.raises(InvalidArgumentError) as err:
        item("x", "regex")
    assert str(err.value) == "item x: scorer 'regex', one of exact, number, choice"


# --- intervals -------------------------------------------------------------------------


def test_wilson_interval_hand_calculation():
    # 8 right of 10 at 95 %, z = 1.959964: z^2/n = 0.3841459
    # centre = (0.8 + 0.3841459 / 2) / 1.3841459 = 0.716751
    # half = 1.959964 * sqrt(0.8 * 0.2 / 10 + 0.3841459 / 40) / 1.3841459 = 0.226350
    # -> [0.4902, 0.9433], the interval Wilson's method gives for 8/10 in the literature
    w = wilson_interval(8, 10)
    assert w.point == 0.8 and w.confidence == 0.95
    assert w.low == pytest.approx(0.4902, abs=1e-4)
    assert w.high == pytest.approx(0.9433, abs=1e-4)


def test_wilson_interval_at_the_bounds_stays_in_zero_one():
    # 0 of 10: low is 0; high = z^2/n / (1 + z^2/n) = 0.3841459 / 1.3841459 = 0.2775
    zero = wilson_interval(0, 10)
    assert zero.low == 0.0 and zero.high == pytest.approx(0.2775, abs=1e-4)
    full = wilson_interval(10, 10)
    assert full.high == 1.0 and full.low == pytest.approx(1 - 0.2775, abs=1e-4)
    # where the float sum of centre and half falls short of 1 (0.9999999999999999)
    assert wilson_interval(13, 13).high == 1.0
    # one item: 1 right of 1 at 95 %: low = 1 / (1 + 3.841459) = 0.2065
    assert wilson_interval(1, 1).low == pytest.approx(0.2065, abs=1e-4)
    with pytest.raises(InvalidArgumentError, match=r"scored > 0, got 0/0"):
        wilson_interval(0, 0)
    with pytest.raises(InvalidArgumentError, match="got 11/10"):
        wilson_interval(11, 10)


@pytest.mark.parametrize("confidence", [0.0, 1.0, 1.5, -0.1])
def test_a_confidence_outside_zero_one_is_refused(confidence):
    with pytest.raises(
        InvalidArgumentError, match=f"confidence must be in \\(0, 1\\), got {confidence}"
    ):
        wilson_interval(5, 10, confidence)


def test_a_lower_confidence_is_a_narrower_interval():
    # 8/10 at 80 %, z = 1.281552: z^2/n = 0.1642374; centre = 0.8821187 / 1.1642374 = 0.757680
    # half = 1.281552 * sqrt(0.016 + 0.0041059) / 1.1642374 = 0.156081 -> [0.6016, 0.9138]
    w = wilson_interval(8, 10, 0.8)
    assert (w.low, w.high) == (pytest.approx(0.6016, abs=1e-4), pytest.approx(0.9138, abs=1e-4))
    d = unpaired_difference(base=(48, 80), candidate=(56, 70), confidence=0.8)
    # Newcombe's method 10 from the two 80 % Wilson intervals (each checked above)
    a, b = wilson_interval(48, 80, 0.8), wilson_interval(56, 70, 0.8)
    assert d.low == pytest.approx(0.2 - math.hypot(b.point - b.low, a.high - a.point))
    assert d.high == pytest.approx(0.2 + math.hypot(b.high - b.point, a.point - a.low))
    wide = unpaired_difference(base=(48, 80), candidate=(56, 70))
    assert wide.low < d.low < d.high < wide.high and d.confidence == 0.8


def test_wilson_interval_narrows_as_items_grow():
    widths = [wilson_interval(n // 2, n).high - wilson_interval(n // 2, n).low for n in (10, 100)]
    # about 1 / sqrt(n): ten times the items, a third of the width (0.56 -> 0.19)
    assert widths[1] < widths[0] / 2.5


def test_newcombe_difference_published_example():
    # Newcombe (1998), "Interval estimation for the difference between independent
    # proportions", Statistics in Medicine 17:873-890, Table II example (a): 56/70 - 48/80,
    # method 10 (score, no continuity correction): 0.0524 to 0.3339
    d = unpaired_difference(base=(48, 80), candidate=(56, 70))
    assert d.point == pytest.approx(56 / 70 - 48 / 80)
    assert d.low == pytest.approx(0.0524, abs=1e-4)
    assert d.high == pytest.approx(0.3339, abs=1e-4)
    assert beyond_noise(d) and d.confidence == 0.95


def test_paired_difference_counts_only_the_items_that_changed():
    # 40 items: 30 both right, 10 right only in the base -> the candidate is 25 points worse
    pairs = [(True, True)] * 30 + [(True, False)] * 10
    d = paired_difference(pairs)
    assert d.point == pytest.approx(-0.25)
    assert d.high < 0 and beyond_noise(d)
    # the same 10 changes among many unchanged items: smaller, still beyond the noise
    assert paired_difference([(True, True)] * 300 + [(True, False)] * 10).high < 0
    # one change each way is no change at all
    same = paired_difference([(True, True)] * 20 + [(True, False), (False, True)])
    assert same.point == 0 and not beyond_noise(same)


def test_paired_is_tighter_than_unpaired_on_the_same_answers():
    # both runs right on the same 30 of 40 items, the candidate also on 4 more: the paired
    # interval sees only those 4 changes; the unpaired one sees two independent samples
    # (here 0.175 wide against 0.349)
    pairs = [(True, True)] * 30 + [(False, True)] * 4 + [(False, False)] * 6
    paired = paired_difference(pairs)
    unpaired = unpaired_difference(base=(30, 40), candidate=(34, 40))
    assert math.isclose(paired.point, unpaired.point)
    assert paired.high - paired.low < 0.6 * (unpaired.high - unpaired.low)
    assert beyond_noise(paired) and not beyond_noise(unpaired)


def test_paired_difference_is_the_seeded_bootstrap_of_the_differences():
    # 60 items, so the interval's ends move with the draws (steps of 1/60)
    pairs = [(True, False), (False, False), (True, True), (False, True), (True, False)] * 12
    diffs = [-1.0, 0.0, 0.0, 1.0, -1.0] * 12
    given = {"confidence": 0.9, "resamples": 150, "seed": 3}
    assert paired_difference(pairs, **given) != paired_difference(pairs, confidence=0.9, seed=3)
    assert paired_difference(pairs, **given) != paired_difference(pairs, **{**given, "seed": 4})
    assert paired_difference(pairs, **given) == bootstrap([diffs], mean, **given)
    assert paired_difference(pairs) == bootstrap([diffs], mean, seed=0)  # the default seed
    with pytest.raises(InvalidArgumentError) as err:
        paired_difference([])
    assert str(err.value) == "no item was scored by both runs: nothing to compare"


@pytest.mark.parametrize(
    ("low", "high", "beyond"),
    [(0.01, 0.2, True), (0.0, 0.2, False), (-0.2, 0.0, False), (-0.2, -0.01, True)],
)
def test_beyond_noise_is_an_interval_that_leaves_out_zero(low, high, beyond):
    interval = Interval(point=(low + high) / 2, low=low, high=high, confidence=0.95)
    assert beyond_noise(interval) is beyond

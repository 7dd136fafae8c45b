"""Quality evals: how an answer is scored, and how sure an accuracy (or a change in it) is.

An item is a prompt and its reference answer with the rule that compares them:

* ``exact``: the answer, normalised (case, surrounding whitespace and quotes, one trailing
  full stop, runs of spaces), equals the reference normalised the same way;
* ``number``: GSM8K's rule as lm-evaluation-harness applies it: the number after ``####``
  when the answer has one (its "strict-match"), else the last number in the answer (its
  "flexible-extract"), equal to the reference's number once commas and a currency sign are
  dropped (``1,000`` = ``1000`` = ``$1000.`` = ``1000.0``);
* ``choice``: a multiple-choice letter: the one after "answer is", else the answer's first
  letter among the item's choices (``B``, ``(B)``, ``B.``, ``B)``).

An accuracy is a binomial proportion: its interval is Wilson's score interval, right at the
small counts evals have where the normal approximation is not. Two runs over the same items
are compared item by item (a paired bootstrap of the per-item differences, so the items
both got right or wrong add no noise); two runs over different items by Newcombe's hybrid
score interval (his method 10), built from the two Wilson intervals. A difference is beyond
the noise when its interval leaves out zero.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal

from servefit.core.bootstrap import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, Interval, bootstrap, mean
from servefit.errors import InvalidArgumentError

Scorer = Literal["exact", "number", "choice"]
SCORERS: tuple[Scorer, ...] = ("exact", "number", "choice")
CHOICE_LETTERS = "ABCDEFGHIJ"

_NUMBER = re.compile(r"-?[$]?\d[\d,]*(?:\.\d+)?")
_STRICT = re.compile(r"####\s*(-?[$]?\d[\d,]*(?:\.\d+)?)")
_ANSWER_IS = re.compile(r"answer is:?\s*\(?([A-J])\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalItem:
    """One question: what is sent, what a right answer is, and how they are compared."""

    item_id: str
    task: str
    prompt: str
    reference: str
    scorer: Scorer = "exact"
    choices: tuple[str, ...] = ()  # ``choice``: the options, lettered A, B, ...
    stop: tuple[str, ...] = ()  # where generation stops (sent to the server)

    def __post_init__(self) -> None:
        if self.scorer not in SCORERS:
            raise InvalidArgumentError(
                f"item {self.item_id}: scorer {self.scorer!r}, one of {', '.join(SCORERS)}"
            )
        if self.scorer == "choice" and self.reference not in self.letters:
            raise InvalidArgumentError(
                f"item {self.item_id}: the answer {self.reference!r} is not one of its "
                f"choices' letters ({', '.join(self.letters) or 'no choices given'})"
            )
        if self.scorer == "number" and parse_number(self.reference) is None:
            raise InvalidArgumentError(
                f"item {self.item_id}: the reference {self.reference!r} is not a number"
            )

    @property
    def letters(self) -> str:
        return CHOICE_LETTERS[: len(self.choices)]


def normalise(text: str) -> str:
    """Case, surrounding whitespace and quotes, a trailing full stop and runs of spaces
    do not make an exact answer wrong."""
    text = " ".join(text.split()).strip().strip("\"'`").strip()
    return text.removesuffix(".").strip().casefold()


def parse_number(text: str) -> float | None:
    """A number as a dataset writes it (``1,000``, ``$12``, ``-3.5``, ``7.``), or None."""
    cleaned = text.strip().replace(",", "").replace("$", "")  # float() reads "7." as 7
    try:
        value = float(cleaned)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def extract_number(answer: str) -> float | None:
    """The answer's number: after ``####`` if it has one, else its last number."""
    strict = _STRICT.search(answer)
    if strict:
        return parse_number(strict.group(1))
    found = _NUMBER.findall(answer)
    return parse_number(found[-1]) if found else None


def extract_choice(answer: str, letters: str) -> str | None:
    """The chosen letter: the one after "answer is", else the first of ``letters`` that
    stands alone at the answer's start (``B``, ``(B)``, ``B.``, ``B)``, ``B:``)."""
    said = _ANSWER_IS.search(answer)
    if said and said.group(1).upper() in letters:
        return said.group(1).upper()
    first = re.match(r"\s*\(?([A-J])(?:[).:,]|\s|$)", answer)
    if first and first.group(1) in letters:
        return first.group(1)
    return None


def is_correct(item: EvalItem, answer: str) -> bool:
    """Whether ``answer`` is right by the item's scorer."""
    if item.scorer == "number":
        got = extract_number(answer)
        want = parse_number(item.reference)
        return got is not None and got == want  # decimal texts: "18.50" and "18.5" are equal
    if item.scorer == "choice":
        return extract_choice(answer, item.letters) == item.reference
    return normalise(answer) == normalise(item.reference)


def _z(confidence: float) -> float:
    if not 0 < confidence < 1:
        raise InvalidArgumentError(f"confidence must be in (0, 1), got {confidence}")
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def wilson_interval(correct: int, scored: int, confidence: float = DEFAULT_CONFIDENCE) -> Interval:
    """The accuracy ``correct / scored`` and its Wilson score interval."""
    if scored <= 0 or not 0 <= correct <= scored:
        raise InvalidArgumentError(
            f"an accuracy needs 0 <= correct <= scored and scored > 0, got {correct}/{scored}"
        )
    z = _z(confidence)
    p = correct / scored
    z2n = z * z / scored
    centre = (p + z2n / 2) / (1 + z2n)
    half = z * math.sqrt(p * (1 - p) / scored + z2n / (4 * scored)) / (1 + z2n)
    # at 0 (or all) right the bound is exactly 0 (or 1), where the float sum leaves a residue
    # either side (13 of 13: 0.9999999999999999; 9 of 9: 1.0000000000000002); elsewhere the
    # bounds lie strictly inside [0, 1]
    low = 0.0 if correct == 0 else centre - half
    high = 1.0 if correct == scored else centre + half
    return Interval(point=p, low=low, high=high, confidence=confidence)


def unpaired_difference(
    base: tuple[int, int], candidate: tuple[int, int], confidence: float = DEFAULT_CONFIDENCE
) -> Interval:
    """``candidate - base`` of two accuracies over different items, each given as
    ``(correct, scored)``: Newcombe's hybrid score interval (1998, method 10)."""
    a = wilson_interval(*base, confidence)
    b = wilson_interval(*candidate, confidence)
    d = b.point - a.point
    low = d - math.sqrt((b.point - b.low) ** 2 + (a.high - a.point) ** 2)
    high = d + math.sqrt((b.high - b.point) ** 2 + (a.point - a.low) ** 2)
    return Interval(point=d, low=low, high=high, confidence=confidence)


def paired_difference(
    pairs: Sequence[tuple[bool, bool]],
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> Interval:
    """``candidate - base`` accuracy over the same items, each pair ``(base, candidate)``
    right or wrong: the bootstrap of the per-item differences (seeded, reproducible)."""
    if not pairs:
        raise InvalidArgumentError("no item was scored by both runs: nothing to compare")
    diffs = [float(c) - float(b) for b, c in pairs]
    return bootstrap([diffs], mean, confidence=confidence, resamples=resamples, seed=seed)


def beyond_noise(interval: Interval) -> bool:
    """A difference whose interval leaves out zero."""
    return interval.low > 0 or interval.high < 0

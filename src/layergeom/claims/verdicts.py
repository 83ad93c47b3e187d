"""The verdict rules of the claims table (docs/methods.md, "Claims"): numbers in, a verdict and its reason out.

Every rule reads a statistic with its interval against a reference, and says ``holds`` only when the whole
interval lies on the claimed side of it: an interval that contains the threshold, or two intervals that overlap,
give ``inconclusive`` (touching counts as overlapping, so a value exactly at a threshold is never a verdict).
``reversed`` is the opposite claim holding with the same strictness; ``fails`` is a claim that is clearly not
met where its opposite is not shown either (a correlation clearly below the claimed 0.5 but not negative, a
change from the null model in the claimed direction that leaves the trained model without the effect).
A missing estimate is ``not_applicable``, a missing interval ``inconclusive``. Pure functions of floats.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

HOLDS, FAILS, REVERSED, INCONCLUSIVE, NOT_APPLICABLE = "holds", "fails", "reversed", "inconclusive", "not_applicable"
#: the verdicts, from the claim met to no verdict at all (the order of the figure's legend)
VERDICTS = (HOLDS, FAILS, REVERSED, INCONCLUSIVE, NOT_APPLICABLE)


@dataclass(frozen=True)
class Verdict:
    verdict: str
    reason: str  # one line


def num(x: float) -> str:
    """A number in a reason: 4 significant digits, a true minus sign."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "nan"
    return f"{float(x) + 0.0:.4g}".replace("-", "−")


def interval(lo: float, hi: float) -> str:
    return f"[{num(lo)}, {num(hi)}]"


def _finite(*xs) -> bool:
    return all(x is not None and math.isfinite(x) for x in xs)


def not_applicable(reason: str) -> Verdict:
    return Verdict(NOT_APPLICABLE, reason)


def threshold(est: float, lo: float, hi: float, ref: float, side: int, *, opposite: float | None = None,
              what: str = "the statistic") -> Verdict:  # fmt: skip
    """Claim ``est > ref`` (side +1) or ``est < ref`` (side −1), read on the interval [lo, hi].

    holds: the interval lies strictly beyond ref on the claimed side; inconclusive: it contains ref (ends
    included); on the other side: reversed where it also lies strictly beyond `opposite` (the value past which
    the opposite claim holds; None: no opposite claim), else fails."""
    if not _finite(est):
        return not_applicable(f"{what} is undefined (nan)")
    if not _finite(lo, hi):
        return Verdict(INCONCLUSIVE, f"{what} {num(est)} has no interval")
    rel = ">" if side > 0 else "<"
    ci = interval(lo, hi)
    near, far = (lo, hi) if side > 0 else (hi, lo)  # the interval's end nearest to / farthest from the claim
    if side * (near - ref) > 0:
        return Verdict(HOLDS, f"{what} {num(est)} {ci} {rel} {num(ref)}")
    if side * (far - ref) >= 0:
        return Verdict(INCONCLUSIVE, f"the interval {ci} of {what} {num(est)} contains {num(ref)}")
    if opposite is not None and side * (far - opposite) < 0:
        return Verdict(REVERSED, f"{what} {num(est)} {ci} {'<' if side > 0 else '>'} {num(opposite)}")
    return Verdict(FAILS, f"{what} {num(est)} {ci} is not {rel} {num(ref)}")


def apart(a: tuple[float, float, float], b: tuple[float, float, float], side: int, *, names=("it", "the reference")
          ) -> Verdict:  # fmt: skip
    """Claim ``a > b`` (side +1) or ``a < b`` (side −1), each an (estimate, ci_low, ci_high): holds when the
    intervals are apart in the claimed order, reversed when apart in the other, inconclusive when they overlap
    (or touch)."""
    (ea, la, ha), (eb, lb, hb) = a, b
    if not _finite(ea, eb):
        return not_applicable(f"{names[0] if not _finite(ea) else names[1]} is undefined (nan)")
    if not _finite(la, ha, lb, hb):
        return Verdict(INCONCLUSIVE, f"{names[0]} {num(ea)} against {names[1]} {num(eb)}: no interval")
    text = f"{names[0]} {num(ea)} {interval(la, ha)}, {names[1]} {num(eb)} {interval(lb, hb)}"
    if (side > 0 and la > hb) or (side < 0 and ha < lb):
        return Verdict(HOLDS, f"{text}: apart, {'above' if side > 0 else 'below'}")
    if (side > 0 and ha < lb) or (side < 0 and la > hb):
        return Verdict(REVERSED, f"{text}: apart, {'below' if side > 0 else 'above'}")
    return Verdict(INCONCLUSIVE, f"{text}: the intervals overlap")


def learned(trained: tuple[float, float, float], null: tuple[float, float, float], side: int, *, zero: float = 0.0,
            names=("trained", "init")) -> Verdict:  # fmt: skip
    """Claim that training made the effect: the trained checkpoint's statistic beyond the null model's (intervals
    apart, ``apart``) in the claimed direction, **and** beyond `zero` itself (``threshold``). Apart in the claimed
    direction without the trained model showing the effect: fails; apart the other way: reversed."""
    moved = apart(trained, null, side, names=names)
    if moved.verdict != HOLDS:
        return moved
    own = threshold(*trained, zero, side, opposite=zero, what=names[0])
    if own.verdict == HOLDS:
        return Verdict(HOLDS, moved.reason + f", and {names[0]} is {'>' if side > 0 else '<'} {num(zero)}")
    return Verdict(FAILS, f"{moved.reason}, but {names[0]} itself is not {'>' if side > 0 else '<'} {num(zero)}")


def none_significant(count: int, of: int, what: str = "FDR-significant layers") -> Verdict:
    """Claim of no discovery: holds at a count of 0, fails otherwise (the test controls its false discoveries)."""
    if count == 0:
        return Verdict(HOLDS, f"0 of {of} {what}")
    return Verdict(FAILS, f"{count} of {of} {what}")


def count_grows(last: int, first: int, names=("last", "first")) -> Verdict:
    """Claim that a count grows from `first` to `last`: holds when larger, reversed when smaller, fails when equal."""
    text = f"{names[1]} {first} → {names[0]} {last}"
    if last > first:
        return Verdict(HOLDS, text)
    if last < first:
        return Verdict(REVERSED, text)
    return Verdict(FAILS, f"{text}: no growth")


def schur_raises(
    a0: tuple[float, float, float], orders: tuple[float, float], a1: tuple[float, float, float]
) -> Verdict:
    """Claim that Schur surgery at α = 0 raises the full-depth cumulative erank above α = 1's (J̄ itself), over
    every eigenvalue order: holds when α = 0's interval at the canonical order lies above α = 1's interval **and**
    the smallest erank over the random orders exceeds α = 1's upper end; reversed when both lie below (the largest
    order under α = 1's lower end); inconclusive otherwise, or without an order range."""
    (omin, omax), (_, l1, h1) = orders, a1
    canonical = apart(a0, a1, +1, names=("α = 0", "α = 1"))
    if canonical.verdict == NOT_APPLICABLE:
        return canonical
    if not _finite(omin, omax):
        return Verdict(INCONCLUSIVE, f"{canonical.reason}; no eigenvalue-order range at α = 0 to hold it over")
    if not _finite(l1, h1):
        return Verdict(INCONCLUSIVE, canonical.reason)
    span = f"orders {num(omin)}–{num(omax)}"
    if canonical.verdict == HOLDS and omin > h1:
        return Verdict(HOLDS, f"{canonical.reason}; {span}, all above")
    if canonical.verdict == REVERSED and omax < l1:
        return Verdict(REVERSED, f"{canonical.reason}; {span}, all below")
    if canonical.verdict == INCONCLUSIVE:
        return Verdict(INCONCLUSIVE, f"{canonical.reason}; {span}")
    return Verdict(INCONCLUSIVE, f"{canonical.reason}, but {span} reach α = 1's interval {interval(l1, h1)}")


def sign_follows(diff: tuple[float, float, float], pos: tuple[float, float, float], neg: tuple[float, float, float],
                 names=("near-symmetric", "non-normal")) -> Verdict:  # fmt: skip
    """Claim that a correlation is positive in one group and negative in the other: holds when the difference
    (first − second) lies above 0 and the first group's mean lies above 0 and the second's below; fails when the
    difference is positive but a group's sign is not shown; reversed when the difference lies below 0."""
    d = threshold(*diff, 0.0, +1, opposite=0.0, what=f"mean ρ {names[0]} − {names[1]}")
    if d.verdict != HOLDS:
        return d
    p = threshold(*pos, 0.0, +1, what=f"{names[0]} mean ρ")
    n = threshold(*neg, 0.0, -1, what=f"{names[1]} mean ρ")
    if p.verdict == HOLDS and n.verdict == HOLDS:
        return Verdict(HOLDS, f"{d.reason}; {p.reason}; {n.reason}")
    return Verdict(FAILS, f"{d.reason}, but {(n if p.verdict == HOLDS else p).reason}")

"""Pearson's chi-squared test of homogeneity, for the tests that show
speculative sampling keeps plain sampling's token distribution (the lookup
draft on the host firmware, tests/host/test_speculate_distribution.py; a
draft model in the reference, tests/unit/test_speculate_draft_distribution.py)."""
from __future__ import annotations

import math
from collections import Counter

ALPHA_Z = 3.0902  # the standard normal's upper 0.001 quantile: ALPHA = 0.001
MIN_EXPECTED = 5  # categories expected fewer times in either sample are pooled into one


def chi2_critical(df: int, z: float = ALPHA_Z) -> float:
    """The chi-squared distribution's upper quantile for df degrees of freedom (Wilson and Hilferty's
    cube-root normal approximation, within 1% of the exact value for df >= 3)."""
    h = 2.0 / (9.0 * df)
    return df * (1.0 - h + z * math.sqrt(h)) ** 3


def chi2_homogeneity(a: Counter, b: Counter) -> tuple[float, int]:
    """Pearson's statistic and degrees of freedom for "a and b are samples of one distribution"."""
    na, nb = sum(a.values()), sum(b.values())
    n = na + nb
    cells, rest = [], [0, 0]
    for c in sorted(set(a) | set(b), key=str):
        p = (a[c] + b[c]) / n
        if min(na, nb) * p >= MIN_EXPECTED:
            cells.append((a[c], b[c]))
        else:
            rest[0] += a[c]
            rest[1] += b[c]
    if sum(rest):
        cells.append(tuple(rest))
    stat = 0.0
    for ca, cb in cells:
        p = (ca + cb) / n
        stat += (ca - na * p) ** 2 / (na * p) + (cb - nb * p) ** 2 / (nb * p)
    return stat, len(cells) - 1


def position_statistics(a: list[list[int]], b: list[list[int]], n_new: int) -> list[tuple[str, float, int]]:
    """(what, statistic, df) for each generated position after the first (the prompt's pass samples it plainly
    in both), and for the pair of the next two, between two sets of generations."""
    out = []
    for t in range(1, n_new):
        out.append((f"token {t}", *chi2_homogeneity(Counter(g[t] for g in a if len(g) > t),
                                                     Counter(g[t] for g in b if len(g) > t))))
    pair = chi2_homogeneity(Counter(tuple(g[1:3]) for g in a if len(g) > 2), Counter(tuple(g[1:3]) for g in b
                                                                                      if len(g) > 2))
    return out + [("tokens 1-2", *pair)]

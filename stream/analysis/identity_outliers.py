"""Which photos of a source set show the same person: the views whose identity embeddings
agree, and the outliers to leave out.

The rule, for n embeddings and the embedder's same-person threshold (dlib 0.6, ArcFace 1.2):
the medoid is the view with the most others within the threshold (ties: the smallest median
distance to the others); the kept views are the medoid and those within the threshold of it.
A consistent set must be a strict majority of the views: two photos that disagree, or two
pairs of two people, leave no way to tell which is the source, and are an error.

The medoid rather than the mean: a mean embedding is pulled towards the outliers it is meant
to find, and with three views and one outlier the mean of all three may sit within the
threshold of every one of them.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Embedding = npt.NDArray[np.float32]


class InconsistentViews(ValueError):
    """No majority of the views shows one person."""


@dataclass(frozen=True)
class Agreement:
    """The views kept (indices, in their order), and each left out with its distance from the
    medoid."""

    kept: tuple[int, ...]
    dropped: tuple[tuple[int, float], ...]
    medoid: int


def agreeing_views(embeddings: Sequence[Embedding], distance: Callable[[Embedding, Embedding], float],
                   threshold: float) -> Agreement:
    """The views of one person among `embeddings`; InconsistentViews when no strict majority
    agrees (the message gives the distances)."""
    n = len(embeddings)
    if n == 0:
        raise ValueError("no views to compare")
    if n == 1:
        return Agreement((0,), (), 0)
    d = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            d[i, j] = d[j, i] = distance(embeddings[i], embeddings[j])
    near = (d < threshold).sum(axis=1) - 1  # the diagonal's own 0 is not a neighbour
    medians = [float(np.median(np.delete(d[i], i))) for i in range(n)]
    medoid = min(range(n), key=lambda i: (-int(near[i]), medians[i]))
    kept = tuple(j for j in range(n) if j == medoid or d[medoid, j] < threshold)
    if 2 * len(kept) <= n:
        worst = max(float(np.delete(d[medoid], medoid).max()), 0.0)
        raise InconsistentViews(f"no majority of the {n} views shows one person (identity distances up to "
                                f"{worst:.2f}; the same person is under {threshold:g})")
    dropped = tuple((j, float(d[medoid, j])) for j in range(n) if j not in kept)
    return Agreement(kept, dropped, medoid)

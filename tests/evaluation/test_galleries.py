"""Gallery selection on a hand-made prediction whose confidence order is known, and the gallery figure."""

from __future__ import annotations

import pytest
import torch

from pyro_bnn.evaluation import least_confident, most_confident_mistakes
from pyro_bnn.plots import plot_gallery


def _probs() -> tuple[torch.Tensor, torch.Tensor]:
    """Two samples of six inputs over three classes; labels all 0.

    Mean confidences: 0.9 (right), 0.8 (wrong, class 1), 0.5 (wrong, class 2), 0.45 (right), 0.7 (wrong, class 1),
    0.95 (right). The samples of input 1 put 0.9 and 0.7 on class 1: spread 0.1.
    """
    mean_rows = [
        [0.9, 0.05, 0.05], [0.1, 0.8, 0.1], [0.25, 0.25, 0.5], [0.45, 0.3, 0.25], [0.2, 0.7, 0.1], [0.95, 0.03, 0.02],
    ]  # fmt: skip
    mean = torch.tensor(mean_rows, dtype=torch.float64)
    delta = torch.zeros_like(mean)
    delta[1] = torch.tensor([-0.05, 0.1, -0.05])
    return torch.stack([mean + delta, mean - delta]), torch.zeros(6, dtype=torch.long)


def test_most_confident_mistakes_come_first_and_only_mistakes_are_picked():
    probs, labels = _probs()
    picked = most_confident_mistakes(probs, labels, 5)
    assert [e.index for e in picked] == [1, 4, 2]  # the three mistakes, by confidence 0.8, 0.7, 0.5
    first = picked[0]
    assert (first.label, first.predicted) == (0, 1)
    assert first.probability == pytest.approx(0.8) and first.spread == pytest.approx(0.1)
    assert picked[1].spread == pytest.approx(0.0)


def test_least_confident_come_first_right_or_wrong():
    probs, labels = _probs()
    picked = least_confident(probs, labels, 3)
    assert [e.index for e in picked] == [3, 2, 4]  # 0.45, 0.5, 0.7
    assert [e.predicted for e in picked] == [0, 2, 1]
    with pytest.raises(ValueError, match="count must be an int >= 1, got 0"):
        least_confident(probs, labels, 0)


def test_the_gallery_draws_one_titled_panel_per_entry():
    probs, labels = _probs()
    images = torch.rand(6, 1, 8, 8)
    entries = most_confident_mistakes(probs, labels, 3)
    figure = plot_gallery(images, entries, class_names=["a", "b", "c"], columns=2, title="mistakes")
    titles = [ax.get_title() for ax in figure.axes if ax.get_title()]
    assert titles == ["a / b\np = 0.80 ± 0.10", "a / b\np = 0.70 ± 0.00", "a / c\np = 0.50 ± 0.00"]
    with pytest.raises(ValueError, match="entry index 9 is outside the 6 images"):
        plot_gallery(images, [entries[0].__class__(9, 0, 0, 0.5, 0.0)])
    with pytest.raises(ValueError, match="at least one entry"):
        plot_gallery(images, [])

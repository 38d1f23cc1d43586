"""The risk-coverage figure draws each curve's points and names its AURC."""

import pytest
import torch

from pyro_bnn.evaluation import ReferralScore, risk_coverage_curve
from pyro_bnn.plots import plot_risk_coverage, save_figure


def test_one_line_per_curve_with_its_points_and_aurc(tmp_path):
    generator = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(4, 30, 3, generator=generator), dim=-1)
    labels = torch.randint(0, 3, (30,), generator=generator)
    curves = [risk_coverage_curve(probs, labels, score=score) for score in ReferralScore]
    figure = plot_risk_coverage(curves, title="toy")
    lines = figure.axes[0].get_lines()
    assert len(lines) == len(curves)
    for line, curve in zip(lines, curves, strict=True):
        assert tuple(line.get_xdata()) == curve.coverage and tuple(line.get_ydata()) == curve.risk
        assert f"AURC {curve.aurc:.4f}" in line.get_label()
    assert save_figure(figure, tmp_path / "risk.png").stat().st_size > 0


def test_bad_arguments():
    with pytest.raises(ValueError, match="at least one"):
        plot_risk_coverage([])
    curve = risk_coverage_curve(torch.full((2, 2), 0.5), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="got 2 labels"):
        plot_risk_coverage([curve], labels=["a", "b"])

"""The fused weight draw with its closed-form KL equals the same computation written with autograd operations."""

import pytest
import torch
from torch.distributions import Normal, kl_divergence

from pyro_bnn.infer.fused_draw import NormalSegment, draw_with_normal_kl, normal_segments_kl

D = 40


def _segments(kind):
    """Priors over [0, D): one zero-mean scalar prior, a shifted one, per-scalar priors, and runs with gaps."""
    if kind == "one":
        return [NormalSegment(0, D, torch.tensor(0.0), torch.tensor(1.5), zero_loc=True)]
    if kind == "shifted":
        return [NormalSegment(0, D, torch.tensor(0.4), torch.tensor(0.7))]
    if kind == "per-scalar":
        return [NormalSegment(0, D, torch.linspace(-1, 1, D), torch.linspace(0.5, 2.0, D))]
    return [  # gaps at [10, 15) and [30, 40): their KL is someone else's (Monte Carlo)
        NormalSegment(0, 10, torch.tensor(0.0), torch.tensor(1.0), zero_loc=True),
        NormalSegment(15, 30, torch.linspace(0, 1, 15), torch.tensor(2.0)),
    ]


def _composed(loc, log_scale, eps, segments):
    weights = loc + log_scale.exp() * eps
    kl = sum(
        kl_divergence(Normal(loc[s.start : s.stop], log_scale[s.start : s.stop].exp()), Normal(s.loc, s.scale)).sum()
        for s in segments
    )
    return weights, kl


@pytest.mark.parametrize("kind", ["one", "shifted", "per-scalar", "gaps"])
@pytest.mark.parametrize("lead", [(), (3, 1)])
def test_values_and_gradients_equal_the_composed_computation(kind, lead):
    torch.manual_seed(0)
    segments = _segments(kind)
    loc = torch.randn(D, dtype=torch.float64, requires_grad=True)
    log_scale = (torch.rand(D, dtype=torch.float64) * 2 - 3).requires_grad_()
    eps = torch.randn(*lead, D, dtype=torch.float64)
    probe = torch.randn(*lead, D, dtype=torch.float64)  # a random linear functional of the weights
    segments = [NormalSegment(s.start, s.stop, s.loc.double(), s.scale.double(), s.zero_loc) for s in segments]
    results = []
    for fn in (draw_with_normal_kl, _composed):
        weights, kl = fn(loc, log_scale, eps, segments)
        objective = (probe * weights).sum() + 0.7 * kl
        results.append((weights, kl, *torch.autograd.grad(objective, [loc, log_scale])))
    for got, expected in zip(*results, strict=True):
        assert torch.allclose(got, expected, rtol=1e-10, atol=1e-12)


def test_gradcheck():
    torch.manual_seed(1)
    loc = torch.randn(D, dtype=torch.float64, requires_grad=True)
    log_scale = torch.randn(D, dtype=torch.float64).mul(0.3).requires_grad_()
    eps = torch.randn(2, 1, D, dtype=torch.float64)
    segments = [NormalSegment(s.start, s.stop, s.loc.double(), s.scale.double(), s.zero_loc) for s in _segments("gaps")]
    assert torch.autograd.gradcheck(lambda m, s: draw_with_normal_kl(m, s, eps, segments), (loc, log_scale))


def test_kl_without_the_draw_equals_torch_kl():
    torch.manual_seed(2)
    loc, log_scale = torch.randn(D), torch.randn(D) * 0.5 - 1
    for kind in ("one", "shifted", "per-scalar", "gaps"):
        segments = _segments(kind)
        expected = _composed(loc, log_scale, torch.zeros(D), segments)[1]
        assert normal_segments_kl(loc, log_scale, log_scale.exp(), segments).item() == pytest.approx(
            expected.item(), rel=1e-5
        )

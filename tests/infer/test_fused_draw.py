"""The fused weight draw with its closed-form KL equals the same computation written with autograd operations."""

import pytest
import torch
from pyro.distributions import constraints
from torch.distributions import Normal, kl_divergence

from pyro_bnn.guides.flat import FlatSite
from pyro_bnn.infer.fused_draw import (
    NormalSegment,
    draw_antithetic_with_normal_kl,
    draw_with_normal_kl,
    normal_segments_kl,
)

D = 40
# Three sites over [0, D): a 4 x 5 matrix, a vector of 12, a 2 x 4 matrix.
SITES = (
    FlatSite("a", 0, 20, torch.Size([4, 5]), 2, constraints.real),
    FlatSite("b", 20, 32, torch.Size([12]), 1, constraints.real),
    FlatSite("c", 32, 40, torch.Size([2, 4]), 2, constraints.real),
)


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
    for fused in (True, False):
        if fused:
            sites, kl = draw_with_normal_kl(loc, log_scale, eps, segments, SITES)
            weights = torch.cat([w.reshape(*lead, -1) for w in sites], dim=-1)
        else:
            weights, kl = _composed(loc, log_scale, eps, segments)
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

    def draw(m, s):
        weights, kl = draw_with_normal_kl(m, s, eps, segments, SITES)
        return (*weights, kl)

    def pair(m, s):
        plus, minus, kl = draw_antithetic_with_normal_kl(m, s, eps[0, 0], segments, SITES)
        return (*plus, *minus, kl)

    assert torch.autograd.gradcheck(draw, (loc, log_scale))
    assert torch.autograd.gradcheck(pair, (loc, log_scale))


def test_antithetic_pair_equals_two_composed_draws():
    torch.manual_seed(3)
    segments = _segments("gaps")
    loc = torch.randn(D, dtype=torch.float64, requires_grad=True)
    log_scale = (torch.rand(D, dtype=torch.float64) - 2).requires_grad_()
    eps = torch.randn(D, dtype=torch.float64)
    probe_plus, probe_minus = torch.randn(D, dtype=torch.float64), torch.randn(D, dtype=torch.float64)
    segments = [NormalSegment(s.start, s.stop, s.loc.double(), s.scale.double(), s.zero_loc) for s in segments]
    plus, minus, kl = draw_antithetic_with_normal_kl(loc, log_scale, eps, segments, SITES)
    plus, minus = (torch.cat([w.reshape(-1) for w in ws]) for ws in (plus, minus))
    got = (probe_plus * plus).sum() + (probe_minus * minus).sum() + 0.7 * kl
    w_plus, kl_ref = _composed(loc, log_scale, eps, segments)
    w_minus, _ = _composed(loc, log_scale, -eps, segments)
    expected = (probe_plus * w_plus).sum() + (probe_minus * w_minus).sum() + 0.7 * kl_ref
    for a, b in zip(
        (got, *torch.autograd.grad(got, [loc, log_scale])),
        (expected, *torch.autograd.grad(expected, [loc, log_scale])),
        strict=True,
    ):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)


def test_kl_without_the_draw_equals_torch_kl():
    torch.manual_seed(2)
    loc, log_scale = torch.randn(D), torch.randn(D) * 0.5 - 1
    for kind in ("one", "shifted", "per-scalar", "gaps"):
        segments = _segments(kind)
        expected = _composed(loc, log_scale, torch.zeros(D), segments)[1]
        assert normal_segments_kl(loc, log_scale, log_scale.exp(), segments).item() == pytest.approx(
            expected.item(), rel=1e-5
        )


def test_unused_sites_and_an_unused_kl_get_zero_gradients():
    """Outputs the loss does not use reach the backward as None: the weights of one site only, and no KL."""
    torch.manual_seed(4)
    segments = [NormalSegment(s.start, s.stop, s.loc.double(), s.scale.double(), s.zero_loc) for s in _segments("one")]
    loc = torch.randn(D, dtype=torch.float64, requires_grad=True)
    log_scale = (torch.rand(D, dtype=torch.float64) - 2).requires_grad_()
    eps = torch.randn(D, dtype=torch.float64)
    probe = torch.randn(4, 5, dtype=torch.float64)
    for fused in (draw_with_normal_kl, draw_antithetic_with_normal_kl):
        first = fused(loc, log_scale, eps, segments, SITES)[0][0]  # the + (or only) weights of the first site
        got = torch.autograd.grad((probe * first).sum(), [loc, log_scale])
        w = loc + log_scale.exp() * eps
        expected = torch.autograd.grad((probe * w[:20].view(4, 5)).sum(), [loc, log_scale])
        for a, b in zip(got, expected, strict=True):
            assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)

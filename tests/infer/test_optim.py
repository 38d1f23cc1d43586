"""The optimiser argument: the default and pyro.optim's Adam run torch's fused kernel, with the same updates."""

import pyro.optim
import pytest
import torch

from pyro_bnn.infer.optim import build_optimizer


def _params(seed=0):
    torch.manual_seed(seed)
    return [("w", torch.nn.Parameter(torch.randn(50, 20))), ("b", torch.nn.Parameter(torch.randn(20)))]


@pytest.mark.parametrize(
    "optim,fused",
    [
        (None, True),
        (pyro.optim.Adam({"lr": 0.01}), True),
        (pyro.optim.AdamW({"lr": 0.01}), True),
        (pyro.optim.Adam({"lr": 0.01, "foreach": False}), None),  # the caller chose an implementation
        (pyro.optim.SGD({"lr": 0.01}), None),
        (lambda params: torch.optim.Adam(params, lr=0.01), None),  # a factory builds exactly what it says
    ],
)
def test_which_optimisers_are_fused(optim, fused):
    optimizer, _ = build_optimizer(optim, _params())
    assert optimizer.param_groups[0].get("fused") == fused


def test_fused_updates_equal_the_default_implementation():
    results = []
    for optim in (pyro.optim.Adam({"lr": 0.05}), lambda params: torch.optim.Adam(params, lr=0.05)):
        named = _params()
        optimizer, _ = build_optimizer(optim, named)
        for step in range(5):
            optimizer.zero_grad()
            loss = sum((p.sin() * (step + 1)).square().sum() for _, p in named)
            loss.backward()
            optimizer.step()
        results.append(torch.cat([p.detach().flatten() for _, p in named]))
    initial = torch.cat([p.detach().flatten() for _, p in _params()])
    assert (results[0] - initial).abs().min() > 1e-3  # every value moved
    assert torch.allclose(results[0], results[1], rtol=1e-5, atol=1e-6)

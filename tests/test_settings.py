"""pyro_bnn's Pyro settings: ``module_local_params`` on import, and the ``PYRO_BNN_MODULE_LOCAL_PARAMS=0`` opt-out.

The setting is read once at import, so every case runs in a fresh interpreter.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from torch import nn

from pyro_bnn import BNN, MODULE_LOCAL_PARAMS_ENV
from pyro_bnn.guides import BayesByBackprop
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.priors import NormalPrior


def _python(code: str, env_value: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != MODULE_LOCAL_PARAMS_ENV}
    if env_value is not None:
        env[MODULE_LOCAL_PARAMS_ENV] = env_value
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "env_value, preset, expected",
    [
        (None, "", True),  # Pyro's own default is False: importing pyro_bnn turned it on
        ("1", "", True),
        # The opt-out leaves what the user had (True here; the trainer test below sees Pyro's default False).
        ("0", "pyro.settings.set(module_local_params=True); ", True),
    ],
)
def test_import_sets_module_local_params_unless_opted_out(env_value, preset, expected):
    code = f"import pyro; {preset}import pyro_bnn; print(pyro.settings.get('module_local_params'))"
    result = _python(code, env_value)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(expected)


def test_a_bad_value_fails_the_import_with_a_one_line_reason():
    result = _python("import pyro_bnn", "maybe")
    assert result.returncode != 0
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("ValueError: PYRO_BNN_MODULE_LOCAL_PARAMS='maybe' is not understood: expected 0 (")
    assert "or 1 (" in last_line


TRAIN_WITH_GLOBAL_PARAMS = """
import pyro, torch
from torch import nn
from pyro_bnn import BNN
from pyro_bnn.data import BatchLoader
from pyro_bnn.guides import BayesByBackprop
from pyro_bnn.infer import Trainer
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.priors import HierarchicalPrior

assert pyro.settings.get("module_local_params") is False
x, y = torch.randn(30, 2, generator=torch.Generator().manual_seed(0)), torch.arange(30) % 3
torch.manual_seed(0)
bnn = BNN(nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 3)), HierarchicalPrior("normal", "halfcauchy", [1.0]),
          Categorical(30))
trainer = Trainer(bnn, BayesByBackprop, optim=pyro.optim.Adam({"lr": 0.05}), seed=0, progress=False)
trainer.setup(x[:10], y[:10])
before = {name: p.detach().clone() for name, p in trainer.guide.named_parameters()}
trainer.fit(BatchLoader(x, y, 10), 2)
after = dict(trainer.guide.named_parameters())
# The guide's parameters live in Pyro's global store (the opt-out took effect) and the trainer still moved them all.
print(len(before), len(pyro.get_param_store().keys()), sum(not torch.equal(before[k], after[k]) for k in before))
"""


def test_the_trainer_still_trains_with_the_global_param_store():
    result = _python(TRAIN_WITH_GLOBAL_PARAMS, "0")
    assert result.returncode == 0, result.stderr
    num_params, num_in_store, num_changed = map(int, result.stdout.split())
    assert num_params == 12  # mu and rho of two weights, two biases and two layer scales
    assert num_in_store == num_params and num_changed == num_params


def test_two_models_with_equal_site_names_share_no_parameter():
    """What the default setting is for: two guides over same-named sites keep their own parameters."""
    guides = []
    for seed in (0, 1):
        bnn = BNN(nn.Linear(3, 2), NormalPrior(), Categorical(10))
        guide = BayesByBackprop(bnn)
        torch.manual_seed(seed)
        guide(torch.randn(4, 3), torch.tensor([0, 1, 0, 1]))
        guides.append(guide)
    first, second = (dict(g.named_parameters()) for g in guides)
    assert first.keys() == second.keys()
    for name in first:
        assert first[name] is not second[name]
        assert not torch.equal(first[name], second[name])

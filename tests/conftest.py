import pyro
import pytest
import torch

import pyro_bnn  # noqa: F401  (applies pyro_bnn's Pyro settings)


@pytest.fixture(autouse=True)
def _fresh_pyro_state():
    """Every test starts with an empty param store, validation on and fixed seeds."""
    pyro.clear_param_store()
    pyro.enable_validation(True)
    pyro.set_rng_seed(0)
    yield
    pyro.enable_validation(False)


@pytest.fixture(params=["cpu", "cuda"])
def device(request):
    """Runs a test on the CPU and, where a GPU exists, on CUDA too."""
    if request.param == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return torch.device(request.param)

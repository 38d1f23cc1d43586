"""The ``arviz_backend`` fixture: a test that takes it runs once per ArviZ generation (ArviZ 0.x ``InferenceData``
and the refactored arviz-base / arviz-stats ``DataTree``), with ``PYRO_BNN_ARVIZ`` forcing
:mod:`pyro_bnn.diagnostics.arviz_compat`'s choice. Both install side by side in the dev environment (setup.cfg's
``dev`` extra), so ``make test`` runs both; a generation whose packages are missing is skipped with the reason."""

from __future__ import annotations

import pytest

from pyro_bnn.diagnostics import arviz_compat

_MISSING = {
    arviz_compat.LEGACY: "ArviZ 0.x (arviz<1) is not installed here (on Python 3.12+ pip installs ArviZ 1.x instead)",
    arviz_compat.REFACTORED: "arviz-base and arviz-stats are not installed here (pip install -e '.[dev]' adds them)",
}


@pytest.fixture(params=arviz_compat.BACKENDS)
def arviz_backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    name = request.param
    if not arviz_compat.available(name):
        pytest.skip(_MISSING[name])
    monkeypatch.setenv(arviz_compat.ENV_VAR, name)
    return name


@pytest.fixture
def both_arviz_backends() -> None:
    """Skips a test that compares the two generations unless both are installed."""
    for name in arviz_compat.BACKENDS:
        if not arviz_compat.available(name):
            pytest.skip(_MISSING[name])

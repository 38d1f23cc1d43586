"""Agreement with MAPIE (an independent implementation of split conformal prediction) on the same probabilities and
predictions. MAPIE is in the ``dev`` extra; the tests skip, saying so, only where it is not installed."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin

from pyro_bnn.evaluation import calibrate_classifier, calibrate_regressor, class_scores
from pyro_bnn.predict import Prediction

mapie = pytest.importorskip("mapie", reason="MAPIE is not installed (pip install -e '.[dev]' brings it)")
from mapie.classification import SplitConformalClassifier  # noqa: E402
from mapie.conformity_scores import APSConformityScore  # noqa: E402
from mapie.regression import SplitConformalRegressor  # noqa: E402

CLASSES = 6


class _TableClassifier(ClassifierMixin, BaseEstimator):
    """A 'prefit' classifier whose input is a row index into fixed probabilities: MAPIE sees our numbers."""

    def __init__(self, table: np.ndarray | None = None):
        self.table = table

    def fit(self, X, y):  # noqa: N803 (scikit-learn's names)
        return self

    def __sklearn_is_fitted__(self):
        return True

    @property
    def classes_(self):
        return np.arange(self.table.shape[1])

    def predict_proba(self, X):  # noqa: N803
        return self.table[np.asarray(X)[:, 0].astype(int)]

    def predict(self, X):  # noqa: N803
        return self.predict_proba(X).argmax(axis=1)


class _TableRegressor(RegressorMixin, BaseEstimator):
    n_features_in_ = 1  # what MAPIE's fitted-check looks for on a prefit regressor

    def __init__(self, table: np.ndarray | None = None):
        self.table = table

    def fit(self, X, y):  # noqa: N803
        return self

    def __sklearn_is_fitted__(self):
        return True

    def predict(self, X):  # noqa: N803
        return self.table[np.asarray(X)[:, 0].astype(int)]


def _classification(n: int = 700, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    probs = rng.dirichlet(np.full(CLASSES, 0.6), size=n)
    labels = np.array([rng.choice(CLASSES, p=row) for row in probs])
    return probs, labels


@pytest.mark.parametrize("alpha", [0.05, 0.1, 0.2, 0.37])
def test_thr_sets_and_scores_equal_mapie_lac(alpha):
    probs, labels = _classification()
    n_cal = 300
    index = np.arange(len(probs))[:, None]
    ours = calibrate_classifier(
        torch.from_numpy(probs[:n_cal]), alpha, method="thr", labels=torch.from_numpy(labels[:n_cal])
    )
    theirs = SplitConformalClassifier(_TableClassifier(probs), confidence_level=1 - alpha, conformity_score="lac")
    theirs.conformalize(index[:n_cal], labels[:n_cal])
    scores = class_scores(torch.from_numpy(probs[:n_cal]), "thr").gather(1, torch.from_numpy(labels[:n_cal])[:, None])
    np.testing.assert_allclose(scores.numpy().ravel(), np.ravel(theirs.conformity_scores), atol=1e-12)
    _, their_sets = theirs.predict_set(index[n_cal:])
    our_sets = ours.prediction_sets(torch.from_numpy(probs[n_cal:])).numpy()
    assert (our_sets == their_sets[:, :, 0]).all()
    assert 0 < our_sets.sum() < our_sets.size  # neither empty nor full: the comparison says something


def test_non_randomised_aps_scores_equal_mapies_true_label_cumsum():
    probs, labels = _classification(n=400, seed=1)
    cumsum, rank = APSConformityScore.get_true_label_cumsum_proba(labels, probs, np.arange(CLASSES))
    ours = class_scores(torch.from_numpy(probs), "aps").gather(1, torch.from_numpy(labels)[:, None])
    np.testing.assert_allclose(ours.numpy().ravel(), cumsum.ravel(), atol=1e-12)
    # and RAPS' penalty counts the same 1-based rank: lam * max(0, rank - k_reg)
    raps = class_scores(torch.from_numpy(probs), "raps", lam=0.1, k_reg=2).gather(1, torch.from_numpy(labels)[:, None])
    np.testing.assert_allclose(raps.numpy().ravel(), cumsum.ravel() + 0.1 * np.maximum(rank - 2, 0), atol=1e-12)


@pytest.mark.parametrize("alpha", [0.05, 0.1, 0.3])
def test_absolute_intervals_equal_mapies_split_conformal_regressor(alpha):
    rng = np.random.default_rng(5)
    n, n_cal = 500, 200
    predicted = rng.normal(size=n)
    targets = predicted + rng.standard_t(3, size=n)
    index = np.arange(n)[:, None]
    theirs = SplitConformalRegressor(
        _TableRegressor(predicted), confidence_level=1 - alpha, conformity_score="absolute"
    )
    theirs.conformalize(index[:n_cal], targets[:n_cal])
    _, intervals = theirs.predict_interval(index[n_cal:])

    def prediction(part: slice, with_targets: bool) -> Prediction:
        means = torch.from_numpy(predicted[part]).view(1, -1, 1)
        y = torch.from_numpy(targets[part]).view(-1, 1) if with_targets else None
        return Prediction(means=means, noise_scale=torch.tensor(1.0), targets=y)

    ours = calibrate_regressor(prediction(slice(0, n_cal), True), alpha, score="absolute")
    lower, upper = ours.intervals(prediction(slice(n_cal, n), False))
    np.testing.assert_allclose(lower.numpy().ravel(), intervals[:, 0, 0], atol=1e-12)
    np.testing.assert_allclose(upper.numpy().ravel(), intervals[:, 1, 0], atol=1e-12)

"""Slow: the default guide trains a real posterior on Fashion-MNIST (run with ``make test-all`` or ``-m slow``)."""

from pathlib import Path

import pyro
import pytest

from pyro_bnn import BNN
from pyro_bnn.data import load_dataset
from pyro_bnn.guides import DEFAULT_GUIDE, mean_posterior_scale, parse_guide
from pyro_bnn.infer import Trainer, map_warm_start
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.models import build_model
from pyro_bnn.predict import predict
from pyro_bnn.priors import NormalPrior

FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")


@pytest.mark.slow
@pytest.mark.skipif(not FASHION_MNIST.is_dir(), reason="Debian's dataset-fashion-mnist is not installed")
def test_default_guide_beats_80_percent_in_three_epochs_with_a_real_posterior():
    data = load_dataset("fashion-mnist", data_dir=FASHION_MNIST, train_subset=10_000, val_size=0, seed=0)
    train, _, _ = data.loaders(128, seed=0)
    pyro.set_rng_seed(0)
    net = build_model("3fc", input_shape=data.input_shape, num_classes=10)
    bnn = BNN(net, NormalPrior(0.0, 1.0), Categorical(len(data.train)))
    spec = parse_guide(DEFAULT_GUIDE)
    optim = pyro.optim.Adam({"lr": 1e-3})
    epochs = 3
    if spec.map_warm_start_epochs:  # the warm start counts against the 3-epoch budget
        map_warm_start(bnn, train, spec.map_warm_start_epochs, optim=optim, seed=0, progress=False)
        epochs -= spec.map_warm_start_epochs
    trainer = Trainer(bnn, spec.build, optim=optim, seed=0, progress=False)
    trainer.fit(train, epochs)
    accuracy = predict(bnn, trainer.guide, (data.test.x, data.test.y), num_samples=20).metrics()["accuracy"]
    sigma, _ = mean_posterior_scale(trainer.guide, bnn)
    assert accuracy > 0.80
    assert sigma >= 0.01

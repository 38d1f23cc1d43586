"""Every prior and guide family trains, predicts and round-trips a checkpoint on each device (CUDA where present)."""

import pyro
import pytest
import torch
from torch import nn

from pyro_bnn import BNN
from pyro_bnn.data import BatchLoader
from pyro_bnn.guides import parse_guide
from pyro_bnn.infer import Checkpoint, Trainer
from pyro_bnn.likelihoods import Categorical
from pyro_bnn.predict import predict, predict_posterior_mean
from pyro_bnn.priors import parse_prior


@pytest.mark.parametrize("prior", ["normal:0,1", "flat", "mixture", "hierarchical:laplace,inversegamma,2,1"])
@pytest.mark.parametrize("guide", ["autonormal:0.05", "bbb", "map"])
def test_train_predict_and_restore_on_device(device, prior, guide, tmp_path):
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(60, 3, generator=g), torch.arange(60) % 3
    spec = parse_guide(guide)

    def build():
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 3))
        return BNN(net, parse_prior(prior), Categorical(60))

    trainer = Trainer(
        build(),
        spec.build,
        optim=pyro.optim.Adam({"lr": 0.01}),
        device=device,
        seed=0,
        progress=False,
        num_val_samples=4,
        num_particles=2,
        callbacks=[Checkpoint(tmp_path / "c.pt")],
    )
    history = trainer.fit(BatchLoader(x, y, 20), 2, val_loader=BatchLoader(x, y, 30))
    assert all(torch.isfinite(torch.tensor(r["loss"])) for r in history)
    assert all(p.device.type == device.type for p in trainer.guide.parameters())
    assert all(b.device.type == device.type for b in trainer.bnn.prior.buffers())
    prediction = predict(trainer.bnn, trainer.guide, (x, y), num_samples=5)
    assert prediction.probs.shape == (5, 60, 3) and prediction.probs.device.type == device.type

    restored = Trainer(build(), spec.build, device=device, progress=False)
    restored.setup(x[:20].to(device), y[:20].to(device))
    restored.load_checkpoint(tmp_path / "c.pt")
    before = predict_posterior_mean(trainer.bnn, trainer.guide, x).probs
    after = predict_posterior_mean(restored.bnn, restored.guide, x).probs
    assert torch.equal(before, after)

"""A run's model: the BNN and guide builder its :class:`~pyro_bnn.runs.config.RunConfig` describes
(:func:`build_bnn`), the same BNN on the meta device for checks before any work (:func:`meta_bnn`), and a saved
run's model and parameter source rebuilt from its checkpoint (:func:`restore`)."""

from __future__ import annotations

import contextlib
import os
from typing import Any

import pyro
import torch
from pyro import poutine

from pyro_bnn.bnn import BNN
from pyro_bnn.data import DatasetName, DatasetSplits, Task, dataset_shape
from pyro_bnn.guides import parse_guide
from pyro_bnn.infer import load_checkpoint
from pyro_bnn.infer.checkpoint import state_dict_mismatch
from pyro_bnn.likelihoods import Categorical, Gaussian
from pyro_bnn.models import build_model
from pyro_bnn.node_noise import add_node_noise, is_node_noise
from pyro_bnn.predict import Samples
from pyro_bnn.priors import nothing, parse_prior
from pyro_bnn.runs.config import RunConfig


def build_bnn(config: RunConfig, data: DatasetSplits) -> tuple[BNN, Any]:
    """The run's model and guide builder (the guide is built by the trainer once the model is on its device).

    Classification data gets a Categorical likelihood, regression data (``data.task``) a Gaussian one with the
    fixed scale ``config.noise_scale``.
    """
    return _build(config, data.input_shape, data.output_dim, data.task, len(data.train))


def _build(config: RunConfig, input_shape, output_dim: int, task: Task, num_train: int, *, meta: bool = False):
    guide_spec = parse_guide(config.guide)
    with torch.device("meta") if meta else contextlib.nullcontext():
        net = build_model(
            config.model,
            input_shape=input_shape,
            num_classes=output_dim,
            activation=config.activation,
            dropout=guide_spec.dropout,
        )
        select = None
        if config.node_noise:
            add_node_noise(net, bias_noise=config.bias_noise)
            select = is_node_noise  # the prior is on the noise; weights and biases stay deterministic
    prior = parse_prior(config.prior, select=select if guide_spec.random_weights else nothing)
    if task is Task.REGRESSION:
        likelihood = Gaussian(num_train, scale=config.noise_scale, kl_scale=config.kl_scale)
    else:
        likelihood = Categorical(num_train, kl_scale=config.kl_scale)
    return BNN(net, prior, likelihood), guide_spec.build


DRAWS = "draws"
"""The checkpoint key of a sampled run's posterior draws, ``{site: (chain, draw, *site_shape)}`` (``pyro-bnn
sample``); such a checkpoint holds no guide."""


def meta_bnn(config: RunConfig) -> BNN:
    """The run's BNN as :func:`build_bnn` builds it, its network on the meta device (a data set size of 1): its sites,
    prior and likelihood with no data read and no memory taken, for checks before any work.

    Raises:
        ValueError: a config ``validate`` refuses.
    """
    shape = dataset_shape(config.dataset)
    task = DatasetName(config.dataset).task
    return _build(config, shape.input_shape, shape.output_dim, task, 1, meta=True)[0]


def restore(
    config: RunConfig,
    data: DatasetSplits,
    checkpoint: str | os.PathLike,
    device: torch.device,
    state: dict[str, Any] | None = None,
):
    """Rebuilds a saved run's model and parameter source from its checkpoint (``state``: the checkpoint, if already
    read): the trained guide, or for a sampled run (:data:`DRAWS`) its draws as a
    :class:`~pyro_bnn.predict.Samples` source ``{site: (draw * chain, *site_shape)}``, the chains interleaved.

    Raises:
        ValueError: the checkpoint does not fit the model, or a sampled run holds fewer draws than
            ``config.num_samples``.
    """
    pyro.set_rng_seed(config.seed)
    bnn, guide_builder = build_bnn(config, data)
    bnn.to(device)
    state = state if state is not None else load_checkpoint(checkpoint, map_location=device)
    sampled = DRAWS in state
    if not sampled:
        guide = guide_builder(bnn).to(device)
        x, y = data.train.x[: config.batch_size].to(device), data.train.y[: config.batch_size].to(device)
        with torch.no_grad(), poutine.block():
            guide(x, y)  # creates the guide's parameters so the saved values can be loaded into them
    try:
        bnn.load_state_dict({k: v.to(device) for k, v in state["model"].items()})
        if sampled:
            # draw-major (chain 0 draw 0, chain 1 draw 0, ...): the first S of them, what predict takes for
            # num_samples=S, come from every chain
            guide = Samples({k: v.transpose(0, 1).flatten(0, 1).to(device) for k, v in state[DRAWS].items()})
        else:
            guide.load_state_dict({k: v.to(device) for k, v in state["guide"].items()})
    except (RuntimeError, KeyError) as err:
        raise ValueError(
            f"{checkpoint} does not fit the model its config describes: {state_dict_mismatch(err)}"
        ) from None
    if sampled and config.num_samples > guide.count:
        raise ValueError(
            f"num_samples={config.num_samples} but {checkpoint} holds {guide.count} posterior draws; ask for at most "
            f"{guide.count}"
        )
    return bnn, guide

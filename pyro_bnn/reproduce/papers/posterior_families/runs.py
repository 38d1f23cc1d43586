"""The runners of ``posterior-families`` (:attr:`~pyro_bnn.reproduce.planned.RunSpec.runner`): one function per kind
of posterior, each fitting its family on the spec's data and handing the fit to :func:`.scoring.
evaluate`, which scores every family the same way.

- :func:`trained`: a Trainer run of the spec's config (mean-field, low-rank, flow VI, node noise).
- :func:`nuts`: NUTS (:func:`pyro_bnn.diagnostics.nuts.run_nuts`) on the full training set; its draws are kept in
  the run folder (``nuts-draws.pt``, not committed) for the families compared with it.
- :func:`laplace`: laplace-torch around the MAP of the spec's first member (:func:`pyro_bnn.laplace.fit_laplace`).
- :func:`sgmcmc`: SG-MCMC chains (:func:`pyro_bnn.sgmcmc.sample_sgmcmc`).
- :func:`swag`: SWAG (:func:`pyro_bnn.swag.fit_swag`), and MultiSWAG of several such runs (option ``models``):
  SGD on the log joint from a seeded initialisation of the network (one per member), then the iterates of a
  constant learning rate.
- :func:`ensemble`: the equally weighted mixture of the spec's MAP members (:func:`pyro_bnn.experiments.
  load_ensemble`).

Each returns a :class:`~pyro_bnn.runs.runs.RunResult` whose metrics hold ``fit_seconds``: the seconds spent
fitting the family, the members it was built from included (the NUTS reference excepted), its scoring not.
"""

from __future__ import annotations

import time
from pathlib import Path

import pyro
import torch

from pyro_bnn.predict import Samples, draw_parameters
from pyro_bnn.reproduce.papers.posterior_families.plan import RUNS
from pyro_bnn.reproduce.papers.posterior_families.scoring import NUTS_DRAWS, Fit, evaluate, reference_of
from pyro_bnn.reproduce.planned import RunSpec
from pyro_bnn.reproduce.records import read_record
from pyro_bnn.reproduce.runners import register_runner
from pyro_bnn.runs.config import resolve_device
from pyro_bnn.runs.run_folder import CHECKPOINT
from pyro_bnn.runs.runs import RunResult, build_bnn, load_data, restore, train_run


def _members_seconds(spec: RunSpec, runs_dir: Path) -> float:
    """Wall time of the members a family was built from (MAP networks), the NUTS reference left out."""
    return sum(read_record(runs_dir, m).seconds for m in spec.members if not m.runner.endswith(":nuts"))


def trained(spec: RunSpec, runs_dir: Path, folder: Path) -> RunResult:
    """Trains the spec's config into ``folder`` (resuming a checkpoint there) and scores its guide."""
    start = time.perf_counter()
    result = train_run(spec.config, folder, resume=True, progress=False)
    seconds = time.perf_counter() - start
    bnn, guide = result.bnn, result.guide
    data = load_data(spec.config)
    draws = None
    if not spec.config.node_noise:  # node noise has deterministic weights: no weight marginals to compare
        with torch.no_grad():
            pyro.set_rng_seed(spec.config.seed)
            x = data.train.x[:1].to(result.prediction.probs.device)
            values = draw_parameters(bnn, guide, spec.config.num_samples, x)
        draws = {name: values[name].squeeze(1).unsqueeze(0) for name in bnn.site_names}
    fit = Fit(bnn=bnn, source=guide, draws=draws, seconds=seconds)
    return evaluate(spec, runs_dir, folder, fit, data)


def nuts(spec: RunSpec, runs_dir: Path, folder: Path) -> RunResult:
    """NUTS with the spec's options (``chains``, ``warmup``, ``samples``, ``tree_depth``) on every training
    example; its draws ``{site: (chain, draw, *shape)}`` are saved as ``nuts-draws.pt``."""
    from pyro_bnn.diagnostics.nuts import run_nuts

    config = spec.config
    data = load_data(config)
    bnn, _ = build_bnn(config, data)
    start = time.perf_counter()
    samples = run_nuts(
        bnn,
        data.train.x,
        data.train.y,
        num_chains=int(spec.option("chains")),
        num_samples=int(spec.option("samples")),
        warmup=int(spec.option("warmup")),
        max_tree_depth=int(spec.option("tree_depth")),
        seed=config.seed,
    )
    seconds = time.perf_counter() - start
    draws = {name: samples[name].detach().contiguous() for name in bnn.site_names}
    torch.save(draws, folder / NUTS_DRAWS)
    flat = {name: value.reshape(-1, *value.shape[2:]) for name, value in draws.items()}
    fit = Fit(bnn=bnn, source=Samples(flat), draws=draws, seconds=seconds, every_draw=True)
    return evaluate(spec, runs_dir, folder, fit, data)


def laplace(spec: RunSpec, runs_dir: Path, folder: Path) -> RunResult:
    """laplace-torch (options ``subset``, ``structure``) around the MAP run that is the spec's first member; the
    GLM predictive with the probit link, and ``config.num_samples`` weight draws for the marginals."""
    from pyro_bnn.laplace import fit_laplace, predict_laplace

    member = spec.members[0]
    config = member.config
    data = load_data(config)
    device = resolve_device(config.device)
    bnn, guide = restore(config, data, runs_dir / member.run_id / CHECKPOINT, device)
    start = time.perf_counter()
    train, _, _ = data.loaders(batch_size=config.batch_size, seed=config.seed, device=device)
    posterior = fit_laplace(
        bnn, guide, train, subset=spec.option("subset"), structure=spec.option("structure"), tune_prior=True
    )
    seconds = time.perf_counter() - start + _members_seconds(spec, runs_dir)
    generator = torch.Generator(device=device).manual_seed(spec.config.seed)
    draws = {name: value.unsqueeze(0) for name, value in posterior.sample(spec.config.num_samples, generator).items()}

    def predictor(x: torch.Tensor, y: torch.Tensor | None):  # batches sized by predict_laplace from the Jacobian
        data_arg = x if y is None else (x, y)
        return predict_laplace(posterior, data_arg, predictive="glm", link="probit")

    fit = Fit(bnn=bnn, source=None, draws=draws, seconds=seconds, predictor=predictor)
    return evaluate(spec, runs_dir, folder, fit, data)


def sgmcmc(spec: RunSpec, runs_dir: Path, folder: Path) -> RunResult:
    """SG-MCMC with the spec's options (``method``, ``step_size``, ``chains``, ``draws``, ``burn_in``, ``thin``,
    ``cycles``, ``init``) on minibatches of ``config.batch_size``; every chain's kept draws are the posterior."""
    from pyro_bnn.sgmcmc import sample_sgmcmc
    from pyro_bnn.sgmcmc.samplers import as_method

    config = spec.config
    data = load_data(config)
    device = resolve_device(config.device)
    # init="network" starts the chains from the network's own initialisation: seeded here, or it would be whatever
    # the process's generator held after the runs before it (Fashion-MNIST SGLD seed 1 differed between two grids)
    pyro.set_rng_seed(config.seed)
    bnn, _ = build_bnn(config, data)
    bnn.to(device)
    train, _, _ = data.loaders(batch_size=config.batch_size, seed=config.seed, device=device)
    result = sample_sgmcmc(
        bnn,
        train,
        method=spec.option("method"),
        step_size=float(spec.option("step_size")),
        num_draws=int(spec.option("draws")),
        burn_in=int(spec.option("burn_in")),
        thin=int(spec.option("thin")),
        num_chains=int(spec.option("chains")),
        num_cycles=int(spec.option("cycles", "1")) if as_method(spec.option("method")).cyclical else None,
        init=spec.option("init", "prior"),
        seed=config.seed,
        progress=False,
    )
    fit = Fit(bnn=bnn, source=result.source(), draws=result.samples, seconds=result.seconds, every_draw=True)
    return evaluate(spec, runs_dir, folder, fit, data)


def swag(spec: RunSpec, runs_dir: Path, folder: Path) -> RunResult:
    """SWAG with the spec's options (``lr``, ``pretrain_lr``, ``pretrain_epochs``, ``epochs``, ``rank``,
    ``models``) on minibatches of ``config.batch_size``; ``models`` > 1 is MultiSWAG (member m from the network
    initialised under seed ``seed * models + m``, its SGD under ``seed + m``). The draws are
    ``config.num_samples`` of the posterior (split evenly over the members), each member one chain for the
    marginals."""
    from pyro_bnn.swag import SwagOptions, fit_multiswag, fit_swag

    config = spec.config
    data = load_data(config)
    device = resolve_device(config.device)
    models = int(spec.option("models", "1"))
    # Each member starts from its own initialisation of the network (seeded), as a deep ensemble's members do; a
    # prior draw would not do on Fashion-MNIST, where N(0, 1) weights on 784 inputs give logits in the thousands.
    starts = []
    for member in range(models):
        pyro.set_rng_seed(config.seed * models + member)
        bnn, _ = build_bnn(config, data)
        starts.append({name: value.detach().clone() for name, value in bnn.initial_values().items()})
    bnn.to(device)
    train, _, _ = data.loaders(batch_size=config.batch_size, seed=config.seed, device=device)
    options = SwagOptions(
        lr=float(spec.option("lr")),
        epochs=int(spec.option("epochs")),
        rank=int(spec.option("rank")),
        pretrain_epochs=int(spec.option("pretrain_epochs")),
        pretrain_lr=float(spec.option("pretrain_lr")),
    )
    start = time.perf_counter()
    if models == 1:
        source = fit_swag(bnn, train, options, init=starts[0], seed=config.seed, progress=False)
        members = [source]
    else:
        source = fit_multiswag(bnn, train, options, models, init=starts, seed=config.seed, progress=False)
        members = source.members
    seconds = time.perf_counter() - start
    per_member = max(1, config.num_samples // len(members))
    draws = {name: torch.stack([m.sample(per_member)[name] for m in members]) for name in bnn.site_names}
    fit = Fit(bnn=bnn, source=source, draws=draws, seconds=seconds)
    return evaluate(spec, runs_dir, folder, fit, data)


def ensemble(spec: RunSpec, runs_dir: Path, folder: Path) -> RunResult:
    """The mixture of the spec's MAP members (each member one chain of one draw for the marginals)."""
    from pyro_bnn.runs.ensemble import load_ensemble

    members = [m for m in spec.members if not m.runner]
    config = members[0].config
    bnn, source = load_ensemble(
        [runs_dir / m.run_id for m in members],
        device=config.device,
        data_dirs={config.dataset: config.data_dir} if config.data_dir is not None else None,
    )
    draws = {name: source.members[name].unsqueeze(1) for name in bnn.site_names}
    fit = Fit(bnn=bnn, source=source, draws=draws, seconds=_members_seconds(spec, runs_dir))
    return evaluate(spec, runs_dir, folder, fit, load_data(spec.config))


__all__ = ["ensemble", "laplace", "nuts", "reference_of", "sgmcmc", "swag", "trained"]


# The names are the ones the plan's specs carry (part of their run ids), kept from when these runners were found by
# importing the module they name.
for _runner in (trained, laplace, sgmcmc, swag, ensemble, nuts):
    register_runner(f"{RUNS}:{_runner.__name__}", _runner)

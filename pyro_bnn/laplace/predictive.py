"""The Laplace posterior's predictive as a :class:`~pyro_bnn.predict.Prediction`: the linearised (GLM) predictive,
or Monte Carlo over weight draws through :func:`~pyro_bnn.predict.predict`."""

from __future__ import annotations

import math

import torch

from pyro_bnn.checks import optional_positive_int, positive_int
from pyro_bnn.laplace.kron_glm import kron_glm_moments
from pyro_bnn.laplace.options import Link, Predictive
from pyro_bnn.laplace.posterior import LaplacePosterior, on_model_device
from pyro_bnn.predict import PointEstimate, Prediction, predict, predict_posterior_mean
from pyro_bnn.predict.batches import Data, data_batches, split_batches
from pyro_bnn.spec.values import enum_member

GLM_JACOBIAN_BYTES = 256 * 2**20
"""About how much memory the Jacobian of one batch of the GLM predictive may take, ``B x outputs x P`` values: the
batch is sized from it unless given. With all 478 000 weights of a 3FC of 400 units, 1 000 inputs would take 19 GB
(it was killed for memory); at this size a batch is 14 inputs, and its peak memory about 1.6 GB."""

MC_BATCH_SIZE = 1000
"""Inputs per batch of the MC predictive unless given."""


def predict_laplace(
    posterior: LaplacePosterior,
    data: Data,
    *,
    predictive: Predictive | str = Predictive.GLM,
    link: Link | str | None = None,
    num_samples: int = 100,
    batch_size: int | None = None,
    point: bool = False,
) -> Prediction:
    """The posterior predictive of a Laplace approximation on every input of ``data``.

    ``predictive="mc"`` is :func:`~pyro_bnn.predict.predict` with :meth:`LaplacePosterior.source`: S weight draws,
    each a network. ``predictive="glm"`` linearises the network at the MAP, so that its outputs are Gaussian,
    ``f ~ N(f(x; w_MAP), J Sigma J^T)`` per input (laplace-torch's GLM predictive), and then

    * classification, ``link="probit"``: ``probs (1, N, C)``, the probit approximation of ``E[softmax(f)]``;
    * classification, ``link="mc"``: ``probs (S, N, C)``, ``softmax`` of S draws of ``f``;
    * regression: ``means (S, N, D)``, S draws of ``f`` (the Prediction holds samples, not a variance), with the
      Gaussian likelihood's ``noise_scale``.

    The GLM's draws are drawn per input from its marginal ``N(mu_n, var_n)``, independently between inputs
    (:func:`independent_draws`; laplace-torch's own draws are correlated across a batch's inputs), so
    GLM sample s is not one network: per-sample accuracies mean nothing there, the sample means and the metrics
    (accuracy, NLL, ECE of the mean probabilities) do. ``log_likelihood (S, N)`` is the likelihood's, of each
    sample's output, as :func:`~pyro_bnn.predict.predict` gives it.

    Args:
        posterior: The fitted approximation.
        data: Inputs ``(N, *input_shape)``, a pair ``(x, y)``, or a re-iterable loader of ``(x, y)`` batches.
        predictive: ``"glm"`` or ``"mc"`` (:class:`~pyro_bnn.laplace.Predictive`).
        link: ``"probit"`` or ``"mc"`` (:class:`~pyro_bnn.laplace.Link`), for the GLM predictive of a classifier;
            None (the default): ``"probit"`` there. Refused where no link applies (``predictive="mc"``, regression).
        num_samples: S, draws of the weights (``mc``) or of the outputs (``glm`` with sampling).
        batch_size: Inputs per batch (a loader's batches are split to it). Default: :data:`MC_BATCH_SIZE`, except
            for a ``glm`` predictive that needs laplace-torch's full Jacobians: then as many inputs as keep a batch's
            Jacobian within :data:`GLM_JACOBIAN_BYTES` (its cost per input does not fall with larger batches).
            A Kronecker-factored approximation over all weights of a network of ``nn.Linear`` layers skips the full
            Jacobians (:mod:`pyro_bnn.laplace.kron_glm`: the same moments from each layer's rank-one Jacobians,
            0.35 ms per input instead of 320 ms over the 638 810 weights of an MLP of three 400-unit layers,
            bench/LAPLACE_GLM.md).
        point: Also score the MAP network and keep it as :attr:`Prediction.point` (``probs (1, N, C)`` or
            ``means (1, N, D)``).

    Returns:
        The :class:`~pyro_bnn.predict.Prediction`.

    Raises:
        ValueError: an unknown predictive or link, a link where none applies, or bad data (one line each).
    """
    predictive = enum_member(Predictive, predictive, "Laplace predictive")
    link = None if link is None else enum_member(Link, link, "GLM link")
    if link is not None and predictive is Predictive.MC:
        raise ValueError(
            f"link={link.value!r} applies to the GLM predictive only; predictive='mc' runs weight draws through the "
            "network"
        )
    num_samples = positive_int(num_samples, "num_samples")
    batch_size = optional_positive_int(batch_size, "batch_size")
    bnn = posterior.bnn
    size = MC_BATCH_SIZE if batch_size is None else batch_size
    if predictive is Predictive.MC:
        return predict(bnn, posterior.source(), data, num_samples=num_samples, batch_size=size, point=point)
    regression = posterior.laplace.likelihood == "regression"
    if link is not None and regression:
        raise ValueError(
            f"link={link.value!r} applies to classifiers only; a regression's GLM predictive draws Gaussian outputs "
            "with no link"
        )
    link = Link.PROBIT if link is None else link
    batches = data_batches(data, size, "predict_laplace", split_loader=True)
    device = next(iter(posterior.map_values.values())).device
    first = batches[0][0].to(device)
    bnn.validate_batch(first)  # the whole batch, so that an error names the inputs' shape
    layers = posterior.rank_one_layers(first[:2])
    if layers is None and batch_size is None:  # laplace-torch's full Jacobians: batches sized by their memory
        size = glm_batch_size(posterior)
        batches = split_batches(batches, size)
    outputs = []
    for x, _ in batches:
        outputs.append(_glm_outputs(posterior, x.to(device), regression, link, num_samples, layers))
    output = torch.cat(outputs, dim=1)  # (S, N, out)
    targets = None if any(y is None for _, y in batches) else torch.cat([y.to(device) for _, y in batches])
    fields = bnn.likelihood.prediction_fields(output)
    log_likelihood = None if targets is None else bnn.likelihood.log_likelihood(output, targets)
    prediction = Prediction(**fields, targets=targets, log_likelihood=log_likelihood)
    if point:
        pairs = [(x, y) if y is not None else x for x, y in batches]
        prediction.point = predict_posterior_mean(bnn, PointEstimate(posterior.mean()), pairs, batch_size=size)
    return prediction


def glm_batch_size(posterior: LaplacePosterior) -> int:
    """Inputs per batch of the GLM predictive whose Jacobian (``B x outputs x P`` values of the posterior's dtype)
    stays within :data:`GLM_JACOBIAN_BYTES`; at least 1, at most :data:`MC_BATCH_SIZE`."""
    la = posterior.laplace
    value = next(iter(posterior.map_values.values()))
    per_input = int(la.n_outputs) * int(la.n_params) * value.element_size()
    return max(1, min(MC_BATCH_SIZE, GLM_JACOBIAN_BYTES // per_input))


def _glm_outputs(
    posterior: LaplacePosterior,
    x: torch.Tensor,
    regression: bool,
    link: Link,
    num: int,
    layers: list[torch.nn.Linear] | None,
) -> torch.Tensor:
    """What the likelihood reads as network outputs, ``(S, B, out)``: GLM draws of ``f``, or for the probit link
    the log of its probabilities ``(1, B, C)`` (a softmax of log-probabilities gives them back). With ``layers``
    (:meth:`LaplacePosterior.rank_one_layers`), the moments of ``f`` come from their rank-one Jacobians and the
    probit link is laplace-torch's formula on them; otherwise laplace-torch computes the moments and the probit."""
    la = posterior.laplace
    with on_model_device(la.model):
        if regression or link is Link.MC:
            f_mu, f_var = kron_glm_moments(la, x, layers) if layers is not None else _glm_moments(la, x)
            return independent_draws(f_mu, f_var, num)
        if layers is None:
            probs = la(x, pred_type="glm", link_approx="probit").detach()
        else:
            f_mu, f_var = kron_glm_moments(la, x, layers)
            kappa = (1.0 + math.pi / 8 * f_var.diagonal(dim1=1, dim2=2)).rsqrt()  # laplace-torch's probit
            probs = torch.softmax(kappa * f_mu, dim=-1)
    return probs.clamp_min(torch.finfo(probs.dtype).tiny).log().unsqueeze(0)


def _glm_moments(la, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """laplace-torch's GLM moments of ``f`` on ``x``: ``f_mu (B, out)`` and ``f_var (B, out, out)``."""
    # The one private laplace-torch call of pyro_bnn: no public one returns these moments for a classifier (__call__
    # returns them for regression only, functional_samples draws from them with correlated noise), and each Laplace
    # class (all weights, last layer, subnetwork) overrides this method with its own Jacobians.
    f_mu, f_var = la._glm_predictive_distribution(x)
    return f_mu.detach(), f_var.detach()


def independent_draws(f_mu: torch.Tensor, f_var: torch.Tensor, num: int) -> torch.Tensor:
    """``num`` draws of each input's ``N(f_mu[n], f_var[n])``, independent between inputs, ``(S, B, out)``.

    laplace-torch's ``functional_samples`` scales one standard normal vector per draw by every input's Cholesky
    factor, so its draws are correlated across the inputs of a batch (for a regression net with one output, one
    standardised value for all of them); scores that read samples per input (the ``log_likelihood (S, N)`` of WAIC
    and LOO, a sample's error over a test set) need draws of their own.

    Args:
        f_mu: ``(B, out)``; f_var: ``(B, out, out)``.
    """
    eps = torch.randn((num, *f_mu.shape, 1), dtype=f_mu.dtype, device=f_mu.device)
    return f_mu + (torch.linalg.cholesky(f_var) @ eps).squeeze(-1)


__all__ = ["predict_laplace"]

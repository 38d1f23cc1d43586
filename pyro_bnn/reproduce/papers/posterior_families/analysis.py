"""Tables, the "which family for what" summary and the verdicts of ``posterior-families``, from its run records
(the figure: :mod:`.figures`).

Every number is a mean ± sd over the seeds a family finished. Comparisons between two families use Welch's t-test
over seeds (:func:`~pyro_bnn.reproduce.report.compare`, level 0.05): a difference is called one only when the seeds
separate it. The summary's lines are written from the measured values: for each question (closest to NUTS,
best NLL, best calibration, best out-of-domain detection, cheapest), the family with the best mean and the families
the seeds cannot tell from it.

**Out-of-domain AUROC** is :func:`pyro_bnn.evaluation.ood_detection`'s: the out-of-domain inputs are the positive
class and the predictive entropy the score (higher: more likely out of domain), so 0.5 is chance, above 0.5 the
entropy detects them and below 0.5 it is *inverted* (the in-domain inputs rank as more uncertain): a failure to
detect, not a weaker detection.

**Cost** of a run (:func:`run_cost`): its fit plus its scoring. The fit is the run's recorded ``fit_seconds`` (the
MAP networks a Laplace fit or an ensemble is built from included, the NUTS reference not); the scoring is the rest of
the run's own recorded wall time (``RunRecord.seconds``, less the part of ``fit_seconds`` spent in the run itself):
loading, the test and out-of-domain predictives and on moons the comparison with NUTS and the predictive map. The
"cheapest" lines rank the total.

Verdict rules (each an expectation from the literature that the issue asks to check):

- **Mean-field VI is narrower than NUTS** (moons): *holds* when the median sd ratio of mean-field VI is below 1 and
  separated from 1 over seeds, *does not hold* when it is above 1 and separated, *inconclusive* otherwise.
- **SG-MCMC's predictive is closer to NUTS than mean-field VI's** (moons; SGLD and cyclical SGLD each against
  mean-field, by the KL from NUTS): *holds* when both are smaller and separated, *does not hold* when one is larger
  and separated, *inconclusive* otherwise.
- **A deep ensemble detects out-of-domain inputs better than mean-field VI** (AUROC, per data set): a data set
  *holds* only when the ensemble's AUROC is above 0.5 (separated from it over seeds) and above mean-field VI's
  (separated); it *does not hold* when the ensemble's AUROC is below 0.5 and separated (an inverted score detects
  nothing, whatever mean-field VI's), or when mean-field VI's is higher and separated; *inconclusive* otherwise.
  The claim *holds* when every data set holds, *does not hold* when half of them or more do not
  (:func:`~pyro_bnn.reproduce.report.overall_verdict`).
- **A Laplace approximation improves the NLL of its MAP network** (KFAC, per data set, against the MAP member it
  was fitted around): *holds* when its NLL is lower and separated on every data set, *does not hold* when higher
  and separated on half of them or more, *inconclusive* otherwise.

A data set of the last two is *not comparable at this scale* (:attr:`~pyro_bnn.reproduce.planned.Verdict.
NOT_COMPARABLE`) when a MAP network it rests on (the ensemble's members; the Laplace fit's MAP network) did not
converge by :func:`pyro_bnn.reproduce.comparability.training_state` (at its epoch cap, still improving). Only the
MAP networks record a per-epoch validation history; the families' own runs (VI, the samplers, Laplace, the ensemble)
record none, so their convergence is not judged.
"""

from __future__ import annotations

from pathlib import Path

from pyro_bnn.reproduce.papers.posterior_families.summary import QUESTIONS as QUESTIONS
from pyro_bnn.reproduce.papers.posterior_families.summary import best_value as best_value
from pyro_bnn.reproduce.papers.posterior_families.summary import inverted_families as inverted_families
from pyro_bnn.reproduce.papers.posterior_families.summary import summary_lines as summary_lines
from pyro_bnn.reproduce.papers.posterior_families.tables import CHANCE as CHANCE
from pyro_bnn.reproduce.papers.posterior_families.tables import COLUMNS as COLUMNS
from pyro_bnn.reproduce.papers.posterior_families.tables import COST_KEYS as COST_KEYS
from pyro_bnn.reproduce.papers.posterior_families.tables import DATASETS as DATASETS
from pyro_bnn.reproduce.papers.posterior_families.tables import MOONS_ONLY as MOONS_ONLY
from pyro_bnn.reproduce.papers.posterior_families.tables import NAMES as NAMES
from pyro_bnn.reproduce.papers.posterior_families.tables import best_families as best_families
from pyro_bnn.reproduce.papers.posterior_families.tables import dataset_table as dataset_table
from pyro_bnn.reproduce.papers.posterior_families.tables import metric as metric
from pyro_bnn.reproduce.papers.posterior_families.tables import run_cost as run_cost
from pyro_bnn.reproduce.papers.posterior_families.tables import values as values
from pyro_bnn.reproduce.papers.posterior_families.verdicts import convergence as convergence
from pyro_bnn.reproduce.papers.posterior_families.verdicts import detection as detection
from pyro_bnn.reproduce.papers.posterior_families.verdicts import headlines as headlines
from pyro_bnn.reproduce.papers.posterior_families.verdicts import ood_cell as ood_cell
from pyro_bnn.reproduce.planned import Analysis, Profile, RunRecord, Section
from pyro_bnn.reproduce.report import CONFORMAL_NOTE

CAVEATS = """- **Label switching.** A tanh network's function is unchanged by permuting hidden units and flipping their
  signs, so NUTS's chains sit in relabelled copies of the same modes. The sd ratios are taken after matching every
  chain's units to NUTS's chain 0 (`align_hidden_units`, one relabelling per chain): a chain that switches labels
  within itself, or a NUTS chain in a genuinely different mode, inflates NUTS's pooled sd and pulls every ratio below
  1. The KL between predictives needs no alignment.
- **The NUTS row** compares NUTS with itself: its KL is between the predictive of its first half of chains and that
  of its second half (a noise floor for the other rows), and its sd ratio is 1 by construction.
- **Laplace, last layer** keeps every other weight at its MAP value, so most of its sd ratios are 0 and its median
  over all weights says nothing; the output-layer column is the one to read. Its predictive (and KFAC's) is the
  linearised GLM predictive with the probit link.
- **Node noise** has deterministic weights and random noise on the layers' inputs: it has no weight marginals, so
  no sd ratio.
- **Out-of-domain AUROC** (`pyro_bnn.evaluation.ood_detection`) takes the out-of-domain inputs as the positive
  class and the predictive entropy as the score: 0.5 is chance, above 0.5 the entropy detects the out-of-domain
  inputs, and below 0.5 the score is *inverted*: the in-domain inputs rank as more uncertain than the out-of-domain
  ones, which is a failure to detect (the OOD verdict counts it as one), not a weaker detection. On moons the
  out-of-domain inputs are points on a circle far around the data: a tanh network's predictions saturate there, so
  the predictive entropy is often *lower* out of domain than near the decision boundary; an AUROC below 0.5 there is
  a finding about the score, not a bug. On Fashion-MNIST they are MNIST's test digits.
- **Cost** is the fit plus the scoring of a run, on a 2-core machine, one torch thread per run. *fit*: the
  run's recorded `fit_seconds`, the MAP networks a Laplace fit or an ensemble is built from included (not the NUTS
  reference the moons families are compared with); *scoring*: the rest of the run's own recorded wall time (loading,
  the test and out-of-domain predictives, and on moons the comparison with NUTS and the predictive map); *total*:
  their sum, which the "cheapest" lines rank. Where a MAP network's record was rewritten after a family summed its
  time (a MAP network retrained alone), the family's own time all counts as scoring: its total is then over by its
  own fit at most (a few seconds for last-layer Laplace, nothing for the ensemble). Other work on the machine counts
  in the wall time of the runs in flight: a large sd in a time column is more likely that than the method; the
  per-seed CSV shows which seed.
- **SG-MCMC** runs without a Metropolis correction at step sizes picked on one seed; its draws are biased by the
  step size, more so for the larger cyclical peak.
- **No flow VI on Fashion-MNIST**, and no full-covariance VI (`mvn`) anywhere: the flow guide refuses networks of
  more than 1 024 weights and `mvn` more than 4 096 (its covariance has P^2 entries), and the Fashion-MNIST MLP has
  638 810. On moons, low-rank VI stands for the correlated Gaussian family.
- **KFAC Laplace's GLM predictive** over all 638 810 weights of the Fashion-MNIST MLP comes from each layer's
  rank-one Jacobians (`pyro_bnn.laplace.kron_glm`, equal to laplace-torch's full-Jacobian route, which took about
  300 ms per input here and made these runs 18-40 minutes long; `bench/LAPLACE_GLM.md`).
- **Convergence.** The two verdicts that rest on MAP networks (the ensemble's members, the KFAC fit's MAP network)
  judge a data set only when every such network converged by the shared rule (`pyro_bnn.reproduce.comparability`:
  stopped by patience, or at its epoch cap with its validation accuracy flat over its last 3 epochs); otherwise the
  data set is *not comparable at this scale*, with what its numbers alone would say. The families' own runs (VI,
  the samplers, Laplace, the ensemble, NUTS) record no per-epoch validation history, so their convergence is not
  judged; NUTS's and SG-MCMC's mixing is not measured here either.
- **Retrained MAP networks.** Run folders are committed without checkpoints; a run that reads a MAP network whose
  checkpoint is gone trains that network again from its seed first. The retrained network can differ from the first
  in the last digits (thread scheduling), and the runs trained after it (here the Fashion-MNIST KFAC Laplace runs)
  are built on the retrained one, the others (last-layer Laplace, the ensemble) on the first.
- **Scale.** The `cpu` profile's Fashion-MNIST network is a 3FC of 400 units per layer on 5 000 images, not the
  One Simple Trick paper's 1 000 units on 60 000 images; rankings may change with scale."""


def analyse(records: list[RunRecord], profile: Profile, out: Path) -> Analysis:
    """The report's sections (a table per data set, the moons maps, the summary, the caveats) and verdicts."""
    from pyro_bnn.reproduce.papers.posterior_families.figures import moons_maps

    sections = []
    for dataset, title in DATASETS.items():
        table, csv_name = dataset_table(records, dataset, out)
        text = ("Mean ± sd over seeds. KL: nats, mean over test points. sd ratio: each weight's marginal sd over "
                "NUTS's, after aligning hidden units; median over weights.") if dataset == "moons" else (
                "Mean ± sd over seeds. Out-of-domain inputs: MNIST test digits.")  # fmt: skip
        text += " " + CONFORMAL_NOTE.replace(
            "(`pyro-bnn reproduce NAME --rescore` adds them from its checkpoint)",
            "(these families' runs keep no checkpoint to re-score: a re-run of the grid records them)",
        )
        sections.append(Section(title, text, tables=[table], csv_files=[csv_name]))
    figure = moons_maps(records, out)
    if figure is not None:
        sections.append(Section("Moons predictive maps", "Posterior-mean probability of class 1 (seed "
                                f"{figure[1]}); the line is p = 0.5, the dots the training points.",
                                figures=[figure[0]]))  # fmt: skip
    lines = summary_lines(records)
    sections.append(Section(
        "Which family for what",
        "Written from the measured values (best mean; the families the seeds do not separate from it named):\n\n"
        + ("\n".join(lines) if lines else "No family has finished yet."),
    ))  # fmt: skip
    sections.append(Section("Caveats", CAVEATS))
    return Analysis(sections, headlines(records))

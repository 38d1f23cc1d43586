"""``mean_sd``: a metric's mean and sample sd over seeds, shared by the reports, the demo and the guide tables."""

import math
import statistics

from pyro_bnn.evaluation import mean_sd


def test_mean_and_sample_sd_of_the_finite_values():
    values = [0.5, 0.25, 0.125]
    assert mean_sd(values) == (statistics.fmean(values), statistics.stdev(values), 3)
    assert mean_sd([0.7]) == (0.7, 0.0, 1)
    mean, sd, n = mean_sd([1.0, math.nan, None, math.inf, 3.0])
    assert (mean, sd, n) == (2.0, statistics.stdev([1.0, 3.0]), 2)
    mean, sd, n = mean_sd([math.nan])
    assert math.isnan(mean) and math.isnan(sd) and n == 0


def test_the_report_module_still_offers_it():
    from pyro_bnn.reproduce import report

    assert report.mean_sd is mean_sd

"""Our own studies, beside the papers' reproductions (:mod:`pyro_bnn.reproduce.papers`): the measurements behind
the library's defaults and the results in docs/results.md, each a module run with ``python -m``.

- :mod:`~pyro_bnn.reproduce.studies.guide_table`: which guide for which model, and the default guide's yardstick
  suite (``--suite``);
- :mod:`~pyro_bnn.reproduce.studies.guide_defaults`: the default guide's choice (location init, scale init, rank);
- :mod:`~pyro_bnn.reproduce.studies.node_noise_lenet`: the node-noise LeNet's learning-rate sweep and latent counts;
- :mod:`~pyro_bnn.reproduce.studies.nuts_reference`: NUTS against VI on two moons and a cubic regression.

Each calls the library's public API (models, guides, the trainer, the run engine :mod:`pyro_bnn.runs`) and writes
its tables under ``results/``. They were ``pyro_bnn.experiments.<name>``; those paths are deprecated shims.
"""

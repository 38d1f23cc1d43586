"""``python -m pyro_bnn.reproduce.studies.nuts_reference``: the study's command line (:func:`.reference.main`)."""

from pyro_bnn.reproduce.studies.nuts_reference.reference import main

if __name__ == "__main__":
    raise SystemExit(main())

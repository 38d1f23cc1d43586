#!/usr/bin/env bash
# One prepared command for a GPU slot (see /work/.library/device/README.md in this workplace, and
# docs/reproductions.md): installs the carried wheels (.whl/: Pyro, which the machine lacks), names the commit the
# tree was sent at (.devcommit, written by `make device-pack`), then runs bench/device_grid.py with the arguments
# given, e.g.   bash bench/device_grid.sh --limit-s 540 leaky-calibration:gpu:8 implicit-bnn:gpu:8
# Archives and logs land in $OUT, data sets are read from .devdata/<name>/ (both carried, see `make device-pack`).
set -uo pipefail
export DEVICE_GRID_STARTED=${DEVICE_GRID_STARTED:-$(date +%s)}  # --limit-s counts from here, set-up included
export OUT=${OUT:-/tmp/device-out}
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || exit 1
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
[ -f .devcommit ] && export PYRO_BNN_COMMIT=$(cat .devcommit)
python3 -c "import torch, pyro; print('torch', torch.__version__, 'pyro', pyro.__version__,
    torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')"
# PROBE="EXPERIMENT PROFILE LABEL": first, that run alone for 2 epochs under cProfile (bench/run_probe.py), into
# $OUT/probe.txt, at most 150 s: where one run's time goes, to set the next slot's workers and sizes.
if [ -n "${PROBE:-}" ]; then
    # shellcheck disable=SC2086
    timeout 150 python3 bench/run_probe.py $PROBE --epochs 2 --device cuda >"$OUT/probe.txt" 2>&1
    head -3 "$OUT/probe.txt"
fi
# CUDA_TESTS_S=N: the CUDA tests (every test with cuda in its name or parameters) run beside the grids for at most
# N seconds, on 4 processes, into $OUT/tests.log (the docs site's tests left out: the machine lacks mkdocs/griffe).
if [ "${CUDA_TESTS_S:-0}" -gt 0 ]; then
    timeout "$CUDA_TESTS_S" python3 -m pytest -q -p no:cacheprovider -n 4 -k cuda -rfEs \
        --continue-on-collection-errors --ignore=tests/test_docs.py tests >"$OUT/tests.log" 2>&1 &
fi
python3 bench/device_grid.py "$@"
status=$?
wait
[ -f "$OUT/tests.log" ] && grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/tests.log" | cut -c1-300
exit $status

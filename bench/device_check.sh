#!/usr/bin/env bash
# The checks a session with a GPU machine runs there, in one call (see /work/.library/device/README.md in this
# workplace): the CUDA tests and the batched-runs benchmark on the GPU. Pyro and the optional packages the tests import
# travel as wheels in .whl/ (the machine has PyTorch, nothing else of ours). Logs and results land in $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/device-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
python3 -c "import torch, pyro; print('torch', torch.__version__, 'pyro', pyro.__version__, torch.cuda.get_device_name())"
# Every test with CUDA in its name or parameters (the device fixture's [cuda] cases, the CUDA-graph tests).
timeout "${TEST_S:-240}" python3 -m pytest -q -p no:cacheprovider -n 8 -k cuda -rfEs --continue-on-collection-errors \
    tests >"$OUT/tests.log" 2>&1
grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/tests.log" | cut -c1-400
[ "${PROFILE:-1}" = 1 ] && timeout 90 python3 bench/profile_batched.py --device cuda --runs 8 >"$OUT/profile.txt" 2>&1
[ "${PROFILE:-1}" = 1 ] && head -3 "$OUT/profile.txt"
# The Adam update of a 3FC batch, each way, then the whole benchmark (which rewrites bench/BATCHED.md).
[ "${ADAM:-1}" = 1 ] && for adam in stacked rows; do
    timeout 120 python3 bench/batched.py --device cuda --workloads 3fc --runs 8 --adam $adam 2>&1 | tee -a "$OUT/adam.log"
done
timeout "${BENCH_S:-300}" python3 bench/batched.py --device cuda --long-steps 200 2>&1 | tee "$OUT/bench.log"
cp bench/batched-cuda.json bench/BATCHED.md "$OUT/" 2>/dev/null

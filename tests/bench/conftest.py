"""The bench scripts (``bench/*.py``) import each other by their file names, as ``python bench/run.py`` does: their
folder goes on ``sys.path`` for these tests."""

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

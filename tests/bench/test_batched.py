"""bench/batched.py: BATCHED.md is rendered from the saved ``batched-<device>.json`` files, each section titled
with the machine its own file records."""

import json
import shutil
from pathlib import Path

import batched as bench_batched
import run as bench_run

BENCH = Path(__file__).resolve().parents[2] / "bench"
ROW = {"workload": "moons", "what": "2-5-5-2 tanh", "runs": 32, "separate_s_per_run": 0.5, "batched_s": 1.6,
       "separate_runs_per_hour": 7200.0, "batched_runs_per_hour": 72000.0, "ratio": 10.0, "goal": 10.0}  # fmt: skip


def test_each_section_names_the_machine_its_file_records_not_the_rendering_one(tmp_path, monkeypatch):
    # The page is rebuilt from both devices' files wherever either is measured; it once titled every section with
    # the machine rendering it, so the 2-core CPU's numbers read "Intel(R) Xeon(R) Processor, 16 cores".
    monkeypatch.setattr(bench_run, "machine", lambda: "the rendering machine")
    for device, machine in (("cpu", "AMD EPYC, 2 cores"), ("cuda", "Xeon, 16 cores")):
        saved = {"device": device, "machine": machine, "commit": f"c-{device}", "rows": [ROW]}
        (tmp_path / f"batched-{device}.json").write_text(json.dumps(saved))
    page = bench_batched.write_page(tmp_path, stamp="2026-01-01 00:00 UTC").read_text()
    assert "### CPU: AMD EPYC, 2 cores\n" in page and "### GPU (CUDA): Xeon, 16 cores\n" in page
    assert "rendering machine" not in page and "(last: 2026-01-01 00:00 UTC)" in page
    assert "| moons | 32 | 0.500 | 1.600 | 7,200 | 72,000 | 10.00x | 10x: met |" in page
    assert "Commit c-cpu." in page and "Commit c-cuda." in page
    (tmp_path / "batched-cuda.json").unlink()
    page = bench_batched.write_page(tmp_path).read_text()
    assert "### GPU (CUDA): not measured yet (no such device where this ran)" in page


def test_the_committed_page_is_the_committed_files_rendered(tmp_path):
    for name in ("batched-cpu.json", "batched-cuda.json"):
        shutil.copy(BENCH / name, tmp_path / name)
    committed = (BENCH / "BATCHED.md").read_text()
    stamp = committed.split("(last: ", 1)[1].split(")", 1)[0]
    assert bench_batched.write_page(tmp_path, stamp=stamp).read_text() == committed
    machine = json.loads((BENCH / "batched-cpu.json").read_text())["machine"]
    assert f"### CPU: {machine}\n" in committed

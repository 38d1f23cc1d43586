"""A run of thousands of short epochs (the full-batch cubic) writes its checkpoint and history about 100 times in
all, not after every epoch, at least MIN_WRITE_INTERVAL_S apart, and still ends with the complete history and a final
checkpoint."""

from __future__ import annotations

import json

from pyro_bnn.infer import Trainer, callbacks, load_checkpoint
from pyro_bnn.runs import runs
from pyro_bnn.runs.config import RunConfig
from pyro_bnn.runs.runs import WEIGHT_STATS_PER_RUN, WRITES_PER_RUN, train_run


def test_a_run_of_many_epochs_writes_its_files_about_a_hundred_times(tmp_path, monkeypatch):
    monkeypatch.setattr(runs, "MIN_WRITE_INTERVAL_S", 0.0)  # the epochs' count alone decides here
    histories, checkpoints = [], []
    write = callbacks.write_text_atomically
    monkeypatch.setattr(callbacks, "write_text_atomically", lambda path, text, **kw: (histories.append(
        len(json.loads(text))), write(path, text, **kw)))  # fmt: skip
    save = Trainer.save_checkpoint
    monkeypatch.setattr(Trainer, "save_checkpoint", lambda self, path: (checkpoints.append(self.epoch),
                                                                        save(self, path)))  # fmt: skip
    epochs = 2 * WRITES_PER_RUN
    config = RunConfig(dataset="cubic", model="mlp:4", guide="map", epochs=epochs, batch_size=400, val_size=0,
                       num_samples=1, device="cpu")  # fmt: skip
    train_run(config, tmp_path / "run", progress=False)
    # every 2nd epoch, and once more at the end
    assert histories == [*range(2, epochs + 1, 2), epochs]
    assert checkpoints[:-1] == list(range(2, epochs + 1, 2)) and checkpoints[-1] == epochs
    history = json.loads((tmp_path / "run" / "history.json").read_text())
    assert [row["epoch"] for row in history] == list(range(1, epochs + 1))


def test_a_short_run_writes_after_every_epoch(tmp_path, monkeypatch):
    histories = []
    write = callbacks.write_text_atomically
    monkeypatch.setattr(callbacks, "write_text_atomically", lambda path, text, **kw: (histories.append(
        len(json.loads(text))), write(path, text, **kw)))  # fmt: skip
    config = RunConfig(dataset="cubic", model="mlp:4", guide="map", epochs=5, batch_size=400, val_size=0,
                       num_samples=1, device="cpu")  # fmt: skip
    train_run(config, tmp_path / "run", progress=False)
    assert histories == [1, 2, 3, 4, 5, 5]


def test_a_long_run_records_about_twenty_weight_statistics_snapshots(tmp_path):
    # Every snapshot is re-encoded on each write and carried by every checkpoint, so a run of many short epochs keeps
    # WEIGHT_STATS_PER_RUN of them (the first epoch, every 5th of 100, and the last) rather than one per epoch.
    config = RunConfig(dataset="cubic", model="mlp:4", epochs=5 * WEIGHT_STATS_PER_RUN, batch_size=400, val_size=0,
                       num_samples=1, device="cpu")  # fmt: skip
    train_run(config, tmp_path / "run", progress=False)
    snapshots = json.loads((tmp_path / "run" / "weight_stats.json").read_text())
    assert [entry["epoch"] for entry in snapshots] == [1, *range(5, 101, 5)]


def test_a_run_of_many_quick_epochs_writes_at_most_once_per_interval_and_at_the_end(tmp_path, monkeypatch):
    # With an interval longer than the run only the files of the last epoch are written, complete; a run that writes
    # after every epoch (fewer than 2 * WRITES_PER_RUN epochs) does so whatever the interval.
    monkeypatch.setattr(runs, "MIN_WRITE_INTERVAL_S", 1e9)
    checkpoints, histories = [], []
    save = Trainer.save_checkpoint
    monkeypatch.setattr(Trainer, "save_checkpoint", lambda self, path: (checkpoints.append(self.epoch),
                                                                        save(self, path)))  # fmt: skip
    write = callbacks.write_text_atomically
    monkeypatch.setattr(callbacks, "write_text_atomically", lambda path, text, **kw: (histories.append(
        len(json.loads(text))), write(path, text, **kw)))  # fmt: skip
    every_epoch = 2 * WRITES_PER_RUN - 1
    for epochs, expected in (
        (2 * WRITES_PER_RUN, [2 * WRITES_PER_RUN]),
        (every_epoch, [*range(1, every_epoch + 1), every_epoch]),
        (5, [1, 2, 3, 4, 5, 5]),
    ):
        checkpoints.clear()
        histories.clear()
        config = RunConfig(dataset="cubic", model="mlp:4", guide="map", epochs=epochs, batch_size=400, val_size=0,
                           num_samples=1, device="cpu")  # fmt: skip
        train_run(config, tmp_path / str(epochs), progress=False)
        assert checkpoints == expected and histories == expected
        history = json.loads((tmp_path / str(epochs) / "history.json").read_text())
        assert [row["epoch"] for row in history] == list(range(1, epochs + 1))
        assert load_checkpoint(tmp_path / str(epochs) / "checkpoint.pt")["epoch"] == epochs

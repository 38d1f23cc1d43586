"""Tiny-settings smoke run of the measurement behind the default guide."""

from pyro_bnn.data import load_dataset
from pyro_bnn.reproduce.studies.guide_defaults import Setting, format_table, measure


def test_measure_records_every_score_after_each_epoch(tmp_path, make_tiny):
    data_dir = make_tiny(n_train=64, n_test=16).write(tmp_path / "fmnist")
    data = load_dataset("fashion-mnist", data_dir=data_dir, val_size=0, seed=0)
    setting = Setting(train_subset=None, test_subset=16, batch_size=32, epochs=(1, 2), num_samples=3, width=32)
    row = measure("autonormal:0.01,loc=map", "leaky:-0.5", data, setting)
    assert sorted(row["by_epoch"]) == [1, 2]
    scores = row["by_epoch"][2]
    assert 0 <= scores["accuracy"] <= 1 and scores["mutual_information"] >= 0
    assert set(scores["sigma_per_layer"]) == {"fc1", "fc2", "fc3", "out"}
    assert 0.005 < scores["mean_sigma"] < 0.02  # started at 0.01, two short epochs
    table = format_table([row], setting.epochs)
    assert "`autonormal:0.01,loc=map` | leaky:-0.5" in table and "acc@2" in table

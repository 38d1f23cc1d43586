import pytest
import torch

from pyro_bnn.evaluation import label_frequencies, label_frequencies_from_samples, summarize


def test_counting_from_samples_is_exact():
    # 4 samples, 3 points, 3 classes
    sampled = torch.tensor([[0, 2, 1], [0, 1, 1], [2, 1, 1], [0, 1, 1]])
    frequencies = label_frequencies_from_samples(sampled, num_classes=3)
    # point 0 drew 0, 0, 2, 0; point 1 drew 2, 1, 1, 1; point 2 drew 1 four times
    expected = torch.tensor([[0.75, 0.0, 0.25], [0.0, 0.75, 0.25], [0.0, 1.0, 0.0]])
    assert torch.equal(frequencies, expected)
    assert frequencies.dtype == torch.get_default_dtype()


def test_counting_from_samples_honours_dtype_and_unused_classes():
    sampled = torch.tensor([[3], [3]], dtype=torch.int32)
    frequencies = label_frequencies_from_samples(sampled, num_classes=5, dtype=torch.float64)
    assert frequencies.dtype == torch.float64
    assert frequencies.tolist() == [[0.0, 0.0, 0.0, 1.0, 0.0]]


def test_one_hot_samples_give_exact_frequencies(device):
    # One-hot samples leave nothing to chance: each draw is the sample's class. 3 of 4 samples say class 0
    # for point 0 and 1 of 4 says class 1; point 1 is the other way round.
    class_0, class_1 = [1.0, 0.0], [0.0, 1.0]
    probs = torch.tensor(
        [[class_0, class_1], [class_0, class_1], [class_0, class_0], [class_1, class_1]], device=device
    )
    frequencies = label_frequencies(probs)
    assert torch.equal(frequencies.cpu(), torch.tensor([[0.75, 0.25], [0.25, 0.75]]))


def test_seeded_frequencies_converge_to_the_mean_probabilities():
    num_samples = 4000
    concentration = torch.tensor([[4.0, 2.0, 1.0], [1.0, 1.0, 1.0], [0.5, 0.5, 3.0], [2.0, 6.0, 2.0]])
    torch.manual_seed(11)
    probs = torch.distributions.Dirichlet(concentration).sample((num_samples,))  # (S, 4, 3)
    mean = probs.mean(dim=0)
    frequencies = label_frequencies(probs, generator=torch.Generator().manual_seed(5))

    # Each frequency has standard deviation <= 0.5 / sqrt(4000) = 0.0079; 0.025 is over 3 of them.
    tolerance = 0.025
    assert (frequencies - mean).abs().max() < tolerance
    # The test can tell wrong estimators apart: the frequency of per-sample argmaxes and the first sample's
    # probabilities both miss the mean by far more than the tolerance.
    argmax_frequency = torch.nn.functional.one_hot(probs.argmax(dim=-1), 3).double().mean(dim=0)
    assert (argmax_frequency - mean.double()).abs().max() > 4 * tolerance
    assert (probs[0] - mean).abs().max() > 4 * tolerance
    torch.testing.assert_close(frequencies.sum(dim=-1), torch.ones(4))


def test_same_seed_same_draws_and_zero_probability_never_drawn():
    probs = torch.tensor([[[0.5, 0.0, 0.5]]]).expand(200, 3, 3).contiguous()
    first = label_frequencies(probs, generator=torch.Generator().manual_seed(0))
    second = label_frequencies(probs, generator=torch.Generator().manual_seed(0))
    assert torch.equal(first, second)
    assert (first[:, 1] == 0).all()


def test_frequencies_are_a_valid_predictive_for_the_metrics():
    probs = torch.softmax(torch.randn(50, 20, 4), dim=-1)
    frequencies = label_frequencies(probs, generator=torch.Generator().manual_seed(0))
    assert frequencies.shape == (20, 4)
    metrics = summarize(frequencies, torch.randint(0, 4, (20,)))
    assert set(metrics) == {"accuracy", "nll", "brier", "ece", "mce"}


def test_label_frequencies_needs_samples():
    with pytest.raises(ValueError, match=r"rank 3 \(num_samples, N, C\); got shape \(5, 3\)"):
        label_frequencies(torch.full((5, 3), 1 / 3))

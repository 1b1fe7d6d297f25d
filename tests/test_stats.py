"""The statistics behind the speed-up figure."""

import math

import pytest

from proflab import stats


def test_median_odd_and_even():
    assert stats.median([3.0, 1.0, 2.0]) == 2.0
    assert stats.median([4.0, 1.0, 3.0, 2.0]) == 2.5


def test_quantile_matches_linear_interpolation():
    values = [10.0, 20.0, 30.0, 40.0]
    assert stats.quantile(values, 0.0) == 10.0
    assert stats.quantile(values, 1.0) == 40.0
    assert stats.quantile(values, 0.5) == 25.0
    assert stats.quantile(values, 0.25) == pytest.approx(17.5)


def test_mad_ignores_one_outlier():
    values = [1.0, 1.1, 0.9, 1.0, 50.0]
    assert stats.mad(values) == pytest.approx(0.1)
    assert stats.relative_noise(values) == pytest.approx(0.1)


def test_compare_pairs_rounds_and_takes_the_median_ratio():
    original = [0.100, 0.120, 0.110]
    learner = [0.050, 0.040, 0.055]
    cmp = stats.compare(original, learner)
    assert cmp.speedup == pytest.approx(2.0)  # ratios 2.0, 3.0, 2.0
    assert cmp.ratio_low == pytest.approx(2.0)
    assert cmp.ratio_high == pytest.approx(3.0)
    assert cmp.original_s == pytest.approx(0.110)
    assert cmp.learner_s == pytest.approx(0.050)
    assert cmp.rounds == 3


def test_compare_reports_the_noisier_version():
    quiet = [1.0, 1.0, 1.0]
    noisy = [0.5, 0.6, 0.4]
    cmp = stats.compare(quiet, noisy)
    assert cmp.noise == pytest.approx(0.2)  # MAD 0.1 over median 0.5


def test_a_slowdown_is_a_speedup_below_one():
    assert stats.compare([1.0, 1.0], [2.0, 2.0]).speedup == pytest.approx(0.5)


@pytest.mark.parametrize("original, learner", [([], []), ([1.0], [1.0, 2.0]), ([0.0], [1.0])])
def test_compare_rejects_bad_input(original, learner):
    with pytest.raises(ValueError):
        stats.compare(original, learner)


def test_empty_inputs_raise():
    with pytest.raises(ValueError):
        stats.median([])
    with pytest.raises(ValueError):
        stats.quantile([1.0], 1.5)
    assert math.isinf(stats.relative_noise([0.0, 0.0]))

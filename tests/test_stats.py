"""The statistics behind the speed-up figure."""

import math

import pytest

from proflab.measuring import stats


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


def test_compare_pairs_rounds_and_takes_the_geometric_mean_ratio():
    original = [0.100, 0.120, 0.110]
    learner = [0.050, 0.040, 0.055]
    cmp = stats.compare(original, learner)
    assert cmp.speedup == pytest.approx(12 ** (1 / 3))  # ratios 2.0, 3.0, 2.0
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


def test_interval_is_students_t_on_the_log_ratios():
    # ratios 2, 3, 2: logs have mean m and sample sd s; 95% t with 2 degrees of freedom is 4.303
    logs = [math.log(2), math.log(3), math.log(2)]
    m = sum(logs) / 3
    s = math.sqrt(sum((x - m) ** 2 for x in logs) / 2)
    cmp = stats.compare([2.0, 3.0, 2.0], [1.0, 1.0, 1.0])
    assert cmp.ci_low == pytest.approx(math.exp(m - 4.303 * s / math.sqrt(3)))
    assert cmp.ci_high == pytest.approx(math.exp(m + 4.303 * s / math.sqrt(3)))


def test_identical_rounds_have_a_zero_width_interval():
    cmp = stats.compare([3.0, 3.0, 3.0], [1.0, 1.0, 1.0])
    assert cmp.ci_low == pytest.approx(3.0) and cmp.ci_high == pytest.approx(3.0)


def test_decide_needs_the_whole_interval_on_one_side():
    clear = stats.compare([2.0, 2.1, 1.9], [1.0, 1.0, 1.0])
    assert clear.decide(1.5) == stats.PASS
    assert clear.decide(2.5) == stats.FAIL
    assert clear.decide(2.0) == stats.UNCLEAR
    spread = stats.compare([1.45, 1.0, 1.45, 1.0], [1.0] * 4)
    assert spread.decide(1.2) == stats.UNCLEAR


def test_one_round_is_never_enough_to_decide():
    one = stats.compare([5.0], [1.0])
    assert one.decide(1.2) == stats.UNCLEAR
    assert one.as_dict()["ci_high"] is None  # JSON has no infinity


def test_t_quantiles():
    assert stats.t95(1) == pytest.approx(12.706)
    assert stats.t95(10) == pytest.approx(2.228)
    assert stats.t95(100) == 2.0
    assert stats.t95(0) == math.inf


def test_an_interval_is_quoted_from_three_rounds_two_give_their_range():
    from proflab.measuring.stats import INTERVAL_ROUNDS, uncertainty

    show = lambda low, high: f"{low:.2f}–{high:.2f}×"  # noqa: E731
    two = stats.compare([1.0, 1.1], [0.5, 0.45])
    assert INTERVAL_ROUNDS == 3 and two.ci_high / two.ci_low > 2  # t with one degree of freedom: 12.7
    said = uncertainty(two.rounds, (two.ci_low, two.ci_high), (two.ratio_low, two.ratio_high), show)
    assert said == "rounds 2.00–2.44×: too few for an interval"
    three = stats.compare([1.0, 1.1, 1.05], [0.5, 0.45, 0.5])
    said = uncertainty(three.rounds, (three.ci_low, three.ci_high), (three.ratio_low, three.ratio_high), show)
    assert said == f"95% interval {three.ci_low:.2f}–{three.ci_high:.2f}×"
    assert uncertainty(1, (0.0, float("inf")), (2.0, 2.0), show) == "one round: no interval"

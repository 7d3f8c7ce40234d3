import math

import numpy as np
import pytest
import torch

import invfast as ivf


@pytest.mark.statistical
def test_threshold_formula_and_decision(rng):
    n = 400
    a = torch.from_numpy(rng.uniform(0.5, 1.0, size=n))
    b = a - 0.3
    r = ivf.hoeffding_test(a, b, delta=0.05)
    assert r.threshold == pytest.approx(4 * math.sqrt(math.log(20) / (2 * n)))
    assert r.mean_diff == pytest.approx(0.3) and r.reject and r.n == n
    same = ivf.hoeffding_test(a, a.clone())
    assert not same.reject and same.mean_diff == 0.0
    # distances: lower is more invariant
    d = ivf.hoeffding_test(b, a, bounds=(-1, 1), higher_is_more_invariant=False)
    assert d.reject


def test_hoeffding_false_positive_rate_is_bounded():
    # under the null (equal means) the test rejects far less often than delta
    gen = np.random.default_rng(0)
    rejections = 0
    for _ in range(300):
        a = torch.from_numpy(gen.uniform(-1, 1, size=50))
        b = torch.from_numpy(gen.uniform(-1, 1, size=50))
        rejections += ivf.hoeffding_test(a, b, delta=0.05).reject
    assert rejections / 300 <= 0.05


@pytest.mark.statistical
def test_most_invariant_with_bonferroni(rng):
    n = 1000
    base = torch.from_numpy(rng.uniform(0, 0.5, size=n))
    scores = {"default": base + 0.1, "spatial": base + 0.4, "appearance": base}
    assert ivf.most_invariant(scores) == "spatial"
    tie = {"a": base + 0.4, "b": base + 0.4, "c": base}
    assert ivf.most_invariant(tie) is None
    # a margin that passes at delta=0.05 but not at delta=0.05/2 (Bonferroni over 2 comparisons)
    thr1 = 4 * math.sqrt(math.log(1 / 0.05) / (2 * n))
    thr2 = 4 * math.sqrt(math.log(2 / 0.05) / (2 * n))
    margin = (thr1 + thr2) / 2
    close = {"x": base + margin, "y": base, "z": base}
    assert ivf.hoeffding_test(close["x"], close["y"]).reject
    assert ivf.most_invariant(close) is None
    assert ivf.most_invariant(close, n_tests=1) == "x"


def test_bad_inputs():
    with pytest.raises(ValueError, match="same images"):
        ivf.hoeffding_test(torch.zeros(3), torch.zeros(4))
    with pytest.raises(ValueError, match="outside bounds"):
        ivf.hoeffding_test(torch.tensor([5.0]), torch.tensor([0.0]), bounds=(-1, 1))
    with pytest.raises(ValueError, match="delta"):
        ivf.hoeffding_test(torch.zeros(3), torch.zeros(3), delta=1.5)
    with pytest.raises(ValueError, match="empty"):
        ivf.hoeffding_test(torch.zeros(0), torch.zeros(0))
    with pytest.raises(ValueError, match="at least 2 models"):
        ivf.most_invariant({"a": torch.zeros(3)})

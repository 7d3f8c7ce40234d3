"""scripts/learning_check.py: the table of issue 41 from a reproduce run's results, against numpy."""

import importlib.util
import os

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def lc():
    spec = importlib.util.spec_from_file_location(
        "learning_check", os.path.join(HERE, "..", "..", "scripts", "learning_check.py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _scores(rng, centre):
    folds = list(centre + 0.02 * rng.standard_normal(5))
    return {"mean": float(np.mean(folds)), "fold_scores": folds}


def _doc(rng, seeds):
    per = {}
    for s in seeds:
        idn = {
            m: _scores(rng, c) for m, c in (("Random", 0.1), ("Default", 0.15), ("Spatial", 0.2), ("Appearance", 0.11))
        }
        ai = {"trained": _scores(rng, 0.16), "init": _scores(rng, 0.12)}
        per[str(s)] = {"stages": {"probes": {"identity": {"scores": idn}}, "pretrain-amortised": {"identity": ai}}}
    return {"per_seed": per}


def _ratio(a, b):
    fa, fb = np.array(a["fold_scores"]), np.array(b["fold_scores"])
    r = fa.mean() / fb.mean()
    rel = np.hypot(fa.std(ddof=1) / np.sqrt(5) / fa.mean(), fb.std(ddof=1) / np.sqrt(5) / fb.mean())
    return r, r * rel


def test_table_rows_are_the_ratios_their_errors_min_median_and_count(lc):
    rng = np.random.default_rng()
    seeds = [7, 10, 100]
    doc = _doc(rng, seeds)
    lines = lc.table(doc)
    assert lines[0].startswith("| model | seed 7 | seed 10 | seed 100 |")
    for line, m in zip(lines[2:], lc.MODELS):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[0] == m
        want = []
        for s in seeds:
            st = doc["per_seed"][str(s)]["stages"]
            if m == "amortised":
                want.append(
                    _ratio(
                        st["pretrain-amortised"]["identity"]["trained"], st["pretrain-amortised"]["identity"]["init"]
                    )
                )
            else:
                idn = st["probes"]["identity"]["scores"]
                want.append(_ratio(idn[m.capitalize()], idn["Random"]))
        assert cells[1:4] == [f"{r:.2f} ± {e:.2f}" for r, e in want]
        r = [w[0] for w in want]
        below = sum(x + 2 * e < 1.2 for x, e in want)
        assert cells[4:] == [f"{min(r):.2f}", f"{np.median(r):.2f}", f"{sum(x >= 1.2 for x in r)}/3", f"{below}/3"]


def test_amortised_only_needs_no_policy_probes(lc):
    doc = _doc(np.random.default_rng(), [1, 2])
    for s in doc["per_seed"].values():
        del s["stages"]["probes"]
    lines = lc.table(doc, ("amortised",))
    assert len(lines) == 3 and lines[2].startswith("| amortised |")
    with pytest.raises(KeyError):
        lc.table(doc)
    with pytest.raises(SystemExit):
        lc.main(["--out", "x", "--seeds", "9-3"])

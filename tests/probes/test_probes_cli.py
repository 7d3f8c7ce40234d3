"""`invfast probe` reliability (issue 25) and exact leave-one-out kernel ridge: usage errors exit 2 with one
line, options that do not apply are refused instead of ignored, --json is written atomically, warnings
print once each on one line naming real options, and --kernel --loo is leave-one-out."""

import json
import re
import warnings

import numpy as np
import pytest
import torch
from sklearn.kernel_ridge import KernelRidge

import invfast.probes as P
from invfast.cli import main as cli_main
from invfast.probes.cli import add_arguments
from invfast.probes.kernel_ridge import kernel_loo_predictions

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def files(tmp_path, rng):
    x = rng.normal(size=(60, 5))
    y = np.repeat(np.arange(3), 20)
    x[:, 0] += y
    paths = {"f": tmp_path / "f.npy", "y": tmp_path / "y.npy", "r": tmp_path / "r.npy"}
    np.save(paths["f"], x)
    np.save(paths["y"], y)
    np.save(paths["r"], np.sin(x[:, :2]) + 0.1 * rng.normal(size=(60, 2)))
    return {k: str(v) for k, v in paths.items()}


def _probe(files, targets, task, *extra):
    return ["probe", "--features", files["f"], "--targets", files[targets], "--task", task, *extra]


def _one_error_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1, err
    assert err[0].startswith("invfast probe: error: ")
    return err[0]


def test_missing_or_unreadable_input_is_a_usage_error(files, tmp_path, capsys):
    """Exit code 2 and one line (before: SystemExit with a message, i.e. exit code 1)."""
    assert (
        cli_main(
            ["probe", "--features", str(tmp_path / "nope.npy"), "--targets", files["y"], "--task", "classification"]
        )
        == 2
    )
    assert "nope.npy" in _one_error_line(capsys)
    (tmp_path / "bad.npy").write_text("not an array")
    assert (
        cli_main(
            ["probe", "--features", str(tmp_path / "bad.npy"), "--targets", files["y"], "--task", "classification"]
        )
        == 2
    )
    assert "bad.npy" in _one_error_line(capsys)


@pytest.mark.parametrize(
    "task,extra,names",
    [
        ("classification", ["--loo"], "--loo"),
        ("classification", ["--kernel"], "--kernel"),
        ("regression", ["--no-stratify"], "--no-stratify"),
        ("regression", ["--max-iter", "50"], "--max-iter"),
        ("regression", ["--loo", "--folds", "3"], "--folds"),
        ("regression", ["--kernel", "--n-models", "2"], "--n-models"),
        ("regression", ["--device", "nonsense"], "--device"),
        ("classification", ["--seed", "3"], "--seed shuffles --no-stratify's folds"),
        ("regression", ["--seed", "3"], "--seed shuffles --no-stratify's folds"),
    ],
)
def test_options_that_do_not_apply_are_refused(files, capsys, task, extra, names):
    """Before: --loo and --kernel with classification (and the others) were silently ignored."""
    assert cli_main(_probe(files, "y" if task == "classification" else "r", task, *extra)) == 2
    assert names in _one_error_line(capsys)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_device_without_cuda_is_a_usage_error(files, capsys):
    assert cli_main(_probe(files, "y", "classification", "--device", "cuda")) == 2
    assert "--device cpu" in _one_error_line(capsys)


def test_kernel_loo_is_leave_one_out(files, tmp_path, capsys):
    """Before: --kernel --loo printed 'leave-one-out' and ran 5-fold."""
    out = tmp_path / "o.json"
    assert cli_main(_probe(files, "r", "regression", "--kernel", "--loo", "--json", str(out))) == 0
    assert "KernelRidgeCV" in capsys.readouterr().out
    res = json.loads(out.read_text())["cv_results"]
    assert "split0_test_score" in res and "split1_test_score" not in res
    ref = P.KernelRidgeCV(cv="loo").fit(np.load(files["f"]), np.load(files["r"]))
    np.testing.assert_allclose(res["mean_test_score"], ref.cv_results_["mean_test_score"], rtol=1e-10)


def test_json_is_written_atomically(files, tmp_path, capsys, monkeypatch):
    """Interrupted while the JSON is produced: the previous file stays whole (before: truncated) and the
    exit code is 130."""
    out = tmp_path / "o.json"
    out.write_text('{"previous": true}')
    real = json.JSONEncoder.iterencode

    def interrupted(self, o, _one_shot=False):
        for i, chunk in enumerate(real(self, o, _one_shot)):
            if i == 50:
                raise KeyboardInterrupt
            yield chunk

    monkeypatch.setattr(json.JSONEncoder, "iterencode", interrupted)
    assert cli_main(_probe(files, "y", "classification", "--json", str(out))) == 130
    assert json.loads(out.read_text()) == {"previous": True}
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("o.json")] == ["o.json"]


def _option_names() -> set[str]:
    import argparse

    p = argparse.ArgumentParser()
    add_arguments(p)
    return {s for a in p._actions for s in a.option_strings}


def test_warnings_print_once_on_one_line_naming_real_options(files, capsys):
    """A convergence shortfall and a rare class: one 'warning:' line each, once, and every --option they
    name exists (before: the convergence advice named dtype='float64', which the command does not have)."""
    y = np.load(files["y"])
    y[:3] = 7  # a class of 3 members, fewer than 5 folds
    np.save(files["y"], y)
    assert cli_main(_probe(files, "y", "classification", "--max-iter", "1", "--tol", "1e-12")) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(err) == 2 and len(set(err)) == 2, err
    assert any("--max-iter" in line for line in err) and any("--folds" in line for line in err)
    for line in err:
        assert not re.search(r"\b[a-z_]+=", line), line  # no Python keyword advice such as dtype=...
        named = {w.strip(",.;()") for w in line.split() if w.startswith("--")}
        assert named <= _option_names(), named


def test_regression_string_targets_one_line(files, tmp_path, capsys):
    np.save(tmp_path / "s.npy", np.array(["a", "b", "c"] * 20))
    assert (
        cli_main(["probe", "--features", files["f"], "--targets", str(tmp_path / "s.npy"), "--task", "regression"]) == 2
    )
    line = _one_error_line(capsys)
    assert "numeric targets" in line and "--task classification" in line


@pytest.mark.parametrize("standardize", [True, False])
def test_kernel_loo_equals_refitting(rng, standardize):
    """Exact LOO: every prediction equals KernelRidge refitted without that sample (X, y standardised once
    on all samples), for every α and γ; the selected pair is the best LOO R²."""
    x = rng.normal(size=(40, 3)) * [1.0, 4.0, 0.3] + 2.0
    y = np.stack([np.sin(x[:, 0]) + x[:, 1] / 4, x[:, 2] ** 2], 1) + 0.05 * rng.normal(size=(40, 2))
    alphas, gammas = np.array([1e-2, 1e-1, 1.0]), np.array([0.05, 0.5])
    est = P.KernelRidgeCV(alphas=alphas, gammas=gammas, cv="loo", standardize=standardize).fit(x, y)
    xs = (x - x.mean(0)) / x.std(0) if standardize else x
    ym, ysd = (y.mean(0), y.std(0)) if standardize else (0.0, 1.0)
    ys = (y - ym) / ysd
    r2 = []
    for a in alphas:
        for g in gammas:
            brute = (
                np.stack(
                    [
                        KernelRidge(alpha=a, kernel="rbf", gamma=g)
                        .fit(np.delete(xs, i, 0), np.delete(ys, i, 0))
                        .predict(xs[i : i + 1])[0]
                        for i in range(40)
                    ]
                )
                * ysd
                + ym
            )
            r2.append(np.mean(1 - ((y - brute) ** 2).sum(0) / ((y - y.mean(0)) ** 2).sum(0)))
            k = torch.exp(-g * torch.cdist(torch.from_numpy(xs), torch.from_numpy(xs)) ** 2)
            ours = kernel_loo_predictions(k, torch.from_numpy(ys), torch.tensor([a], dtype=torch.float64))[0]
            np.testing.assert_allclose(ours.numpy() * ysd + ym, brute, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(est.cv_results_["mean_test_score"], r2, rtol=1e-7, atol=1e-10)
    assert est.best_index_ == int(np.argmax(r2)) and est.cv_scores_per_target_.shape == (6, 1, 2)
    with pytest.raises(ValueError, match="'loo'"):
        P.KernelRidgeCV(cv="lou").fit(x, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isfinite(est.score(x, y))


def test_seed_shuffles_the_unstratified_folds(files, capsys):
    assert cli_main(_probe(files, "y", "classification", "--no-stratify", "--seed", "3")) == 0

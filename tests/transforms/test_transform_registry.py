"""The open test-transform registry: a user's transform registered with ``invfast.transforms.register`` is
found by name everywhere a built-in is (``get``, ``measure_invariance``, ``invfast measure``), its scores
equal a direct float64 computation, the contract is checked with clear errors, and the names removed in 0.4
(``transforms.SYNTHETIC``, ``synthetic.TRANSFORMATIONS``) are gone."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch

import invfast
import invfast.transforms as T
from invfast import FeatureStats, invariance_scores

GRID = torch.linspace(0.5, 2.0, 7)  # 1.0 is the 3rd point: the identity


def _gamma(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    return x.unsqueeze(1) ** g.view(1, -1, 1, 1, 1)


@pytest.fixture
def registered():
    """Names registered by a test, unregistered afterwards whatever happens."""
    names: list[str] = []
    yield names
    for n in names:
        if n in T.names():
            try:
                T.unregister(n)
            except ValueError:  # a built-in already restored
                pass


def test_register_get_and_apply(registered, rng):
    t = T.register("gamma", grid=lambda k: torch.linspace(0.5, 2.0, k), apply=_gamma, family="appearance", identity=1.0)
    registered.append("gamma")
    assert T.get("gamma") is t and "gamma" in T.names() and T.names()[:18] == T.TEST_TRANSFORMS
    assert t.family == "appearance" and t.param_dim == 1 and not t.builtin and T.get("rotation").builtin
    assert torch.equal(t.grid(7), GRID) and t.grid(7).dtype == torch.float32
    assert t.is_identity(t.grid(7)).tolist() == [False, False, True, False, False, False, False]
    x8 = torch.from_numpy(rng.integers(0, 256, (3, 3, 10, 12), dtype=np.uint8))
    y8 = t.apply(x8, GRID)
    assert y8.shape == (3, 7, 3, 10, 12) and y8.dtype == torch.uint8
    ref = np.round(255 * (x8.numpy()[:, None] / 255.0) ** GRID.double().numpy()[None, :, None, None, None])
    diff = np.abs(y8.numpy().astype(np.float64) - ref)
    assert diff.max() <= 1 and (diff == 0).mean() > 0.99  # float32 pow vs float64: a rare half-level tie
    xf = x8.float() / 255
    torch.testing.assert_close(t(xf, GRID[3:]), _gamma(xf, GRID[3:]).clamp(0, 1), atol=0, rtol=0)
    with pytest.raises(ValueError, match="fill is only for the built-in geometric"):
        t.apply(xf, GRID, fill=0.5)
    with pytest.raises(ValueError, match=r"params must be 1-D \[P\]"):
        t.apply(xf, torch.ones(2, 2))


def test_decorator_vector_params_fixed_grid_and_callable_identity(registered):
    @T.register("roll", grid=[[0, 0], [1, 0], [0, -2], [3, 1]], family="spatial", identity=(0, 0))
    def roll(x, p):
        return torch.stack([torch.roll(x, (int(dy), int(dx)), dims=(-2, -1)) for dx, dy in p.tolist()], 1)

    registered.append("roll")
    assert isinstance(roll, T.TestTransform) and roll.param_dim == 2 and roll.family == "spatial"
    assert roll.grid(1).shape == (4, 2) and roll.grid(100).shape == (4, 2)  # a fixed grid, whatever k
    assert roll.is_identity(roll.grid()).tolist() == [True, False, False, False]
    x = torch.rand(2, 3, 6, 7)
    y = roll.apply(x, roll.grid())
    assert torch.equal(y[:, 2], torch.roll(x, (-2, 0), dims=(-2, -1)))
    t = T.register(
        "noop",
        grid=lambda k: torch.arange(k, dtype=torch.float64),
        apply=lambda x, p: _gamma(x, p * 0 + 1),
        family="appearance",
        identity=lambda p: p == 0,
        param_dim=1,
    )
    registered.append("noop")
    assert t.is_identity(t.grid(3)).tolist() == [True, False, False]


def test_overwrite_and_unregister(registered):
    with pytest.raises(
        ValueError, match="'rotation' is a built-in test transform; choose another name, or pass overwrite=True"
    ):
        T.register("rotation", grid=[0.0, 1.0], apply=_gamma, family="spatial")
    mine = T.register("rotation", grid=[0.5, 2.0], apply=_gamma, family="appearance", overwrite=True)
    registered.append("rotation")
    assert T.get("rotation") is mine
    T.unregister("rotation")
    assert T.get("rotation").builtin and T.get("rotation").family == "spatial"
    with pytest.raises(ValueError, match="only registered transforms can be unregistered"):
        T.unregister("rotation")
    T.register("gamma", grid=GRID, apply=_gamma, family="appearance")
    registered.append("gamma")
    with pytest.raises(ValueError, match="'gamma' is already registered"):
        T.register("gamma", grid=GRID, apply=_gamma, family="appearance")
    T.register("gamma", grid=GRID[:2], apply=_gamma, family="appearance", overwrite=True)
    assert T.get("gamma").grid().shape == (2,)
    T.unregister("gamma")
    with pytest.raises(ValueError, match="unknown transform 'gamma'"):
        T.get("gamma")
    with pytest.raises(ValueError, match="unknown transform 'gamma'"):
        T.unregister("gamma")


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"name": "my gamma"}, ValueError, "letters, digits"),
        ({"name": "a,b"}, ValueError, "no commas"),
        ({"name": ""}, ValueError, "letters, digits"),
        ({"name": 3}, ValueError, "letters, digits"),
        ({"name": "all"}, ValueError, "selects a group"),
        ({"name": "spatial"}, ValueError, "selects a group"),
        ({"family": "colour"}, ValueError, "family must be one of spatial, appearance"),
        ({"apply": "x ** g"}, TypeError, "apply must be a callable"),
        ({"grid": torch.ones(2, 2, 2)}, ValueError, r"shape \[P\] or \[P, m\]"),
        ({"grid": []}, ValueError, r"shape \[P\] or \[P, m\]"),
        ({"grid": [1.0, float("nan")]}, ValueError, "NaN"),
        ({"grid": "1,2"}, TypeError, "float array"),
        ({"param_dim": 2}, ValueError, "param_dim=2 but the grid has shape"),
        ({"param_dim": 0}, ValueError, "param_dim must be a positive int"),
        ({"check": "p > 0"}, TypeError, "check must be a callable params -> None"),
        ({"identity": (1.0, 2.0)}, ValueError, r"identity must be None, a callable or 1 finite"),
        ({"identity": lambda p: p[:1] == 1}, ValueError, r"identity\(params\) must return bool \[P\]"),
        (
            {"apply": lambda x, p: x},
            ValueError,
            r"returned shape \(2, 3, 16, 16\), expected \[B, P, C, H, W\] = "
            r"\[2, 2, 3, 16, 16\]",
        ),
        ({"apply": lambda x, p: (_gamma(x, p) * 255).to(torch.uint8)}, TypeError, "floating images"),
        ({"apply": lambda x, p: _gamma(x, p).numpy()}, TypeError, "must return a torch.Tensor"),
        (
            {"apply": lambda x, p: 1 / 0},
            ValueError,
            r"probe call apply\(images \[2, 3, 16, 16\] float32, grid\(8\)\[:2\]\) "
            "failed: ZeroDivisionError",
        ),
    ],
)
def test_registration_errors_name_the_problem(kwargs, error, match):
    args = {"name": "bad-one", "grid": GRID, "apply": _gamma, "family": "appearance", **kwargs}
    name = args.pop("name")
    with pytest.raises(error, match=match):
        T.register(name, **args)
    assert "bad-one" not in T.names()


def test_a_check_runs_on_every_call_with_its_own_message(registered):
    def positive(p: torch.Tensor) -> None:
        if bool((p <= 0).any()):
            raise ValueError(f"gamma: exponents must be > 0, got {p.min().item():g}")

    t = T.register("gamma", grid=GRID, apply=_gamma, family="appearance", identity=1.0, check=positive)
    registered.append("gamma")
    x = torch.rand(2, 3, 8, 8)
    assert t.apply(x, GRID).shape == (2, 7, 3, 8, 8)
    with pytest.raises(ValueError, match="exponents must be > 0, got -1"):
        t.apply(x, [1.0, -1.0])
    with pytest.raises(ValueError, match="exponents must be > 0, got 0"):
        t.is_identity([0.0])
    with pytest.raises(ValueError, match="exponents must be > 0"):
        T.register("gamma0", grid=[0.0, 1.0], apply=_gamma, family="appearance", check=positive)


@pytest.mark.parametrize(
    "name, bad", [("scale", [-1.0]), ("posterize", [9.0]), ("hue", [0.7]), ("crop", [[0.0, 0.0, 2.0, 2.0]])]
)
def test_a_builtin_is_its_record_registered_like_a_users_transform(registered, rng, name, bad):
    """The 18 are registered by ``register(name, apply=<their record>, ...)``: the same record under a new name
    is a transform equal to the built-in on uint8 and float input, with fill, identity mask and checks."""
    from invfast.transforms.builtin import RECORDS

    rec, b = RECORDS[name], T.get(name)
    t = T.register(
        f"my-{name}",
        grid=rec.grid,
        apply=rec,
        family=rec.family,
        identity=rec.identity,
        param_dim=rec.param_dim,
        check=rec.check,
    )
    registered.append(f"my-{name}")
    assert t.builtin and t.family == b.family and t.param_dim == b.param_dim
    x8 = torch.from_numpy(rng.integers(0, 256, (2, 3, 20, 18), dtype=np.uint8))
    p = b.grid(8)
    assert torch.equal(t.grid(8), p) and torch.equal(t.is_identity(p), b.is_identity(p))
    for x in (x8, x8.double() / 255):
        assert torch.equal(t.apply(x, p[:4], fill=0.5), b.apply(x, p[:4], fill=0.5))
    with pytest.raises(ValueError) as theirs:
        b.apply(x8, bad)
    with pytest.raises(ValueError) as mine:
        t.apply(x8, bad)
    assert str(mine.value).replace(f"my-{name}", name) == str(theirs.value)


def test_every_apply_result_is_checked(registered):
    calls = []

    def flaky(x, p):  # right on the probe, wrong later
        calls.append(1)
        return _gamma(x, p) if len(calls) == 1 else _gamma(x, p)[:, :1]

    t = T.register("flaky", grid=GRID, apply=flaky, family="appearance")
    registered.append("flaky")
    with pytest.raises(ValueError, match=r"'flaky': apply returned shape \(1, 1, 3, 8, 8\), expected"):
        t.apply(torch.rand(1, 3, 8, 8), GRID[:3])


def _manual_scores(model, x: torch.Tensor, grid: torch.Tensor, identity: torch.Tensor):
    """Features of the original and gamma-transformed images, FeatureStats (trace shrinkage, eps 1e-6,
    measure_invariance's defaults) and invariance_scores, all in float64 by hand; with the whitener's
    Cholesky factor [D, D]."""
    with torch.no_grad():
        f_ref = model(x).double()
        views = (x.double().unsqueeze(1) ** grid.double().view(1, -1, 1, 1, 1)).float()  # [N, P, 3, H, W]
        f_t = model(views.flatten(0, 1)).double().view(x.shape[0], grid.shape[0], -1)
    stats = FeatureStats().update(f_ref).finalize(shrinkage="trace", eps=1e-6)
    sc = invariance_scores(f_ref, f_t, stats)
    keep = ~identity
    return sc["distance"].double(), sc["cosine"].double(), keep, stats.chol_


def test_measure_a_registered_transform_equals_the_direct_computation(registered, rng):
    from registry_helpers import tiny_net

    T.register("gamma", grid=lambda k: torch.linspace(0.5, 2.0, k), apply=_gamma, family="appearance", identity=1.0)
    registered.append("gamma")
    model = tiny_net(seed=int(rng.integers(1000))).eval()
    x = torch.from_numpy(rng.random((20, 3, 12, 12), dtype=np.float32))
    res = invfast.measure_invariance(
        model, x, transforms=["gamma", "hflip"], grid_size=7, batch_size=8, normalize=False
    )
    assert list(res.transforms) == ["gamma", "hflip"]
    r = res.transforms["gamma"]
    assert r.family == "appearance" and r.identity.tolist() == [False, False, True, False, False, False, False]
    d, c, keep, chol = _manual_scores(model, x, GRID, r.identity)
    # measure whitens float32 features in float32: the error grows with the condition number of the
    # whitener (a random tanh net can give near-constant features), as in test_metrics
    tol = max(1e-4, 30 * np.finfo(np.float32).eps * np.linalg.cond(chol.numpy()))
    torch.testing.assert_close(r.distance, d.mean(0), atol=tol, rtol=tol)
    torch.testing.assert_close(r.cosine, c.mean(0), atol=tol, rtol=tol)
    assert r.mean_distance == pytest.approx(float(d[:, keep].mean()), rel=tol)
    assert r.mean_cosine == pytest.approx(float(c[:, keep].mean()), rel=tol, abs=tol)
    # the tolerance still tells the transform from another: the grid reversed is far outside it
    d_rev, _, _, _ = _manual_scores(model, x, GRID.flip(0), r.identity.flip(0))
    assert (r.distance - d_rev.mean(0)).abs().max() > 10 * tol * d_rev.mean(0).abs().max()
    assert r.identity_distance == pytest.approx(0.0, abs=1e-6)  # gamma 1 changes nothing
    # passing the object gives the same numbers; 'all' stays the 18 built-ins, 'all,gamma' adds it
    again = invfast.measure_invariance(
        model, x, transforms=[T.get("gamma")], grid_size=7, batch_size=8, normalize=False
    )
    assert again.transforms["gamma"].mean_distance == pytest.approx(r.mean_distance, rel=1e-12)
    from invfast.measure.selection import resolve_transforms

    assert [t.name for t in resolve_transforms("all")] == list(T.TEST_TRANSFORMS)
    assert [t.name for t in resolve_transforms("all,gamma")][-1] == "gamma"


def test_measure_cli_measures_a_transform_registered_by_the_model_module(tmp_path, cli_env, monkeypatch, capsys):
    from invfast.cli import main

    monkeypatch.delitem(sys.modules, "registry_helpers", raising=False)  # the CLI's import registers it
    if "gamma-cli" in T.names():
        T.unregister("gamma-cli")
    x = torch.from_numpy(np.random.default_rng(0).random((20, 3, 12, 12), dtype=np.float32))
    np.save(tmp_path / "x.npy", (x.numpy() * 255).round().astype(np.uint8))
    try:
        rc = main(
            [
                "measure",
                "--model",
                "registry_helpers:tiny_net",
                "--data",
                f"npy:{tmp_path / 'x.npy'}",
                "--transforms",
                "gamma-cli,vflip",
                "--grid-size",
                "5",
                "--images",
                "0",
                "--no-progress",
                "--no-plots",
                "--no-normalize",
                "--out",
                str(tmp_path / "out"),
            ]
        )
        assert rc == 0, capsys.readouterr().err
        doc = json.loads((tmp_path / "out" / "result.json").read_text())
        names = [t["name"] for t in doc["transforms"]]
        assert names == ["gamma-cli", "vflip"]
        assert "| gamma-cli |" in capsys.readouterr().out
    finally:
        if "gamma-cli" in T.names():
            T.unregister("gamma-cli")
    # without the module, the name is unknown: a usage error naming the valid ones
    assert (
        main(
            [
                "measure",
                "--model",
                "resnet18-cifar",
                "--data",
                f"npy:{tmp_path / 'x.npy'}",
                "--transforms",
                "gamma-cli",
                "--out",
                str(tmp_path / "o2"),
                "--no-progress",
            ]
        )
        == 2
    )
    assert "unknown transform 'gamma-cli'" in capsys.readouterr().err


def test_removed_names_are_gone():
    """0.4 removed the old names (``TEST_TRANSFORMS`` and ``TRANSFORMATION_TYPES`` replace them)."""
    import invfast.synthetic as S

    for module, name in ((T, "SYNTHETIC"), (S, "TRANSFORMATIONS"), (T, "NOPE"), (S, "NOPE")):
        with pytest.raises(AttributeError, match=f"no attribute '{name}'"):
            getattr(module, name)


def test_contributing_recipe_a_registered_transform_is_listed_and_previewed_by_the_cli(tmp_path, cli_env, capsys):
    """CONTRIBUTING's recipe, followed as written: a module that calls register() makes the transform appear in
    ``invfast transforms`` (a fresh process, as from a shell, with ``--import``) and in its preview."""
    import os
    import subprocess

    from invfast.cli import main

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(os.path.dirname(__file__)), *sys.path])}
    res = subprocess.run(
        [sys.executable, "-m", "invfast", "transforms", "--import", "registry_helpers"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    listed = [line.split()[0] for line in res.stdout.splitlines()]
    assert listed[:18] == list(T.TEST_TRANSFORMS) and listed[18:] == ["gamma-cli"]
    assert "gamma-cli    appearance grid (5,)" in res.stdout
    sys.modules.pop("registry_helpers", None)
    if "gamma-cli" in T.names():
        T.unregister("gamma-cli")
    try:
        out = tmp_path / "sheet.png"
        assert main(["transforms", "--import", "registry_helpers", "--preview", str(out), "--names", "gamma-cli"]) == 0
        assert out.stat().st_size > 0 and "1 transforms" in capsys.readouterr().out
    finally:
        if "gamma-cli" in T.names():
            T.unregister("gamma-cli")
    assert main(["transforms", "--import", "no_such_module_xyz"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--import 'no_such_module_xyz': cannot import it" in err[0]


@pytest.mark.parametrize("module", ["", ".helpers", "./registry_helpers.py", "pkg/mod", "os.path:join"])
def test_transforms_import_needs_a_dotted_module_name(module, capsys):
    from invfast.cli import main

    assert main(["transforms", "--import", module]) == 2
    err = capsys.readouterr().err.strip()
    assert "give an absolute dotted module name" in err and "\n" not in err


def test_a_refused_registration_in_an_imported_module_is_one_line(tmp_path, capsys, monkeypatch):
    from invfast.cli import main

    (tmp_path / "bad_registration_mod.py").write_text(
        "import invfast.transforms as T\n"
        "T.register('bad-reg', grid=[0.0, 1.0], apply=lambda x, p: [1, 2], family='appearance')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert main(["transforms", "--import", "bad_registration_mod"]) == 2
    finally:
        sys.modules.pop("bad_registration_mod", None)
    err = capsys.readouterr().err.strip()
    assert "--import 'bad_registration_mod'" in err and "must return a torch.Tensor" in err and "\n" not in err
    assert "bad-reg" not in T.names()


def test_the_listing_shows_the_names_asked_for(capsys):
    """``invfast transforms --names a b`` lists a and b (it listed every transform, the names only checked)."""
    from invfast.cli import main

    assert main(["transforms", "--names", "rotation", "hflip"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split()[0] for line in lines] == ["rotation", "hflip"]

"""Per-layer measurement: hooks against a manual forward, every layer from one pass equal to measuring it
alone, per-unit variances against float64 numpy on stored activations, names, warnings, pair files, resume."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from measure_helpers import HFlip, Rot90

from invfast.measure import InvarianceResult, MeasureConfig, measure_invariance
from invfast.measure.extractor import FeatureExtractor
from invfast.measure.layers import resolve_layers
from invfast.models import create

pytestmark = pytest.mark.usefixtures("one_thread")


def _net(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    m = create("resnet18-cifar", width=4).eval()
    with torch.no_grad():  # non-trivial BN statistics, so every layer's activations differ per image
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.2, 0.2)
                mod.running_var.uniform_(0.5, 1.5)
    return m


def _manual_stages(model: torch.nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """GAP of the output of each ResNet stage, by running stem and blocks by hand (no hooks)."""
    from invfast.models.resnet import LAYOUTS

    counts = LAYOUTS[model.depth][1]
    h = model.stem(x)
    out, b = {}, 0
    for i, n in enumerate(counts):
        for _ in range(n):
            h = model.blocks[b](h)
            b += 1
        out[f"layer{i + 1}"] = h.mean((2, 3))
    return out


def test_hooks_equal_a_manual_forward(rng):
    model = _net()
    x = torch.from_numpy(rng.integers(0, 256, (5, 3, 16, 16), dtype=np.uint8))
    ext = FeatureExtractor(model, torch.device("cpu"), normalize=False, layers="all")
    assert ext.layer_names == ["layer1", "layer2", "layer3", "layer4"]
    with torch.no_grad():
        got = ext.features(x)
        ref = _manual_stages(model, x.float() / 255)
    for name in ref:
        torch.testing.assert_close(got[name], ref[name], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got["layer4"], model(x.float() / 255), rtol=1e-5, atol=1e-6)
    ext.close()
    assert not any(m._forward_hooks for m in model.modules())  # the user's model is left without hooks


class _Stage(torch.nn.Module):
    """The GAP features of one stage of ``model``, computed by hand: an independent path to that layer."""

    def __init__(self, model: torch.nn.Module, name: str) -> None:
        super().__init__()
        self.model, self.name = model, name

    def forward(self, x):
        return _manual_stages(self.model, x)[self.name]


def test_layers_from_one_pass_equal_each_layer_alone(rng):
    model = _net(1)
    x = torch.from_numpy(rng.integers(0, 256, (40, 3, 16, 16), dtype=np.uint8))
    cfg = MeasureConfig(grid_size=4, batch_size=16, normalize=False, shrinkage="ledoit-wolf", equivariance=True)
    together = measure_invariance(model, x, [Rot90(), HFlip()], cfg, layers="layer1,layer2,layer4")
    assert list(together.layers) == ["layer1", "layer2", "layer4"] and together.layer == "layer4"
    assert together.meta["layers"] == ["layer1", "layer2", "layer4"]
    for name, r in together.layers.items():
        alone = measure_invariance(_Stage(model, name), x, [Rot90(), HFlip()], cfg)
        assert r.stats["dim"] == alone.stats["dim"]
        for t in ("rot90", "hflip"):
            assert r[t].mean_distance == pytest.approx(alone[t].mean_distance, rel=1e-5)
            assert r[t].mean_cosine == pytest.approx(alone[t].mean_cosine, rel=1e-4, abs=1e-6)
            torch.testing.assert_close(r[t].per_image_cosine, alone[t].per_image_cosine, rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(
                r[t].unit_transform_variance, alone[t].unit_transform_variance, rtol=1e-5, atol=1e-9
            )
            torch.testing.assert_close(r[t].linear_equivariance, alone[t].linear_equivariance, rtol=1e-4, atol=1e-5)


def test_per_unit_variances_against_numpy(rng):
    """Transformational variance (over an image's views, averaged over images), sample variance (over
    images, averaged over views), their ratio and tmeasures's normalized variance (a ratio of standard
    deviations, ddof 1), identity view included once, vs float64 numpy (activations recomputed here, so
    float32 rounding of another batching: rtol 1e-4; tests/measure/test_measure_units.py checks 1e-12)."""
    model = _net(2)
    x = torch.from_numpy(rng.integers(0, 256, (30, 3, 16, 16), dtype=np.uint8))
    t = Rot90()
    params = t.grid(4)  # 0, 90, 180, 270: identity in the grid, so it is one of the 4 views
    r = measure_invariance(
        model, x, [t], grid_size=4, batch_size=7, forward_batch=9, normalize=False, layers="layer2,layer4"
    )
    with torch.no_grad():
        views = t.apply(x, params)  # [N, V, C, H, W]
        acts = {
            n: torch.stack([_manual_stages(model, views[:, v].float() / 255)[n] for v in range(views.shape[1])], 1)
            .double()
            .numpy()
            for n in ("layer2", "layer4")
        }  # [N, V, D]
    for name, a in acts.items():
        tv = a.var(axis=1).mean(axis=0)
        sv = a.var(axis=0).mean(axis=0)
        tr = r.layers[name]["rot90"]
        np.testing.assert_allclose(tr.unit_transform_variance.numpy(), tv, rtol=1e-4, atol=1e-10)
        np.testing.assert_allclose(tr.unit_sample_variance.numpy(), sv, rtol=1e-4, atol=1e-10)
        vr = np.where(sv > 0, tv / np.where(sv > 0, sv, 1), np.nan)
        assert tr.variance_ratio == pytest.approx(float(np.nanmean(vr)), rel=1e-4)
        num, den = a.std(axis=1, ddof=1).mean(axis=0), a.std(axis=0, ddof=1).mean(axis=0)
        nv = np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)
        assert tr.n_views == 4
        np.testing.assert_allclose(tr.unit_normalized_variance.numpy(), nv, rtol=1e-4, atol=1e-10)
        assert tr.normalized_variance == pytest.approx(float(np.nanmean(nv)), rel=1e-4)


def test_reference_view_joins_when_the_grid_has_no_identity(rng):
    """Brightness factors 0.5/1.5 (no identity): the untransformed view is added as the identity."""
    from measure_helpers import Brightness

    class NoIdentity(Brightness):
        def grid(self, k):
            return torch.tensor([0.5, 1.5])

    model = _net(3)
    x = torch.from_numpy(rng.integers(0, 256, (12, 3, 16, 16), dtype=np.uint8))
    t = NoIdentity()
    r = measure_invariance(model, x, [t], grid_size=2, normalize=False, layers="layer3")
    with torch.no_grad():
        views = torch.cat([x[:, None], t.apply(x, t.grid(2))], 1)
        a = torch.stack([_manual_stages(model, views[:, v].float() / 255)["layer3"] for v in range(3)], 1).double()
    np.testing.assert_allclose(
        r[t.name].unit_transform_variance.numpy(), a.numpy().var(axis=1).mean(0), rtol=1e-4, atol=1e-10
    )


def test_names_and_errors():
    model = _net()
    assert list(resolve_layers(model, "all")) == ["layer1", "layer2", "layer3", "layer4"]
    assert resolve_layers(model, "stem,layer3,output") == {"stem": "stem", "layer3": "blocks.5", "output": None}
    assert resolve_layers(model, None) == {"output": None}
    with pytest.raises(ValueError, match="model has no layer 'layer9'"):
        resolve_layers(model, "layer9")
    with pytest.raises(ValueError, match="listed more than once"):
        resolve_layers(model, "layer1,layer1")
    flat = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())
    with pytest.raises(ValueError, match="layers='all' needs a model"):
        resolve_layers(flat, "all")
    assert resolve_layers(flat, "0") == {"0": "0"}
    with pytest.raises(ValueError, match="need an nn.Module"):
        resolve_layers(lambda v: v, "layer1")
    with pytest.raises(ValueError, match="real-world mode measures one layer"):
        from invfast.measure import measure_real_world

        measure_real_world(model, torch.rand(4, 3, 16, 16), groups=[0, 0, 1, 1], layers="layer1,layer2")


def test_n_below_d_warning_names_the_layer(rng):
    model = _net()
    x = torch.from_numpy(rng.integers(0, 256, (10, 3, 16, 16), dtype=np.uint8))
    with pytest.warns(RuntimeWarning, match=r"layer 'layer4': FeatureStats: N=10 reference samples for D=32"):
        measure_invariance(model, x, [HFlip()], grid_size=2, normalize=False, layers="layer1,layer4")


def test_pair_files_resume_and_json_per_layer(tmp_path, rng):
    model = _net(4)
    x = torch.from_numpy(rng.integers(0, 256, (12, 3, 16, 16), dtype=np.uint8))
    cfg = MeasureConfig(
        grid_size=4,
        batch_size=4,
        forward_batch=8,
        normalize=False,
        layers=("layer1", "layer3"),
        state_path=str(tmp_path / "state.pt"),
        save_every=0,
        pair_scores_dir=str(tmp_path / "pairs"),
    )
    full = measure_invariance(model, x, [Rot90()], cfg.replace(state_path=None, pair_scores_dir=None))
    calls, orig = [0], model.forward

    def killing(v):
        calls[0] += 1
        if calls[0] > 5:  # 3 calls of statistics, 2 of scores, then the kill
            raise KeyboardInterrupt
        return orig(v)

    model.forward = killing
    with pytest.raises(KeyboardInterrupt):
        measure_invariance(model, x, [Rot90()], cfg)
    model.forward = orig
    resumed = measure_invariance(model, x, [Rot90()], cfg)
    assert resumed.meta["resumed"]
    for name in ("layer1", "layer3"):
        a, b = full.layers[name]["rot90"], resumed.layers[name]["rot90"]
        assert a.mean_cosine == pytest.approx(b.mean_cosine, rel=1e-9)
        torch.testing.assert_close(a.unit_sample_variance, b.unit_sample_variance, rtol=1e-9, atol=1e-12)
        files = b.pair_scores
        assert files["cosine"].endswith(f"rot90.{name}.cosine.npy") and os.path.exists(files["cosine"])
        pc = np.load(files["cosine"])
        assert pc.shape == (12, 4) and not np.isnan(pc).any()
        np.testing.assert_allclose(pc[:, ~b.identity.numpy()].mean(1), b.per_image_cosine.numpy(), rtol=1e-5)
    back = InvarianceResult.from_json(resumed.to_json())
    assert list(back.layers) == ["layer1", "layer3"] and back.layer == "layer3"
    assert back.layers["layer1"]["rot90"].normalized_variance == pytest.approx(
        resumed.layers["layer1"]["rot90"].normalized_variance
    )
    assert json.loads(resumed.to_json())["layers"][0]["layer"] == "layer1"


def test_cli_layers_end_to_end(tmp_path, monkeypatch, capsys, rng):
    """`invfast measure --layers all`: every layer's numbers in result.json, a row per layer, depth.png."""
    from invfast.cli import main

    monkeypatch.syspath_prepend(os.path.dirname(os.path.abspath(__file__)))
    monkeypatch.syspath_prepend(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    x = rng.integers(0, 256, (40, 3, 16, 16), dtype=np.uint8)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out"
    code = main(
        [
            "measure",
            "--model",
            "resnet18-cifar",
            "--data",
            f"npy:{tmp_path / 'x.npy'}",
            "--transforms",
            "hflip,rotation",
            "--grid-size",
            "4",
            "--images",
            "0",
            "--layers",
            "all",
            "--no-progress",
            "--out",
            str(out),
            "--pair-scores",
            "--equivariance",
        ]
    )
    assert code == 0, capsys.readouterr().err
    d = json.loads((out / "result.json").read_text())
    assert [p["layer"] for p in d["layers"]] == ["layer1", "layer2", "layer3", "layer4"] and d["layer"] == "layer4"
    assert (out / "depth.png").stat().st_size > 0
    assert all(f"resnet18-cifar [layer{i}]" in (out / "table.md").read_text() for i in range(1, 5))
    assert sorted(os.listdir(out / "pairs"))[:2] == ["hflip.layer1.cosine.npy", "hflip.layer1.distance.npy"]
    r = InvarianceResult.from_json(out / "result.json")
    assert r.layers["layer2"]["rotation"].normalized_variance is not None
    assert "linear equivariance" in (out / "table.md").read_text()
    for lay in r.layers.values():
        eq = lay["rotation"].linear_equivariance
        assert eq.shape == (4,) and bool((eq <= 1).all()) and lay["rotation"].mean_linear_equivariance is not None
    from invfast import report

    assert len(report.plot_depth(r).axes) == 4  # cosine, distance, normalized variance, equivariance
    for lay in r.layers.values():
        for t in lay.transforms.values():
            t.linear_equivariance = None
    assert len(report.plot_depth(r).axes) == 3
    r.layers["layer1"].stats = {"n": 12, "dim": 64, "shrinkage": "trace"}  # N <= D: marked (issue 62)
    r.layers["layer2"].stats = {"n": 12, "dim": 64, "shrinkage": "ledoit-wolf"}  # made up for: not marked
    r.layers["layer3"].stats = r.layers["layer4"].stats = {"n": 500, "dim": 64, "shrinkage": "trace"}
    fig = report.plot_depth(r)
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert ticks == ["layer1\n(N ≤ D)", "layer2", "layer3", "layer4"]
    assert any("N ≤ D" in t.get_text() for t in fig.texts)


@pytest.mark.slow
def test_two_ranks_equal_one_process_at_every_layer(tmp_path, capsys, rng):
    """`--world-size 2 --layers ...`: each layer's statistics and scores reduced over the ranks equal one process."""
    from invfast.cli import main

    x = rng.integers(0, 256, (24, 3, 16, 16), dtype=np.uint8)
    np.save(tmp_path / "x.npy", x)
    base = [
        "measure",
        "--model",
        "resnet18-cifar",
        "--data",
        f"npy:{tmp_path / 'x.npy'}",
        "--transforms",
        "hflip,brightness",
        "--grid-size",
        "4",
        "--images",
        "0",
        "--layers",
        "layer2,layer4",
        "--no-progress",
        "--no-plots",
        "--shrinkage",
        "ledoit-wolf",
    ]
    assert main(base + ["--out", str(tmp_path / "one")]) == 0, capsys.readouterr().err
    assert main(base + ["--out", str(tmp_path / "two"), "--world-size", "2"]) == 0, capsys.readouterr().err
    one = InvarianceResult.from_json(tmp_path / "one" / "result.json")
    two = InvarianceResult.from_json(tmp_path / "two" / "result.json")
    assert two.meta["world_size"] == 2 and sorted(two.layers) == sorted(one.layers) == ["layer2", "layer4"]
    for layer in one.layers:
        for name, a in one.layers[layer].transforms.items():
            b = two.layers[layer].transforms[name]
            assert b.mean_distance == pytest.approx(a.mean_distance, rel=1e-5), (layer, name)
            assert b.mean_cosine == pytest.approx(a.mean_cosine, rel=1e-4, abs=1e-6), (layer, name)
            np.testing.assert_allclose(b.per_image_cosine.numpy(), a.per_image_cosine.numpy(), rtol=1e-4, atol=1e-6)
            # the per-view moments over images, merged across ranks (Chan's update in rank order)
            np.testing.assert_allclose(
                b.unit_normalized_variance.numpy(), a.unit_normalized_variance.numpy(), rtol=1e-4, atol=1e-8
            )
            assert b.n_views == a.n_views


@pytest.mark.filterwarnings("ignore:FeatureStats")
def test_the_users_model_is_left_as_it_was_given(tmp_path, rng):
    """Measuring a model in training mode with a checkpoint, channels-last and layer hooks leaves the user's
    module as it was: its weights, their memory format, every module's training flag, no hooks; also when the
    measurement fails before scoring (a state of another run)."""
    model = _net(2).train()
    model.blocks[0].eval()  # mixed flags come back as they were
    flags = [m.training for m in model.modules()]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    other = _net(3)
    torch.save(other.state_dict(), tmp_path / "other.pt")
    x = torch.from_numpy(rng.integers(0, 256, (12, 3, 16, 16), dtype=np.uint8))
    kw = dict(grid_size=4, batch_size=6, normalize=False, layers="layer1,layer4", shrinkage="ledoit-wolf")
    r = measure_invariance(model, x, [Rot90()], checkpoint=str(tmp_path / "other.pt"), channels_last=True, **kw)
    alone = measure_invariance(other.eval(), x, [Rot90()], **kw)  # the checkpoint's weights were measured
    for ly in ("layer1", "layer4"):
        assert r.layers[ly]["rot90"].mean_distance == pytest.approx(alone.layers[ly]["rot90"].mean_distance, rel=1e-4)
    assert [m.training for m in model.modules()] == flags
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert all(p.is_contiguous() for p in model.parameters())  # not converted to channels-last
    assert not any(m._forward_hooks for m in model.modules())
    state = tmp_path / "state.pt"
    measure_invariance(model, x, [HFlip()], state_path=state, **kw)
    with pytest.raises(ValueError, match="another run"):
        measure_invariance(model, x, [Rot90()], state_path=state, **kw)
    assert [m.training for m in model.modules()] == flags
    assert not any(m._forward_hooks for m in model.modules())


def _call_sizes(net: torch.nn.Module, x: torch.Tensor, threads: int, **kw) -> tuple[list[int], dict, dict]:
    """The batch sizes of every call of ``net`` while one extractor (``**kw``) gives the features and units of
    ``x`` twice at ``threads`` torch threads, and those features and units (the second time's)."""
    sizes: list[int] = []
    hook = net.register_forward_pre_hook(lambda m, a: sizes.append(a[0].shape[0]))
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    ex = FeatureExtractor(
        net, torch.device("cpu"), normalize=False, layers=["layer1", "layer3"], units="elements", **kw
    )
    try:
        with torch.no_grad():
            ex.features_and_units(x)
            got = ex.features_and_units(x)
        assert torch.get_num_threads() == threads  # restored after the split call
    finally:
        torch.set_num_threads(before)
        hook.remove()
        ex.close()
    return sizes, *got


def test_split_forward_gives_each_thread_sub_batches_and_the_same_features():
    """On the CPU a model call runs as sub-batches: no more than images / threads each (every thread has work),
    taken by the threads in turn, after one one-image call per input shape that measures the activations; the
    features equal one whole-batch call."""
    net, x = _net(3), torch.randn(13, 3, 16, 16)
    whole, want, want_units = _call_sizes(net, x, 1, split_forward=False)
    assert whole == [13, 13]  # off: one call per chunk, nothing measured
    for threads in (1, 3):
        sizes, got, got_units = _call_sizes(net, x, threads)
        # 1 thread: the activations (4 KiB per image) bound nothing here; 3 threads: 13 images as 5 + 5 + 3
        assert sizes[0] == 1 and sorted(sizes[1:]) == ([13, 13] if threads == 1 else [3, 3, 5, 5, 5, 5])
        for name in want:
            assert torch.equal(got[name], want[name]) and not got[name].requires_grad
            assert torch.equal(got_units[name], want_units[name])


def test_split_forward_bounds_each_calls_largest_activation(monkeypatch):
    """Sub-batches hold the most images whose largest activation fits ``CALL_ACTIVATION_BYTES``: this net's
    largest is its stem's 4 channels x 16 x 16 float32 (4 096 bytes per image), so 9 000 bytes give 2 images."""
    import invfast.measure.extractor as extractor

    monkeypatch.setattr(extractor, "CALL_ACTIVATION_BYTES", 9000)
    net, x = _net(4), torch.randn(13, 3, 16, 16)
    _, want, want_units = _call_sizes(net, x, 1, split_forward=False)
    for threads in (1, 2):
        sizes, got, got_units = _call_sizes(net, x, threads)
        assert sizes[0] == 1 and sorted(sizes[1:]) == [1, 1] + [2] * 12
        for name in want:  # oneDNN picks another algorithm for 2 images than for 13: equal up to float rounding
            torch.testing.assert_close(got[name], want[name], rtol=1e-6, atol=1e-6)
            torch.testing.assert_close(got_units[name], want_units[name], rtol=1e-5, atol=1e-5)
    monkeypatch.setattr(extractor, "CALL_ACTIVATION_BYTES", 100)  # below one image: one image per call
    sizes, got, _ = _call_sizes(net, x, 2)
    assert sizes[1:] == [1] * 26
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-6, atol=1e-6)


def test_split_forward_calls_a_model_that_fails_on_one_image_split_over_the_threads():
    class NeedsTwo(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = _net(5)

        def forward(self, x):
            if x.shape[0] < 2:
                raise ValueError("needs a batch of two")
            return self.net(x)

    m, x = NeedsTwo(), torch.randn(9, 3, 16, 16)
    sizes: list[int] = []
    hook = m.register_forward_pre_hook(lambda mod, a: sizes.append(a[0].shape[0]))
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with torch.no_grad():
            got = FeatureExtractor(m, torch.device("cpu"), normalize=False).features(x)
    finally:
        torch.set_num_threads(threads)
        hook.remove()
    with torch.no_grad():
        want = m.net(x)
    assert sizes[0] == 1 and sorted(sizes[1:]) == [4, 5]
    assert torch.allclose(got["output"], want, rtol=1e-6, atol=1e-6)


def test_split_forward_passes_a_models_error_on():
    class Broken(torch.nn.Module):
        def forward(self, x):
            raise RuntimeError("broken model")

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        ex = FeatureExtractor(Broken(), torch.device("cpu"), normalize=False)
        with pytest.raises(RuntimeError, match="broken model"):
            ex.features(torch.rand(4, 3, 8, 8))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
    with pytest.raises(TypeError, match=r"split_forward must be True or False \(or None\)"):
        MeasureConfig(split_forward="yes")

import pytest

pytest.importorskip("skimage")

from invfast.cli import main  # noqa: E402
from invfast.demo import SPATIAL, run_demo  # noqa: E402


def test_dihedral_average_is_exactly_invariant_to_spatial_transforms():
    res = run_demo(n_ref=48, n_test=16, size=32, seed=1)
    for t in SPATIAL:
        assert res["convnet-d4"][t]["cosine"] == pytest.approx(1.0, abs=1e-5)
        assert res["convnet-d4"][t]["distance"] == pytest.approx(0.0, abs=1e-3)
        assert res["convnet"][t]["cosine"] < 0.99
    for t in ("invert", "grayscale"):
        assert res["convnet-d4"][t]["cosine"] < 0.99


def test_cli_demo_and_info(capsys, tmp_path):
    assert main(["info"]) == 0
    assert "cpp" in capsys.readouterr().out
    assert main(["demo", "--images", "8", "--reference", "40", "--size", "32", "--json", str(tmp_path / "d.json")]) == 0
    out = capsys.readouterr().out
    assert "| convnet-d4 (cosine) |" in out and (tmp_path / "d.json").exists()


def test_cli_bench_runs(capsys):
    from invfast.bench import run_bench

    rows = run_bench(n=8, p=3, d=16, n_uniform=50, repeat=1)
    assert len(rows) == 2 and all(r["auto_s"] > 0 and r["reference_s"] > 0 for r in rows)

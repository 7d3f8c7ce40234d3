import subprocess
import sys

import pytest
import torch

import invfast as ivf
from invfast import backend


def test_backend_info_keys():
    info = ivf.backend_info()
    for key in ("cpp", "cuda", "dali", "threads", "version", "torch", "compiled_ops", "mode"):
        assert key in info
    assert info["threads"] >= 1
    if info["cpp"]:
        assert {"pair_scores", "sqdist_logsumexp"} <= set(info["compiled_ops"])


def test_modes():
    with pytest.raises(ValueError, match="backend mode must be one of"):
        backend.use("fast")
    z_ref, z_t, shift = torch.randn(3, 4), torch.randn(3, 2, 4), torch.randn(4)
    with backend.using("reference"):
        assert backend.compiled_for("pair_scores", z_ref, z_t, shift) is None
    assert backend.mode() == "auto"
    if ivf.backend_info()["cpp"]:
        with backend.using("compiled"):
            assert backend.compiled_for("pair_scores", z_ref, z_t, shift) is not None


def test_import_without_compiled_core_warns_and_falls_back(tmp_path):
    # hide the compiled module: import must still work, warn once with build instructions, and compute
    code = (
        "import sys, importlib.abc, warnings\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name == 'invfast._C': raise ImportError('hidden for test')\n"
        "sys.meta_path.insert(0, Block())\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    import invfast, torch\n"
        "assert any('pip install --no-build-isolation -e .' in str(x.message) for x in w), [str(x.message) for x in w]\n"
        "assert invfast.backend_info()['cpp'] is False\n"
        "st = invfast.FeatureStats.from_features(torch.randn(20, 3))\n"
        "out = invfast.invariance_scores(torch.randn(4, 3), torch.randn(4, 2, 3), st)\n"
        "assert out['distance'].shape == (4, 2)\n"
        "print('ok')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "ok" in res.stdout


def test_cuda_kernel_opt_in_switch(monkeypatch):
    """Unmeasured CUDA kernels serve only when asked: INVFAST_CUDA_KERNELS=1/all or a list of families,
    or mode 'compiled'; mode 'reference' always wins."""
    monkeypatch.delenv(backend.CUDA_KERNELS_ENV, raising=False)
    assert not backend.cuda_kernels_enabled("hyper")
    monkeypatch.setenv(backend.CUDA_KERNELS_ENV, "augment")
    assert backend.cuda_kernels_enabled("augment") and not backend.cuda_kernels_enabled("hyper")
    monkeypatch.setenv(backend.CUDA_KERNELS_ENV, "augment, hyper")
    assert backend.cuda_kernels_enabled("hyper")
    monkeypatch.setenv(backend.CUDA_KERNELS_ENV, "1")
    assert backend.cuda_kernels_enabled("hyper")
    with backend.using("reference"):
        assert not backend.cuda_kernels_enabled("hyper")
    monkeypatch.setenv(backend.CUDA_KERNELS_ENV, "0")
    with backend.using("compiled"):
        assert backend.cuda_kernels_enabled("augment")

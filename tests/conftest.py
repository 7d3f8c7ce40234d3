import os  # noqa: E402

import numpy as np
import pytest
import torch

#: the seed of tests marked ``statistical`` (assertions that hold with high probability, not always)
STATISTICAL_SEED = 20261123


@pytest.fixture
def rng(request):
    """A fresh, logged seed per test: inputs are random but reproducible from the failure message.

    ``INVFAST_TEST_SEED=N`` reruns with seed N. Tests marked ``statistical`` use the fixed
    ``STATISTICAL_SEED`` (stable CI) unless ``INVFAST_TEST_SEED`` is set (``random``: a fresh one).
    """
    env = os.environ.get("INVFAST_TEST_SEED", "")
    if env and env != "random":
        seed = int(env)
    elif request.node.get_closest_marker("statistical") is not None and env != "random":
        seed = STATISTICAL_SEED
    else:
        seed = int(np.random.SeedSequence().entropy % (2**31))
    print(f"seed={seed} (rerun with INVFAST_TEST_SEED={seed})")
    torch.manual_seed(seed)
    return np.random.default_rng(seed)


@pytest.fixture(autouse=True)
def _allocator_left_alone(monkeypatch):
    """In-process runs of `invfast measure` do not cap the pytest process's heaps (a cap lasts for the process and
    would make later tests depend on the order); the cap's own tests run it in fresh processes."""
    import invfast.measure.cli as measure_cli

    monkeypatch.setattr(measure_cli, "limit_arenas", lambda *args, **kwargs: False)


@pytest.fixture
def npy(tmp_path) -> str:
    """A .npy file of 48 uint8 blob images [48, 3, 16, 16] for pretraining CLI runs (``--data npy:PATH``)."""
    from test_pretrain_fixtures import blob_images

    p = tmp_path / "x.npy"
    np.save(p, blob_images(48, size=16).numpy())
    return str(p)


@pytest.fixture
def cli_env(monkeypatch):
    """The invfast CLI run in-process on tiny models: the test helper modules importable by name
    (``--model measure_helpers:small_net``), one torch thread."""
    monkeypatch.syspath_prepend(os.path.dirname(os.path.abspath(__file__)))
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def one_thread():
    """Run on one torch thread: tiny problems are faster that way and immune to oversubscription."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


# ----------------------------------------------------------------------------------------------
# devices: every device-sensitive test runs on "cpu", on "guard" (CPU data, tensors created without
# device= land on meta and raise when they meet the data; see tests/device_guard.py) and on "cuda"
# where a GPU exists (`pytest -m cuda` selects those; `-m device_guard` the guard runs).

import contextlib  # noqa: E402
from dataclasses import dataclass  # noqa: E402

from device_guard import device_guard  # noqa: E402


@dataclass(frozen=True)
class DeviceCase:
    """Where a test puts its data (``device``) and how it runs the code under test (``run()``)."""

    name: str
    device: torch.device

    def run(self):
        """Context for the call under test: the device guard for 'guard', nothing otherwise."""
        return device_guard() if self.name == "guard" else contextlib.nullcontext()

    def check(self, *tensors: torch.Tensor) -> None:
        """Each result lives on the data's device (and is not a meta tensor)."""
        for t in tensors:
            assert t.device == self.device, f"result on {t.device}, data on {self.device}"

    def generator(self, seed: int, on: str = "cpu") -> torch.Generator:
        """A seeded generator on the CPU (``on='cpu'``) or on the data's device (``on='data'``)."""
        dev = self.device if on == "data" else torch.device("cpu")
        return torch.Generator(device=dev).manual_seed(seed)


def _cuda_device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cuda")


DEVICE_PARAMS = [
    pytest.param("cpu", id="cpu"),
    pytest.param("guard", id="guard", marks=pytest.mark.device_guard),
    pytest.param(
        "cuda",
        id="cuda",
        marks=[pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")],
    ),
]


@pytest.fixture(params=DEVICE_PARAMS)
def device(request) -> DeviceCase:
    """The device-sensitive test's data device: cpu, guard (CPU data under the device guard) or cuda."""
    name = request.param
    return DeviceCase(name, _cuda_device() if name == "cuda" else torch.device("cpu"))


@pytest.fixture
def cuda_device() -> torch.device:
    """The GPU for CPU-vs-CUDA comparisons (the test is skipped without one)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    return _cuda_device()


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "device_guard: CPU data with tensors created off-device turned into "
        "errors (tests/device_guard.py); runs in the default suite",
    )


@pytest.fixture(scope="session", autouse=True)
def _tiny_in_one_process():
    """The suite runs ``--preset tiny`` in one process (users get 2: the preset's ``workers``): tests replace stages
    in this process (monkeypatch), which worker processes would not see; the 2-process path has its own tests
    (``--workers 2`` in tests/reproduce/test_reproduce.py) and every subprocess run uses the preset as shipped."""
    from invfast.reproduce.presets import PRESETS

    saved = PRESETS["tiny"].get("run.workers")
    PRESETS["tiny"]["run.workers"] = 1
    yield
    PRESETS["tiny"]["run.workers"] = saved

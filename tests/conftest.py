import numpy as np
import pytest
import torch


@pytest.fixture
def rng():
    """A fresh, logged seed per test: inputs are random but reproducible from the failure message."""
    seed = int(np.random.SeedSequence().entropy % (2**31))
    print(f"seed={seed}")
    torch.manual_seed(seed)
    return np.random.default_rng(seed)


@pytest.fixture
def one_thread():
    """Run on one torch thread: tiny problems are faster that way and immune to oversubscription."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)

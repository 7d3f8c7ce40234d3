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

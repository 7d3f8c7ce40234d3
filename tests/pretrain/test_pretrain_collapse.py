"""Head collapse statistics (issue 57): the mean pairwise cosine of the head's outputs and the share of their
common vector, against numpy; on a MoCo model, the online network's own outputs."""

import numpy as np
import pytest
import torch
from test_pretrain_fixtures import RandomAug, TinyEncoder

from invfast.pretrain import MoCoV2
from invfast.pretrain.collapse import head_collapse, output_collapse


def _reference(z: np.ndarray) -> tuple[float, float]:
    zn = z / np.linalg.norm(z, axis=1, keepdims=True)
    c = zn @ zn.T
    return float(c[~np.eye(len(z), dtype=bool)].mean()), float(np.sum(z.mean(0) ** 2) / np.mean(np.sum(z**2, 1)))


@pytest.mark.parametrize("offset", [0.0, 3.0, 1e3])
def test_output_collapse_against_numpy(offset):
    rng = np.random.default_rng()
    z = rng.standard_normal((37, 9)) + offset * rng.standard_normal(9)  # a common vector of growing size
    got = output_collapse(torch.from_numpy(z).float())
    cos, share = _reference(z.astype(np.float32).astype(np.float64))
    assert got["cos"] == pytest.approx(cos, abs=1e-6) and got["mean_share"] == pytest.approx(share, abs=1e-6)
    if offset >= 1e3:
        assert got["cos"] > 0.999 and got["mean_share"] > 0.999


def test_output_collapse_refuses_fewer_than_two_outputs():
    with pytest.raises(ValueError, match=r"outputs must be \[N >= 2, D\], got \(1, 4\)"):
        output_collapse(torch.zeros(1, 4))


def test_head_collapse_is_the_online_networks_outputs_in_eval_mode():
    torch.manual_seed(0)
    m = MoCoV2(TinyEncoder(bn=True), RandomAug(), queue_size=16, proj_dim=8).train()
    images = torch.randint(0, 256, (10, 3, 16, 16), dtype=torch.uint8)
    got = head_collapse(m, images, size=16, batch=3)
    assert m.training and m.online.training  # the caller's mode comes back
    from invfast.pretrain.invariance import to_input

    m.eval()
    with torch.no_grad():
        z = m.online(to_input(images, 16), 0).double().numpy()
    cos, share = _reference(z)
    assert got["cos"] == pytest.approx(cos, abs=1e-6) and got["mean_share"] == pytest.approx(share, abs=1e-6)

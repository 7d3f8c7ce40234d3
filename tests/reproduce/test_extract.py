"""The stages' feature extraction is the library's FeatureExtractor (issue 60), and gives the bits the stages' own
loop gave: every encoder kind a stage extracts from, at more images than one chunk, against that loop written
out here (ImageNet normalisation, chunks of 256, eval mode, the output as float32)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from invfast.measure import WithDescriptor
from invfast.reproduce.presets import preset
from invfast.reproduce.stages.context import encoder, extract, normalise


@torch.no_grad()
def _stages_loop(model: torch.nn.Module, images: torch.Tensor, batch: int = 256) -> np.ndarray:
    model.eval()
    out = [model(normalise(images[s : s + batch])).float() for s in range(0, images.shape[0], batch)]
    return torch.cat(out).numpy()


@pytest.mark.parametrize("key", ["random", "amortised", "amortised-k5", "vit-random", "vit-amortised"])
def test_extract_gives_the_stages_loop_bits(rng, key):
    cfg = preset("tiny", {"run.seed": int(rng.integers(1000))})
    model = encoder(cfg, key)
    if key.endswith(("amortised", "amortised-k5")):
        k = 5 if key.endswith("k5") else 2
        model = WithDescriptor(model, rng.random(k).tolist())
    model.train()  # extract measures in eval mode whatever it is given, and gives the flags back
    images = torch.from_numpy(rng.integers(0, 256, (300, 3, cfg.data.size, cfg.data.size), dtype=np.uint8))
    got = extract(model, images)
    assert model.training and all(m.training for m in model.modules())
    want = _stages_loop(model, images)
    assert got.dtype == np.float32 and got.shape == want.shape and want.shape[0] == 300
    assert np.array_equal(got, want), key
    assert not np.array_equal(extract(model, images.flip(0)), want)  # the comparison can fail

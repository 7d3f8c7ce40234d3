"""Contact sheet and the ``invfast transforms`` command."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

import invfast.transforms as T
from invfast.cli import main

skimage_data = pytest.importorskip("skimage.data")


def test_contact_sheet_rotation_row_shows_exact_90_degrees():
    img = torch.from_numpy(skimage_data.astronaut()).permute(2, 0, 1)
    sheet = T.contact_sheet(img, ["rotation", "hflip"], k=8, tile=48, label=False)
    assert sheet.dtype == np.uint8 and sheet.shape == (2 * 48, 8 * 50, 3)
    tiles = [sheet[:48, c * 50 : c * 50 + 48] for c in range(8)]
    assert np.array_equal(tiles[2], np.rot90(tiles[0], 1))  # 90 degrees, counter-clockwise
    assert np.array_equal(tiles[4], np.rot90(tiles[0], 2))
    assert np.array_equal(sheet[48:, 50:98], sheet[48:, :48][:, ::-1])  # hflip
    assert (sheet[48:, 2 * 50 :] == 255).all()  # binary transforms show two tiles
    with pytest.raises(ValueError, match="valid names"):
        T.contact_sheet(img, ["spin"])
    with pytest.raises(ValueError, match="single image"):
        T.contact_sheet(img.unsqueeze(0).expand(2, -1, -1, -1), ["rotation"])


def test_cli_preview(tmp_path, capsys):
    out = tmp_path / "sheet.png"
    assert main(["transforms", "--preview", str(out), "--k", "4", "--tile", "32", "--names", "rotation", "blur"]) == 0
    im = np.asarray(Image.open(out))
    assert im.ndim == 3 and im.shape[0] == 2 * (32 + 14)
    assert main(["transforms"]) == 0
    assert "posterize" in capsys.readouterr().out

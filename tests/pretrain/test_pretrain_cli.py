"""``invfast pretrain`` end to end on small data, and every bad input named in the issue."""

import json
import math
import os

import numpy as np
import pytest
import torch

from invfast.cli import main

HERE = os.path.dirname(os.path.abspath(__file__))
TINY = "test_pretrain_fixtures:TinyEncoder"


pytestmark = pytest.mark.usefixtures("cli_env")


def args(npy, out, *extra):
    return [
        "pretrain",
        "--data",
        f"npy:{npy}",
        "--arch",
        TINY,
        "--epochs",
        "2",
        "--batch-size",
        "16",
        "--out",
        str(out),
        "--no-progress",
        "--log-every",
        "1",
        *extra,
    ]


def test_cli_trains_resumes_and_refuses_other_configs(npy, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(args(npy, out, "--policy", "spatial", "--checkpoint-every", "2")) == 0
    recs = [json.loads(x) for x in open(out / "metrics.jsonl")]
    assert [r["step"] for r in recs] == list(range(1, 7))
    ck = torch.load(out / "checkpoint.pt", weights_only=False)
    assert ck["config"]["policy"] == "spatial" and ck["config"]["method.queue_size"] == 16  # 48/8 < one batch
    assert ck["config"]["arch"] == TINY and (out / "model.pt").exists()
    # same run again without --resume: refused, nothing overwritten
    assert main(args(npy, out, "--policy", "spatial")) == 2
    assert "--resume" in capsys.readouterr().err
    # resume with another policy: the differing field is named
    assert main(args(npy, out, "--policy", "appearance", "--resume")) == 2
    err = capsys.readouterr().err
    assert "policy: checkpoint has 'spatial', this run has 'appearance'" in err
    assert main(args(npy, out, "--policy", "spatial", "--resume", "--lr", "0.1")) == 2
    assert "lr: checkpoint has" in capsys.readouterr().err
    # resume of a finished run with the same configuration is a no-op that succeeds
    assert main(args(npy, out, "--policy", "spatial", "--resume")) == 0


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--method", "byol"], "unknown method 'byol'"),
        (["--policy", "colour"], "unknown policy 'colour'"),
        (["--arch", "resnet7"], "architecture"),
        (["--batch-size", "64"], "larger than the data set (48 images)"),
        (["--queue-size", "40"], "must be divisible by the global batch size (16)"),
        (["--method", "ai-moco", "--policy", "spatial"], "drop --policy"),
        (["--descriptors", "pairs", "--method", "ai-simclr"], "unknown descriptor set 'pairs'"),
    ],
)
def test_cli_bad_input(npy, tmp_path, capsys, extra, message):
    assert main(args(npy, tmp_path / "o", *extra)) == 2
    assert message in capsys.readouterr().err


def test_cli_missing_data(tmp_path, capsys):
    base = ["pretrain", "--arch", TINY, "--out", str(tmp_path / "o"), "--no-progress"]
    assert main(base + ["--data", f"folder:{tmp_path / 'nothing'}"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(base + ["--data", "imagenet"]) == 2
    assert "must be 'synthetic:...', 'folder:PATH' or 'npy:FILE'" in capsys.readouterr().err
    assert main(base + ["--data", "synthetic:objects=3,colour=1"]) == 2
    assert "unknown synthetic data option(s) ['colour']" in capsys.readouterr().err


def test_cli_amortised_with_real_policies(npy, tmp_path):
    out = tmp_path / "ai"
    assert main(args(npy, out, "--method", "ai-moco", "--descriptors", "individual")) == 0
    ck = torch.load(out / "checkpoint.pt", weights_only=False)
    assert ck["model"]["queue.keys"].shape == (26, 16, 128)  # the default queue: one batch of 16
    assert ck["model"]["online.descriptors"].shape == (26, 5)
    names = {json.loads(x)["descriptor"] for x in open(out / "metrics.jsonl")}
    assert names and all("+" in n for n in names)


def test_cli_head_norm_reaches_the_checkpoint_and_resume_checks_it(npy, tmp_path, capsys):
    out = tmp_path / "bn"
    assert main(args(npy, out, "--head-norm", "bn")) == 0
    ck = torch.load(out / "checkpoint.pt", weights_only=False)
    assert ck["config"]["method.head_norm"] == "bn" and "online.heads.0.4.running_var" in ck["model"]
    assert main(args(npy, out, "--resume")) == 2  # a plain head would not continue a normalised one
    assert "head_norm: checkpoint has 'bn', this run has '<absent>'" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse's own refusal of a choice it does not list
        main(args(npy, tmp_path / "x", "--head-norm", "layer"))
    assert "invalid choice: 'layer'" in capsys.readouterr().err


def test_cli_synthetic_data_and_folder(tmp_path):
    out = tmp_path / "syn"
    assert (
        main(
            [
                "pretrain",
                "--data",
                "synthetic:objects=4,transforms=rotate,n=40,size=16",
                "--arch",
                TINY,
                "--method",
                "simclr",
                "--steps",
                "2",
                "--batch-size",
                "8",
                "--out",
                str(out),
                "--no-progress",
                "--invariance-every",
                "2",
                "--invariance-images",
                "16",
            ]
        )
        == 0
    )
    rec = [json.loads(x) for x in open(out / "metrics.jsonl")][-1]
    assert rec["step"] == 2 and "invariance/rot90" in rec
    from PIL import Image

    folder = tmp_path / "imgs"
    folder.mkdir()
    for i in range(10):
        Image.fromarray(np.random.default_rng(i).integers(0, 255, (20 + i, 24, 3), dtype=np.uint8)).save(
            folder / f"{i}.jpg"
        )
    assert (
        main(
            [
                "pretrain",
                "--data",
                f"folder:{folder}",
                "--arch",
                TINY,
                "--size",
                "16",
                "--steps",
                "2",
                "--batch-size",
                "4",
                "--out",
                str(tmp_path / "fold"),
                "--no-progress",
            ]
        )
        == 0
    )
    assert torch.load(tmp_path / "fold" / "checkpoint.pt", weights_only=False)["config"]["data"].startswith("folder:")


def test_workers_0_decodes_folder_images_in_the_training_process(tmp_path):
    """--workers 0 is what its help says (no DataLoader workers), not a refused value (it was: '>= 1')."""
    from PIL import Image

    folder = tmp_path / "imgs"
    folder.mkdir()
    for i in range(8):
        Image.fromarray(np.random.default_rng(i).integers(0, 255, (24, 24, 3), dtype=np.uint8)).save(
            folder / f"{i}.png"
        )
    argv = ["pretrain", "--data", f"folder:{folder}", "--arch", TINY, "--size", "16", "--steps", "2"]
    assert main([*argv, "--batch-size", "4", "--workers", "0", "--out", str(tmp_path / "o"), "--no-progress"]) == 0
    rec = [json.loads(x) for x in open(tmp_path / "o" / "metrics.jsonl")][-1]
    assert rec["step"] == 2 and math.isfinite(rec["loss"])

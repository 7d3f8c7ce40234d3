"""Two gloo processes on one global batch match one process on the same batch.

Both sides run in float64, so that an all-reduce of gradients (instead of one batch sum) changes only
the last bits: parameters, momentum buffers and queues agree to 1e-9 absolute after 6 steps. (In
float32 SimCLR's 1/temperature-scaled gradients at lr 0.5 amplified those bits to ~5e-5 on some CPUs;
a bookkeeping bug in the gather or the shuffled-BN permutation changes parameters by ~1e-2.)
The encoder has no BatchNorm here: BatchNorm statistics are per process in DDP, which legitimately
changes the result; without BatchNorm, MoCo's shuffled-BN key path must give exactly the keys of the
unshuffled one, which checks its permutation bookkeeping. The views are deterministic because the
augmentation randomness is keyed by rank (each process draws its own).
"""

import datetime
import os

import pytest
import torch
import torch.distributed as dist
from ranks import run_ranks
from test_pretrain_fixtures import FixedAug, TinyEncoder, blob_images

from invfast.data import ArraySource
from invfast.pretrain import AmortisedMoCo, MoCoV2, SimCLR, TrainConfig, Trainer
from invfast.runtime.launch import free_port

TOL = 1e-9


def build(method: str):
    torch.manual_seed(0)
    if method in ("moco", "moco-noshuffle"):  # shuffled BN (default) permutes the key batch across ranks
        return MoCoV2(
            TinyEncoder(), FixedAug(), queue_size=32, proj_dim=8, key_momentum=0.9, shuffle_bn=method == "moco"
        )
    if method == "simclr":
        return SimCLR(TinyEncoder(), FixedAug(), proj_dim=8)
    return AmortisedMoCo(TinyEncoder(k=2), [FixedAug() for _ in range(3)], queue_size=32, proj_dim=8)


def run(method: str, out: str | None):
    torch.set_num_threads(1)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        return _run(method, out)
    finally:
        torch.set_default_dtype(old)


def _run(method: str, out: str | None):
    m = build(method)
    t = Trainer(
        m,
        ArraySource(blob_images(48)),
        TrainConfig(
            batch_size=16, steps=6, size=16, lr=0.5, checkpoint_every=3, log_every=3, progress=False, device="cpu"
        ),
        out=out,
    )  # gloo: CPU even where a GPU exists
    t.fit()
    return m, t


METHODS = ("moco", "moco-noshuffle", "simclr", "amortised")


def _worker(rank: int, world: int, port: int, folder: str) -> None:
    os.environ.update(
        RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=90))
    try:
        for method in METHODS:
            m, t = run(method, os.path.join(folder, method))
            torch.save(
                {"model": m.state_dict(), "opt": t.optimizer.state_dict(), "history": t.history},
                os.path.join(folder, f"{method}-rank{rank}.pt"),
            )
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def two_process_runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ddp")
    run_ranks(_worker, 2, (2, free_port(), str(folder)))
    return folder


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed not available")
@pytest.mark.parametrize("method", METHODS)
def test_two_gloo_processes_match_one_process(two_process_runs, method):
    folder = two_process_runs
    single, t1 = run(method, None)
    ref = single.state_dict()
    r0 = torch.load(folder / f"{method}-rank0.pt", weights_only=False)
    r1 = torch.load(folder / f"{method}-rank1.pt", weights_only=False)
    for k, v in ref.items():
        for r in (r0, r1):
            torch.testing.assert_close(r["model"][k], v, rtol=0, atol=TOL, msg=f"{k} differs")
    for k, v in r0["model"].items():  # the ranks agree with each other exactly (same queue, DDP)
        assert torch.equal(v, r1["model"][k]), k
    for a, b in zip(t1.optimizer.state_dict()["state"].values(), r0["opt"]["state"].values()):
        torch.testing.assert_close(a["momentum_buffer"], b["momentum_buffer"], rtol=0, atol=TOL)
    # the logged loss is the mean over the global batch
    assert [x["loss"] for x in r0["history"]] == pytest.approx([x["loss"] for x in t1.history], abs=1e-9)
    ck = torch.load(folder / method / "checkpoint.pt", weights_only=False)
    assert ck["config"]["world_size"] == 2 and len(ck["rng"]) == 2 and ck["step"] == 6

"""Issue 59 (5): rank 0 alone lists the data folder and fingerprints its files (the others get the result), and a
two-node ``torchrun`` (two launchers on one machine) gives the numbers of one process."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch
from measure_helpers import MEASURE_CLI, image_folder, small_net
from ranks import run_ranks

from invfast.runtime.launch import free_port

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _join(rank: int, port: int) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)


class _Odd(Exception):
    def __init__(self, a: int, b: int) -> None:
        super().__init__(f"{a}/{b}")


def _first_rank_worker(rank: int, port: int, out: str) -> None:
    import torch.distributed as dist

    from invfast.measure.state import from_first_rank
    from invfast.runtime.launch import Rank

    _join(rank, port)
    shard = Rank(rank, 2)
    try:

        def compute():
            pathlib.Path(out, f"computed-by-{rank}").touch()
            return {"files": [f"a{rank}", "b"]}

        got = from_first_rank(compute, shard, "a test")

        def fails():
            raise FileNotFoundError("no folder 'x' on rank 0")

        try:
            from_first_rank(fails, shard, "a test")
            err = "no error"
        except FileNotFoundError as e:
            err = f"FileNotFoundError: {e}"
        try:  # an exception that pickles but cannot be unpickled: the others get its line as a RuntimeError
            from_first_rank(lambda: (_ for _ in ()).throw(_Odd(1, 2)), shard, "a test")
        except Exception as e:  # noqa: BLE001 - the test names what came
            odd = f"{type(e).__name__}: {e}"
        with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
            json.dump({"got": got, "error": err, "odd": odd}, f)
    finally:
        dist.destroy_process_group()


def test_from_first_rank_computes_once_and_its_error_reaches_every_rank(tmp_path):
    run_ranks(_first_rank_worker, 2, (free_port(), str(tmp_path)), deadline_s=120)
    assert sorted(p.name for p in tmp_path.glob("computed-by-*")) == ["computed-by-0"]
    for r in (0, 1):
        said = json.loads((tmp_path / f"rank{r}.json").read_text())
        assert said["got"] == {"files": ["a0", "b"]} and said["error"] == "FileNotFoundError: no folder 'x' on rank 0"
        assert said["odd"] == ("_Odd: 1/2" if r == 0 else "RuntimeError: rank 0: _Odd: 1/2")


def _measure(folder: str, **kw):
    from invfast.measure import measure_invariance

    return measure_invariance(
        small_net(), f"folder:{folder}", "rotation,hflip", grid_size=3, resize=20, batch_size=4, workers=0, **kw
    )


def _measure_worker(rank: int, port: int, folder: str, out: str) -> None:
    import torch.distributed as dist

    import invfast.data.folder
    import invfast.measure.core

    _join(rank, port)
    if rank == 1:  # any listing or fingerprinting of the files on rank 1 fails the run

        def refuse(*a, **k):
            raise AssertionError("rank 1 read the data folder's listing or files itself")

        invfast.data.folder._invfast_listing = refuse
        invfast.measure.core.files_fingerprint = refuse
    try:
        r = _measure(folder, fingerprint_content=True, state_path=os.path.join(out, "state.pt"))
        if rank == 0:
            r.to_json(os.path.join(out, "result.json"))
    finally:
        dist.destroy_process_group()


def test_only_rank_0_lists_and_fingerprints_the_folder_and_the_numbers_are_one_processs(tmp_path):
    from invfast.measure import InvarianceResult

    folder = image_folder(tmp_path / "imgs", n=30)  # N > D = 24: well conditioned
    out = tmp_path / "out"
    out.mkdir()
    run_ranks(_measure_worker, 2, (free_port(), str(folder), str(out)))
    two = InvarianceResult.from_json(out / "result.json")
    one = _measure(str(folder))
    assert two.meta["world_size"] == 2 and two.n_images == one.n_images == 30
    for name in ("rotation", "hflip"):
        torch.testing.assert_close(two[name].per_image_cosine, one[name].per_image_cosine, rtol=1e-5, atol=1e-6)
        assert two[name].mean_distance == pytest.approx(one[name].mean_distance, rel=1e-6)


CLI = [*MEASURE_CLI, "--workers", "1"]


def test_two_nodes_on_one_machine_equal_one_process(tmp_path):
    """``torchrun --nnodes 2 --node-rank R --master-addr ... --master-port ...`` started twice, as on two machines
    sharing ``--out`` (the documented multi-node command), measures what one process measures."""
    from invfast.cli import main

    folder = image_folder(tmp_path / "imgs", n=30)
    assert main([*CLI, "--data", f"folder:{folder}", "--out", str(tmp_path / "one")]) == 0
    env = {**os.environ, "PYTHONPATH": TESTS + os.pathsep + os.environ.get("PYTHONPATH", ""), "OMP_NUM_THREADS": "1"}
    port = free_port()
    nodes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes=2",
                f"--node-rank={r}",
                "--nproc-per-node=1",
                "--master-addr=127.0.0.1",
                f"--master-port={port}",
                "-m",
                "invfast",
                *CLI,
                "--data",
                f"folder:{folder}",
                "--out",
                str(tmp_path / "two"),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (0, 1)
    ]
    try:
        said = [p.communicate(timeout=300) for p in nodes]
    finally:
        for p in nodes:
            p.kill()
    for p, (o, e) in zip(nodes, said):
        assert p.returncode == 0, o[-2000:] + e[-4000:]
    one = json.loads((tmp_path / "one" / "result.json").read_text())
    two = json.loads((tmp_path / "two" / "result.json").read_text())
    assert two["meta"]["world_size"] == 2 and one["meta"]["world_size"] == 1
    for ta, tb in zip(one["transforms"], two["transforms"]):
        assert ta["name"] == tb["name"] and ta["n_images"] == tb["n_images"] == 30
        assert ta["mean_distance"] == pytest.approx(tb["mean_distance"], rel=1e-6)
        assert ta["mean_cosine"] == pytest.approx(tb["mean_cosine"], rel=1e-5, abs=1e-6)

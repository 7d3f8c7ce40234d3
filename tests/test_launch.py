"""invfast.runtime.launch.under_torchrun: the one test of whether torchrun started this process, shared by `invfast
measure` and `invfast pretrain` (they disagreed for a torchrun of one process)."""

import pytest

from invfast.runtime.launch import under_torchrun


@pytest.mark.parametrize(
    "env, started",
    [
        ({}, False),
        ({"WORLD_SIZE": "2"}, False),  # no RANK: not a launcher's environment
        ({"RANK": "0", "WORLD_SIZE": "1"}, False),  # a hand-set single process
        ({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}, True),  # torchrun --nproc-per-node 1
        ({"RANK": "1", "WORLD_SIZE": "2"}, True),
        ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, True),
    ],
)
def test_under_torchrun(env, started):
    assert under_torchrun(env) is started


def test_both_commands_use_it():
    import inspect

    from invfast.measure import cli as measure_cli
    from invfast.pretrain import cli as pretrain_cli

    for mod in (measure_cli, pretrain_cli):
        src = inspect.getsource(mod.run)
        assert "under_torchrun()" in src and "WORLD_SIZE" not in src


def test_the_group_backend_is_nccl_only_where_each_rank_has_its_own_gpu(monkeypatch):
    import torch

    from invfast.runtime.launch import group_backend

    assert group_backend(torch.device("cpu")) == "gloo"
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert group_backend(torch.device("cuda", 0)) == "nccl"
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # two ranks on one GPU: NCCL refuses them
    assert group_backend(torch.device("cuda", 0)) == "gloo"
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert group_backend(torch.device("cuda", 1)) == "nccl"

"""Trainer: exact resume (in-process and after SIGKILL), checkpoint/config checks, logs, learning."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from test_pretrain_fixtures import RandomAug, TinyEncoder, blob_images

from invfast.data import ArraySource, FolderSource
from invfast.io import atomic_torch_save
from invfast.pretrain import AmortisedMoCo, MoCoV2, SimCLR, TrainConfig, Trainer

HERE = os.path.dirname(os.path.abspath(__file__))


def make(method="moco", seed=0, bn=True):
    torch.manual_seed(seed)
    if method == "moco":
        return MoCoV2(TinyEncoder(bn=bn), RandomAug(), queue_size=32, proj_dim=8, key_momentum=0.99)
    if method == "simclr":
        return SimCLR(TinyEncoder(bn=bn), RandomAug(), proj_dim=8)
    return AmortisedMoCo(TinyEncoder(k=2, bn=bn), [RandomAug() for _ in range(3)], queue_size=32, proj_dim=8)


def cfg(**kw):
    base = dict(
        batch_size=16, epochs=3, size=16, lr=0.05, checkpoint_every=3, log_every=2, progress=False, device="cpu"
    )  # CUDA resume: tests/test_devices.py
    base.update(kw)
    return TrainConfig(**base)


def state(method):
    return {k: v.clone() for k, v in method.state_dict().items()}


def assert_bit_identical(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), f"{k} differs"


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("method", ["moco", "simclr", "amortised"])
def test_resume_is_bit_identical(tmp_path, method):
    data = ArraySource(blob_images(64))
    ref = make(method)
    t_ref = Trainer(ref, data, cfg(), out=tmp_path / "ref")
    t_ref.fit()
    # "killed" after step 8: the last checkpoint is step 6, steps 7-8 are lost and redone
    first = make(method)
    Trainer(first, data, cfg(), out=tmp_path / "run").fit(until_step=8)
    resumed = make(method, seed=123)  # a fresh process would build a fresh model
    with open(tmp_path / "run" / "metrics.jsonl", "a") as f:
        f.write('{"step": 9, "lo')  # a record cut short by the kill
    t = Trainer(resumed, data, cfg(checkpoint_every=5, log_every=1), out=tmp_path / "run")
    hist = t.fit(resume=True)
    assert t.step == 12
    assert_bit_identical(state(ref), state(resumed))
    for a, b in zip(t_ref.optimizer.state_dict()["state"].values(), t.optimizer.state_dict()["state"].values()):
        assert torch.equal(a["momentum_buffer"], b["momentum_buffer"])
    steps = [r["step"] for r in hist]
    assert steps == sorted(set(steps)) and steps[-1] == 12  # no duplicated log rows after the redo


def test_resume_after_sigkill(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(f"""
        import sys, time, torch
        sys.path[:0] = [{HERE!r}, {os.path.dirname(HERE)!r}]
        torch.set_num_threads(1)
        from test_pretrain_trainer import make, cfg
        from test_pretrain_fixtures import blob_images
        from invfast.data import ArraySource
        from invfast.pretrain import Trainer
        class Slow(ArraySource):
            def get(self, idx):
                time.sleep(0.15)
                return super().get(idx)
        m = make("moco")
        Trainer(m, Slow(blob_images(64)), cfg(epochs=6, checkpoint_every=2), out=sys.argv[1]).fit()
    """)
    )
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, str(script), str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    ck = out / "checkpoint.pt"
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if ck.exists() and torch.load(ck, weights_only=False)["step"] >= 4:
            break
        time.sleep(0.1)
    assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = torch.load(ck, weights_only=False)["step"]
    assert 4 <= killed_at < 24
    data = ArraySource(blob_images(64))
    resumed = make("moco", seed=7)
    Trainer(resumed, data, cfg(epochs=6, checkpoint_every=2), out=out).fit(resume=True)
    ref = make("moco")
    Trainer(ref, data, cfg(epochs=6, checkpoint_every=2), out=tmp_path / "ref").fit()
    assert_bit_identical(state(ref), state(resumed))
    assert not [p for p in os.listdir(out) if ".tmp" in p]


def test_checkpoint_contents_and_logs(tmp_path):
    m = make("moco")
    t = Trainer(m, ArraySource(blob_images(64)), cfg(invariance_every=6, invariance_images=32), out=tmp_path)
    hist = t.fit()
    ck = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    assert ck["step"] == 12 and ck["data_position"] == {"epoch": 3, "batch_in_epoch": 0, "images_seen": 192}
    assert {"model", "optimizer", "scheduler", "rng", "config"} <= set(ck)
    assert "queue.keys" in ck["model"] and "key.encoder.body.0.weight" in ck["model"]
    assert ck["config"]["method.queue_size"] == 32 and ck["config"]["lr"] == 0.05
    lines = [json.loads(x) for x in open(tmp_path / "metrics.jsonl")]
    assert [r["step"] for r in lines] == [2, 4, 6, 8, 10, 12] == [r["step"] for r in hist]
    assert {"loss", "lr", "images_per_s", "augment_share"} <= set(lines[0])
    inv = [r for r in lines if "invariance/rot90" in r]
    assert [r["step"] for r in inv] == [6, 12]
    assert all(-1 <= r[f"invariance/{n}"] <= 1 for r in inv for n in ("rot90", "hflip", "grayscale", "brightness"))
    assert lines[-1]["lr"] == pytest.approx(0.0, abs=1e-12)  # cosine schedule ends at 0
    header = open(tmp_path / "metrics.csv").readline().strip().split(",")
    assert header[:3] == ["step", "epoch", "loss"] and "invariance/rot90" in header
    final = torch.load(tmp_path / "model.pt", weights_only=False)
    assert set(final["encoder"]) == set(m.encoder.state_dict())


def test_resume_refuses_another_configuration(tmp_path):
    data = ArraySource(blob_images(64))
    Trainer(make(), data, cfg(), out=tmp_path).fit(until_step=3)
    with pytest.raises(ValueError, match=r"batch_size: checkpoint has 16, this run has 8"):
        Trainer(make(), data, cfg(batch_size=8), out=tmp_path).fit(resume=True)
    with pytest.raises(ValueError, match=r"method.tau"):
        m = MoCoV2(TinyEncoder(bn=True), RandomAug(), queue_size=32, proj_dim=8, key_momentum=0.99, tau=0.5)
        Trainer(m, data, cfg(), out=tmp_path).fit(resume=True)
    with pytest.raises(ValueError, match=r"arch: checkpoint has '<absent>', this run has 'x'"):
        Trainer(make(), data, cfg(), out=tmp_path, meta={"arch": "x"}).fit(resume=True)
    with pytest.raises(FileExistsError, match="--resume"):
        Trainer(make(), data, cfg(), out=tmp_path).fit()
    # bookkeeping fields may change
    Trainer(make(), data, cfg(log_every=5, checkpoint_every=4), out=tmp_path).fit(resume=True, until_step=4)


def test_a_checkpoint_of_an_older_format_is_refused_naming_it(tmp_path):
    """A checkpoint whose random draws were keyed by an older scheme would not resume bit-identically."""
    data = ArraySource(blob_images(64))
    Trainer(make(), data, cfg(), out=tmp_path).fit(until_step=3)
    path = tmp_path / "checkpoint.pt"
    ck = torch.load(path, weights_only=True)
    ck["format"] = "invfast.pretrain/1"
    atomic_torch_save(ck, path)
    with pytest.raises(ValueError, match=r"format 'invfast.pretrain/1'.*cannot be resumed exactly"):
        Trainer(make(), data, cfg(), out=tmp_path).fit(resume=True)


@pytest.mark.parametrize("schedule", ["cosine", "constant"])
def test_warmup_ramps_the_learning_rate_then_follows_the_schedule(tmp_path, schedule):
    """The lr each step ran with, against the formula written out: (s + 1) / W · base for s < W, then
    base · ½(1 + cos(π (s - W) / (S - W))) (or base); and a run with a warm-up resumes bit-identically."""
    import math

    base, total, warm = 0.05, 12, 4
    t = Trainer(make(), ArraySource(blob_images(64)), cfg(warmup_steps=warm, schedule=schedule, log_every=1))
    lrs = [r["lr"] for r in t.fit()]  # the lr after each step: that of the next step

    def expected(s):
        if s < warm:
            return base * (s + 1) / warm
        return base * (0.5 * (1 + math.cos(math.pi * (s - warm) / (total - warm))) if schedule == "cosine" else 1)

    assert lrs == pytest.approx([expected(s) for s in range(1, total + 1)], rel=1e-12, abs=1e-15)
    ref = make()
    Trainer(ref, ArraySource(blob_images(64)), cfg(warmup_steps=warm), out=tmp_path / "ref").fit()
    Trainer(make(), ArraySource(blob_images(64)), cfg(warmup_steps=warm), out=tmp_path / "run").fit(until_step=7)
    resumed = make(seed=5)
    Trainer(resumed, ArraySource(blob_images(64)), cfg(warmup_steps=warm), out=tmp_path / "run").fit(resume=True)
    assert_bit_identical(state(ref), state(resumed))
    with pytest.raises(ValueError, match=r"warmup_steps: checkpoint has 4, this run has 2"):
        Trainer(make(), ArraySource(blob_images(64)), cfg(warmup_steps=2), out=tmp_path / "run").fit(resume=True)


def test_trainer_bad_input(tmp_path):
    data = ArraySource(blob_images(20))
    with pytest.raises(ValueError, match="larger than the data set"):
        Trainer(make(), data, cfg(batch_size=32))
    with pytest.raises(ValueError, match="queue size .32. must be divisible by the global batch size .12."):
        Trainer(make(), data, cfg(batch_size=12))
    with pytest.raises(ValueError, match="schedule"):
        Trainer(make(), data, cfg(schedule="step"))
    with pytest.raises(ValueError, match="warmup_steps must be an integer >= 0, got -1"):
        Trainer(make(), ArraySource(blob_images(64)), cfg(warmup_steps=-1))
    with pytest.raises(ValueError, match=r"the warm-up \(12 steps\) must be shorter than the run \(12 steps\)"):
        Trainer(make(), ArraySource(blob_images(64)), cfg(warmup_steps=12))
    with pytest.raises(ValueError, match=r"the warm-up \(13 steps\) must be shorter than the run \(12 steps\)"):
        Trainer(make(), ArraySource(blob_images(64)), cfg(warmup_steps=13, schedule="constant"))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        FolderSource(tmp_path / "nope", 32)
    with pytest.raises(ValueError, match="holds no images"):
        FolderSource(tmp_path, 32)
    with pytest.raises(ValueError, match="3 colour channels"):
        ArraySource(torch.zeros(4, 2, 8, 8, dtype=torch.uint8))


def test_folder_source_loads_resized_images(tmp_path):
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    os.makedirs(tmp_path / "a" / "b")
    for i, (h, w) in enumerate([(20, 30), (40, 10), (16, 16)]):
        Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(
            tmp_path / "a" / ("b" if i else "") / f"{i}.png"
        )
    src = FolderSource(tmp_path, 12)
    x = src.get(torch.tensor([2, 0]))
    assert len(src) == 3 and x.shape == (2, 3, 12, 12) and x.dtype == torch.uint8


@pytest.mark.parametrize("method", ["moco", "simclr"])
def test_short_run_lowers_the_loss(method):
    torch.manual_seed(0)
    if method == "moco":
        m = MoCoV2(TinyEncoder(dim=32, bn=True), RandomAug(), queue_size=48, proj_dim=16, key_momentum=0.99)
    else:
        m = SimCLR(TinyEncoder(dim=32, bn=True), RandomAug(), proj_dim=16)
    hist = Trainer(
        m, ArraySource(blob_images(96)), cfg(epochs=25, checkpoint_every=0, log_every=15, lr=0.03, schedule="constant")
    ).fit()
    # MoCo's first steps compare against the random initial queue (an easy task); from the second
    # record on the queue holds real keys. Learning must bring the loss clearly down from there.
    early, last = hist[1]["loss"], sum(r["loss"] for r in hist[-2:]) / 2
    assert last < early - 0.4, [round(r["loss"], 3) for r in hist]


def test_bfloat16_autocast_runs_and_is_recorded(tmp_path):
    m = make("simclr")
    hist = Trainer(m, ArraySource(blob_images(32)), cfg(epochs=1, amp=True), out=tmp_path).fit()
    assert all(torch.isfinite(torch.tensor(r["loss"])) for r in hist)
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=False)["config"]["amp"] is True
    assert all(p.dtype == torch.float32 for p in m.parameters())


@pytest.mark.parametrize("method", ["moco", "amortised"])
def test_channels_last_training_matches_contiguous(tmp_path, method):
    """Channels-last storage (the CPU default) changes only the order of float sums: the same run
    in both layouts gives the same losses and weights to float32 rounding, and writes contiguous files."""
    data = ArraySource(blob_images(48))
    runs = {}
    for cl in (False, True):
        m = make(method)
        t = Trainer(m, data, cfg(channels_last=cl, log_every=1), out=tmp_path / str(cl))
        convs = [p for p in m.parameters() if p.dim() == 4]
        assert convs and all(p.is_contiguous(memory_format=torch.channels_last) == cl for p in convs)
        runs[cl] = ([r["loss"] for r in t.fit() if "loss" in r], state(m))
        saved = torch.load(tmp_path / str(cl) / "model.pt", weights_only=False)
        assert all(v.is_contiguous() for v in saved["encoder"].values() if isinstance(v, torch.Tensor))
    (loss_a, sa), (loss_b, sb) = runs[False], runs[True]
    assert len(loss_a) == 9
    torch.testing.assert_close(torch.tensor(loss_b), torch.tensor(loss_a), rtol=1e-4, atol=1e-5)
    for k in sa:
        torch.testing.assert_close(sb[k], sa[k], rtol=1e-3, atol=1e-4, msg=k)
    assert Trainer(make(method), data, cfg()).channels_last  # the CPU default
    with pytest.raises(TypeError, match="channels_last must be True or False"):
        cfg(channels_last="yes")


def test_adam_steps_as_torchs_adam_and_resumes_bit_identically(tmp_path):
    """optimizer='adam': the Trainer's update is torch.optim.Adam's with the config's lr and weight decay
    (one step checked against Adam applied to the same gradients by hand), and a run resumes exactly."""
    data = ArraySource(blob_images(48))
    method = make()
    start = state(method)
    tr = Trainer(method, data, cfg(optimizer="adam", lr=1e-3, weight_decay=1e-5, steps=1, epochs=1))
    assert isinstance(tr.optimizer, torch.optim.Adam)
    assert tr.optimizer.param_groups[0]["lr"] == 1e-3 and tr.optimizer.param_groups[0]["weight_decay"] == 1e-5
    tr.fit()
    grads = {n: p.grad.clone() for n, p in method.online.named_parameters() if p.grad is not None}
    ref = make()
    ref.load_state_dict(start)
    params = [p for n, p in ref.online.named_parameters() if n in grads]
    for (n, _), p in zip([(n, g) for n, g in grads.items()], params):
        p.grad = grads[n]
    torch.optim.Adam(params, lr=1e-3, weight_decay=1e-5).step()  # cosine over 1 step: lr at step 0 is lr
    for (n, p_got), p_ref in zip([(n, p) for n, p in method.online.named_parameters() if n in grads], params):
        torch.testing.assert_close(p_got, p_ref, rtol=0, atol=0, msg=n)
    a = make()
    Trainer(a, data, cfg(optimizer="adam", lr=1e-3), out=str(tmp_path / "a")).fit()
    b = make()
    Trainer(b, data, cfg(optimizer="adam", lr=1e-3), out=str(tmp_path / "b")).fit(until_step=4)
    b2 = make(seed=1)
    Trainer(b2, data, cfg(optimizer="adam", lr=1e-3), out=str(tmp_path / "b")).fit(resume=True)
    assert_bit_identical(state(a), state(b2))
    with pytest.raises(ValueError, match="optimizer must be one of"):
        Trainer(make(), data, cfg(optimizer="lamb"))


def _run_logs(tmp_path, name, lagged, **kw):
    """A run whose per-step reads are (or are not) one step late, as on a GPU: its records and checkpoint."""
    from invfast.pretrain.step_reads import StepReads

    t = Trainer(make(), ArraySource(blob_images(48)), cfg(**kw), out=tmp_path / name)
    t._reads = StepReads(t.device, lagged=lagged)
    t.fit(until_step=7)
    ck = torch.load(tmp_path / name / "checkpoint.pt", weights_only=False)
    return [(r["step"], r["loss"]) for r in t.history], ck["loss_window"][0][:2]


@pytest.mark.parametrize("log_every", [0, 4, 5])
def test_reads_one_step_late_log_what_reads_at_once_log(tmp_path, log_every):
    """On a GPU the trainer reads each step's loss one step late (no wait for the device inside the loop); every
    log record and the window a checkpoint keeps (here the one at step 6, the last before step 7) must hold the
    same steps' losses as reading each step at once."""
    kw = dict(log_every=log_every, checkpoint_every=3)
    now, late = _run_logs(tmp_path, "now", False, **kw), _run_logs(tmp_path, "late", True, **kw)
    assert late == now
    assert now[1][1] == (6 % log_every if log_every else 6)  # the steps since the last record, the pending one too
    assert [step for step, _ in now[0]] == [s for s in range(1, 8) if log_every and (s % log_every == 0 or s == 7)]


def test_step_reads_return_each_step_once_in_order():
    from invfast.pretrain.step_reads import StepReads

    for lagged in (False, True):
        reads, got = StepReads(torch.device("cpu"), lagged=lagged), []
        for s in range(5):
            reads.views_started()
            reads.views_done()
            got += reads.push(s, torch.tensor(s + 0.1, dtype=torch.float64), t0=0.0)  # not a float32 value
            assert len(got) == (s if lagged else s + 1)
        got += reads.drain()
        assert [(r.step, r.loss) for r in got] == [(s, s + 0.1) for s in range(5)]
        assert all(0 <= r.t_aug <= r.t_total for r in got) and reads.drain() == []


def test_step_reads_time_the_views_on_the_training_device_s_stream(monkeypatch):
    """A Trainer on a GPU other than the current one (``device="cuda:1"`` without ``set_device``) must record its
    events on that GPU's stream: an event on the current device's stream times and waits for nothing of its."""
    from invfast.pretrain.step_reads import StepReads

    recorded = []

    class Event:
        def __init__(self, enable_timing: bool = False) -> None:
            self.timing = enable_timing

        def record(self, stream=None) -> None:
            recorded.append((stream, self.timing))

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: ("stream of", device))
    reads = StepReads(torch.device("cuda", 1))
    reads.views_started()
    reads.views_done()
    assert recorded == [(("stream of", torch.device("cuda", 1)), True)] * 2  # timing events, on cuda:1's stream


@pytest.mark.parametrize("lagged", [False, True])
def test_a_non_finite_loss_stops_the_run_naming_its_step(tmp_path, lagged):
    from invfast.pretrain.step_reads import StepReads

    m = make()
    t = Trainer(m, ArraySource(blob_images(48)), cfg(log_every=0, checkpoint_every=0))
    t._reads = StepReads(t.device, lagged=lagged)
    loss = m.training_loss

    def poisoned(*a, **kw):
        out = loss(*a, **kw)
        return out * float("nan") if t.step == 3 else out

    m.training_loss = poisoned
    with pytest.raises(FloatingPointError, match="the loss became nan at step 3; lower the learning rate"):
        t.fit()
    assert t.step == (5 if lagged else 4)  # one step more when read late, and no further

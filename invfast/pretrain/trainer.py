"""The pretraining loop: single process (CPU or one GPU) or several processes with DDP.

Everything random is keyed by (seed, step) — the data order by (seed, epoch), the descriptor by
(seed, step), the augmentations by (seed, step, rank) through a fresh CPU ``torch.Generator`` — so a run
resumed from a checkpoint at step s continues exactly as the uninterrupted run would have (bit-identical on CPU),
and the checkpoint needs no generator objects beyond the step counter. The global torch (and CUDA)
RNG states of every rank are saved as well, for anything else that draws from them.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from invfast.io import atomic_torch_save, without_added_defaults
from invfast.pretrain import invariance as inv
from invfast.pretrain import run_log
from invfast.pretrain.config import TrainConfig
from invfast.pretrain.memory_layout import channels_last, contiguous_state, use_channels_last
from invfast.pretrain.methods import PretrainMethod
from invfast.pretrain.randomness import _STREAM_AUG, _STREAM_DATA, _STREAM_DESC, _STREAM_SHUFFLE, generator
from invfast.pretrain.schedules import build_optimizer, lr_multiplier
from invfast.pretrain.step_reads import StepRead, StepReads
from invfast.pretrain.training_state import checkpoint_record, read_checkpoint, restore_rng
from invfast.runtime.devices import resolve_device
from invfast.runtime.launch import current_rank

CHECKPOINT_NAME = "checkpoint.pt"
MODEL_NAME = "model.pt"
#: every file a pretraining run writes in its output folder (recorded in the folder's marker)
OWN_FILES = (CHECKPOINT_NAME, MODEL_NAME, "metrics.jsonl", "metrics.csv")


def _images(batch: Any) -> torch.Tensor:
    """The images of a source's batch (a labelled source returns (images, labels))."""
    return batch[0] if isinstance(batch, (tuple, list)) else batch


class Trainer:
    """Trains a :class:`PretrainMethod` (the contrastive methods, :class:`Supervised`) on an image source.

    Args:
        method: the method (owns encoder, heads, key network, queues, policies).
        source: an image source (``len``, ``get(indices) -> uint8 [B, 3, H, W]``, ``spec``); a
            labelled one (``get -> (images, labels)``, :class:`LabelledSource`) for a method with
            ``uses_labels``.
        config: :class:`TrainConfig`.
        out: folder for ``checkpoint.pt``, ``metrics.jsonl`` / ``metrics.csv`` and ``model.pt``
            (None: nothing is written, no resume).
        heldout: images for the periodic invariance measurement (a source; default: ``source``).
        meta: extra identity of the run (e.g. architecture and policy names), checked on resume.
        probe: a :class:`~invfast.pretrain.HeldoutProbe` run every ``config.probe_every`` steps (and
            before the first): its kNN / linear accuracy and feature spread go into the metrics log.

    Call :meth:`fit`. Launch several processes with ``torchrun`` and initialise the process group
    first (:func:`invfast.pretrain.distributed.init_from_env`); ``config.batch_size`` is global.
    """

    def __init__(
        self,
        method: PretrainMethod,
        source: Any,
        config: TrainConfig | None = None,
        *,
        out: str | os.PathLike | None = None,
        heldout: Any = None,
        meta: dict | None = None,
        device: torch.device | str | None = None,
        probe: Any = None,
    ) -> None:
        self.method = method
        self.source = source
        self.config = config or TrainConfig()
        self.config.validate()
        self.out = os.fspath(out) if out is not None else None
        self.heldout = heldout if heldout is not None else source
        self.meta = dict(meta or {})
        self.probe = probe
        if getattr(method, "uses_labels", False) and not hasattr(source, "labels"):
            raise TypeError(
                f"the {method.method_name} method trains on labelled images: pass a LabelledSource "
                f"(get -> (images, labels)), not {type(source).__name__}"
            )
        self.dist = current_rank()
        self.device = resolve_device(
            device if device is not None else self.config.device, local_rank=self.dist.local_rank
        )
        self.local_batch, self.steps_per_epoch, self.total_steps = self._step_plan()
        self.channels_last = self._place_method()
        self.optimizer, self.scheduler = self._optimization()
        self.online: torch.nn.Module = self._online_network()
        self.step = 0
        self._window = run_log.Window()  # the loss (and timings) the next log record averages
        self._reads = StepReads(self.device)  # each step's loss and timings, one step late on a GPU
        self._perm_epoch: int | None = None
        self._perm: torch.Tensor | None = None
        self.history: list[dict] = []

    def _step_plan(self) -> tuple[int, int, int]:
        """(images per process per step, steps per epoch, steps of the run); refuses a global batch that
        the data set, the processes or the key queue cannot take (ValueError)."""
        cfg = self.config
        n = len(self.source)
        if cfg.batch_size > n:
            raise ValueError(
                f"batch_size {cfg.batch_size} is larger than the data set ({n} images); use --batch-size <= {n}"
            )
        if cfg.batch_size % self.dist.world_size:
            raise ValueError(
                f"the global batch size {cfg.batch_size} must be divisible by the number of "
                f"processes ({self.dist.world_size})"
            )
        local_batch = cfg.batch_size // self.dist.world_size
        steps_per_epoch = n // cfg.batch_size
        total_steps = cfg.steps if cfg.steps is not None else cfg.epochs * steps_per_epoch
        queue = getattr(self.method, "queue", None)
        if queue is not None and queue.size % cfg.batch_size:
            raise ValueError(
                f"the queue size ({queue.size}) must be divisible by the global batch size "
                f"({cfg.batch_size}); e.g. use queue size {max(1, queue.size // cfg.batch_size) * cfg.batch_size}"
            )
        return local_batch, steps_per_epoch, total_steps

    def _place_method(self) -> bool:
        """Move the method to the device, in channels-last memory where that pays; returns whether it does."""
        self.method.to(self.device)
        use = use_channels_last(self.config.channels_last, self.device, self.method)
        if use:
            self.method.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # the stubs lack it
        return use

    def _optimization(self) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
        """The optimiser of the online network's trainable parameters and its per-step learning-rate schedule."""
        cfg = self.config
        params = [p for p in self.method.online.parameters() if p.requires_grad]
        optimizer = build_optimizer(params, cfg)
        sched = lr_multiplier(cfg.schedule, self.total_steps, cfg.warmup_steps)
        return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, sched)

    def _online_network(self) -> torch.nn.Module:
        """The online network this process trains: wrapped in DDP when there are several processes."""
        if self.dist.world_size > 1:
            return DistributedDataParallel(
                self.method.online,
                device_ids=[self.device.index] if self.device.type == "cuda" else None,
                find_unused_parameters=self.method.n_descriptors > 1,
            )
        return self.method.online

    # ------------------------------------------------------------------ identity
    def run_config(self) -> dict:
        """Everything that determines the result; a checkpoint resumes only under the same values."""
        numbers = self.config.numbers()
        fields = {k: v for k, v in dataclasses.asdict(self.config).items() if k in numbers}
        cfg = without_added_defaults(fields, TrainConfig.added_fields())
        cfg["lr"] = self.config.base_lr()
        cfg.update({f"method.{k}": v for k, v in self.method.config().items()})
        cfg.update(
            {
                "data": getattr(self.source, "spec", type(self.source).__name__),
                "n_images": len(self.source),
                "world_size": self.dist.world_size,
                "total_steps": self.total_steps,
            }
        )
        cfg.update(self.meta)
        return cfg

    # ------------------------------------------------------------------ data
    def batch_indices(self, step: int) -> torch.Tensor:
        """This rank's image indices [local_batch] for global step ``step`` (drop-last epochs)."""
        epoch, pos = divmod(step, self.steps_per_epoch)
        if self._perm_epoch != epoch or self._perm is None:
            self._perm = torch.randperm(
                len(self.source), generator=generator(self.config.seed, _STREAM_DATA, epoch), device="cpu"
            )  # host indices into the source
            self._perm_epoch = epoch
        g = self._perm[pos * self.config.batch_size : (pos + 1) * self.config.batch_size]
        r = self.dist.rank
        return g[r * self.local_batch : (r + 1) * self.local_batch]

    # ------------------------------------------------------------------ checkpoints
    @property
    def checkpoint_path(self) -> str | None:
        return None if self.out is None else self._out_file(CHECKPOINT_NAME)

    def _out_file(self, name: str) -> str:
        if self.out is None:
            raise RuntimeError(f"this Trainer has out=None: it writes no {name}")
        return os.path.join(self.out, name)

    def _rng_states(self) -> list[dict]:
        mine = {"cpu": torch.get_rng_state(), "loss_window": self._window.state()}
        if self.device.type == "cuda":
            mine["cuda"] = torch.cuda.get_rng_state(self.device)
        if self.dist.world_size == 1:
            return [mine]
        out: list[Any] = [None] * self.dist.world_size
        dist.all_gather_object(out, mine)
        return out

    def save_checkpoint(self) -> None:
        """Write the full training state to ``out/checkpoint.pt`` atomically (rank 0 writes)."""
        if self.out is None:
            return
        self._absorb(self._reads.drain())
        rng = self._rng_states()
        window = [r.pop("loss_window") for r in rng]
        if self.dist.is_main:
            record = checkpoint_record(
                config=self.run_config(),
                step=self.step,
                steps_per_epoch=self.steps_per_epoch,
                batch_size=self.config.batch_size,
                model=self.method.state_dict(),
                optimizer=self.optimizer.state_dict(),
                scheduler=self.scheduler.state_dict(),
                rng=rng,
                loss_window=window,
            )
            atomic_torch_save(record, self._out_file(CHECKPOINT_NAME))
            self._write_csv()
        if self.dist.world_size > 1:
            dist.barrier()

    def load_checkpoint(self, path: str) -> None:
        """Restore the state saved by :meth:`save_checkpoint`; refuses another configuration."""
        ck = read_checkpoint(path, self.run_config())
        self.method.load_state_dict(ck["model"])
        self.optimizer.load_state_dict(ck["optimizer"])
        self.scheduler.load_state_dict(ck["scheduler"])
        restore_rng(ck["rng"][self.dist.rank], self.device)
        self.step = int(ck["step"])
        windows = ck.get("loss_window")
        self._window = run_log.Window(windows[self.dist.rank] if isinstance(windows, list) else None)
        self._truncate_log()

    # ------------------------------------------------------------------ metrics log
    def _truncate_log(self) -> None:
        """Drop log records written after the checkpoint (the steps the resumed run redoes)."""
        self.history = []
        if self.out is None or not self.dist.is_main or not os.path.exists(self._out_file("metrics.jsonl")):
            return
        self.history = run_log.truncate(self._out_file("metrics.jsonl"), self.step)

    def _log(self, rec: dict) -> None:
        self.history.append(rec)
        if self.out is not None and self.dist.is_main:
            run_log.append(self._out_file("metrics.jsonl"), rec)

    def _write_csv(self) -> None:
        if self.out is not None and self.history:
            run_log.write_csv(self._out_file("metrics.csv"), self.history)

    # ------------------------------------------------------------------ invariance
    def measure_invariance(self) -> dict[str, float]:
        """Standardised cosine per transform of the current encoder on the held-out batch
        (``invariance/<transform>`` keys; ``invariance/<descriptor>/<transform>`` for amortised methods)."""
        n = min(self.config.invariance_images, len(self.heldout))
        images = _images(self.heldout.get(torch.arange(n, device="cpu")))
        m = self.method
        was = m.training
        m.eval()
        out = {}
        try:
            for d in range(m.n_descriptors) if m.n_descriptors <= 3 else [m.n_descriptors - 1]:
                scores = inv.measure_while_training(
                    functools.partial(m.features, d=d),
                    images,
                    self.config.size,
                    self.config.invariance_transforms,
                    device=self.device,
                )
                prefix = "invariance/" if m.n_descriptors == 1 else f"invariance/{m.descriptor_names[d]}/"
                out.update({prefix + k: v for k, v in scores.items()})
        finally:
            m.train(was)
        return out

    def _probe_due(self, step: int) -> bool:
        every = self.config.probe_every
        return bool(self.probe is not None and every and (step % every == 0 or step == self.total_steps))

    def run_probe(self) -> dict[str, float]:
        """The held-out probe's numbers for the current encoder (``probe/...`` keys; eval mode while it runs)."""
        m = self.method
        was = m.training
        m.eval()
        try:
            with torch.no_grad():
                return self.probe(lambda x: m.features(x, 0), self.config.size, device=self.device)
        finally:
            m.train(was)

    def _batch(self, batch: Any) -> Any:
        """The source's batch on the training device; labels dropped for a method that does not use them."""
        if isinstance(batch, (tuple, list)):
            if not getattr(self.method, "uses_labels", False):
                return batch[0].to(self.device, non_blocking=True)
            return tuple(b.to(self.device, non_blocking=True) for b in batch)
        return batch.to(self.device, non_blocking=True)

    # ------------------------------------------------------------------ training
    def fit(self, resume: bool = False, until_step: int | None = None) -> list[dict]:
        """Train to the end (or to global step ``until_step``); returns the metric records.

        ``resume=True`` continues from ``out/checkpoint.pt`` when it exists (and starts fresh when
        it does not); without it an existing checkpoint in ``out`` is an error, never overwritten.
        """
        folder = self._claim_out(resume)
        end = self.total_steps if until_step is None else min(until_step, self.total_steps)
        self.method.train()
        bar = None
        if self.config.progress and self.dist.is_main:
            from invfast.runtime.progress import bar as progress_bar

            bar = progress_bar(
                self.total_steps, initial=self.step, desc=f"pretrain {self.method.method_name}", unit="step"
            )
        if self.step == 0 and self._probe_due(0) and self.dist.is_main:
            self._log({"step": 0, "epoch": 0.0, **self.run_probe()})  # the initialisation's scores
        t_start = time.perf_counter()
        loader = ThreadPoolExecutor(1)  # loads the next batch while this one trains
        pending = None
        try:
            while self.step < end:
                pending, d = self._train_step(loader, pending, end)
                if bar is not None:
                    bar.update(1)
                self._after_step(d, end, bar)
            self._absorb(self._reads.drain())
        finally:
            loader.shutdown(wait=True, cancel_futures=True)
            if bar is not None:
                bar.close()
        if self.step == self.total_steps and self.out is not None:
            self._save_final(folder, t_start)
        return self.history

    def finish(self) -> None:
        """End the run at the current step, for a caller that stops training early by a criterion of its own: the
        last checkpoint, the model file and the run marked finished, as at the end of :meth:`fit`. A later
        ``fit(resume=True)`` on the folder refuses to continue it (its model file exists)."""
        if self.out is None:
            raise ValueError("finish() writes the model file: the Trainer needs an output folder (out=...)")
        from invfast.runtime.run_folder import RunFolder

        self._save_final(RunFolder(self.out, "pretrain", overwrite=True), time.perf_counter())

    def _claim_out(self, resume: bool) -> Any:
        """The output folder's run marker (None without ``out``): an invfast pretraining run only by its marker,
        a folder of the user's files refused; the checkpoint loaded when resuming, else refused if present."""
        if self.out is None:
            return None
        from invfast.runtime.run_folder import RunFolder

        # only the files listed in OWN_FILES (written by invfast) are ever replaced or deleted
        folder = RunFolder(self.out, "pretrain", overwrite=True)
        if self.dist.is_main:
            folder.check()
            os.makedirs(self.out, exist_ok=True)
            folder.own(*OWN_FILES)
        if os.path.exists(self._out_file(CHECKPOINT_NAME)):
            if not resume:
                raise FileExistsError(
                    f"{self.out!r} already holds a pretraining checkpoint; pass resume=True "
                    "(--resume) to continue it or choose another output folder"
                )
            self.load_checkpoint(self._out_file(CHECKPOINT_NAME))
            if self.step < self.total_steps and os.path.lexists(os.path.join(self.out, MODEL_NAME)):
                # the run writes model.pt only once it has finished: this one is not the run's, never replaced
                raise FileExistsError(
                    f"{self.out!r} holds a {MODEL_NAME} although the run it would continue stopped at step "
                    f"{self.step} of {self.total_steps}: that file is not this run's; move it away to resume"
                )
        elif os.path.exists(os.path.join(self.out, MODEL_NAME)):
            raise FileExistsError(
                f"{self.out!r} already holds a {MODEL_NAME} and no {CHECKPOINT_NAME} of a run "
                "to continue; it is never overwritten: choose another output folder"
            )
        elif self.dist.is_main:
            folder.remove(["metrics.jsonl", "metrics.csv"])  # a fresh run's logs start empty
            folder.own(*OWN_FILES)
        return folder

    def _train_step(self, loader: ThreadPoolExecutor, pending: Any, end: int) -> tuple[Any, int]:
        """One optimisation step at ``self.step`` (the next batch loading meanwhile): returns the next batch's
        pending load and the step's descriptor index; adds the steps read back by now (this one, or on a GPU the
        one before it: :mod:`invfast.pretrain.step_reads`) to the current log window."""
        cfg, s = self.config, self.step
        t0 = time.perf_counter()
        if pending is None:
            pending = loader.submit(self.source.get, self.batch_indices(s))
        batch = self._batch(pending.result())
        pending = loader.submit(self.source.get, self.batch_indices(s + 1)) if s + 1 < end else None
        d = self.method.sample_descriptor(generator(cfg.seed, _STREAM_DESC, s))
        g = generator(cfg.seed, _STREAM_AUG, s, self.dist.rank)
        self._reads.views_started()
        inputs = self.method.make_views(batch, d, g)
        inputs = tuple(map(channels_last, inputs)) if self.channels_last else inputs
        self._reads.views_done()
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=cfg.amp):
            loss = self.method.training_loss(
                *inputs, d, online=self.online, generator=generator(cfg.seed, _STREAM_SHUFFLE, s)
            )
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        self.step = s + 1
        self._absorb(self._reads.push(s, loss, t0))
        return pending, d

    def _absorb(self, reads: list[StepRead]) -> None:
        """Finished steps into the log window; a non-finite loss stops the run (FloatingPointError)."""
        w = self._window
        for r in reads:
            if not math.isfinite(r.loss):
                raise FloatingPointError(f"the loss became {r.loss} at step {r.step}; lower the learning rate")
            w.loss_sum += r.loss
            w.n += 1
            w.t_aug += r.t_aug
            w.t_total += r.t_total

    def _after_step(self, d: int, end: int, bar: Any) -> None:
        """What falls due after a step: the log record (with invariance and probe scores when due) closing the
        log window, and the checkpoint."""
        cfg = self.config
        log_now = cfg.log_every and (self.step % cfg.log_every == 0 or self.step == end)
        inv_now = cfg.invariance_every and (self.step % cfg.invariance_every == 0 or self.step == self.total_steps)
        probe_now = self._probe_due(self.step)
        if log_now or inv_now or probe_now:
            self._absorb(self._reads.drain())
            w = self._window
            # on the training device: NCCL all-reduces CUDA tensors only
            stat = torch.tensor([w.loss_sum, w.n], dtype=torch.float64, device=self.device)
            if self.dist.world_size > 1:
                dist.all_reduce(stat)
            rec = {
                "step": self.step,
                "epoch": self.step / self.steps_per_epoch,
                "loss": float(stat[0] / stat[1]),
                "lr": self.optimizer.param_groups[0]["lr"],
                "images_per_s": w.n * cfg.batch_size / max(w.t_total, 1e-9),
                "augment_share": w.t_aug / max(w.t_total, 1e-9),
                "descriptor": self.method.descriptor_names[d],
            }
            if inv_now and self.dist.is_main:
                rec.update(self.measure_invariance())
            if probe_now and self.dist.is_main:
                rec.update(self.run_probe())
            self._log(rec)
            if bar is not None:
                bar.set_postfix(loss=f"{rec['loss']:.4f}", img_s=f"{rec['images_per_s']:.0f}")
            self._window = run_log.Window()
        if cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0:
            self.save_checkpoint()

    def _save_final(self, folder: Any, t_start: float) -> None:
        """The last checkpoint and, on the main rank, the trained model file; the run folder marked finished."""
        assert self.out is not None
        self.save_checkpoint()
        if self.dist.is_main:
            atomic_torch_save(
                {
                    "format": "invfast.pretrained/1",
                    "config": self.run_config(),
                    "encoder": contiguous_state(self.method.encoder.state_dict()),
                    "method": contiguous_state(self.method.state_dict()),
                    "seconds": time.perf_counter() - t_start,
                },
                os.path.join(self.out, MODEL_NAME),
            )
            if folder is not None:
                folder.finish()

"""The commands' runtime, one home each: the ranks and process groups (:mod:`~invfast.runtime.launch`: under
torchrun or spawned locally, the rank type, the backend rule, the lost-rank timeout), the device resolver
(:mod:`~invfast.runtime.devices`), output folders (:mod:`~invfast.runtime.run_folder`: marker, lock, staging) and
the write-path checks under them (:mod:`~invfast.runtime.write_paths`), progress bars
(:mod:`~invfast.runtime.progress`), and the options a command takes from its configuration's declarations
(:mod:`~invfast.runtime.options`). Imports nothing at package import: take the submodules."""

__all__ = ["devices", "launch", "options", "progress", "run_folder", "write_paths"]

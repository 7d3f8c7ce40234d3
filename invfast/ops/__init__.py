"""Thin Python wrappers over the compiled ops, one module per op family.

Each module registers, for its ops: the torch reference (``backend.register_reference``),
a fake/meta implementation (``torch.library.register_fake``) and, where the op is
differentiable, its autograd formula (``torch.library.register_autograd``). Whether a call runs
the compiled kernel or the reference is the dispatch table's decision (:mod:`invfast.dispatch`,
through ``backend.call`` / ``backend.compiled_for``). Two wrappers refine it, as their table entries say:
``warp_affine`` keeps the exact torch gather for integral maps under ``auto`` on CPU, and
``sqdist_logsumexp`` and ``pairwise_logsumexp`` run the reference for inputs that require grad (their kernels
have no backward).
"""

"""Thin Python wrappers over the compiled ops, one module per op family.

Each module registers, for its ops: the torch reference (``backend.register_reference``),
a fake/meta implementation (``torch.library.register_fake``) and, where the op is
differentiable, its autograd formula (``torch.library.register_autograd``).
"""

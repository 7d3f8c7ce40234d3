"""``invfast transforms``: list the test transforms and render a contact sheet.

invfast transforms --preview out.png [--image astronaut] [--k 8] [--tile 96] [--names rotation hflip]
invfast transforms --import mypkg.transforms          # also a user's transforms, registered by that module
"""

from __future__ import annotations

import argparse
import importlib
import os

import torch

from invfast.transforms.builtin import TEST_TRANSFORMS
from invfast.transforms.registry import get, names

_SKIMAGE = ("astronaut", "chelsea", "coffee", "rocket")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preview", metavar="OUT.png", help="write a contact sheet of the transforms to this PNG")
    parser.add_argument(
        "--image",
        default="astronaut",
        help=f"an image file, or a scikit-image sample ({', '.join(_SKIMAGE)}); default astronaut",
    )
    parser.add_argument(
        "--names",
        nargs="+",
        default=None,
        metavar="NAME",
        help=f"transforms to list or show (default: every registered one; the contact sheet: the 18 built-ins): "
        f"{' '.join(TEST_TRANSFORMS)}, or a registered one",
    )
    parser.add_argument(
        "--import",
        dest="modules",
        action="append",
        default=[],
        metavar="MODULE",
        help="import this module first, so that the transforms it registers (invfast.transforms.register) are "
        "listed and can be previewed; repeatable",
    )
    parser.add_argument("--k", type=int, default=8, help="grid points per transform (columns)")
    parser.add_argument("--tile", type=int, default=96, help="thumbnail side in pixels")


def _load(image: str) -> torch.Tensor:
    import numpy as np

    if image in _SKIMAGE:
        import skimage.data

        arr = getattr(skimage.data, image)()
    else:
        from PIL import UnidentifiedImageError

        from invfast.data.folder import open_rgb

        if not os.path.isfile(image):
            raise FileNotFoundError(
                f"--image {image!r}: no such file; give an image file or one of {', '.join(_SKIMAGE)}"
            )
        try:  # the decoding rule of data folders: 16-bit and float images by what they hold
            arr = np.asarray(open_rgb(image))
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as e:
            raise ValueError(
                f"--image {image!r} cannot be read as an image ({e}); give a PNG/JPEG file or one of "
                f"{', '.join(_SKIMAGE)}"
            ) from e
    return torch.from_numpy(np.ascontiguousarray(arr[..., :3])).permute(2, 0, 1).unsqueeze(0)


def _import(module: str) -> None:
    """Import ``module`` (a dotted name, importable as ``--model module:factory`` modules are) so its
    registrations run."""
    if not module or module.startswith(".") or any(c in module for c in "/\\:") or module.endswith(".py"):
        raise ValueError(
            f"--import {module!r}: give an absolute dotted module name (my_transforms, pkg.transforms) importable "
            "from PYTHONPATH, not a file path, a relative name or an empty one"
        )
    try:
        importlib.import_module(module)
    except ImportError as e:
        raise ValueError(f"--import {module!r}: cannot import it ({e}); is it installed or on PYTHONPATH?") from e
    except (TypeError, ValueError) as e:  # a registration it makes is refused (the transform checks say why)
        raise ValueError(f"--import {module!r}: {e}") from e


def run(args: argparse.Namespace) -> int:
    for m in args.modules:
        _import(m)
    for k, hi in (("k", 64), ("tile", 1024)):
        if not 1 <= getattr(args, k) <= hi:
            raise ValueError(f"--{k} must be from 1 to {hi}, got {getattr(args, k)}")
    if args.names:
        for n in args.names:
            get(n)  # unknown names raise a ValueError listing the valid ones
    if not args.preview:
        for n in args.names or names():
            t = get(n)
            print(f"{n:12s} {t.family:10s} grid {tuple(t.grid(256).shape)}")
        return 0
    from invfast.runtime.write_paths import refuse_input_as_output
    from invfast.transforms.contact_sheet import save_contact_sheet

    refuse_input_as_output(args.preview, "--preview", {"--image": [args.image]})

    sheet = save_contact_sheet(args.preview, _load(args.image), args.names, k=args.k, tile=args.tile)
    print(
        f"wrote {args.preview} ({sheet.shape[1]}x{sheet.shape[0]} px, {len(args.names or TEST_TRANSFORMS)} transforms)"
    )
    return 0

"""Images for measurement and pretraining behind one protocol (:mod:`invfast.data.protocol`):

- :class:`TensorSource` / :class:`ArraySource` (in memory), :class:`DatasetSource` (map-style datasets);
- :class:`FolderSource`: image folders decoded with PIL (one resize/crop rule, DataLoader workers);
- :class:`SyntheticSource` and the one ``synthetic:`` spec parser (:func:`parse_synthetic_spec`);
- :func:`as_source` / :func:`open_source`: from a user's value or spec string to a source.

See docs/data.md.
"""

from invfast.data.folder import IMAGE_EXTENSIONS, DecodeErrors, FolderSource, decode_image
from invfast.data.protocol import ImageDecodeError, ImageSource, Source
from invfast.data.sources import as_source, heldout_source, open_source
from invfast.data.synthetic import (
    SYNTHETIC_DEFAULTS,
    SyntheticSource,
    SyntheticSpec,
    heldout_split,
    parse_synthetic_spec,
    synthetic_source,
)
from invfast.data.tensors import ArraySource, DatasetSource, TensorSource

__all__ = [
    "IMAGE_EXTENSIONS",
    "SYNTHETIC_DEFAULTS",
    "ArraySource",
    "DatasetSource",
    "DecodeErrors",
    "FolderSource",
    "ImageDecodeError",
    "ImageSource",
    "Source",
    "SyntheticSource",
    "SyntheticSpec",
    "TensorSource",
    "as_source",
    "decode_image",
    "heldout_source",
    "heldout_split",
    "open_source",
    "parse_synthetic_spec",
    "synthetic_source",
]

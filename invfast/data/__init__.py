"""Image sources for measurement: tensors, datasets, image folders and synthetic specs behind one protocol
(``len(source)`` and ``source.batches(...)``; see :mod:`invfast.data.sources`)."""
from invfast.data.sources import (IMAGE_EXTENSIONS, DatasetSource, DecodeErrors, FolderSource, ImageDecodeError,
                                  TensorSource, as_source, parse_synthetic_spec, synthetic_source)

__all__ = ["IMAGE_EXTENSIONS", "DatasetSource", "DecodeErrors", "FolderSource", "ImageDecodeError", "TensorSource",
           "as_source", "parse_synthetic_spec", "synthetic_source"]

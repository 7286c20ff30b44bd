"""An invisible, keyed watermark in the luma of video frames: a tiled spread-spectrum
pattern (``pattern``), the embed kernel with its CPU twin (``embed``), the payload's
error-correcting code (``ecc``) and the detector that finds the tile grid again after
re-encoding, rescaling and cropping (``detect``). Compute only: what the bits mean is the
media plane's business (``streamer.provenance``)."""

"""Provenance of what the node makes: the invisible watermark in every swapped frame
(``marker``, over ``gpu.watermark``), Content Credentials on files (``credentials``), and
the verifier that reads both back from files, streams and uploads (``verify``, ``routes``)."""

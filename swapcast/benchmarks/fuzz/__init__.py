"""``swapcast bench fuzz``: our own mutation fuzzer against a live node, in the style of
MediaMTX's (each protocol layer with its own corpus and mutators, run against the server as
clients reach it).

One ``swapcast serve`` process on 127.0.0.1 (and a Redis, so the job routes are live) takes
mutated input on every surface at once: the HTTP API (every documented route: JSON bodies,
paths, queries, headers, framing, forged and malformed tokens), SDP offers (sessions, WHIP,
WHEP), uploads (face images and job videos: truncated, damaged, bombs, broken multipart) and
RTMP (handshake, chunk stream, AMF commands, FLV tags of a real ffmpeg publish, play). While
it runs and at the end it checks that the node answers ``/healthz``, that nothing reached a
5xx (a 503 that says why is allowed: full, draining) or hung, that its log shows no traceback
or dead thread, and that thread count and RSS come back within bounds.

Modules: ``node`` (the process, a raw HTTP client, probes), ``fixtures`` (users, face, keys),
``mutate`` (shared mutators), ``tokens``, ``api``, ``sdp``, ``uploads``, ``rtmp`` (the layers),
``outcome`` (what one input did), ``runner`` (scheduling, checks, figures)."""

from swapcast.benchmarks.fuzz.runner import FuzzFigures, run_fuzz, run_fuzz_benchmark

__all__ = ["FuzzFigures", "run_fuzz", "run_fuzz_benchmark"]

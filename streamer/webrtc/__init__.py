"""Live browser swap over WebRTC, WHIP ingest and WHEP playback (aiortc).

- ``session``: one peer connection, its swapped video, delayed audio and WHEP viewers
- ``swapped_track``: the latency policy (newest frame only) and the relay to consumers
- ``delayed_audio``: the peer's audio, delayed by the measured video latency
- ``encoders``: x264 ultrafast/zerolatency and VP8 realtime inside aiortc, bitrate bounds
- ``ice``: STUN/TURN servers and the host addresses offered to peers
- ``offers``: checking an SDP offer before negotiating
- ``manager``: all sessions of a node, the session limit, negotiation, teardown
- ``routes``: the HTTP API (``/api/v1/faces``, ``/api/v1/sessions``, ``/whip``, ``/whep``)
"""

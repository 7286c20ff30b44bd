"""Offline video jobs, media side: cut the input at keyframes (``split``), swap a chunk
through the engine like ``swapcast swap`` does (``render``), join the chunks and the audio
and verify the result (``assemble``), and the worker that runs these as queue tasks
(``worker``). The queue itself lives in ``signaling.jobs``."""

"""The payload's error protection: CRC-16 to tell a real payload from noise, and a rate-1/3
convolutional code (constraint length 7, the LTE generators) decoded with soft-decision
Viterbi, which corrects the scattered weak chips a re-encoded or rescaled copy leaves, and a
list Viterbi that gives the next most likely messages too (the CRC picks among them)."""

from __future__ import annotations

import numpy as np

CONSTRAINT = 7
GENERATORS = (0o133, 0o171, 0o165)
TAIL = CONSTRAINT - 1
_STATES = 1 << TAIL


def crc16(bits: np.ndarray) -> np.ndarray:
    """CRC-16/CCITT (polynomial 0x1021, initial 0xFFFF) of a bit array, as 16 bits."""
    register = 0xFFFF
    for bit in np.asarray(bits, dtype=np.uint8):
        feedback = ((register >> 15) & 1) ^ int(bit)
        register = (register << 1) & 0xFFFF
        if feedback:
            register ^= 0x1021
    return np.array([(register >> (15 - i)) & 1 for i in range(16)], dtype=np.uint8)


def _register_outputs() -> np.ndarray:
    """Coded signs (+1 for bit 0, -1 for bit 1) for every 7-bit shift-register value."""
    registers = np.arange(1 << CONSTRAINT)
    bits = np.array([[bin(r & g).count("1") & 1 for g in GENERATORS] for r in registers], dtype=np.float32)
    return 1.0 - 2.0 * bits


_OUTPUT_SIGNS = _register_outputs()


def coded_length(message_bits: int) -> int:
    return (message_bits + TAIL) * len(GENERATORS)


def encode(bits: np.ndarray) -> np.ndarray:
    """Message bits -> coded bits (zero tail included, so the decoder ends in state 0)."""
    state, out = 0, []
    for bit in [*np.asarray(bits, dtype=np.uint8).tolist(), *[0] * TAIL]:
        register = ((state << 1) | bit) & ((1 << CONSTRAINT) - 1)
        out.extend(bin(register & g).count("1") & 1 for g in GENERATORS)
        state = register & (_STATES - 1)
    return np.array(out, dtype=np.uint8)


def decode(soft: np.ndarray, message_bits: int) -> np.ndarray:
    """Soft values (positive = bit 0, larger = surer), one per coded bit -> message bits: the
    most likely message (Viterbi)."""
    return decode_list(soft, message_bits, 1)[0]


def decode_list(soft: np.ndarray, message_bits: int, size: int) -> list[np.ndarray]:
    """The ``size`` most likely messages, most likely first (a list Viterbi: each state keeps
    its ``size`` best paths). The most likely message is not always the one sent, even when
    the one sent is a close second: one JPEG still's soft values leave a few marks whose
    best path beats the sent one by a hair (3 to 12 message bits apart). The caller picks the
    first whose CRC matches."""
    if size < 1:
        raise ValueError("a list decoder keeps at least one path")
    rate = len(GENERATORS)
    steps = np.asarray(soft, dtype=np.float64).reshape(message_bits + TAIL, rate)
    metric = np.full((_STATES, size), -np.inf)
    metric[0, 0] = 0.0  # the encoder starts in state 0
    previous = np.arange(1 << CONSTRAINT) >> 1  # the state each register value comes from
    branch_signs = _OUTPUT_SIGNS.astype(np.float64)
    from_register = np.empty((len(steps), _STATES, size), dtype=np.int64)
    from_rank = np.empty((len(steps), _STATES, size), dtype=np.int64)
    states = np.arange(_STATES)[:, None]
    for t, chips in enumerate(steps):
        candidate = metric[previous] + (branch_signs @ chips)[:, None]  # (register, rank)
        # the two registers ending in next state n are n (top bit 0) and n + 64 (top bit 1):
        # their 2 x size paths compete for n's size places
        both = np.concatenate([candidate[:_STATES], candidate[_STATES:]], axis=1)
        order = np.argsort(-both, axis=1, kind="stable")[:, :size]
        metric = np.take_along_axis(both, order, axis=1)
        from_register[t] = states + _STATES * (order >= size)
        from_rank[t] = order % size
    messages = []
    for rank in range(size):  # the zero tail ends every path in state 0
        if not np.isfinite(metric[0, rank]):
            break
        state, at, bits = 0, rank, []
        for t in range(len(steps) - 1, -1, -1):
            register = from_register[t, state, at]
            bits.append(register & 1)
            at = from_rank[t, state, at]
            state = register >> 1
        messages.append(np.array(bits[::-1][:message_bits], dtype=np.uint8))
    return messages

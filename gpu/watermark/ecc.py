"""The payload's error protection: CRC-16 to tell a real payload from noise, and a rate-1/3
convolutional code (constraint length 7, the LTE generators) decoded with soft-decision
Viterbi, which corrects the scattered weak chips a re-encoded or rescaled copy leaves."""

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
    """Soft values (positive = bit 0, larger = surer), one per coded bit -> message bits."""
    rate = len(GENERATORS)
    steps = np.asarray(soft, dtype=np.float32).reshape(message_bits + TAIL, rate)
    metric = np.full(_STATES, -np.inf, dtype=np.float32)
    metric[0] = 0.0
    registers = np.arange(1 << CONSTRAINT)
    previous = registers >> 1
    choices = np.empty((len(steps), _STATES), dtype=np.int64)
    for t, chips in enumerate(steps):
        candidate = metric[previous] + _OUTPUT_SIGNS @ chips  # indexed by register
        # the two registers ending in next state n are n (top bit 0) and n + 64 (top bit 1)
        low, high = candidate[:_STATES], candidate[_STATES:]
        pick_high = high > low
        choices[t] = np.where(pick_high, registers[_STATES:], registers[:_STATES])
        metric = np.where(pick_high, high, low)
    state, bits = 0, []
    for t in range(len(steps) - 1, -1, -1):
        register = choices[t, state]
        bits.append(register & 1)
        state = register >> 1
    return np.array(bits[::-1][:message_bits], dtype=np.uint8)

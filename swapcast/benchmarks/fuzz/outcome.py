"""What one fuzz input did: its layer, a label (route or case kind), the status the node gave,
and the problem it shows, if any, with the bytes that reproduce it."""

from __future__ import annotations

import json
from dataclasses import dataclass

from swapcast.benchmarks.fuzz.node import Answer


@dataclass(frozen=True)
class Outcome:
    layer: str
    label: str
    status: int | str  # an HTTP status, or a word for non-HTTP layers ("closed", "answered", ...)
    problem: str | None = None  # None: the node behaved (a 4xx with a reason is good behaviour)
    reproducer: bytes = b""  # the bytes sent, kept only when there is a problem
    inputs: int = 1  # inputs this case carried (an FLV publish carries many tags)
    detail: str = ""  # what the node did, where the status alone does not say (an oversize case's reason, RSS, ...)


def hold_outcome(layer: str, how: str, held: str | None) -> Outcome:
    """A hold case: cut (the node closed the connection, as it should) or held, with what
    was held as the problem and the way of holding as its reproducer."""
    if not held:
        return Outcome(layer, how, "cut")
    return Outcome(layer, how, "held", f"{how}: {held}", how.encode())


def http_outcome(layer: str, label: str, raw: bytes, answer: Answer) -> Outcome:
    """5xx (other than a 503 that says why: full, draining, not registered) and a hang are
    problems; any 4xx is the node refusing bad input, as it should, and so is closing the
    connection on a request it cannot even parse."""
    status: int | str = answer.status or "closed"  # closed unanswered: a request cut short or unparsable
    problem = None
    if answer.hung:
        problem, status = f"no HTTP answer ({answer.error})", "hung"
    elif answer.status >= 500 and not (answer.status == 503 and _reason(answer.body)):
        problem = f"{answer.status}: {answer.body[:200]!r}"
    return Outcome(layer, label, status, problem, raw if problem else b"")


def _reason(body: bytes) -> str | None:
    try:
        value = json.loads(body)
    except ValueError:
        return None
    if isinstance(value, dict):
        return value.get("error") or value.get("status")
    return None

"""Who is asking, and the errors that say they may not.

These are pure values (no aiohttp, no PyJWT) so any layer — the REST handlers, the RTMP
relay, a CLI tool — can check ownership the same way. The errors carry an HTTP ``status``
so one error handler can render all of them; ``middleware`` re-exports them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

from gpu.errors import SwapcastError

Role = Literal["admin", "user"]
ROLES: tuple[str, ...] = get_args(Role)


@dataclass(frozen=True)
class Principal:
    """The verified caller: ``subject`` is the token's ``sub`` (the user id that owns
    sessions, faces and stream keys), ``role`` what they may do."""

    subject: str
    role: Role
    # the token's ``exp`` (unix time): what lives on past the request (an events socket) ends
    # then; not part of who the caller is
    expires: float | None = field(default=None, compare=False)

    def expired(self, now: float) -> bool:
        return self.expires is not None and now >= self.expires

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    def may_access(self, owner: str) -> bool:
        """Admins act on everything; a user only on what they own."""
        return self.is_admin or owner == self.subject


class AuthError(SwapcastError):
    """A request refused for who is asking (or how often); ``status`` is its HTTP code."""

    status: int = 400

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Unauthorized(AuthError):
    """No credentials, or credentials that do not verify: the client should re-authenticate."""

    status = 401


class Forbidden(AuthError):
    """Valid credentials whose role does not allow the action."""

    status = 403


class TooManyRequests(AuthError):
    """A rate limit was hit; ``retry_after_s`` says when the next request is allowed."""

    status = 429

    def __init__(self, reason: str, retry_after_s: float) -> None:
        super().__init__(reason)
        self.retry_after_s = retry_after_s


class NotYours(AuthError):
    """A user asked for another user's resource. Reported exactly like a missing one (404,
    generic reason) so ids cannot be probed for existence."""

    status = 404

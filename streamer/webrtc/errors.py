"""Errors of live sessions, each with the HTTP status the API answers with.

They are ``SwapcastError``s: bad input from a client, reported with their message as
``{"error": reason}``, never a traceback, and never disturbing another session."""

from __future__ import annotations

from gpu.errors import SwapcastError


class SessionError(SwapcastError):
    status = 400

    @property
    def reason(self) -> str:
        return str(self)


class BadRequestError(SessionError):
    """Malformed request: bad JSON, malformed SDP, an offer without video, bad options."""

    status = 400


class UnauthorizedError(SessionError):
    """No usable ``Authorization: Bearer`` stream key."""

    status = 401


class ForbiddenError(SessionError):
    """A stream key that is unknown or revoked."""

    status = 403


class NotFoundError(SessionError):
    """Unknown session or viewer."""

    status = 404


class ConflictError(SessionError):
    """The request names something in a state that does not allow it (e.g. a placed
    session id the gateway did not place here for this caller)."""

    status = 409


class PayloadTooLargeError(SessionError):
    """A body over its limit (an SDP offer over ``offers.MAX_SDP_BYTES``)."""

    status = 413


class UnsupportedMediaTypeError(SessionError):
    status = 415


class UnprocessableError(SessionError):
    """Well-formed but unusable (e.g. a stream key whose source face or options are bad)."""

    status = 422


class ServerFullError(SessionError):
    """``config.webrtc.max_sessions`` (or the viewer limit) reached."""

    status = 503


class SessionLimitError(SessionError):
    """A user already holds ``auth.max_sessions_per_user`` sessions."""

    status = 429

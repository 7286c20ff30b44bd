"""The one rule for every id a request refers to: in its URL, its JSON body, a query, a
multipart field or a storage path.

Checking only the resource in the URL lets a body reach what the URL could not (a job whose
``path`` is another user's upload, a stream key wearing another user's face). So every
reference is resolved for the caller through ``visible`` / ``require_visible``: admins see
everything, a user only what they own, and resources without an owner (the sample faces, the
operator's command-line faces) are everyone's where the kind of resource is shareable.
Another user's resource gets exactly the answer a missing one gets (``NotYours``, 404, with
the same reason), so ids cannot be probed through any field.
"""

from __future__ import annotations

from .principal import NotYours, Principal


def visible(caller: Principal | None, owner: str, *, shared_when_unowned: bool = False) -> bool:
    """Whether ``caller`` may refer to a resource of ``owner``. ``None``: an API mounted
    without the auth middleware (the bare jobs API of tests and benchmarks) has no owners."""
    if caller is None:
        return True
    return (shared_when_unowned and not owner) or caller.may_access(owner)


def require_visible(caller: Principal | None, owner: str, missing: str, *, shared_when_unowned: bool = False) -> None:
    """``NotYours(missing)`` unless ``visible``; ``missing`` is the reason the route gives
    for an id that does not exist, word for word."""
    if not visible(caller, owner, shared_when_unowned=shared_when_unowned):
        raise NotYours(missing)

"""Credentials with scopes for every HTTP service: API keys, trusted networks, ping tokens, UI sessions.

``require(scope)`` is the one security dependency; ``include_scoped`` puts it on routers. See
docs/operations.md, "Securing a deployment".
"""

from ragbot.http.auth.credentials import (
    Authenticator,
    Principal,
    forwarded_client,
    new_key,
    parse_ip,
    refusal,
    sha256_hex,
)
from ragbot.http.auth.dependency import (
    WHAT_TO_SEND,
    AuthState,
    RouteAuth,
    RouteRule,
    auth_state,
    authenticate,
    authenticate_first,
    client_ip,
    include_scoped,
    install_auth,
    owner_of,
    require,
)
from ragbot.http.auth.session import CSRF_COOKIE, CSRF_HEADER, GUEST, SESSION_COOKIE, SessionCookies

__all__ = [
    "CSRF_COOKIE",
    "CSRF_HEADER",
    "GUEST",
    "SESSION_COOKIE",
    "WHAT_TO_SEND",
    "AuthState",
    "Authenticator",
    "Principal",
    "RouteAuth",
    "RouteRule",
    "SessionCookies",
    "auth_state",
    "authenticate",
    "authenticate_first",
    "client_ip",
    "forwarded_client",
    "include_scoped",
    "install_auth",
    "new_key",
    "owner_of",
    "parse_ip",
    "refusal",
    "require",
    "sha256_hex",
]

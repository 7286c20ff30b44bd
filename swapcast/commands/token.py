"""``swapcast token``: mint an API token with the configured HS256 secret, for operators,
scripts and apps (with RS256/JWKS, tokens come from the identity provider instead)."""

from __future__ import annotations

import argparse

from swapcast.commands.common import config_from_args
from swapcast.config import ConfigError


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("token", help="print an API token (JWT) signed with auth.jwt_secret")
    parser.add_argument("--subject", default="operator", help="the user the token names (default: operator)")
    parser.add_argument("--role", choices=["user", "admin"], default="user", help="default: user")
    parser.add_argument("--ttl", type=float, default=3600.0, metavar="SECONDS", help="lifetime (default 3600)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from signaling.auth import mint_token

    config = config_from_args(args)
    if not config.auth.jwt_secret:
        raise ConfigError("no auth.jwt_secret configured (SWAPCAST_AUTH__JWT_SECRET): nothing to sign with"
                          + ("; with auth.jwks_file, tokens come from your identity provider" if config.auth.jwks_file else ""))
    if not args.subject.strip() or not args.ttl > 0:
        raise ConfigError("--subject must not be empty and --ttl must be more than 0")
    claims = {"iss": config.auth.issuer} if config.auth.issuer else {}
    if config.auth.audience:
        claims["aud"] = config.auth.audience
    print(mint_token(config.auth.jwt_secret, args.subject.strip(), role=args.role, ttl_s=args.ttl, **claims))
    return 0

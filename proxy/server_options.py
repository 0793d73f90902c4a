"""The server's settings on a command line: one option per `ServerSettings` field (`serve` and
`wrap` take them alike), their resolution over the environment, and the one-line messages that
say what is wrong with them."""

from __future__ import annotations

import argparse

from proxy.config import ServerSettings


def option(name: str) -> str:
    return f"--{name.replace('_', '-')}"


def add_settings_options(parser: argparse.ArgumentParser, *, defaults: dict[str, str] | None = None) -> None:
    """One option per ServerSettings field, documented from the field itself. A boolean field is a
    plain flag (`--redis-cluster`), with `--no-redis-cluster` to turn it off. `defaults`: what a
    command does without an option instead of the field's default (wrap: a free port), as shown."""
    for name, field in ServerSettings.model_fields.items():
        env = f"OFFLOAD_{name.upper()}"
        default = (defaults or {}).get(name, field.get_default(call_default_factory=True))
        # None: the built-in default, which the description names in parentheses
        help = (
            f"{field.description} [env {env}]"
            if default is None
            else f"{field.description} [env {env}; default {default}]"
        )
        if field.annotation is bool:
            parser.add_argument(option(name), dest=name, default=None, action=argparse.BooleanOptionalAction, help=help)
        else:
            parser.add_argument(option(name), dest=name, default=None, metavar=name.upper(), help=help)


def resolve_settings(args: argparse.Namespace) -> ServerSettings:
    """CLI values override the environment, which overrides the defaults."""
    overrides = {
        name: getattr(args, name) for name in ServerSettings.model_fields if getattr(args, name, None) is not None
    }
    return ServerSettings(**overrides)  # lists and maps are parsed by the fields' own validators


def settings_error(exc: Exception) -> str:
    """One line per invalid setting, naming its option and variable: what is wrong and what is expected."""
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError):
        return f"offload-proxy: invalid settings: {exc}"
    lines = []
    for error in exc.errors():
        name = str(error["loc"][0]) if error.get("loc") else ""
        message = error["msg"].removeprefix("Value error, ")
        where = f"{option(name)} (env OFFLOAD_{name.upper()})" if name in ServerSettings.model_fields else "settings"
        given = error.get("input")
        shown = "" if error["type"] == "value_error" or not isinstance(given, (str, int, float)) else f" {given!r}"
        if len(error.get("loc") or ()) > 1:  # an item of a list or map: which one
            shown += f" (at {'.'.join(str(part) for part in error['loc'][1:])})"
        lines.append(f"offload-proxy: invalid {where}{shown}: {message}")
    return "\n".join(lines)


def listen_problem(host: str, port: int) -> str | None:
    """Why the server could not listen on host:port (one line), else None: checked before the
    banner, where uvicorn would only log `[Errno 98]` after it."""
    import errno
    import socket

    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            sock.bind(address)
    except socket.gaierror as exc:
        return f"--host {host}: cannot be resolved ({exc.strerror})"
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return f"port {port} is in use: choose another with --port"
        return f"cannot listen on {host}:{port}: {exc.strerror} (choose another --host or --port)"
    return None

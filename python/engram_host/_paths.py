"""Where a daemon listens: docs/protocol.md, "Socket path", resolved exactly as the Java CLI resolves it."""

from __future__ import annotations

import os
import re
from typing import Callable, Mapping, Optional

ENV = "ENGRAM_HOST_SOCKET"
ROOT_TEMPLATE = "/run/engram-host/{instance}.sock"
DEFAULT_INSTANCE = "default"
MAX_PATH_BYTES = 107
_PLACEHOLDER = re.compile(r"\{([^}]*)}")
_INSTANCE = re.compile(r"[A-Za-z0-9._-]+")


def template(flag: Optional[str] = None, env: Optional[Mapping[str, str]] = None, euid: Optional[int] = None) -> str:
    """The template in force: ``flag`` (``--socket``), else ``$ENGRAM_HOST_SOCKET``, else the default for
    ``euid``. Blank values count as unset."""
    env = os.environ if env is None else env
    if flag is not None and flag.strip():
        return flag
    from_env = env.get(ENV)
    if from_env is not None and from_env.strip():
        return from_env
    return default_template(os.geteuid() if euid is None else euid, env)


def default_template(euid: int, env: Mapping[str, str]) -> str:
    """``/run/engram-host/{instance}.sock`` for root; ``$XDG_RUNTIME_DIR/engram-host/{instance}.sock`` for other
    users when that is an absolute path without braces (trailing slashes dropped); else
    ``/tmp/engram-host-<euid>/{instance}.sock``."""
    if euid == 0:
        return ROOT_TEMPLATE
    xdg = env.get("XDG_RUNTIME_DIR")
    if xdg is not None and xdg.startswith("/") and "{" not in xdg and "}" not in xdg:
        end = len(xdg)
        while end > 1 and xdg[end - 1] == "/":
            end -= 1
        directory = "" if end == 1 else xdg[:end]
        return directory + "/engram-host/{instance}.sock"
    return f"/tmp/engram-host-{euid}/{{instance}}.sock"


def resolve(tmpl: str, instance: Optional[str] = None, device: Optional[int] = None,
            uuid_of_device: Optional[Callable[[int], str]] = None) -> str:
    """Fills ``{instance}``, ``{device}`` and ``{device_uuid}``; the result must be absolute and at most 107
    bytes. Raises ValueError with the Java CLI's wording otherwise."""
    inst = DEFAULT_INSTANCE if instance is None or not instance.strip() else instance
    if not _INSTANCE.fullmatch(inst):
        raise ValueError(f"--instance '{inst}' may hold only letters, digits, '.', '_' and '-'")

    def need_device(placeholder: str) -> int:
        if device is None:
            raise ValueError(f"socket template '{tmpl}' uses {placeholder} but no --device was given")
        return device

    def fill(m: "re.Match[str]") -> str:
        name = m.group(1)
        if name == "instance":
            return inst
        if name == "device":
            return str(need_device("{device}"))
        if name == "device_uuid":
            d = need_device("{device_uuid}")
            if uuid_of_device is None:
                from ._cuda.device import device_uuid
                return device_uuid(d)
            return uuid_of_device(d)
        raise ValueError(f"socket template '{tmpl}': unknown placeholder {{{name}}}; known: {{instance}}, "
                         "{device}, {device_uuid}")

    path = _PLACEHOLDER.sub(fill, tmpl)
    if not path.startswith("/"):
        raise ValueError(f"socket path '{path}' must be absolute")
    if len(path.encode("utf-8")) > MAX_PATH_BYTES:
        raise ValueError(f"socket path '{path}' is longer than {MAX_PATH_BYTES} bytes, the limit of a Unix socket "
                         "address")
    return path


def socket_path(socket: Optional[str] = None, instance: Optional[str] = None, device: Optional[int] = None) -> str:
    """The socket path for these options and this process's environment and euid. A user other than root who named
    no path (no ``socket``, no ``$ENGRAM_HOST_SOCKET``) and has no socket at their own default, while the system
    daemon's ``/run/engram-host/...`` exists, gets the system path, said once through the package's logger, as the
    Java client does (``SocketPaths.forClient``); one who may not search ``/run/engram-host`` keeps their own default,
    and the logger says what root's daemon needs to serve them."""
    return for_client(socket, os.environ, os.geteuid(), instance, device)


def socket_path_checked(socket: Optional[str] = None, instance: Optional[str] = None,
                        device: Optional[int] = None) -> None:
    """Checks what :func:`socket_path` would check (placeholders, the instance, absolute, the length) without asking
    the CUDA driver for ``{device_uuid}``: a UUID of the same length stands in. Raises ValueError as it would."""
    resolve(template(socket), instance, device, lambda d: "GPU-" + "0" * 8 + "-0000-0000-0000-" + "0" * 12)


def for_client(socket: Optional[str], env: Mapping[str, str], euid: int, instance: Optional[str] = None,
               device: Optional[int] = None, uuid_of_device: Optional[Callable[[int], str]] = None) -> str:
    """:func:`socket_path` for a given environment and euid."""
    own = resolve(template(socket, env, euid), instance, device, uuid_of_device)
    from_env = env.get(ENV)
    own_default = euid != 0 and not (socket and socket.strip()) and not (from_env and from_env.strip())
    if not own_default or os.path.lexists(own):
        return own
    system = resolve(ROOT_TEMPLATE, instance, device, uuid_of_device)
    import logging
    try:
        os.lstat(system)
    except PermissionError:
        # this uid may not search the system daemon's directory: whether root's daemon serves this node cannot be
        # told; its own default stays, and the warning says what root's daemon needs to serve it
        directory = os.path.dirname(system)
        logging.getLogger("engram_host").warning(
            f"no daemon socket at {own} (this user's default), and uid {euid} may not search {directory} for the "
            f"system daemon's {system}: if root's daemon serves this node, it must admit uid {euid} (serve "
            f"--allow-uid {euid}) and {directory} must let it search (chmod o+x {directory}); --socket or {ENV} "
            "chooses another")
        return own
    except OSError:
        return own
    logging.getLogger("engram_host").warning(
        f"no daemon socket at {own} (this user's default): using the system daemon's {system} (--socket or {ENV} "
        "chooses another)")
    return system

"""What a driver promises a container given one of its devices (the profile's
``containerEdits``): env and device nodes, written as templates over the allocated device,
so a check can ask that they name *that* device, not just any.

Placeholders: ``{request}`` the request's name, ``{REQUEST}`` the same as env names spell
it (upper case, ``_`` for anything else), ``{device}`` the device's name, and
``{<domain>/<name>}`` the value of one of its attributes (qualified, as in CEL)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
BUILTIN = ("request", "REQUEST", "device")


class NamedDevice(Protocol):
    """What the templates may name of an allocated device (``fixtures.devices.Device``)."""

    @property
    def request(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def attributes(self) -> Mapping[str, Any]: ...


class UnknownAttribute(LookupError):
    """A template names an attribute the allocated device does not have."""


@dataclass(frozen=True)
class ContainerEdits:
    env: tuple[tuple[str, str], ...] = ()
    device_nodes: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.env or self.device_nodes)

    def env_for(self, device: NamedDevice) -> dict[str, str]:
        return {render(name, device): render(value, device) for name, value in self.env}

    def device_nodes_for(self, device: NamedDevice) -> list[str]:
        return [render(path, device) for path in self.device_nodes]


def parse_env(entries: Iterable[str]) -> dict[str, str]:
    """NAME=VALUE entries (a CDI spec's env, the lines of ``env``) as a mapping."""
    return dict(e.split("=", 1) for e in entries if "=" in e)


def env_spelling(request: str) -> str:
    return re.sub(r"[^A-Z0-9]", "_", request.upper())


def render(template: str, device: NamedDevice) -> str:
    def value(match: re.Match[str]) -> str:
        key = match.group(1)
        if key == "request":
            return device.request
        if key == "REQUEST":
            return env_spelling(device.request)
        if key == "device":
            return device.name
        if key not in device.attributes:
            raise UnknownAttribute(
                f"the profile's containerEdits template {template!r} names attribute "
                f"{key!r}, which device {device.name} does not have (it has "
                f"{sorted(device.attributes)})")
        return str(device.attributes[key])

    return PLACEHOLDER.sub(value, template)


def template_problems(template: str, field: str) -> list[str]:
    """A placeholder that can never be filled: not built in and not a qualified name."""
    return [f"{field}: placeholder {{{key}}} is neither one of "
            f"{', '.join('{' + b + '}' for b in BUILTIN)} nor a qualified attribute name "
            "(domain/name)"
            for key in PLACEHOLDER.findall(template) if key not in BUILTIN and "/" not in key]


def parse(data: Mapping[str, Any], where: str) -> tuple[ContainerEdits, list[str]]:
    """The profile's ``containerEdits`` section and every problem with it."""
    problems: list[str] = []
    env = data.get("env") if isinstance(data.get("env"), dict) else {}  # else: the schema's
    nodes = [n for n in data.get("deviceNodes") or [] if isinstance(n, str)]
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        problems.append(f"{where}.env must map env names to strings, not {env!r}")
        env = {}
    for name, value in env.items():
        problems += template_problems(name, f"{where}.env")
        problems += template_problems(value, f"{where}.env.{name}")
    for path in nodes:
        problems += template_problems(path, f"{where}.deviceNodes")
        if not path.startswith("/dev/"):
            problems.append(f"{where}.deviceNodes: {path} is not under /dev/")
    return ContainerEdits(tuple(env.items()), tuple(nodes)), problems

"""Protocol version negotiation for ``initialize``.

The host speaks three baselines. Each is a caret range: an offer inside one
is spoken too and answered with that exact entry, so an editor newer than
this daemon (offering 1.4.0, say) connects rather than being refused. Of the
acceptable offers the highest wins, whatever order they came in.
"""

from __future__ import annotations

import re

from ahpd.host.kernel.jsonrpc import INVALID_PARAMS, RpcError

#: What a refusal lists, newest first.
SUPPORTED_VERSIONS = ("1.0.0", "0.10.0", "0.9.0")
UNSUPPORTED_PROTOCOL_VERSION = -32005

_SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$")


def parse_version(text: str) -> tuple[int, int, int]:
    match = _SEMVER.match(text)
    if not match:
        raise ValueError(text)
    return int(match[1]), int(match[2]), int(match[3])


def _in_caret_range(version: tuple[int, int, int], base: tuple[int, int, int]) -> bool:
    """``^base``: the same major, or for 0.x the same minor, and not older."""
    if version < base:
        return False
    if base[0] > 0:
        return version[0] == base[0]
    return version[0] == 0 and version[1] == base[1]


_BASES = [parse_version(v) for v in SUPPORTED_VERSIONS]


def negotiate(offered: list[str]) -> str:
    """The offered entry to speak, or an :class:`RpcError` saying why none."""
    parsed = []
    for index, entry in enumerate(offered):
        try:
            parsed.append((parse_version(entry), entry))
        except (ValueError, TypeError):
            raise RpcError(
                INVALID_PARAMS,
                f"protocolVersions[{index}] {entry!r} is not a MAJOR.MINOR.PATCH version",
                {"path": f"$.protocolVersions[{index}]"},
            ) from None
    acceptable = [p for p in parsed if any(_in_caret_range(p[0], base) for base in _BASES)]
    if not acceptable:
        raise RpcError(
            UNSUPPORTED_PROTOCOL_VERSION,
            f"none of the offered protocol versions {offered} is spoken here",
            {"supportedVersions": list(SUPPORTED_VERSIONS)},
        )
    return max(acceptable)[1]

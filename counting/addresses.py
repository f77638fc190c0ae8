"""Address ranges (data centres, the allow-list) looked up fast: sorted, merged integer ranges per
IP version, searched by bisection."""

from __future__ import annotations

import ipaddress
import socket
from bisect import bisect_right
from collections.abc import Iterable

_V4_MAPPED_PREFIX = int(ipaddress.IPv6Address("::ffff:0:0"))


class AddressRanges:
    """Address ranges as sorted, disjoint (first, last) integers per IP version, looked up by
    bisection (an IPv4-mapped IPv6 address is looked up as its IPv4)."""

    def __init__(self, texts: Iterable[str]) -> None:
        self.networks = tuple(ipaddress.ip_network(text) for text in texts)
        self._v4 = self._merged(4)
        self._v6 = self._merged(6)

    def _merged(self, version: int) -> tuple[list[int], list[int]]:
        starts: list[int] = []
        ends: list[int] = []
        for n in sorted(self.networks, key=lambda n: (n.version, int(n.network_address))):
            if n.version != version:
                continue
            first, last = int(n.network_address), int(n.broadcast_address)
            if ends and first <= ends[-1] + 1:
                ends[-1] = max(ends[-1], last)
            else:
                starts.append(first)
                ends.append(last)
        return starts, ends

    def __contains__(self, ip: str) -> bool:
        """Plain addresses are parsed by `socket.inet_pton` (a strict subset of what `ipaddress`
        accepts, about 20 times faster); the rest (e.g. scoped IPv6) go through `ipaddress`."""
        try:
            return _in(int.from_bytes(socket.inet_pton(socket.AF_INET, ip)), self._v4)
        except OSError:
            pass
        try:
            value = int.from_bytes(socket.inet_pton(socket.AF_INET6, ip))
        except OSError:
            return self._contains_parsed(ip)
        if value >> 32 == _V4_MAPPED_PREFIX >> 32:
            return _in(value & 0xFFFFFFFF, self._v4)
        return _in(value, self._v6)

    def _contains_parsed(self, ip: str) -> bool:
        try:
            address = ipaddress.ip_address(ip)
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address.version == n.version and address in n for n in self.networks)


def _in(value: int, ranges: tuple[list[int], list[int]]) -> bool:
    starts, ends = ranges
    at = bisect_right(starts, value) - 1
    return at >= 0 and value <= ends[at]

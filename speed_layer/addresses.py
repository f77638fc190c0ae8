"""`counting.bots.is_datacenter_ip` for the counter's hot path: the same ranges
(`bots.DATACENTER_RANGES`) as sorted integer intervals, addresses parsed by the C socket library.
A parity test holds it to the rules module's answer."""

from __future__ import annotations

import bisect
import ipaddress
import socket

from counting import bots


def _intervals(version: int) -> tuple[list[int], list[int]]:
    networks = sorted(
        (int(n.network_address), int(n.broadcast_address))
        for n in (ipaddress.ip_network(r) for r in bots.DATACENTER_RANGES)
        if n.version == version
    )
    return [first for first, _ in networks], [last for _, last in networks]


_V4_FIRST, _V4_LAST = _intervals(4)
_V6_FIRST, _V6_LAST = _intervals(6)


def _within(value: int, firsts: list[int], lasts: list[int]) -> bool:
    # Every range that starts at or below the value may hold it (ranges may nest).
    return any(value <= lasts[j] for j in range(bisect.bisect_right(firsts, value)))


_CACHE_SIZE = 262_144
_cache: dict[str, bool] = {}


def is_datacenter_ip(ip: str) -> bool:
    """True when the address is in a data-centre range (IPv4-mapped IPv6 counts as its IPv4);
    remembered per address (the cache is emptied when it fills)."""
    found = _cache.get(ip)
    if found is None:
        if len(_cache) >= _CACHE_SIZE:
            _cache.clear()
        found = _cache[ip] = _lookup(ip)
    return found


def _lookup(ip: str) -> bool:
    if "%" in ip:  # a scoped IPv6 address: let the rules module decide
        return bots.is_datacenter_ip(ip)
    try:
        if ":" in ip:
            value = int.from_bytes(socket.inet_pton(socket.AF_INET6, ip), "big")
            if value >> 32 == 0xFFFF:
                return _within(value & 0xFFFFFFFF, _V4_FIRST, _V4_LAST)
            return _within(value, _V6_FIRST, _V6_LAST)
        if ip.count(".") != 3:
            return bots.is_datacenter_ip(ip)
        return _within(int.from_bytes(socket.inet_pton(socket.AF_INET, ip), "big"), _V4_FIRST, _V4_LAST)
    except OSError:
        return bots.is_datacenter_ip(ip)

"""What the single-event routes take from the connection, never from the body: the client's address
(read through X-Forwarded-For only when the peer is a trusted proxy) and its user agent."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

from starlette.datastructures import Headers

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
MAX_USER_AGENT_CHARS = 512  # the event's limit


def trusted_networks(proxies: Iterable[str]) -> tuple[IPNetwork, ...]:
    """The `trusted_proxies` setting (addresses or CIDRs) as networks."""
    return tuple(ipaddress.ip_network(proxy, strict=False) for proxy in proxies)


def _address(text: str) -> IPAddress | None:
    try:
        address = ipaddress.ip_address(text.strip())
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def client_address(
    peer: str | None, forwarded_for: Sequence[str], trusted: Sequence[IPNetwork]
) -> str | None:
    """The client's address: the direct peer, unless it is a trusted proxy; then the right-most
    X-Forwarded-For hop that is not itself a trusted proxy (a hop that is not an address ends the
    walk at the proxy that added it). None when the peer is no IP address (a test client, a socket)."""
    current = _address(peer) if peer else None
    if current is None:
        return None
    hops = [hop for header in forwarded_for for hop in header.split(",")]
    for hop in reversed(hops):
        if not any(current in network for network in trusted):
            break
        previous = _address(hop)
        if previous is None:
            break
        current = previous
    return str(current)


def user_agent(headers: Headers) -> str | None:
    """The User-Agent header, cut to the event's limit; None when absent or empty."""
    value = headers.get("user-agent")
    return value[:MAX_USER_AGENT_CHARS] if value else None

"""Who sends generated traffic: browser, headless and impossible user agents with their TLS
fingerprints, and residential, bot and data-centre addresses (all derived from stable hashes)."""

from __future__ import annotations

import ipaddress

from counting import bots

IPV6_SHARE = 0.25  # share of households on an IPv6 address

_CHROME_JA3 = "cd08e31494f9531f560d64c695473da9"
_FIREFOX_JA3 = "b20b44b18b853ef29ab773e921b03422"
_SAFARI_JA3 = "773906b0efdefa24a7f2b8eb6985bf37"
BROWSERS: tuple[tuple[str, str], ...] = (
    (
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
        "Chrome/124.0.0.0 Safari/537.36",
        _CHROME_JA3,
    ),
    (
        "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) "
        "Version/17.4 Safari/605.1.15",
        _SAFARI_JA3,
    ),
    (
        "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
        "Version/17.4 Mobile/15E148 Safari/604.1",
        _SAFARI_JA3,
    ),
    (
        "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) "
        "Chrome/124.0.6367.82 Mobile Safari/537.36",
        _CHROME_JA3,
    ),
    ("Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:125.0) Gecko/20100101 Firefox/125.0", _FIREFOX_JA3),
    (
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
        "Chrome/124.0.0.0 Safari/537.36 Edg/124.0.2478.67",
        _CHROME_JA3,
    ),
    (
        "Mozilla/5.0 (SMART-TV; Linux; Tizen 7.0) AppleWebKit/537.36 (KHTML, like Gecko) "
        "SamsungBrowser/5.0 Chrome/94.0.4606.31 TV Safari/537.36",
        _CHROME_JA3,
    ),
)


def _rotation_agents() -> tuple[tuple[str, str], ...]:
    """Real browsers of the last few years on real platforms (Chrome, Edge, Firefox, Safari on
    desktops and phones), with their TLS fingerprints: none is scripted or impossible."""
    webkit = "AppleWebKit/537.36 (KHTML, like Gecko)"
    safari = "AppleWebKit/605.1.15 (KHTML, like Gecko)"
    desktops = ("Windows NT 10.0; Win64; x64", "Macintosh; Intel Mac OS X 10_15_7", "X11; Linux x86_64")
    geckos = ("Windows NT 10.0; Win64; x64", "Macintosh; Intel Mac OS X 14.4", "X11; Ubuntu; Linux x86_64")
    agents = [
        (f"Mozilla/5.0 ({os}) {webkit} Chrome/{v}.0.0.0 Safari/537.36", _CHROME_JA3)
        for os in desktops
        for v in range(110, 132)
    ]
    edges = [(v, f"Edg/{v}.0.{2300 + v}.{v}") for v in range(110, 132)]
    agents += [
        (f"Mozilla/5.0 ({desktops[0]}) {webkit} Chrome/{v}.0.0.0 Safari/537.36 {edge}", _CHROME_JA3)
        for v, edge in edges
    ]
    agents += [
        (f"Mozilla/5.0 (Linux; Android {a}; K) {webkit} Chrome/{v}.0.0.0 Mobile Safari/537.36", _CHROME_JA3)
        for a in (12, 13, 14)
        for v in range(118, 132)
    ]
    agents += [
        (f"Mozilla/5.0 ({os}; rv:{v}.0) Gecko/20100101 Firefox/{v}.0", _FIREFOX_JA3)
        for os in geckos
        for v in range(110, 134)
    ]
    for major in (15, 16, 17):
        for minor in range(7):
            version = f"Version/{major}.{minor}"
            mac = f"Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) {safari} {version} Safari/605.1.15"
            phone = f"Mozilla/5.0 (iPhone; CPU iPhone OS {major}_{minor} like Mac OS X) {safari} {version}"
            agents += [(mac, _SAFARI_JA3), (f"{phone} Mobile/15E148 Safari/604.1", _SAFARI_JA3)]
    return tuple(agents)


# What bots that rotate their agent send (one agent of these each view).
ROTATION_AGENTS: tuple[tuple[str, str], ...] = _rotation_agents()
# Agents no real client sends (a browser version years ahead, a Windows that does not exist, an
# iPhone on Windows): what some headless farms send instead of a headless agent.
IMPOSSIBLE_AGENTS: tuple[str, ...] = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/312.0.0.0 "
    "Safari/537.36",
    "Mozilla/5.0 (Windows NT 11.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 "
    "Safari/537.36",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:240.0) Gecko/20100101 Firefox/240.0",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X; Windows NT 10.0) AppleWebKit/605.1.15 "
    "(KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1",
)
HEADLESS_AGENTS: tuple[str, ...] = (
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/124.0.0.0 "
    "Safari/537.36",
    "Mozilla/5.0 (Unknown; Linux x86_64) AppleWebKit/538.1 (KHTML, like Gecko) PhantomJS/2.1.1 Safari/538.1",
    "python-requests/2.31.0",
    "Go-http-client/1.1",
)
# First octets of residential-looking addresses: humans and the subtler bots draw from disjoint sets.
HOME_V4 = (24, 67, 68, 71, 73, 76, 81, 86, 92, 98, 174, 189, 201)
HOME_V6 = (0x2601, 0x2A02)
BOT_V4 = (45, 77, 91, 185, 196)

# Who sends an event: user_id, session_id, ip, user_agent, ja3.
Ctx = tuple[str | None, str, str, str, str]


def mix(*parts: int) -> int:
    """A 64-bit hash of integers (splitmix64 steps): stable across runs and platforms."""
    x = 0x9E3779B97F4A7C15
    for part in parts:
        x = ((x ^ part) + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        x ^= x >> 31
    return x


def ipv4(first_octets: tuple[int, ...], h: int) -> str:
    """An IPv4 address drawn by the hash `h`, its first octet one of `first_octets`."""
    octets = (first_octets[h % len(first_octets)], (h >> 8) & 0xFF, (h >> 16) & 0xFF, (h >> 24) % 254 + 1)
    return ".".join(map(str, octets))


def home_address(seed: int, household: int) -> str:
    """A residential-looking IPv4 or IPv6 address of a household (never a data-centre range)."""
    h = mix(seed, household, 0xADD)
    if (h >> 40) % 100 < IPV6_SHARE * 100:
        prefix = HOME_V6[h % len(HOME_V6)]
        return str(ipaddress.IPv6Address((prefix << 112) | ((h >> 8) & (2**48 - 1)) << 64 | (h >> 32)))
    return ipv4(HOME_V4, h)


def datacenter_address(h: int) -> str:
    """An address inside one of the shipped rules' data-centre networks, drawn by the hash `h`."""
    networks = bots.shipped().datacenter.networks
    network = networks[h % len(networks)]
    return str(network.network_address + 1 + (h >> 8) % (network.num_addresses - 2))

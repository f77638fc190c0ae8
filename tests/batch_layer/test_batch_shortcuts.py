"""The batch layer's shortcuts against the plain rules they stand for: the address prefilter of the
data-centre signal, the flag of flagged values (an IN list sent as one expression, or a broadcast
join), retries found by counting copies of each id's hash, and lone views judged without windows."""

from __future__ import annotations

import ipaddress
import random
from collections import Counter
from collections.abc import Callable, Sequence

import msgspec
import pytest
from pyspark.sql import DataFrame, SparkSession

from batch_layer import hashes, verdict
from batch_layer.hashes import mark_repeated
from batch_layer.retries import REPEATED, deduplicate, id_hash, without_retries
from batch_layer.transform import classify
from batch_layer.verdict import _flag, _may_be_datacenter_ip
from counting import bots, rules
from counting.bots import BotFilter
from counting.event import Event, parse_event, stamped
from counting.traffic import TrafficConfig, generate

pytestmark = pytest.mark.slow


# The shipped ranges and more, as a rules file's `datacenter_files` adds them (wider and narrower
# IPv6 ranges, IPv4 ranges over several first octets).
WIDER = BotFilter(
    bots.SHIPPED.rules.model_copy(
        update={
            "addresses": bots.SHIPPED.rules.addresses.model_copy(
                update={
                    "datacenter": [
                        *bots.SHIPPED.rules.addresses.datacenter,
                        "44.192.0.0/10",
                        "2406:da00::/24",
                        "2600:1900::/28",
                        "2a00::/16",
                        "198.51.100.0/24",
                    ]
                }
            )
        }
    )
)


def _addresses(rng: random.Random, bot_filter: BotFilter) -> list[str]:
    """Addresses in and near every range, written every way Python reads them."""
    found = ["::ffff:3.1.2.3", "0:0:0:0:0:FFFF:52.1.2.3", "::FFFF:3401:203", "0::ffff:159.89.0.1"]
    found += ["2600:1F00::5", "02a05:d000::1", "2a05:D07F:ffff::1%eth0", "::", "::1", "not-an-ip", ""]
    for text in bot_filter.rules.addresses.datacenter:
        network = ipaddress.ip_network(text)
        first, last = int(network.network_address), int(network.broadcast_address)
        for value in (first, last, first - 1, last + 1, rng.randint(first, last)):
            address = ipaddress.ip_address(value % (2**network.max_prefixlen))
            found += [str(address), address.exploded, address.exploded.upper()]
            if address.version == 4:
                found.append(f"::ffff:{address}")
    found += [str(ipaddress.ip_address(rng.getrandbits(32))) for _ in range(500)]
    found += [str(ipaddress.ip_address(rng.getrandbits(128))) for _ in range(500)]
    return found


@pytest.mark.parametrize("bot_filter", [bots.SHIPPED, WIDER], ids=["shipped", "with-range-files"])
def test_the_address_prefilter_keeps_every_datacenter_address(
    spark: SparkSession, bot_filter: BotFilter
) -> None:
    addresses = _addresses(random.Random(7), bot_filter)
    frame = spark.createDataFrame([(a,) for a in addresses], "ip string")
    kept = {r["ip"] for r in frame.where(_may_be_datacenter_ip(frame["ip"], bot_filter)).collect()}
    datacenter = {a for a in addresses if bot_filter.is_datacenter_ip(a)}

    assert len(datacenter) > 40
    assert datacenter - kept == set()


# Values whose text would break or change a hand-written SQL literal.
_AWKWARD = ["it's", 'say "hi"', "back\\slash", "tab\tand\nnewline", "ünïcödé ☃", "`tick`", "a', 'b", ""]


@pytest.mark.parametrize("max_in_list", [10_000, 1], ids=["in-list", "broadcast-join"])
def test_the_flag_holds_exactly_for_the_flagged_values(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch, max_in_list: int
) -> None:
    monkeypatch.setattr(verdict, "_MAX_IN_LIST", max_in_list)
    flagged = sorted({*_AWKWARD[::2], *(f"10.0.{i // 250}.{i % 250}" for i in range(2_000))})
    values = [*_AWKWARD, "10.0.0.1", "10.0.0.01", "10.0.7.249", "10.0.8.0", None]
    frame = spark.createDataFrame([(v, i) for i, v in enumerate(values)], "ip string, n long")

    flagged_frame, flag = _flag(frame, "ip", flagged, "_is_flagged")
    rows = flagged_frame.select("n", flag.alias("flag")).collect()

    assert {r["n"]: r["flag"] for r in rows} == {i: v in flagged for i, v in enumerate(values)}


def test_retries_by_counted_copies_equal_the_sorted_deduplication(spark: SparkSession) -> None:
    rng = random.Random(11)
    rows = []
    for n in range(3_000):
        copies = rng.choice((1, 1, 1, 2, 3))
        for copy in range(copies):
            # Copies differ (the first ingested decides); some share a millisecond.
            ingest_ts = 1_000 + n + rng.choice((0, 0, 5, 900)) * copy
            rows.append((f"e{n}", f"v{rng.randrange(9)}", ingest_ts, rng.randrange(2), rng.randrange(10**6)))
    rows += [(None, "v0", 5, 0, 1), (None, "v1", 4, 0, 2)]  # no id: one of them, as the sort keeps
    rng.shuffle(rows)
    frame = spark.createDataFrame(
        rows, "event_id string, video_id string, ingest_ts long, kafka_partition long, kafka_offset long"
    ).localCheckpoint(eager=True)

    expected = sorted(map(tuple, deduplicate(frame).collect()), key=repr)
    actual = sorted(
        map(tuple, without_retries(mark_repeated(frame, {REPEATED: id_hash()})).collect()), key=repr
    )

    assert actual == expected
    assert len(actual) == 3_001


def _sorted_rows(frame: DataFrame) -> list[tuple[object, ...]]:
    return sorted(map(tuple, frame.collect()), key=repr)


def test_lone_views_judged_without_windows_equal_the_windowed_judgement(
    log_frame: Callable[[Sequence[Event]], DataFrame], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Traffic with bots (replay loops, address bursts) and retries, over two days, with viewers
    # that come back: (video, viewer) pairs of one view and of many.
    start = 1_795_000_000_000 - 6 * 3_600_000
    config = TrafficConfig(
        seed=7, videos=30, viewers=400, events=8_000, rate=0.1, start_ms=start, bot_fraction=0.2
    )
    events = []
    for item in generate(config):
        sent = start + item.send_at_ms
        events.append(stamped(parse_event(msgspec.json.encode(item.event), sent), sent))
    views = [e for e in events if e.type == "view"]
    per_pair = Counter((e.video_id, rules.viewer_of(e)) for e in {e.event_id: e for e in views}.values())
    assert {n == 1 for n in per_pair.values()} == {True, False}
    assert len({e.ts // rules.DAY_MS for e in views}) >= 2
    frame = log_frame(events)

    shortcut = _sorted_rows(classify(frame))
    monkeypatch.setattr(hashes, "MAX_BROADCAST_REPEATS", -1)  # every view through the windows
    windowed = _sorted_rows(classify(frame))

    assert shortcut == windowed
    outcomes = Counter(row[8] for row in shortcut)  # the `outcome` column of `CLASSIFIED`
    assert {"counted", "repeat", "rejected", "short"} <= set(outcomes)

"""`tally demo`: the whole platform on the local stack, every layer compared with the oracle."""

from __future__ import annotations

import time

import httpx
from rich.console import Console
from rich.table import Table

from counting import oracle, redisconn, rules
from counting.event import Event
from counting.settings import Settings
from tally.secrets import with_local_secrets
from tally.speedview import counter_caught_up, speed_totals, wait_until, watermark
from tally.stack import Stack, start_stack
from tally.traffic_run import generate_items, post_with_progress
from warehouse.baseline import current_baseline


def _edge_between(events: list[Event], bucket_ms: int) -> int:
    """A bucket edge near the middle of the traffic's ingestion times."""
    stamps = sorted(e.ingest_ts or 0 for e in events)
    middle = stamps[len(stamps) // 2]
    bucket = max(rules.bucket_of(middle, bucket_ms), rules.bucket_of(stamps[0], bucket_ms) + 1)
    return rules.bucket_start(bucket, bucket_ms)


# The demo's traffic is small: a ladder it climbs (the platform's default starts at 1,000 views).
DEMO_MILESTONE_STEPS = [10, 25, 50, 100, 250]


def _milestones(settings: Settings, console: Console) -> None:
    """Announce the milestones the published baseline reached, on the demo's small ladder."""
    from tally.milestones import announce

    done = announce(settings.model_copy(update={"milestone_steps": DEMO_MILESTONE_STEPS}))
    highest: dict[str, int] = {}
    for key in done.sent:
        video, _, step = key.partition(":")
        highest[video] = max(highest.get(video, 0), int(step))
    ranked = sorted(highest.items(), key=lambda item: (-item[1], item[0]))
    shown = ", ".join(f"{video} {step}" for video, step in ranked[:5])
    more = f" and {len(ranked) - 5} more videos" if len(ranked) > 5 else ""
    console.print(
        f"{len(done.sent)} milestones announced on the topic '{settings.milestones_topic}' (ladder "
        f"{DEMO_MILESTONE_STEPS}, from the published baseline only), highest step per video: "
        f"{shown or 'none yet'}{more}"
    )


def run_demo(settings: Settings, seconds: int, rate: float, keep_running: bool, console: Console) -> None:
    settings = with_local_secrets(settings)  # the keys the stack's APIs are started with
    console.rule("[bold]Tally demo")
    console.print(f"data directory {settings.data_dir}, bucket {settings.bucket_ms} ms")
    stack: Stack = start_stack(settings, reset=True)
    try:
        _run(settings, stack, seconds, rate, console)
    except BaseException:
        stack.stop()
        raise
    if keep_running:
        console.print(
            f"\nThe stack is still up. Try:\n"
            f"  curl http://{settings.serving_host}:{settings.serving_port}/v1/videos/v0001/stats\n"
            f"  curl http://{settings.serving_host}:{settings.serving_port}/v1/videos/v0001/milestones\n"
            f"  open http://{settings.serving_host}:{settings.serving_port}/dashboard (the overview)\n"
            f"  open http://{settings.serving_host}:{settings.serving_port}/docs (serving) and "
            f"http://{settings.ingest_host}:{settings.ingest_port}/docs (ingest)\n"
            f"Stop it with: tally down --data-dir {settings.data_dir}"
        )
    else:
        stack.stop()
        console.print("stack stopped")


def _run(settings: Settings, stack: Stack, seconds: int, rate: float, console: Console) -> None:
    console.print("stack up: " + ", ".join(f"{p.name} (pid {p.pid})" for p in stack.processes))
    items = generate_items(events=int(seconds * rate), rate=rate, seed=11, videos=40, bots=True)
    console.print(f"sending {len(items)} generated events (humans and labelled bots) for ~{seconds} s")
    ingest_url = f"http://{settings.ingest_host}:{settings.ingest_port}"
    sent = post_with_progress(items, ingest_url, settings.collector_key, console)
    console.print(f"acknowledged {len(sent.events)} events, refused {len(sent.refused)}")

    client = redisconn.sync_client(settings)
    try:
        wait_until(lambda: counter_caught_up(client, settings), 120, "the counter catching up")
        cutoff = _edge_between(sent.events, settings.bucket_ms)
        console.print(f"waiting for the archiver's watermark to close the cutoff {cutoff}")
        wait_until(lambda: watermark(client) >= cutoff, 120, "the archiver closing the cutoff")
        console.print("running the Spark batch (bot-filtered, exact) …")
        from batch_layer import run_batch

        result = run_batch(settings, cutoff)
        console.print(f"batch {result.run_id}: {result.events_read} events, {result.seconds:.1f} s")
        baseline = current_baseline(settings.baselines_dir)
        truth_all = oracle.count(sent.events)
        truth_cut = oracle.count(sent.events, cutoff)
        top = sorted(truth_all, key=lambda v: -truth_all[v].views)[:10]
        table = Table(title=f"views (likes) of the top videos; batch cutoff {cutoff}")
        for column in ("video", "speed (all)", "batch (< C)", "oracle (< C)", "served", "oracle (all)"):
            table.add_column(column, justify="right")
        with httpx.Client(base_url=f"http://{settings.serving_host}:{settings.serving_port}") as api:
            for video in top:
                speed = speed_totals(client, video)
                base = baseline.get(video) if baseline else None
                served = api.get(f"/v1/videos/{video}/stats").json()
                table.add_row(
                    video,
                    f"{speed.get('views', 0)} ({speed.get('likes', 0)})",
                    f"{base.views if base else 0} ({base.likes if base else 0})",
                    f"{truth_cut.get(video, oracle.VideoCounts()).views} "
                    f"({truth_cut.get(video, oracle.VideoCounts()).likes})",
                    f"{served['views']} ({served['likes']})",
                    f"{truth_all[video].views} ({truth_all[video].likes})",
                )
        console.print(table)
        console.print(
            "batch equals the oracle before the cutoff exactly (bots removed); served = batch + the speed "
            "layer's buckets after the cutoff, where the first events of a bot burst may still count "
            "until the next batch."
        )
        _milestones(settings, console)
    finally:
        client.close()
    time.sleep(0)

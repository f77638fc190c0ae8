"""Create the broker topics the platform uses (events, milestones, their dead letters), idempotently."""

from __future__ import annotations

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from counting.settings import Settings
from tally.errors import StackError


def milestones_dead_letter_topic(settings: Settings) -> str:
    """Where a milestone goes whose webhook refused every try."""
    return f"{settings.milestones_topic}-dead-letter"


def ensure_topics(settings: Settings, timeout: float = 15.0) -> None:
    """Create the events topic (settings.topic_partitions partitions), its dead-letter topic, the
    milestones topic with its dead-letter topic, and with other regions the components topic."""
    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap})
    try:
        existing = set(admin.list_topics(timeout=timeout).topics)
    except KafkaException as exc:
        raise StackError(
            f"the broker is not reachable at {settings.kafka_bootstrap}: start it with 'tally up' "
            f"or set TALLY_KAFKA_BOOTSTRAP ({exc})"
        ) from exc
    wanted = [
        NewTopic(settings.events_topic, num_partitions=settings.topic_partitions, replication_factor=1),
        NewTopic(settings.dead_letter_topic, num_partitions=1, replication_factor=1),
        NewTopic(settings.milestones_topic, num_partitions=1, replication_factor=1),
        NewTopic(milestones_dead_letter_topic(settings), num_partitions=1, replication_factor=1),
    ]
    if settings.peers:  # they read it from this region's broker (decision 0006)
        partitions = settings.topic_partitions
        wanted.append(NewTopic(settings.components_topic, num_partitions=partitions, replication_factor=1))
    missing = [t for t in wanted if t.topic not in existing]
    if not missing:
        return
    for topic, future in admin.create_topics(missing, operation_timeout=timeout).items():
        try:
            future.result(timeout)
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise StackError(f"could not create topic {topic!r}: {exc}") from exc

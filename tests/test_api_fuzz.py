"""Schemathesis against the OpenAPI of both APIs, served for real (broker, Redis): no 5xx, no
answer outside its documented status codes and schemas, for a bounded number of examples.

Schema-valid data may still be refused (422): an event's `ts` must lie within 30 days of the
server's clock, which no schema can say, so the positive-data check is left out."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from counting.settings import Settings
from ingest.app import create_app as create_ingest
from ingest.auth import issue_token
from ingest.routes import SINGLE_ROUTES
from serving_layer.app import create_app as create_serving
from tally.topics import ensure_topics
from tests.servers import serve

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EXAMPLES = settings(
    max_examples=25,
    derandomize=True,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.function_scoped_fixture,
    ],
)


@pytest.fixture(scope="module")
def fuzz_settings(tmp_path_factory: pytest.TempPathFactory, broker: str, redis_url: str) -> Settings:
    configured = Settings(
        data_dir=tmp_path_factory.mktemp("fuzz"),
        kafka_bootstrap=broker,
        redis_url=redis_url,
        events_topic="fuzz-events",
        dead_letter_topic="fuzz-dlq",
        topic_partitions=2,
        bucket_ms=2_000,
        rate_limit_ip_per_min=100_000,
        rate_limit_user_per_min=100_000,
        admin_key="fuzz-admin-key-0123456789",
        collector_key="fuzz-collector-key-0123456789",
        user_token_secret="fuzz-token-secret-0123456789",
    )
    ensure_topics(configured)
    return configured


@pytest.fixture(scope="module")
def ingest_url(fuzz_settings: Settings) -> Iterator[str]:
    with serve(create_ingest(fuzz_settings)) as url:
        yield url


@pytest.fixture(scope="module")
def serving_url(fuzz_settings: Settings) -> Iterator[str]:
    with serve(create_serving(fuzz_settings)) as url:
        yield url


@pytest.fixture(scope="module")
def ingest_schema(ingest_url: str) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_url(f"{ingest_url}/openapi.json")


@pytest.fixture(scope="module")
def serving_schema(serving_url: str) -> schemathesis.BaseSchema:
    schema = schemathesis.openapi.from_url(f"{serving_url}/openapi.json")
    return schema.exclude(path="/v1/videos/{video_id}/live")  # an endless stream, tested on its own


def _fuzz(schema: schemathesis.BaseSchema, headers: dict[str, str]) -> list[str]:
    """Run every operation's generated cases; return the operations exercised."""
    exercised = []
    for result in schema.get_all_operations():
        operation = result.ok()

        @given(case=operation.as_strategy())
        @EXAMPLES
        def run(case: schemathesis.Case) -> None:
            case.headers = {**(case.headers or {}), **headers}
            case.call_and_validate(excluded_checks=[positive_data_acceptance])

        run()
        exercised.append(operation.label)
    return exercised


def test_ingest_api_conforms(ingest_schema: schemathesis.BaseSchema, fuzz_settings: Settings) -> None:
    token = issue_token(fuzz_settings.user_token_secret, "fuzzer", 600)
    headers = {"x-collector-key": fuzz_settings.collector_key, "authorization": f"Bearer {token}"}
    # Every operation: the batch route, each single-event route, the health check.
    assert len(_fuzz(ingest_schema, headers)) == 1 + len(SINGLE_ROUTES) + 1


def test_serving_api_conforms(serving_schema: schemathesis.BaseSchema, fuzz_settings: Settings) -> None:
    assert len(_fuzz(serving_schema, {"x-admin-key": fuzz_settings.admin_key})) >= 6

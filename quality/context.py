"""Run a suite over a frame in a Great Expectations file context under the quality directory, keep
the validation result and its data docs page there, and say what failed in plain words.

Offline: no analytics, no progress bars, and only filesystem stores and sites.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import great_expectations as gx
import pandas as pd
from great_expectations.checkpoint import UpdateDataDocsAction
from great_expectations.data_context import FileDataContext
from great_expectations.data_context.types.base import ProgressBarsConfig
from great_expectations.exceptions import DataContextError

from quality.report import SuiteOutcome

DATASOURCE = "tally"
BATCH_DEFINITION = "whole"
SITE = "local_site"
DOCS_DIR = Path("gx", "uncommitted", "data_docs", SITE)
EXAMPLES = 5
# The data docs' front page lists the newest validations only: building it reads every result it
# lists, so with all of them (a run every 5 minutes keeps ~860 a day) each validation took longer
# than the one before. Every result and its page stay kept.
INDEX_LIMIT = 100


def open_context(quality_dir: Path) -> FileDataContext:
    """The file context rooted at `quality_dir` (created on first use): suites, results, data docs."""
    quality_dir.mkdir(parents=True, exist_ok=True)
    context = gx.get_context(mode="file", project_root_dir=quality_dir)
    assert isinstance(context, FileDataContext)
    if getattr(context.get_config(), "analytics_enabled", None) is not False:
        context.enable_analytics(False)
    progress: Any = context.variables.progress_bars
    globally = progress.get("globally") if isinstance(progress, dict) else getattr(progress, "globally", None)
    if globally is not False:
        context.variables.progress_bars = ProgressBarsConfig(globally=False)
        context.variables.save()
    sites: Any = context.variables.data_docs_sites
    index = sites[SITE].setdefault("site_index_builder", {"class_name": "DefaultSiteIndexBuilder"})
    if index.get("validation_results_limit") != INDEX_LIMIT:
        index["validation_results_limit"] = INDEX_LIMIT
        context.variables.data_docs_sites = sites
        context.variables.save()
    return context


def docs_index(quality_dir: Path) -> Path:
    """The data docs' front page: the newest `INDEX_LIMIT` validations, newest first."""
    return quality_dir / DOCS_DIR / "index.html"


def _batch_definition(context: FileDataContext, asset_name: str) -> Any:
    source: Any
    try:
        source = context.data_sources.get(DATASOURCE)
    except (KeyError, ValueError, DataContextError):
        source = context.data_sources.add_pandas(DATASOURCE)
    try:
        asset = source.get_asset(asset_name)
    except LookupError:
        asset = source.add_dataframe_asset(asset_name)
    try:
        return asset.get_batch_definition(BATCH_DEFINITION)
    except (KeyError, LookupError):
        return asset.add_batch_definition_whole_dataframe(BATCH_DEFINITION)


def run_suite(
    context: FileDataContext,
    suite: gx.ExpectationSuite,
    frame: pd.DataFrame,
    run_name: str,
    index_columns: Iterable[str] = (),
) -> SuiteOutcome:
    """Validate `frame` with `suite` through a checkpoint that stores the result and updates the
    data docs; `index_columns` name the rows of failure examples (e.g. the file)."""
    suite = context.suites.add_or_update(suite)
    definition = context.validation_definitions.add_or_update(
        gx.ValidationDefinition(name=suite.name, data=_batch_definition(context, suite.name), suite=suite)
    )
    result_format: dict[str, Any] = {"result_format": "SUMMARY", "partial_unexpected_count": 20}
    if index_columns:
        result_format["unexpected_index_column_names"] = list(index_columns)
    checkpoint = context.checkpoints.add_or_update(
        gx.Checkpoint(
            name=suite.name,
            validation_definitions=[definition],
            actions=[UpdateDataDocsAction(name="update_data_docs", site_names=[SITE])],
            result_format=result_format,
        )
    )
    result = checkpoint.run(batch_parameters={"dataframe": frame}, run_id=gx.RunIdentifier(run_name=run_name))
    failures: list[str] = []
    failing: list[str] = []
    page: Path | None = None
    for identifier, validation in result.run_results.items():
        page = _docs_page(context, identifier) or page
        failed = [r for r in validation.results if not r.success]
        failures += [_plain_words(r, index_columns) for r in failed]
        failing += [key for r in failed for key in _failing_keys(r, list(index_columns))]
    return SuiteOutcome(
        suite=suite.name,
        rows=len(frame),
        failures=tuple(failures),
        docs_page=page,
        failing=tuple(dict.fromkeys(failing)),
    )


def _failing_keys(outcome: Any, index_columns: list[str]) -> list[str]:
    """The index values of a failed expectation's example rows (one column: its value; several:
    joined by ' / '); the rows also carry the checked columns, which are left out."""
    result: Mapping[str, Any] = outcome.result or {}
    rows = result.get("partial_unexpected_index_list") or []
    return [
        " / ".join(str(_plain(row[c])) for c in index_columns if c in row)
        for row in rows
        if isinstance(row, Mapping)
    ]


def _docs_page(context: FileDataContext, identifier: Any) -> Path | None:
    for site in context.get_docs_sites_urls(resource_identifier=identifier, site_names=[SITE]):
        url = site.get("site_url")
        if url and url.startswith("file://"):
            return Path(unquote(urlparse(url).path))
    return None


def _plain_words(outcome: Any, index_columns: Iterable[str]) -> str:
    """One failed expectation as a sentence: what should hold, how often it does not, examples."""
    config = outcome.expectation_config
    what = config.description or f"{config.type} {dict(config.kwargs)}"
    info: Mapping[str, Any] = outcome.exception_info or {}
    if info.get("raised_exception"):
        return f"{what}: could not be checked ({info.get('exception_message')})"
    result: Mapping[str, Any] = outcome.result or {}
    if "unexpected_count" not in result:
        return f"{what} (observed {result.get('observed_value')!r})"
    text = f"{what}: {result['unexpected_count']} of {result.get('element_count')} rows break it"
    examples = _examples(result, list(index_columns))
    return f"{text}, e.g. {examples}" if examples else text


def _examples(result: Mapping[str, Any], index_columns: list[str]) -> str:
    indexed = result.get("partial_unexpected_index_list") or []
    if indexed and index_columns:
        shown = [_row_text(row) for row in indexed[:EXAMPLES]]
        return "; ".join(shown)
    values = result.get("partial_unexpected_list") or []
    return ", ".join(repr(_plain(v)) for v in values[:EXAMPLES])


def _row_text(row: Mapping[str, Any]) -> str:
    return ", ".join(f"{key}={_plain(value)!r}" for key, value in row.items())


def _plain(value: Any) -> Any:
    """numpy scalars and tuples of them as plain Python values (for readable messages)."""
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    item = getattr(value, "item", None)
    return item() if callable(item) else value

"""The bot rules a batch run counted with, kept beside its outputs (`batch/<run>/bot_rules.json`),
so an audit of the run's payouts judges the log with the same rules, whatever the file holds now."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from counting.batchpaths import rules_used_path
from counting.botrules import BotRules, RulesError
from counting.bots import BotFilter, filter_of
from counting.settings import Settings


def save_run_rules(settings: Settings, run_id: str, bot_filter: BotFilter) -> Path:
    """Keep the rules a run counts with (replacing any of an earlier try of the run)."""
    path = rules_used_path(settings, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    part.write_text(bot_filter.rules.model_dump_json(indent=2) + "\n", encoding="utf-8")
    part.replace(path)
    return path


def run_bot_filter(settings: Settings, run_id: str) -> BotFilter:
    """The filter of the rules run `run_id` counted with; for a run that kept none (made before
    runs kept their rules), the filter of the settings' rules file."""
    path = rules_used_path(settings, run_id)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return filter_of(settings.bot_rules_file)
    try:
        return BotFilter(BotRules.model_validate_json(text))
    except ValidationError as exc:
        raise RulesError(
            path, 0, f"the rules kept by run {run_id!r} are damaged ({exc.errors()[0]['msg']})"
        ) from None

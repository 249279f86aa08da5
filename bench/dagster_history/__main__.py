"""`python -m dagster_history` from bench/: seed, purge, measure, report (see __init__)."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import click
import dagster as dg
from common import kafka, write_figures
from sqlalchemy import text

from tidelake.streaming.calls.call_events import CALL_EVENTS

from .page import time_page, ui_queries
from .profiles import PROGRESS_S, after_profile, before_profile
from .report import report
from .seeding import Seeder, seed, verify
from .site import local_postgres, make_site, postgres_bin, sensor_ids, webserver
from .storage import purge_to_retention, storage_bytes, table_rows
from .templates import capture_templates
from .ticks import time_ticks


@click.command()
@click.option("--days", default=30.0, show_default=True, help="history to seed")
@click.option("--restarts-per-day", default=3.0, show_default=True, help="before the live run")
@click.option("--live-run-days", default=7.0, show_default=True, help="age of the live run")
@click.option("--profiles", default="before,after", show_default=True)
@click.option("--storages", default="sqlite,postgres", show_default=True)
@click.option("--ticks", default=15, show_default=True, help="ticks timed per instance")
@click.option("--repeats", default=5, show_default=True, help="runs of each page query")
@click.option("--verify/--no-verify", "check", default=True, help="compare bulk and real seeding")
@click.option(
    "--retention-days",
    type=click.FloatRange(min=0, min_open=True),
    help="purge the aged instances to this many days (the daily dagster_history_retention "
    "job) before measuring them",
)
@click.option(
    "--purge-only",
    is_flag=True,
    help="only the aged instances, seeded and purged to --retention-days: the purge's time "
    "and longest statement and transaction, no webserver, tick or page",
)
@click.option("--keep", is_flag=True, help="keep the instances' folders")
@click.option("--out", type=click.Path(path_type=Path))
def main(
    days: float,
    restarts_per_day: float,
    live_run_days: float,
    profiles: str,
    storages: str,
    ticks: int,
    repeats: int,
    check: bool,
    retention_days: float | None,
    purge_only: bool,
    keep: bool,
    out: Path | None,
) -> None:
    if purge_only and not retention_days:
        raise click.BadParameter("--purge-only needs --retention-days", param_hint="--purge-only")
    logging.getLogger("dagster").setLevel(logging.WARNING)
    root = Path(tempfile.mkdtemp(prefix="tidelake-dagster-history-"))
    env = {
        "TIDELAKE_LAKE": str(root / "lake"),
        "TIDELAKE_CHECKPOINTS": str(root / "checkpoints"),
        "TIDELAKE_HOME": str(root / "home"),
    }
    os.environ.update(env)
    chosen = [p for p in profiles.split(",") if p]
    figures: dict[str, Any] = {
        "days": days,
        "restarts_per_day": restarts_per_day,
        "live_run_days": live_run_days,
        "runs": {},
    }
    postgres = None
    with kafka() as conf, contextlib.ExitStack() as stack:
        env["KAFKA_BOOTSTRAP_SERVERS"] = conf["bootstrap.servers"]
        os.environ["KAFKA_BOOTSTRAP_SERVERS"] = conf["bootstrap.servers"]
        from tidelake.assets.definitions import build_definitions
        from tidelake.assets.resources import KafkaResource
        from tidelake.streaming.kafka.admin import ensure_topic

        ensure_topic(conf, CALL_EVENTS.topic, CALL_EVENTS.topic_partitions)
        defs = build_definitions({CALL_EVENTS.name: CALL_EVENTS})
        resources = {"kafka": KafkaResource(bootstrap_servers=conf["bootstrap.servers"])}
        templates = capture_templates(defs, resources)
        figures["one_tick_writes"] = {
            "rows": templates.rows_per_tick,
            "event_bytes": sum(len(dg.serialize_value(e)) for e in templates.health),
            "log_files": templates.log_files_per_tick,
            "log_bytes": templates.log_bytes_per_tick,
        }
        figures["one_progress_report_writes"] = {
            "events": len(templates.progress),
            "event_bytes": sum(len(dg.serialize_value(e)) for e in templates.progress),
        }
        click.echo(f"one real tick writes: {figures['one_tick_writes']}")
        click.echo(f"one progress report writes: {figures['one_progress_report_writes']}")
        if check:
            figures["verify"] = verify(templates)
            click.echo(f"bulk vs store_event, 1 hour: {figures['verify']}")
        if "postgres" in storages:
            if postgres_bin() is None:
                raise click.ClickException(
                    "PostgreSQL's server is not installed: scripts/install_debian_packages.sh"
                )
            postgres = stack.enter_context(local_postgres())
        queries = {} if purge_only else ui_queries()
        ages = (("aged", days),) if purge_only else (("new", 1 / 24), ("aged", days))
        for storage in [s for s in storages.split(",") if s]:
            for name in chosen:
                profile = before_profile() if name == "before" else after_profile()
                for age, history in ages:
                    label = f"{storage}/{name}/{age}"
                    site = make_site(root, label.replace("/", "-"), storage, postgres, profile)
                    click.echo(f"{label}: seeding {history:g} days ...")
                    with contextlib.ExitStack() as served:
                        url = None if purge_only else served.enter_context(webserver(site, env))
                        origin_id, selector_id = sensor_ids(url) if url else ("origin", "selector")
                        with site.instance() as instance:
                            started = time.perf_counter()
                            seeder = Seeder(instance, templates, origin_id, selector_id)
                            live = seed(
                                seeder, profile, time.time(), history, restarts_per_day,
                                live_run_days,
                            )  # fmt: skip
                            seeded_s = time.perf_counter() - started
                            # the live run reports on: seeding took minutes
                            seeder.progress(live, [time.time()], PROGRESS_S)
                            if storage == "postgres":
                                with instance.event_log_storage.index_connection() as conn:  # type: ignore[attr-defined]
                                    conn.execute(text("analyze"))  # as autovacuum would
                            purge = None
                            if retention_days and age == "aged":
                                purge = purge_to_retention(instance, site.home, retention_days)
                                click.echo(f"{label}: purged to {retention_days:g} days: {purge}")
                            rows = table_rows(instance)
                            size = storage_bytes(instance, site.home)
                            tick, page = {}, {}
                            if url:
                                tick = time_ticks(
                                    instance,
                                    defs,
                                    resources,
                                    origin_id,
                                    selector_id,
                                    profile.tick_retention,
                                    ticks,
                                )
                                page = time_page(url, queries, repeats)
                    figures["runs"][label] = {
                        "seed_s": seeded_s,
                        "rows": rows,
                        "bytes": size,
                        "tick": tick,
                        "page_ms": page,
                        "purge": purge,
                    }
                    click.echo(f"{label}: {size / 1e6:,.1f} MB, rows {rows}")
                    if url:
                        click.echo(
                            f"{label}: tick {tick['tick_ms']:.0f} ms (sensor "
                            f"{tick['evaluate_ms']:.0f}, writes {tick['write_ms']:.0f}); page "
                            f"{page['page_total_ms']:.0f} ms"
                        )
                    if not keep:
                        shutil.rmtree(site.home, ignore_errors=True)
    report(figures)
    write_figures(out, figures)
    if not keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

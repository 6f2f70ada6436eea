"""Chapter 08's bench as a library: every router of the course — and any registered one — trained on one backbone and
measured the same way.

- :mod:`~capsule_lab.studies.bench.settings` — the bench's settings, quick and full;
- :mod:`~capsule_lab.studies.bench.entries` — its routers (:data:`~capsule_lab.studies.bench.entries.ROUTERS`),
  each a registered kind's spec on the backbone, and the networks they make;
- :mod:`~capsule_lab.studies.bench.records` — one router and seed trained and measured: a record, keyed for the cache;
- :mod:`~capsule_lab.studies.bench.runner` — the bench run, cached; results written, summarised, the longer runs;
- :mod:`~capsule_lab.studies.bench.tables` — the chapter's result tables;
- :mod:`~capsule_lab.studies.bench.timing` — routers timed by the timing rule: interleaved, repeated, at each thread
  count;
- :mod:`~capsule_lab.studies.bench.claims` — the verdict table: each paper's claim the bench can test.

The bench's names are re-exported here: ``from capsule_lab.studies.bench import run_router_bench`` works.
"""


from .settings import RouterBenchSettings, ROUTERS_08, SETTINGS
from .entries import MAIN_ROUTER, BenchEntry, matched_ladder_widths, ROUTERS, bench_entry, bench_data, build_network
from .records import BENCH_VERSION, RECORD_FIELDS, measure_network, record_key, ADDED_SETTINGS, train_record
from .runner import (run_router_bench, write_results, summarize_records, default_cache, SHIPPED_CACHE,
                     LONGER_RUN, longer_run_settings, shipped_longer_run, verdict_records)

__all__ = ["RouterBenchSettings", "ROUTERS_08", "SETTINGS", "MAIN_ROUTER", "BenchEntry", "matched_ladder_widths",
           "ROUTERS", "bench_entry", "bench_data", "build_network", "BENCH_VERSION", "RECORD_FIELDS", "measure_network",
           "record_key", "ADDED_SETTINGS", "train_record", "run_router_bench", "write_results", "summarize_records",
           "default_cache", "SHIPPED_CACHE", "LONGER_RUN", "longer_run_settings", "shipped_longer_run",
           "verdict_records"]

"""gateway serve | ingest | sync | search | eval | verify | backup | restore | export-schema | check-config"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.errors import GatewayError, StorageUnavailable, StoreRefused
from gateway.retrieval.options import Fusion, Mode

if TYPE_CHECKING:
    from gateway.ingest.jsonl_reader import ReadAhead


# Exit codes (docs/operations.md): 0 done; 1 damage (`verify` found some, or a command refused to
# open a damaged or unverifiable store: re-running will not help); 2 a usage, configuration or input
# error; 3 `serve` cannot start; 75 storage unavailable for now (sysexits EX_TEMPFAIL: a lock held, a
# full or read-only disk, a server down: fix that or wait, then re-run).
EXIT_DAMAGE = 1
EXIT_CANNOT_START = 3  # uvicorn's STARTUP_FAILURE, which a failing lifespan gives too
EXIT_STORAGE = 75
LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"
# How long `serve` lets in-flight requests finish on SIGTERM or Ctrl-C.
GRACEFUL_SHUTDOWN_S = 10
# The supervised milvus-lite server's name on /metrics' per-process series.
MILVUS_LITE = "milvus-lite"
# Seconds between the progress lines long commands print on stderr (ingest off a terminal, verify, compact).
PROGRESS_S = 5.0


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT)
    # pymilvus logs every failed RPC and iterator fallback with a traceback; our errors say enough.
    logging.getLogger("pymilvus").setLevel(logging.CRITICAL)
    try:
        return args.handler(args)
    except StoreRefused as exc:
        print(f"error [{exc.code}]: {exc.message}", file=sys.stderr)
        return EXIT_DAMAGE
    except StorageUnavailable as exc:
        print(f"error [{exc.code}]: {exc.message}", file=sys.stderr)
        return EXIT_STORAGE
    except GatewayError as exc:
        print(f"error [{exc.code}]: {exc.message}", file=sys.stderr)
        return 2


def _log_config() -> dict:
    """uvicorn's logging plus the gateway's INFO lines (the access log among them) on stderr. uvicorn
    applies it in every worker process too, which start as fresh interpreters without `main`'s setup."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["formatters"]["gateway"] = {"format": LOG_FORMAT}
    config["handlers"]["gateway"] = {"class": "logging.StreamHandler", "formatter": "gateway",
                                     "stream": "ext://sys.stderr"}
    config["loggers"]["gateway"] = {"handlers": ["gateway"], "level": "INFO", "propagate": False}
    config["loggers"]["pymilvus"] = {"level": "CRITICAL"}  # as in `main`: our errors say enough
    config.setdefault("filters", {})["gateway_refusal"] = {"()": "gateway.cli.RefusalTraceback"}
    config["loggers"]["uvicorn.error"]["filters"] = ["gateway_refusal"]
    return config


class RefusalTraceback(logging.Filter):
    """Drops the traceback uvicorn logs when the app's start-up raised a GatewayError: the lifespan
    has logged `gateway cannot start: <message>`, which is the whole story (gateway/app.py)."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not (text.startswith("Traceback (most recent call last)") and _raised_gateway_error(text))


def _raised_gateway_error(traceback_text: str) -> bool:
    """Whether the exception a formatted traceback ends with (the last one raised) is a GatewayError."""
    import importlib

    last = traceback_text.rsplit("Traceback (most recent call last):", 1)[-1]
    line = next((line for line in last.splitlines() if line and not line[0].isspace()), "")
    module, _, name = line.split(":", 1)[0].rpartition(".")
    try:
        raised = getattr(importlib.import_module(module), name) if module.startswith("gateway") else None
    except ImportError:
        return False
    return isinstance(raised, type) and issubclass(raised, GatewayError)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gateway", description="GraphQL retrieval gateway over Milvus")
    sub = parser.add_subparsers(required=True, metavar="command")

    def target(p: argparse.ArgumentParser) -> None:
        p.add_argument("--tenant", required=True)
        p.add_argument("--namespace", required=True)
        p.add_argument("--collection", required=True)

    p = sub.add_parser("ingest", help="ingest .md/.txt/.pdf/.html files, directories and BEIR JSONL into a collection")
    target(p)
    p.add_argument("paths", nargs="+", type=Path)
    p.add_argument("--prune", action="store_true", help="delete sources that are not in this ingest")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(handler=_ingest)

    p = sub.add_parser("sync", help="ingest every tenant's seed corpora (what `serve` does on an empty store)")
    p.set_defaults(handler=_sync)

    p = sub.add_parser("search", help="search one collection directly, without the HTTP server")
    target(p)
    p.add_argument("query")
    _search_options(p)
    p.set_defaults(handler=_search)

    p = sub.add_parser("eval", help="nDCG@10, Recall@100 and MRR@10 on a BEIR-style test split")
    p.add_argument("--tenant", required=True)
    p.add_argument("--namespace", required=True)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--collection")
    where.add_argument("--collections", help="comma-separated: a federated search over these collections")
    where.add_argument("--federated", action="store_true", help="a federated search over the whole namespace")
    p.add_argument("--merge", choices=["rrf", "dbsf", "signals"],
                   help="how federated results are merged (default: the tenant's federation.merge)")
    p.add_argument("--queries", required=True, type=Path)
    p.add_argument("--qrels", required=True, type=Path)
    p.add_argument("--mode", default="hybrid",
                   help="dense, sparse, hybrid, or a comma-separated list of them")
    p.add_argument("--fusion", choices=[f.value for f in Fusion])
    p.add_argument("--alpha", type=float, help="1 = dense only, 0 = BM25 only (weights of hybrid fusion)")
    p.add_argument("--candidates", type=int, help="candidates per signal before fusion")
    p.add_argument("--group-by-source", action=argparse.BooleanOptionalAction, default=None,
                   help="one hit per source before fusion (default: the collection's setting)")
    p.add_argument("--pipeline", help="run this pipeline of the tenant around the search (see docs/pipelines.md)")
    p.add_argument("--limit", type=int,
                   help="hits per query (default 100, so Recall@100 means something); a smaller limit "
                        "measures what a caller asking for that many gets, since candidate depth follows it")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_eval)

    p = sub.add_parser("verify", help="re-read every stored row: content hashes, vectors, orphans, counts")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--adopt", action="store_true",
                   help="a store found without its record is recorded even when damage is found "
                        "(without it, only a store with no damage is)")
    p.set_defaults(handler=_verify)

    p = sub.add_parser("backup", help="copy the milvus-lite store, its record and token vectors (while serving)")
    p.add_argument("dest", type=Path, help="a new directory for the backup")
    p.add_argument("--pause-timeout", type=float, default=60.0,
                   help="seconds to wait for in-flight writes before the copy starts (default 60)")
    p.set_defaults(handler=_backup)

    p = sub.add_parser("restore", help="check a backup and put it in place of the store (gateway stopped)")
    p.add_argument("src", type=Path, help="a directory written by `gateway backup`")
    p.set_defaults(handler=_restore)

    p = sub.add_parser("check-config", help="validate tenants/*.yaml and print every problem")
    p.add_argument("path", nargs="?", type=Path,
                   help="a folder of tenant files or one tenant file (default: GATEWAY_TENANTS_DIR)")
    p.set_defaults(handler=_check_config)

    p = sub.add_parser("serve", help="serve the GraphQL API (GraphiQL at /graphql)")
    p.add_argument("--host", help="bind address (default: GATEWAY_HOST or 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default: GATEWAY_PORT or 8000)")
    p.add_argument("--accept-empty", action="store_true",
                   help="start although the gateway's record says the (now empty) store held data")
    p.add_argument("--workers", type=int,
                   help="worker processes sharing one store (default: GATEWAY_WORKERS or 1; "
                        "admission limits apply per process)")
    p.set_defaults(handler=_serve)

    _add_compact(sub)

    p = sub.add_parser("export-schema", help="print the GraphQL schema (SDL) the code defines")
    p.add_argument("--output", type=Path, help="write to this file instead of stdout")
    p.set_defaults(handler=_export_schema)
    return parser


def _search_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mode", choices=[m.value for m in Mode])
    p.add_argument("--fusion", choices=[f.value for f in Fusion])
    p.add_argument("--alpha", type=float)
    p.add_argument("--limit", type=int)


def _settings():
    from gateway.preflight import read_settings

    return read_settings()


def _runtime():
    from gateway.runtime import build_runtime

    return build_runtime(_settings())


def _ingest(args: argparse.Namespace) -> int:
    """Ingest; files that cannot be read are listed with the reason (stderr, and `unreadable` in
    --json) after the rest is ingested, and the exit code is then 2, so a script notices."""
    from gateway.ingest.jsonl_reader import ReadAhead

    # A large JSONL file's reader starts first: it parses the first lines while this process imports
    # the storage client (a second or so) and opens the store.
    with ReadAhead(args.paths) as ahead:
        return _ingest_with(args, ahead)


def _ingest_with(args: argparse.Namespace, ahead: ReadAhead) -> int:
    from gateway.ingest.loaders import Unread, check_paths, count_documents, load_paths
    from gateway.ingest.sync import ingest_documents

    check_paths(args.paths)  # before anything heavy
    unreadable: list[Unread] = []
    runtime = _runtime()
    try:
        ref = _resolve(runtime, args)
        images = "image" in ref.config.modality  # an image collection's directories give their images
        total = count_documents(args.paths, images=images)
        before = _committed_rows(runtime, ref)
        documents = load_paths(args.paths, unreadable, images=images, ahead=ahead)
        # Pruning would delete the sources of files that failed to read: decided once all are read, so
        # the documents stream (a million chunks of vectors held at once would be gigabytes).
        prune = (lambda: not unreadable) if args.prune else False
        try:
            # A terminal shows the progress bar; a log (cron, CI, a pipe) gets a line every 5 s instead.
            lines = not sys.stderr.isatty()
            with _bulk_collection():
                report = ingest_documents(runtime.store, runtime.embedder, ref, documents, total=total,
                                          prune=prune, tokens=runtime.token_store_for(ref),
                                          on_window=_window_lines(f"ingest {ref.label}", total) if lines else None,
                                          on_rows=_progress(f"ingest {ref.label}") if lines else None)
        except StorageUnavailable as exc:
            return _storage_failure(exc, before, runtime.store.guard.committed_rows, args.json)
    finally:
        runtime.close()
    summary = report.summary()
    if args.json:
        print(json.dumps({**summary, "unreadable": [{"path": u.path, "reason": u.reason} for u in unreadable]}))
    else:
        print(" ".join(f"{k}={v}" for k, v in summary.items()))
    if unreadable:
        _print_unreadable(unreadable)
        if args.prune:
            print("error: nothing was pruned: --prune would delete the sources of the unreadable files; "
                  "fix or remove them and re-run", file=sys.stderr)
        return 2
    return 0


# Young collections during an ingest. A bulk load keeps a round's records (16,384 chunks) alive while it
# writes them, and with the default 700 the collector walked them, and everything start-up built, again
# and again: 0.9 to 1.0 s of collections in a 50,000-chunk load; 0.14 to 0.17 s with this and start-up's
# objects frozen (benchmarks/bulk_vectors.py, timed with gc.callbacks).
INGEST_GC_THRESHOLD = 50_000


@contextmanager
def _bulk_collection() -> Iterator[None]:
    """The garbage collector as an ingest wants it: what start-up built (imports, the runtime) frozen out
    of its walks, and young collections at INGEST_GC_THRESHOLD; the settings as they were afterwards (an
    in-process caller, a test, keeps its own)."""
    import gc

    thresholds, frozen = gc.get_threshold(), gc.get_freeze_count()
    gc.freeze()
    gc.set_threshold(INGEST_GC_THRESHOLD, *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        if not frozen:  # a caller that froze objects of its own keeps them frozen
            gc.unfreeze()


def _print_unreadable(unreadable) -> None:
    print(f"{len(unreadable)} file(s) could not be read and were not ingested:", file=sys.stderr)
    for item in unreadable:
        print(f"  {item}", file=sys.stderr)


def _committed_rows(runtime, ref) -> dict[str, int]:
    scope, where = ref.scope, runtime.store.physical(ref.scope)
    names = (where.chunks, where.parents)
    return {name: runtime.store.guard.count_rows(name) if runtime.store.exists(scope) else 0 for name in names}


def _storage_failure(exc: StorageUnavailable, before: dict[str, int], after: dict[str, int], as_json: bool) -> int:
    """What was committed before storage failed: rows per collection at the last successful flush."""
    partial = {name: {"rows_before": rows, "rows_committed": after.get(name, rows)} for name, rows in before.items()}
    report = {"error": exc.code.value, "message": exc.message, "committed": partial,
              "next": "fix the storage fault and re-run the same command: committed chunks are skipped "
                      "by their content hash and the rest is written"}
    print(json.dumps(report) if as_json else "\n".join(
        ["ingest stopped: storage failed; committed before the failure:"]
        + [f"  {name}: {v['rows_before']} -> {v['rows_committed']} rows" for name, v in partial.items()]
        + [f"  {report['next']}"]))
    print(f"error [{exc.code}]: {exc.message}", file=sys.stderr)
    return EXIT_STORAGE


def _verify(args: argparse.Namespace) -> int:
    """Check every configured collection; a milvus-lite store found without its record is recorded
    (adopted) once no damage is found, or with --adopt whatever was found."""
    from gateway.embedding.modal import collection_embedder
    from gateway.ingest.verify import verify_collection
    from gateway.runtime import adopt, build_runtime
    from gateway.storage.milvus import is_embedded
    from gateway.storage.record import StorePaths

    try:
        runtime = build_runtime(_settings(), verifying=True)
    except StoreRefused as exc:
        # Damage found before opening (opening would have made it worse): that is verify's answer.
        if args.json:
            print(json.dumps({"ok": False, "refused": exc.message, "collections": []}))
        else:
            print(f"store DAMAGED, not opened: {exc.message}")
        return EXIT_DAMAGE
    checks = []
    adopted: dict[str, int] | None = None
    try:
        record = runtime.store.guard.record.snapshot() if is_embedded(runtime.settings.milvus_uri) else None
        for tenant in runtime.registry:
            for ref in runtime.registry.collections(tenant.id):
                encoder = collection_embedder(ref.config, runtime.embedder)  # an image collection's own
                checks.append(verify_collection(runtime.store, ref, model=encoder.name,  # type: ignore[union-attr]
                                                dim=encoder.dim, record=record,  # type: ignore[union-attr]
                                                tokens=runtime.tokens,
                                                on_rows=_progress(f"verify {tenant.id}:{ref.label}")))
        damaged = [c for c in checks if not c.ok]
        unrecorded = record is not None and not record.exists
        if unrecorded and (not damaged or args.adopt):
            adopted = adopt(runtime.store, StorePaths.of(runtime.settings.milvus_uri))
    finally:
        runtime.close()
    if args.json:
        print(json.dumps({"ok": not damaged, "collections": [c.summary() for c in checks],
                          **({"adopted": adopted} if unrecorded else {})}))
    else:
        for check in checks:
            state = "ok" if check.ok else "DAMAGED " + ", ".join(f"{k}={v}" for k, v in check.problems.items())
            print(f"{check.label}: chunks={check.chunks} parents={check.parents} "
                  f"token_vectors={check.token_vectors} {state}")
            for kind, examples in check.examples.items():
                print(f"  {kind}: {', '.join(examples)}")
        print(f"{len(damaged)} of {len(checks)} collection(s) damaged" if damaged
              else f"verified {len(checks)} collection(s): no damage found")
        if unrecorded:
            paths = StorePaths.of(runtime.settings.milvus_uri)
            print(f"the store had no record: recorded it as it is now in {paths.record} ({len(adopted)} collection(s), "
                  f"{sum(adopted.values())} row(s)); the gateway now starts on it" if adopted is not None else
                  f"the store has no record and was NOT recorded because of the damage above: repair it (restore a "
                  f"backup, or re-ingest the affected sources after `gateway verify --adopt` records it as it is)")
    return EXIT_DAMAGE if damaged else 0


def _lite_paths(command: str):
    from gateway.errors import ConfigError
    from gateway.storage.milvus import is_embedded
    from gateway.storage.record import StorePaths
    from gateway.storage.token_vectors import default_directory

    settings = _settings()
    if not is_embedded(settings.milvus_uri):
        raise ConfigError(f"`gateway {command}` copies a milvus-lite store; GATEWAY_MILVUS_URI is the server "
                          f"{settings.milvus_uri!r}: back it up with the server's own tooling (milvus-backup)")
    return StorePaths.of(settings.milvus_uri), settings.token_vectors_dir or default_directory(settings.milvus_uri)


def _backup(args: argparse.Namespace) -> int:
    from gateway.storage.backup import backup

    paths, tokens = _lite_paths("backup")
    print(json.dumps(backup(paths, tokens, args.dest, pause_timeout_s=args.pause_timeout).summary()))
    return 0


def _restore(args: argparse.Namespace) -> int:
    from gateway.storage.backup import restore

    paths, tokens = _lite_paths("restore")
    print(json.dumps(restore(args.src, paths, tokens)))
    return 0


def _sync(args: argparse.Namespace) -> int:
    from gateway.ingest.seed import ingest_seeds

    runtime = _runtime()
    try:
        for label, report in ingest_seeds(runtime, force=True):
            print(f"{label}: " + " ".join(f"{k}={v}" for k, v in report.summary().items()))
    finally:
        runtime.close()
    return 0


def _search(args: argparse.Namespace) -> int:
    from gateway.retrieval.defaults import options_for
    from gateway.retrieval.options import Query
    from gateway.retrieval.retrievers import CollectionRetriever

    runtime = _runtime()
    try:
        ref = _resolve(runtime, args)
        runtime.store.open_existing(ref.scope)
        options = options_for(ref.config, mode=Mode(args.mode) if args.mode else None, limit=args.limit,
                              fusion=Fusion(args.fusion) if args.fusion else None, alpha=args.alpha,
                              max_limit=runtime.settings.max_limit)
        hits = asyncio.run(CollectionRetriever(runtime.store, runtime.embedder, ref).retrieve(Query(args.query), options))
    finally:
        runtime.close()
    for hit in hits:
        print(f"{hit.score:.4f}  [{hit.source_id}/{hit.chunk_id}] {hit.title or ''}: {hit.content[:160]}")
    return 0


def _eval(args: argparse.Namespace) -> int:
    from gateway.retrieval.defaults import options_for
    from gateway.retrieval.evaluation import CHUNK_DEPTH, RANK_DEPTH, evaluate, load_qrels, load_queries, trec_eval

    trec_eval()  # the `eval` extra, before anything is loaded
    try:
        modes = [Mode(m.strip()) for m in args.mode.split(",")]
    except ValueError:
        print(f"error: --mode {args.mode!r}; allowed: {', '.join(m.value for m in Mode)}", file=sys.stderr)
        return 2
    queries, qrels = load_queries(args.queries), load_qrels(args.qrels)
    runtime = _runtime()
    results = {}
    try:
        _require_tenant(runtime, args.tenant)
        names = [c.strip() for c in args.collections.split(",")] if args.collections else None
        refs = ([runtime.registry.resolve(args.tenant, n, namespace=args.namespace) for n in names] if names
                else runtime.registry.collections(args.tenant, args.namespace) if args.federated
                else [runtime.registry.resolve(args.tenant, args.collection, namespace=args.namespace)])
        empty = [r.label for r in refs if not runtime.store.open_existing(r.scope)]
        if empty:
            print(f"error: {', '.join(empty)} of tenant {args.tenant} not ingested; run `gateway ingest` first",
                  file=sys.stderr)
            return 2
        grouped = refs[0].config.group_by_source if args.group_by_source is None else args.group_by_source
        # Grouped hits are documents already; chunk hits need a deeper list to fill 100 documents.
        depth = args.limit if args.limit is not None else (RANK_DEPTH if grouped else CHUNK_DEPTH)
        for mode in modes:
            fusion = Fusion(args.fusion) if args.fusion else None
            if args.collection and not args.pipeline:
                from gateway.retrieval.retrievers import CollectionRetriever

                retriever = CollectionRetriever(runtime.store, runtime.embedder, refs[0])
                options = options_for(refs[0].config, mode=mode, limit=depth, fusion=fusion, alpha=args.alpha,
                                      candidates=args.candidates, group_by_source=grouped)
            else:
                if args.candidates or args.group_by_source is not None:
                    print("error: --candidates and --group-by-source apply to a plain search of one collection; "
                          "a federated or pipeline eval uses the tenant file's collection settings", file=sys.stderr)
                    return 2
                retriever, options = _searcher_eval(runtime, args, refs, mode, fusion, depth)
            result = asyncio.run(evaluate(retriever, options, queries, qrels))
            results[mode.value] = {**result.metrics, "queries": result.queries,
                                   "p50_ms": result.latency_ms_p50, "p95_ms": result.latency_ms_p95}
    finally:
        runtime.close()
    if args.json:
        print(json.dumps(results))
    else:
        for mode, metrics in results.items():
            print(f"{mode:7s} " + "  ".join(f"{k}={v}" for k, v in metrics.items()))
    return 0


def _searcher_eval(runtime, args: argparse.Namespace, refs, mode: Mode, fusion, depth: int):
    """The same path `search` takes (federated, or with a pipeline), seen as a retriever. Collection
    settings come from the tenant file; --merge, --mode, --fusion and --alpha override."""
    from gateway.retrieval.options import SearchOptions
    from gateway.routing.searcher import SearchRequest, Searcher
    from gateway.settings import process_environment
    from gateway.tenancy.auth import Principal
    from gateway.tenancy.config import Role
    from gateway.tenancy.registry import TenantRegistry

    tenant = runtime.registry.get(args.tenant)
    if args.merge:
        tenant = tenant.model_copy(update={"federation": tenant.federation.model_copy(update={"merge": args.merge})})
    settings = runtime.settings.model_copy(update={"max_limit": max(depth, runtime.settings.max_limit)})
    searcher = Searcher(TenantRegistry({tenant.id: tenant}), runtime.store, runtime.embedder, settings,
                        tokens=runtime.tokens, environ=process_environment())
    principal = Principal(tenant.id, Role.READER)
    labels = tuple(r.label for r in refs)

    class SearcherEval:
        async def retrieve(self, query, options):
            request = SearchRequest(query=query.text, collections=labels, mode=mode, fusion=fusion,
                                    alpha=args.alpha, limit=depth, pipeline=args.pipeline)
            return list((await searcher.search(principal, request)).hits)

    return SearcherEval(), SearchOptions(mode=mode, limit=depth)


def _check_config(args: argparse.Namespace) -> int:
    """Every problem `serve` would refuse to start with, in one run: the tenant files (PATH, or
    GATEWAY_TENANTS_DIR) with these settings and this environment."""
    from gateway.errors import ConfigError
    from gateway.preflight import configuration_problems, read_settings
    from gateway.settings import process_environment

    try:
        settings = read_settings()
    except ConfigError as exc:
        print(exc.message)
        return 1
    where = args.path if args.path is not None else settings.tenants_dir
    # With a path, the engine is milvus-lite; a server's capabilities are checked when serving.
    tenants, problems = configuration_problems(settings, where, process_environment())
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} problem(s) in {where}", file=sys.stderr)
        return 1
    print(f"ok: {len(tenants)} tenant(s) in {where}: {', '.join(sorted(tenants))}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    """Serve; on a local milvus-lite path, first start its server as a supervised child, so that
    workers and `gateway ingest | search | eval | verify | backup` in other terminals share the store.

    A store that cannot be served (read-only, damaged, locked) ends here with exit 3 and one line,
    `gateway cannot start: ...`, as a refusal inside a worker's start-up does."""
    import gc
    import os
    import signal

    import uvicorn

    from gateway.errors import ConfigError
    from gateway.lifeline import exit_on_signal
    from gateway.preflight import configuration_problems
    from gateway.settings import process_environment
    from gateway.storage.integrity import open_refusal
    from gateway.storage.milvus import is_embedded
    from gateway.storage.record import StorePaths
    from gateway.storage.server import SupervisedServer, live_server
    from gateway.runtime import parsed_tenant_files

    try:
        settings = _settings()
    except ConfigError as exc:
        return _cannot_start(exc.message)
    if args.accept_empty:
        settings = settings.model_copy(update={"accept_empty_store": True})
    workers = args.workers if args.workers is not None else settings.workers
    # Every configuration problem, before anything heavy starts: what `gateway check-config` prints
    # (the app reuses this reading of the tenant files). Without the cyclic collector, which would
    # walk the thousands of configs read here again and again (the app's start-up collects once).
    gc.disable()
    try:
        _, problems = configuration_problems(settings, settings.tenants_dir, process_environment(),
                                             parsed=parsed_tenant_files(settings), workers=workers,
                                             workers_option="--workers" if args.workers is not None else "GATEWAY_WORKERS")
    finally:
        gc.enable()
    if problems:
        return _cannot_start(f"{len(problems)} configuration problem(s) (`gateway check-config` lists the same):\n"
                             + "\n".join(f"  {p}" for p in problems))
    host = args.host or settings.host
    port = args.port or settings.port
    logging.getLogger("gateway").setLevel(logging.INFO)
    supervisor = None
    storage = settings.milvus_uri
    try:
        if is_embedded(settings.milvus_uri) and settings.lite_server:
            paths = StorePaths.of(settings.milvus_uri)
            if live_server(paths) is None:
                refusal = open_refusal(paths)  # the child would die on it with a traceback
                if refusal is not None:
                    return _cannot_start(refusal)
            # Supervises the store's server (its checks run before milvus-lite opens the store), or
            # attaches to the one another serve supervises and takes over when that one stops.
            supervisor = SupervisedServer(paths, accept_empty=settings.accept_empty_store)
            running = supervisor.start()
            storage = f"{settings.milvus_uri} via milvus-lite server {running.uri} (pid {running.pid})"
        if workers > 1:
            # Here, once: seeding rather than N workers racing to create the same collections, and the
            # store's checks, whose refusal would otherwise end each worker and leave uvicorn exiting 0.
            _prepare_store_apart(settings)
    except GatewayError as exc:  # what the lifespan of a single process refuses with the same line and code
        if supervisor is not None:
            supervisor.stop()
        return _cannot_start(exc.message)
    except BaseException:
        if supervisor is not None:
            supervisor.stop()
        raise
    # uvicorn re-raises the SIGTERM it drained on with the handler it found: make that an exit that
    # runs the `finally` below (stopping the milvus-lite child), as Ctrl-C's KeyboardInterrupt does.
    signal.signal(signal.SIGTERM, exit_on_signal)
    try:
        print(f"gateway: serving http://{host}:{port}/graphql with {workers} worker(s) (milvus: {storage}, "
              f"tenants: {settings.tenants_dir})", file=sys.stderr)
        # The gateway's access log (telemetry/access.py) writes one JSON line per request, with the
        # tenant, operation and code; uvicorn's own line would only repeat the method and status.
        served = {"host": host, "port": port, "timeout_graceful_shutdown": GRACEFUL_SHUTDOWN_S, "log_level": "info",
                  "access_log": False, "log_config": _log_config()}
        if workers == 1:
            from gateway.app import create_app
            from gateway.telemetry.metrics import GatewayMetrics

            metrics = GatewayMetrics(settings.metrics_tenants)
            if supervisor is not None:
                metrics.processes.watch(MILVUS_LITE, lambda: supervisor.pid)
            uvicorn.run(create_app(settings, metrics=metrics), **served)
            return 0
        # The supervising parent starts and watches the workers and sums their metrics: it imports
        # neither the app (GraphQL schema, Starlette) nor a model.
        # Workers are fresh interpreters that read their settings from the environment.
        os.environ["GATEWAY_INGEST_DEMO_ON_START"] = "false"
        if settings.accept_empty_store:
            os.environ["GATEWAY_ACCEPT_EMPTY_STORE"] = "true"
        from gateway.lifeline import WorkerConfig

        # Workers whose Config makes them exit normally on SIGTERM (gateway/lifeline.py).
        started = _supervise(WorkerConfig("gateway.cli:worker_app", factory=True, workers=workers, **served),
                             settings.metrics_tenants, supervisor)
        return 0 if started else _cannot_start("a worker failed before serving (its log lines above say why)")
    finally:
        if supervisor is not None:
            supervisor.stop()


def _supervise(config, max_tenants: int, store_server) -> bool:
    """uvicorn.run's path for workers, with the metrics hub that gives them one /metrics (telemetry/hub.py).
    False when it stopped because a worker failed before serving."""
    from gateway.supervisor import Supervisor
    from gateway.telemetry.hub import MetricsHub

    hub = MetricsHub(max_tenants).start()
    if store_server is not None:
        hub.processes.watch(MILVUS_LITE, lambda: store_server.pid)
    supervisor = Supervisor(config, [config.bind_socket()], hub)
    try:
        supervisor.run()
    except KeyboardInterrupt:  # as uvicorn.run: Ctrl-C has stopped the workers
        pass
    finally:
        hub.close()
    return not supervisor.failed_to_start


def _cannot_start(reason: str) -> int:
    print(f"gateway cannot start: {reason}", file=sys.stderr)
    return EXIT_CANNOT_START


def worker_app():
    """The app of one `serve --workers N` worker process, which ends when its supervisor dies
    (gateway/lifeline.py): otherwise a supervisor killed with SIGKILL leaves workers holding the port."""
    import multiprocessing
    import os

    from gateway.app import create_app
    from gateway.lifeline import exit_with_parent
    from gateway.settings import Settings
    from gateway.telemetry.hub import HubClient
    from gateway.telemetry.metrics import GatewayMetrics

    parent = multiprocessing.parent_process()
    if parent is not None and parent.pid is not None:
        exit_with_parent(parent.pid, grace_s=GRACEFUL_SHUTDOWN_S + 5)
    settings = Settings()
    return create_app(settings, metrics=GatewayMetrics(settings.metrics_tenants,
                                                       hub=HubClient.from_environment(dict(os.environ))))


def _prepare_store_apart(settings) -> None:
    """`_prepare_store` in a short-lived child process, so that the supervisor of `serve --workers N`
    stays small: the store's client, the embedder that seeding loads and the memory they took all
    go when the child ends (in the parent they stayed for the life of the server: 0.3 GB).
    A refusal in the child is raised here, as if it had happened in this process."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")  # a fresh interpreter: nothing of this one is copied
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_prepare_store_child, args=(settings, send), name="gateway-prepare-store")
    child.start()
    send.close()
    refusal = None
    try:
        refusal = receive.recv()
    except EOFError:  # the child ended without a word: it died (its traceback is on stderr)
        pass
    child.join()
    if refusal is not None:
        raise refusal
    if child.exitcode != 0:
        raise RuntimeError(f"preparing the store in a child process failed (exit code {child.exitcode})")


def _prepare_store_child(settings, send) -> None:
    """The child's side: prepare the store, and send back the refusal, if any (None when done)."""
    try:
        _prepare_store(settings)
    except GatewayError as exc:
        send.send(exc)
        return
    send.send(None)


def _prepare_store(settings) -> None:
    """Open and check the store once before the workers start, and seed it if asked to."""
    from gateway.ingest.seed import ingest_seeds
    from gateway.runtime import build_runtime

    runtime = build_runtime(settings)
    try:
        if settings.ingest_demo_on_start:
            for label, report in ingest_seeds(runtime):
                print(f"gateway: seeded {label}: {report.chunks_written} chunks from {report.sources} sources",
                      file=sys.stderr)
    finally:
        runtime.close()


def _export_schema(args: argparse.Namespace) -> int:
    from gateway.graphql.schema import build_schema
    from gateway.settings import Settings

    sdl = build_schema(Settings()).as_str() + "\n"
    if args.output:
        args.output.write_text(sdl, encoding="utf-8")
    else:
        sys.stdout.write(sdl)
    return 0


def _require_tenant(runtime, tenant: str) -> None:
    from gateway.errors import ConfigError, allowed

    if tenant not in runtime.registry:
        raise ConfigError(f"tenant {tenant!r} is not configured in {runtime.settings.tenants_dir}; "
                          f"known: {allowed(t.id for t in runtime.registry)}")


def _resolve(runtime, args: argparse.Namespace):
    _require_tenant(runtime, args.tenant)
    return runtime.registry.resolve(args.tenant, args.collection, namespace=args.namespace)



def _add_compact(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compact", help="rewrite collections from their live rows, so BM25 statistics forget "
                                       "deleted rows (see docs/operations.md)")
    p.add_argument("--tenant", required=True)
    p.add_argument("--namespace", help="only this namespace (default: every namespace of the tenant)")
    p.add_argument("--collection", help="only this collection (needs --namespace when the name is ambiguous)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(handler=_compact)


def _compact(args: argparse.Namespace) -> int:
    from gateway.admin.compact import compact

    runtime = _runtime()
    try:
        if args.collection is not None:
            refs = [runtime.registry.resolve(args.tenant, args.collection, namespace=args.namespace)]
        else:
            refs = runtime.registry.collections(args.tenant, args.namespace)
        report = [compact(runtime.store, ref, on_rows=_progress(f"compact {ref.label}")).summary() for ref in refs]
        if args.json:
            print(json.dumps(report, indent=2))
        else:
            for line in report:
                done = line.get("skipped") or f"{line['rows']} rows rewritten"
                print(f"{line['collection']}: {done} ({line['seconds']} s)")
        return 0
    finally:
        runtime.close()


def _window_lines(label: str, total: int):
    """An ingest's progress on stderr at most every PROGRESS_S seconds, for where no terminal shows the bar:
    `ingest bench/corpus: 40,960 of 100,000 documents (chunks written 0, unchanged 409,600)`."""
    last = [time.monotonic()]

    def show(report) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_S:
            last[0] = now
            print(f"{label}: {report.sources:,} of {total:,} documents (chunks written {report.chunks_written:,}, "
                  f"unchanged {report.chunks_unchanged:,})", file=sys.stderr, flush=True)

    return show


def _progress(label: str):
    """A progress line on stderr at most every PROGRESS_S seconds: `compact docs/faq: copy 40,960 rows`."""
    last = [time.monotonic()]

    def show(step: str, rows: int) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_S:
            last[0] = now
            print(f"{label}: {step} {rows:,} rows", file=sys.stderr, flush=True)

    return show


if __name__ == "__main__":
    raise SystemExit(main())

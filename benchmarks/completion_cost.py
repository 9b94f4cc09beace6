"""What executing a search's GraphQL document costs, with and without plain-subtree completion.

Runs one real hybrid search on the throughput benchmark's store (run `throughput.py` once first to
build it), then executes the schema many times over that fixed result, so only GraphQL's own work
is timed: argument conversion, the resolvers' mapping, completion of the selected fields. Two
documents, the throughput benchmark's full selection (about 250 fields) and its ids-only one,
each completed by `PlainCompletion` and by graphql-core's own `complete_object_value`,
interleaved in blocks. Reports CPU ms per execution and checks that both answers are equal.

    python benchmarks/completion_cost.py --work /tmp/throughput
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import throughput  # noqa: E402


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=Path("/tmp/gateway-throughput"))
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--per-block", type=int, default=200)
    args = parser.parse_args()
    if not (args.work / "store").exists():
        raise SystemExit(f"no store under {args.work}: run benchmarks/throughput.py with --work {args.work} first")

    from graphql.execution.executor import Executor

    from gateway.graphql.schema import Execution, build_schema
    from gateway.routing.searcher import SearchRequest, Searcher
    from gateway.runtime import build_runtime
    from gateway.settings import Settings
    from gateway.storage.record import StorePaths
    from gateway.storage.server import SupervisedServer
    from gateway.tenancy.auth import Principal
    from gateway.tenancy.config import Role

    with SupervisedServer(StorePaths(args.work / "store" / "gateway.db")):
        os.environ.update(throughput.environment(args.work, False))
        settings = Settings()
        runtime = build_runtime(settings)
        searcher = Searcher(runtime.registry, runtime.store, runtime.embedder, settings, tokens=runtime.tokens)
        principal = Principal("bench", Role.READER)
        result = await searcher.search(principal, SearchRequest("vitamin D deficiency and bone loss",
                                                                collection="corpus"))

    class FixedSearch:
        """The searcher's interface over the one result (no retrieval is timed)."""

        max_limit = searcher.max_limit

        async def search(self, *_: object) -> object:
            return result

    schema = build_schema(settings)
    plain = Execution.complete_object_value

    async def execute(document: str) -> object:
        context = types.SimpleNamespace(principal=principal, searcher=FixedSearch(), partial_failures=[])
        answer = await schema.execute(document, variable_values={"q": "x"}, context_value=context)
        assert not answer.errors, answer.errors
        return answer.data

    variants = {"plain completion": plain, "graphql-core": Executor.complete_object_value}
    documents = {"full selection": throughput.FULL, "ids and scores": throughput.IDS}
    answers: dict[tuple[str, str], object] = {}
    spent: dict[tuple[str, str], float] = dict.fromkeys(((d, v) for d in documents for v in variants), 0.0)
    for block in range(args.blocks):
        names = list(variants)[block % 2:] + list(variants)[:block % 2]
        for document_name, document in documents.items():
            for variant in names:
                Execution.complete_object_value = variants[variant]
                answers[(document_name, variant)] = await execute(document)
                start = time.process_time()
                for _ in range(args.per_block):
                    await execute(document)
                spent[(document_name, variant)] += time.process_time() - start
    Execution.complete_object_value = plain
    count = args.blocks * args.per_block
    print("| document | completion | CPU ms per execution |")
    print("| --- | --- | --- |")
    for (document_name, variant), seconds in spent.items():
        print(f"| {document_name} | {variant} | {1000 * seconds / count:.3f} |")
    for document_name in documents:
        same = answers[(document_name, "plain completion")] == answers[(document_name, "graphql-core")]
        print(f"{document_name}: answers equal: {same}")


if __name__ == "__main__":
    asyncio.run(main())

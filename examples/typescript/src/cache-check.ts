// Proof, with the stock normalised caches, that a search result reads back as it was returned:
// 1. two searches that share a chunk each keep their own scores;
// 2. one source id in two collections is two chunks, never one cache entry;
// 3. after deleteSource, the deleted chunk ids evict what showed it (Apollo evict, urql invalidate).
import assert from "node:assert/strict";
import { apolloClient, urqlClient } from "./client.js";
import {
  DeleteSourceDocument,
  SearchDocument,
  UpsertDocumentsDocument,
  type SearchInput,
  type SearchQuery,
} from "./gql/graphql.js";

// `search` is nullable: a failing search is null on its own (its error is in `errors`).
type Hits = NonNullable<SearchQuery["search"]>["hits"];

const A: SearchInput = { query: "How do I get a refund?", collection: "docs", limit: 5 };
const B: SearchInput = { query: "refund for a double charge on my invoice", collection: "docs", limit: 5 };
const SOURCE = "cache-check-zeppelin.md";
const TEXTS: Record<string, { title: string; text: string }> = {
  docs: { title: "Zeppelin mooring (docs)", text: "Zeppelin mooring fees are refunded within a week of cancellation." },
  tickets: { title: "Zeppelin mooring (ticket)", text: "Zeppelin mooring ticket: the customer disputes the fees." },
};
const inCollection = (collection: string): SearchInput => ({ query: "zeppelin mooring fees", collection, limit: 3 });

function scores(hits: Hits): Array<[string, number]> {
  return hits.map((hit) => [hit.chunk.id, hit.score]);
}

function sharedChunk(a: Hits, b: Hits): string {
  const inB = new Map(b.map((hit) => [hit.chunk.id, hit.score]));
  const shared = a.find((hit) => inB.has(hit.chunk.id) && inB.get(hit.chunk.id) !== hit.score);
  assert.ok(shared, "the two searches should share a chunk with different scores, or the check proves nothing");
  return shared.chunk.id;
}

function checkOwnCollection(hits: Hits, collection: string): void {
  const ours = hits.find((hit) => hit.chunk.sourceId === SOURCE);
  assert.ok(ours, `${SOURCE} should be found in ${collection}`);
  assert.equal(ours.chunk.collection, collection);
  assert.equal(ours.chunk.id, `support/${collection}/${SOURCE}/0`);
  assert.equal(ours.chunk.title, TEXTS[collection]?.title);
  assert.equal(ours.content, TEXTS[collection]?.text);
}

async function apollo(): Promise<void> {
  const client = apolloClient();
  const search = async (input: SearchInput): Promise<Hits> => {
    const { data } = await client.query({ query: SearchDocument, variables: { input }, fetchPolicy: "network-only" });
    assert.ok(data?.search);
    return data.search.hits;
  };
  const cached = (input: SearchInput): Hits | undefined =>
    client.readQuery({ query: SearchDocument, variables: { input } })?.search?.hits;

  const [a, b] = [await search(A), await search(B)];
  sharedChunk(a, b);
  assert.deepEqual(scores(cached(A) ?? []), scores(a), "Apollo: the first search reads back its own scores");
  assert.deepEqual(scores(cached(B) ?? []), scores(b));

  await search(inCollection("docs"));
  await search(inCollection("tickets"));
  checkOwnCollection(cached(inCollection("docs")) ?? [], "docs");
  checkOwnCollection(cached(inCollection("tickets")) ?? [], "tickets");

  await client.mutate({
    mutation: DeleteSourceDocument,
    variables: { namespace: "support", collection: "docs", sourceId: SOURCE },
    update(cache, { data }) {
      for (const id of data?.deleteSource.chunkIds ?? []) cache.evict({ id: cache.identify({ __typename: "Chunk", id }) });
      cache.gc();
    },
  });
  // The result that showed the deleted chunk is no longer complete in the cache, so it is fetched again.
  assert.equal(cached(inCollection("docs")), undefined, "Apollo: the deleted chunk is evicted");
  checkOwnCollection(cached(inCollection("tickets")) ?? [], "tickets");
  const again = await search(inCollection("docs"));
  assert.ok(!again.some((hit) => hit.chunk.sourceId === SOURCE));
}

async function urql(): Promise<void> {
  const client = urqlClient();
  const search = async (input: SearchInput): Promise<Hits> => {
    const result = await client.query(SearchDocument, { input }, { requestPolicy: "network-only" }).toPromise();
    assert.ok(result.data?.search, result.error?.message);
    return result.data.search.hits;
  };
  const cached = async (input: SearchInput): Promise<Hits | undefined> => {
    const result = await client.query(SearchDocument, { input }, { requestPolicy: "cache-only" }).toPromise();
    return result.data?.search?.hits ?? undefined;
  };

  const [a, b] = [await search(A), await search(B)];
  sharedChunk(a, b);
  assert.deepEqual(scores((await cached(A)) ?? []), scores(a), "urql: the first search reads back its own scores");
  assert.deepEqual(scores((await cached(B)) ?? []), scores(b));

  await search(inCollection("tickets"));
  checkOwnCollection((await cached(inCollection("tickets"))) ?? [], "tickets");

  const deleted = await client
    .mutation(DeleteSourceDocument, { namespace: "support", collection: "tickets", sourceId: SOURCE })
    .toPromise();
  assert.deepEqual(deleted.data?.deleteSource.chunkIds, [`support/tickets/${SOURCE}/0`]);
  assert.equal(await cached(inCollection("tickets")), undefined, "urql: the deleted chunk is invalidated");
}

async function upsert(): Promise<void> {
  const client = apolloClient();
  for (const [collection, doc] of Object.entries(TEXTS)) {
    const { data } = await client.mutate({
      mutation: UpsertDocumentsDocument,
      variables: { namespace: "support", collection, documents: [{ sourceId: SOURCE, ...doc }] },
    });
    assert.ok(data);
  }
}

async function cleanUp(): Promise<void> {
  const client = apolloClient();
  for (const collection of Object.keys(TEXTS)) {
    await client
      .mutate({ mutation: DeleteSourceDocument, variables: { namespace: "support", collection, sourceId: SOURCE } })
      .catch(() => undefined); // already deleted by the check
  }
}

try {
  await upsert();
  await apollo();
  await urql();
} finally {
  await cleanUp();
}
console.log(JSON.stringify({ ok: true, script: "cache-check", clients: ["apollo", "urql"] }));

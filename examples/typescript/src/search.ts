// Search the demo tenant with Apollo Client and page through the ranked hits with the cursor.
import { apolloClient } from "./client.js";
import { SearchDocument, type SearchQuery } from "./gql/graphql.js";

const client = apolloClient();
const input = { query: process.argv[2] ?? "How do refunds work?", collection: "docs", limit: 6 };
let after: string | null = null;
let pages = 0;
const seen: string[] = [];
do {
  const { data }: { data?: SearchQuery } = await client.query({
    query: SearchDocument,
    variables: { input, first: 4, after },
  });
  // `search` is nullable: a failing search is null and its error is in `errors`.
  if (!data?.search) throw new Error("search returned no data");
  for (const hit of data.search.hits) {
    seen.push(hit.chunk.id);
    console.log(`${hit.rank}. [${hit.chunk.sourceId}/${hit.chunk.chunkId}] ${hit.score.toFixed(4)} ${hit.content.slice(0, 60)}`);
  }
  after = data.search.pageInfo.hasNextPage ? data.search.pageInfo.endCursor : null;
  pages += 1;
} while (after !== null);
if (new Set(seen).size !== seen.length) throw new Error(`pages repeated a hit: ${seen.join(", ")}`);
console.log(JSON.stringify({ ok: true, script: "search", pages, hits: seen.length }));

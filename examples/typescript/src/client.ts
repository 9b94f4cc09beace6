// Where the gateway is, and the stock clients the scripts use, configured as docs/clients.md says.
import { ApolloClient, HttpLink, InMemoryCache } from "@apollo/client";
import { Client, fetchExchange } from "@urql/core";
import { cacheExchange } from "@urql/exchange-graphcache";

export const GATEWAY_URL = process.env.GATEWAY_URL ?? "http://127.0.0.1:8000/graphql";
// A demo key (README, "Demo tenants and keys"); the cache check writes, so it needs a writer.
export const GATEWAY_KEY = process.env.GATEWAY_KEY ?? "demo-acme-writer";

const headers = { Authorization: `Bearer ${GATEWAY_KEY}` };

// Chunk is normalised by its id (namespace/collection/sourceId/chunkId); SearchHit has no id, so
// Apollo keeps each hit, with its score and rank, inside the result it came with.
export function apolloClient(): ApolloClient {
  return new ApolloClient({
    link: new HttpLink({ uri: GATEWAY_URL, headers }),
    cache: new InMemoryCache(),
  });
}

// The same for urql's graphcache: Chunk is keyed by id (the default), every type that is part of
// one search's answer is embedded (key null), and deleteSource invalidates the chunks it removed.
export function urqlClient(): Client {
  return new Client({
    url: GATEWAY_URL,
    fetchOptions: { headers },
    exchanges: [
      cacheExchange({
        keys: {
          SearchResult: () => null,
          SearchHit: () => null,
          SearchGroup: () => null,
          SearchProgress: () => null,
          PageInfo: () => null,
          Provenance: () => null,
          SignalScore: () => null,
          Parent: () => null,
          Trace: () => null,
          StageTrace: () => null,
          ContextResult: () => null,
          Source: () => null,
          SourceChunk: () => null,
          CitationReport: () => null,
          CitationCheck: () => null,
          UncitedSentence: () => null,
          UpsertResult: () => null,
          DeleteResult: () => null,
        },
        updates: {
          Mutation: {
            deleteSource(result, _args, cache) {
              const deleted = result.deleteSource as { chunkIds: string[] } | null;
              for (const id of deleted?.chunkIds ?? []) cache.invalidate({ __typename: "Chunk", id });
            },
            upsertDocuments(result, _args, cache) {
              const written = result.upsertDocuments as { chunkIds: string[]; deletedChunkIds: string[] } | null;
              for (const id of [...(written?.chunkIds ?? []), ...(written?.deletedChunkIds ?? [])]) {
                cache.invalidate({ __typename: "Chunk", id });
              }
            },
          },
        },
      }),
      fetchExchange,
    ],
  });
}

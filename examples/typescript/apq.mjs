// Automatic persisted queries with Apollo Client's stock PersistedQueryLink (docs/http.md).
//
//   GATEWAY_URL=http://127.0.0.1:8000/graphql GATEWAY_KEY=demo-acme-reader node apq.mjs
//
// Runs one query twice over POST and another twice with hashed GETs, each through a fresh cache,
// and prints, as JSON, every HTTP exchange (method, whether the full query was sent, status,
// error codes) and the data each run got, so a test can check the protocol step by step.
import { createHash } from "node:crypto";
import { ApolloClient, HttpLink, InMemoryCache, gql } from "@apollo/client";
import { PersistedQueryLink } from "@apollo/client/link/persisted-queries";

const url = process.env.GATEWAY_URL ?? "http://127.0.0.1:8000/graphql";
const key = process.env.GATEWAY_KEY ?? "demo-acme-reader";
const exchanges = [];

async function loggingFetch(input, init) {
  const target = new URL(typeof input === "string" ? input : input.url);
  const method = init?.method ?? "GET";
  const sent = method === "GET" ? Object.fromEntries(target.searchParams) : JSON.parse(init.body);
  const response = await fetch(input, init);
  const body = await response.clone().json().catch(() => null);
  exchanges.push({
    method,
    fullQuery: typeof sent.query === "string",
    status: response.status,
    codes: (body?.errors ?? []).map((e) => e.extensions?.code),
  });
  return response;
}

function client(useGETForHashedQueries) {
  const persisted = new PersistedQueryLink({
    sha256: (text) => createHash("sha256").update(text).digest("hex"),
    useGETForHashedQueries,
  });
  const http = new HttpLink({ uri: url, headers: { Authorization: `Bearer ${key}` }, fetch: loggingFetch });
  return new ApolloClient({ link: persisted.concat(http), cache: new InMemoryCache() });
}

const OVER_POST = gql`
  query CollectionsOverPost {
    collections { namespace name }
  }
`;
const OVER_GET = gql`
  query CollectionsOverGet {
    collections { namespace name mode }
  }
`;
const runs = [];
for (const [label, get, query] of [["post-first", false, OVER_POST], ["post-again", false, OVER_POST],
                                   ["get-first", true, OVER_GET], ["get-again", true, OVER_GET]]) {
  const before = exchanges.length;
  const { data } = await client(get).query({ query, fetchPolicy: "network-only" });
  runs.push({ label, collections: data.collections.map((c) => `${c.namespace}/${c.name}`),
              exchanges: exchanges.slice(before) });
}
console.log(JSON.stringify(runs));

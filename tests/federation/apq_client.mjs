// Apollo Client (4) with its persisted-queries link, against a RecallQL server: runs a mutation and the
// same query twice, and prints what each step sent over the wire and what came back (tests/
// test_persisted_queries.py reads it). The operations are named after the resource, so that each run's
// texts are new to the server.
//
//   node apq_client.mjs <graphql url> <resourceId> <post|get>
// FEDERATION_NODE_MODULES: the folder whose node_modules/ holds the pinned packages (see gateway.mjs).
import { createHash } from "node:crypto";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(process.env.FEDERATION_NODE_MODULES || here, "package.json"));
const { ApolloClient, HttpLink, InMemoryCache, gql } = require("@apollo/client");
const { PersistedQueryLink } = require("@apollo/client/link/persisted-queries");

const [url, resourceId, method] = process.argv.slice(2);
let wire = [];

async function logged(input, init) {
  const sentBy = init?.method ?? "GET";
  const sent =
    sentBy === "GET"
      ? Object.fromEntries(new URL(String(input)).searchParams)
      : JSON.parse(init.body);
  const response = await fetch(input, init);
  const answer = await response.clone().json();
  wire.push({
    method: sentBy,
    status: response.status,
    text: typeof sent.query === "string" && sent.query.length > 0,
    hash: JSON.stringify(sent.extensions ?? "").includes("sha256Hash"),
    codes: (answer.errors ?? []).map((error) => error.extensions?.code ?? null),
  });
  return response;
}

const client = new ApolloClient({
  cache: new InMemoryCache(),
  link: new PersistedQueryLink({
    sha256: (text) => createHash("sha256").update(text).digest("hex"),
    useGETForHashedQueries: method === "get",
  }).concat(new HttpLink({ uri: url, fetch: logged })),
});

// Operation names of this run's own: texts an earlier run registered on the same server are not known.
const run = resourceId.replace(/[^A-Za-z0-9_]/g, "_");
const CREATE = gql`
  mutation Create_${run}($r: String!, $t: String) {
    createThread(input: { resourceId: $r, title: $t }) { id }
  }
`;
const THREADS = gql`
  query Threads_${run}($r: String!) {
    threads(resourceId: $r) { total threads { id title } }
  }
`;

function step() {
  const done = wire;
  wire = [];
  return done;
}

const created = await client.mutate({ mutation: CREATE, variables: { r: resourceId, t: "from Apollo Client" } });
const steps = { mutation: step() };
const first = await client.query({ query: THREADS, variables: { r: resourceId }, fetchPolicy: "network-only" });
steps.first = step();
const second = await client.query({ query: THREADS, variables: { r: resourceId }, fetchPolicy: "network-only" });
steps.second = step();
console.log(
  JSON.stringify({ steps, created: created.data, first: first.data, second: second.data }),
);

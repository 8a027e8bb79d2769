// Federation check for tests/test_federation.py: a second subgraph (users), composition, and Apollo
// Gateway in front of RecallQL and users, all on loopback.
//
//   node gateway.mjs CONFIG.json
//
// CONFIG: { "recallqlUrl": "http://127.0.0.1:PORT/graphql", "users": [...], "outDir": "...",
//           "fetchLog": "...", "apq": false }. Each user: { id, name, resourceId, messageIds: [...],
//           threadIds: [...], greeting }.
// FEDERATION_NODE_MODULES: the folder whose node_modules/ holds the pinned packages (the test installs
// them with `npm ci` into a cache folder keyed by the lockfile hash); unset: this folder's.
//
// Steps: start the users subgraph on a free port; read both subgraphs' SDL with `_service { sdl }`
// over HTTP; compose them with @apollo/composition (errors: printed on stderr, exit code 2); write
// supergraph.graphql and api.graphql to outDir; start the gateway with that supergraph on a free port;
// print `FEDERATION-READY {"gateway": URL, "users": URL}` on stdout. Every request the gateway sends to a
// subgraph is appended to fetchLog as a JSON line {subgraph, query, representations}.

import { appendFileSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(process.env.FEDERATION_NODE_MODULES || here, 'package.json'));
const { parse, printSchema } = require('graphql');
const { buildSubgraphSchema } = require('@apollo/subgraph');
const { composeServices } = require('@apollo/composition');
const { ApolloGateway, RemoteGraphQLDataSource } = require('@apollo/gateway');
const { ApolloServer } = require('@apollo/server');
const { startStandaloneServer } = require('@apollo/server/standalone');
const { ApolloServerPluginInlineTraceDisabled } = require('@apollo/server/plugin/disabled');

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const users = config.users;

// ------------------------------------------------------------------------------------------ users subgraph
// A User references RecallQL's entities by their keys (its Resource, messages and threads), and adds a
// field of its own to Message that @requires RecallQL's @inaccessible Message.threadResourceId.
// TextPart is @shareable in both subgraphs.
const usersTypeDefs = parse(`
  extend schema
    @link(url: "https://specs.apollo.dev/federation/v2.0",
          import: ["@key", "@shareable", "@external", "@requires"])

  type Query {
    users: [User!]!
    user(id: ID!): User
  }

  type User @key(fields: "id") {
    id: ID!
    name: String
    resource: Resource
    recentMessages: [Message!]!
    threads: [Thread]!
    greeting: TextPart
  }

  type Resource @key(fields: "id", resolvable: false) {
    id: String!
  }

  type Thread @key(fields: "id", resolvable: false) {
    id: ID!
  }

  type Message @key(fields: "id") {
    id: ID!
    threadResourceId: String @external
    user: User @requires(fields: "threadResourceId")
  }

  type TextPart @shareable {
    type: String!
    text: String!
  }
`);

const byId = new Map(users.map((u) => [u.id, u]));
const byResource = new Map(users.map((u) => [u.resourceId, u]));
const usersResolvers = {
  Query: {
    users: () => users,
    user: (_, { id }) => byId.get(id) ?? null,
  },
  User: {
    __resolveReference: (ref) => byId.get(ref.id) ?? null,
    resource: (u) => ({ id: u.resourceId }),
    recentMessages: (u) => u.messageIds.map((id) => ({ id })),
    threads: (u) => u.threadIds.map((id) => ({ id })),
    greeting: (u) => ({ type: 'text', text: u.greeting }),
  },
  Message: {
    __resolveReference: (ref) => ref,
    user: (m) => (m.threadResourceId ? byResource.get(m.threadResourceId) ?? null : null),
  },
};

const listen = { port: 0, host: '127.0.0.1' };
// Logs go to stderr: stdout carries the ready line only.
const logger = {
  debug: () => {},
  info: (message) => process.stderr.write(`${message}\n`),
  warn: (message) => process.stderr.write(`warn: ${message}\n`),
  error: (message) => process.stderr.write(`error: ${message}\n`),
};
const usersServer = new ApolloServer({
  schema: buildSubgraphSchema([{ typeDefs: usersTypeDefs, resolvers: usersResolvers }]),
  plugins: [ApolloServerPluginInlineTraceDisabled()],
  logger,
});
const { url: usersUrl } = await startStandaloneServer(usersServer, { listen });

// ------------------------------------------------------------------------------------------ composition
async function serviceSdl(url) {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ query: '{ _service { sdl } }' }),
  });
  const body = await response.json();
  if (!body.data?._service?.sdl) throw new Error(`no _service.sdl from ${url}: ${JSON.stringify(body)}`);
  return body.data._service.sdl;
}

const subgraphs = [
  { name: 'recallql', url: config.recallqlUrl, typeDefs: parse(await serviceSdl(config.recallqlUrl)) },
  { name: 'users', url: usersUrl, typeDefs: parse(await serviceSdl(usersUrl)) },
];
const composed = composeServices(subgraphs);
if (composed.errors) {
  process.stderr.write(
    `composition failed:\n${JSON.stringify(composed.errors.map((e) => ({ code: e.extensions?.code, message: e.message })), null, 2)}\n`,
  );
  process.exit(2);
}
writeFileSync(join(config.outDir, 'supergraph.graphql'), composed.supergraphSdl);
writeFileSync(join(config.outDir, 'api.graphql'), printSchema(composed.schema.toAPISchema().toGraphQLJSSchema()));
writeFileSync(
  join(config.outDir, 'hints.json'),
  JSON.stringify((composed.hints ?? []).map((h) => ({ code: h.definition?.code, message: h.message })), null, 2),
);

// ------------------------------------------------------------------------------------------ gateway
class LoggedDataSource extends RemoteGraphQLDataSource {
  willSendRequest({ request, context }) {
    // Forward the caller's credential: RecallQL checks entity fetches against it.
    if (context?.authorization) request.http.headers.set('authorization', context.authorization);
    const representations = request.variables?.representations;
    appendFileSync(
      config.fetchLog,
      `${JSON.stringify({
        subgraph: this.name,
        query: request.query,
        representations: Array.isArray(representations) ? representations.length : null,
      })}\n`,
    );
  }
}

const gateway = new ApolloGateway({
  supergraphSdl: composed.supergraphSdl,
  logger,
  // apq: automatic persisted queries to the subgraphs (a hash first, the text only when it is unknown).
  buildService: ({ name, url }) =>
    Object.assign(new LoggedDataSource({ url, apq: config.apq === true }), { name }),
});
const gatewayServer = new ApolloServer({ gateway, logger });
const { url: gatewayUrl } = await startStandaloneServer(gatewayServer, {
  listen,
  context: async ({ req }) => ({ authorization: req.headers.authorization }),
});

process.stdout.write(`FEDERATION-READY ${JSON.stringify({ gateway: gatewayUrl, users: usersUrl })}\n`);

async function stop() {
  await gatewayServer.stop();
  await usersServer.stop();
  process.exit(0);
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);

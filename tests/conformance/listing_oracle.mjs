// What the oracles beside this file (resource_oracle.mjs, threads_oracle.mjs, clone_oracle.mjs,
// update_oracle.mjs, write_oracle.mjs, working_memory_oracle.mjs) share: their command line, their mode,
// Mastra's LibSQL store, the one way they patch its SQL, the rows as stored, their loop over the cases
// and their output.
import { readFileSync, writeFileSync } from 'node:fs';

import { load } from '../mastra_packages.mjs';

// The command line `node SCRIPT DATASET QUERIES OUT [more]`: the parsed dataset and queries, the paths,
// and ORACLE_MODE (contract, the default, or mastra).
export function oracleArgs(script, more = []) {
  const names = ['DATASET.json', 'QUERIES.json', 'OUT.json', ...more];
  const paths = process.argv.slice(2);
  if (paths.length < names.length) {
    process.stderr.write(`usage: node ${script} ${names.join(' ')}\n`);
    process.exit(2);
  }
  const mode = process.env.ORACLE_MODE || 'contract';
  if (mode !== 'contract' && mode !== 'mastra') throw new Error(`unknown ORACLE_MODE ${mode}`);
  const [datasetPath, queriesPath] = paths;
  return {
    mode,
    paths,
    dataset: JSON.parse(readFileSync(datasetPath, 'utf8')),
    queries: JSON.parse(readFileSync(queriesPath, 'utf8')),
  };
}

export const clone = (v) => (v === undefined ? undefined : JSON.parse(JSON.stringify(v)));

// Mastra's LibSQL store at `url`, initialised, and its memory domain.
export async function memoryStorage(id, url) {
  const { LibSQLStore } = await load('@mastra/libsql');
  const storage = new LibSQLStore({ id, url });
  await storage.init();
  return { storage, memoryStore: await storage.getStore('memory') };
}

// Rewrites the SQL of every statement the store runs: `edit(sql)` gives the SQL to run instead.
// storage.client is a Proxy that queues calls and then runs the client's own execute: the method is
// replaced on the client under it, and the replacement calls the class's original.
export function rewriteSql(storage, edit) {
  const original = Object.getPrototypeOf(storage.client).execute;
  storage.client.execute = function (stmt, ...rest) {
    if (typeof stmt === 'object') stmt = { ...stmt, sql: edit(stmt.sql) };
    return original.call(this, stmt, ...rest);
  };
}

// Each case's answer in order, as the harness compares them: {name, ok: true, ...answer(args)}, or
// {name, ok: false, error} when it throws.
export async function runCases(queries, answer) {
  const results = [];
  for (const q of queries) {
    try {
      results.push({ name: q.name, ok: true, ...(await answer(q.args)) });
    } catch (err) {
      results.push({ name: q.name, ok: false, error: String(err?.message ?? err) });
    }
  }
  return results;
}

// runCases for listings: `list(args)` gives {rows, total, page, perPage, hasMore} (rows: the listed items).
export function runQueries(queries, list) {
  return runCases(queries, async (args) => {
    const { rows, total, page, perPage, hasMore } = await list(args);
    return { ids: rows.map((row) => row.id), total, page, perPage, hasMore };
  });
}

// These messages' rows as stored, by id (Mastra's own reads leave system rows out and reshape content).
export async function storedRows(storage, ids) {
  if (!ids.length) return new Map();
  const rows = (await storage.client.execute({
    sql: `SELECT id, content, role, type, "createdAt", thread_id, "resourceId" FROM mastra_messages WHERE id IN (${ids.map(() => '?').join(', ')})`,
    args: ids,
  })).rows;
  return new Map(rows.map((row) => [row.id, row]));
}

// OUT: {mode, ...counts, results}, and one line of progress.
export function writeResults(outPath, script, mode, counts, results) {
  writeFileSync(outPath, JSON.stringify({ mode, ...counts, results }, null, 1) + '\n');
  const errors = results.filter((r) => !r.ok).length;
  process.stdout.write(`${script}: ${results.length} queries (${errors} errors)\n`);
}

// The dataset's threads, saved as given (a thread without times gets the datasets' first instant).
export async function saveThreads(memoryStore, threads) {
  for (const t of threads ?? []) {
    const createdAt = t.createdAt ?? '2026-01-01T00:00:00.000Z';
    await memoryStore.saveThread({
      thread: {
        id: t.id,
        resourceId: t.resourceId,
        title: t.title ?? '',
        metadata: clone(t.metadata),
        createdAt: new Date(createdAt),
        updatedAt: new Date(t.updatedAt ?? createdAt),
      },
    });
  }
}

// The dataset's threads, then its messages in dataset order (the insertion order breaks createdAt ties).
export async function saveDataset(memoryStore, dataset) {
  await saveThreads(memoryStore, dataset.threads);
  const messages = (dataset.messages ?? []).map((m) => {
    const c = clone(m);
    if (c.createdAt !== undefined && c.createdAt !== null) c.createdAt = new Date(c.createdAt);
    return c;
  });
  if (messages.length) await memoryStore.saveMessages({ messages });
  return messages;
}

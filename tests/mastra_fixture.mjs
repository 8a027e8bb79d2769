#!/usr/bin/env node
// Writes a Mastra memory database with the REAL Mastra (@mastra/libsql's LibSQLStore, @mastra/memory), for
// the import tests and the import benchmark.
//
//   node tests/mastra_fixture.mjs DB_PATH EXPECTED.json            the feature fixture (see below)
//   node tests/mastra_fixture.mjs DB_PATH EXPECTED.json --bulk N   N plain messages over N/500 threads
//
// RECALL_ORACLE_NODE_MODULES names the folder whose node_modules/ holds @mastra/* (the conformance
// oracle's package cache, installed by ../../shared/conformance/oracle.sh).
//
// EXPECTED.json is what Mastra itself reports about the stored data: threads (getThreadById), resources
// (getResourceById), and the messages in rowid (insertion) order, each with its raw row and the message
// as Mastra's storage reads it back (listMessagesById: legacy rows converted to format 2).
import { existsSync, unlinkSync, writeFileSync } from 'node:fs';
import { load } from './mastra_packages.mjs';

const [, , dbPath, expectedPath, ...rest] = process.argv;
if (!dbPath || !expectedPath) {
  process.stderr.write('usage: node mastra_fixture.mjs DB_PATH EXPECTED.json [--bulk N]\n');
  process.exit(2);
}
const bulkAt = rest.indexOf('--bulk');
const bulk = bulkAt >= 0 ? Number(rest[bulkAt + 1]) : 0;

for (const suffix of ['', '-wal', '-shm', '-journal']) if (existsSync(dbPath + suffix)) unlinkSync(dbPath + suffix);

const { LibSQLStore } = await load('@mastra/libsql');
const { Memory } = await load('@mastra/memory');

const storage = new LibSQLStore({ id: 'recallql-import-fixture', url: `file:${dbPath}` });
await storage.init();
const store = await storage.getStore('memory');
const BASE = Date.parse('2026-01-01T00:00:00.000Z');
const at = (ms) => new Date(BASE + ms);
const text = (t, extra = {}) => ({ format: 2, parts: [{ type: 'text', text: t }], ...extra });

if (bulk > 0) {
  await writeBulk(bulk);
} else {
  await writeFeatures();
}
await report();

async function writeBulk(n) {
  const threads = Math.max(1, Math.ceil(n / 500));
  for (let t = 0; t < threads; t++) {
    await store.saveThread({
      thread: { id: `bt${t}`, resourceId: `br${t % 20}`, title: `bulk ${t}`, metadata: { n: t }, createdAt: at(0), updatedAt: at(0) },
    });
  }
  const batch = [];
  for (let i = 0; i < n; i++) {
    const t = i % threads;
    batch.push({
      id: `bm${String(i).padStart(7, '0')}`,
      threadId: `bt${t}`,
      resourceId: `br${t % 20}`,
      role: i % 2 ? 'assistant' : 'user',
      // Every fifth message shares its createdAt with the one before it.
      createdAt: at(1000 * (i - (i % 5 === 4 ? 1 : 0))),
      content: text(`bulk message ${i}: the quick brown fox jumps over the lazy dog`, i % 7 ? {} : { metadata: { i } }),
    });
    if (batch.length === 1000) await store.saveMessages({ messages: batch.splice(0) });
  }
  if (batch.length) await store.saveMessages({ messages: batch.splice(0) });
}

async function writeFeatures() {
  // Threads through Memory.saveThread (Mastra's own path; INSERT OR REPLACE with the given dates).
  const memory = new Memory({ storage, options: { workingMemory: { enabled: true, scope: 'resource' } } });
  const threadMemory = new Memory({ storage, options: { workingMemory: { enabled: true, scope: 'thread' } } });
  const threads = [
    { id: 'alpha', resourceId: 'alice', title: 'Trip planning', createdAt: at(0), updatedAt: at(5),
      metadata: { topic: 'travel', nested: { list: [1, 2.5, -3, null, true, false, 'x'], deep: { k: 'v' } },
                  quote: 'He said "hi"\\n\n\ttab', unicode: 'café 東京 🚆', empty: {}, none: null, big: 12345678901234 } },
    { id: 'beta', resourceId: 'alice', title: '', createdAt: at(1), updatedAt: at(1), metadata: { n: 1 } },
    { id: 'gamma', resourceId: 'bob', title: 'No metadata', createdAt: at(2), updatedAt: at(2) },
    { id: 'empty-thread', resourceId: 'carol', title: 'Nothing here', createdAt: at(3), updatedAt: at(4), metadata: {} },
  ];
  for (const thread of threads) await memory.saveThread({ thread });

  const m = (id, threadId, ms, content, extra = {}) => ({
    id, threadId, resourceId: extra.resourceId ?? (threadId === 'gamma' ? 'bob' : 'alice'),
    role: extra.role ?? 'user', createdAt: at(ms), content, ...(extra.type ? { type: extra.type } : {}),
  });
  await store.saveMessages({ messages: [
    m('a-001', 'alpha', 1001, text('Find me a train to Lyon', { metadata: { topic: 'travel', urgent: true } })),
    m('a-002', 'alpha', 2002, {
      format: 2,
      parts: [
        { type: 'step-start' },
        { type: 'reasoning', reasoning: 'look up trains', details: [{ type: 'text', text: 'look up trains' }] },
        { type: 'tool-invocation', toolInvocation: { state: 'result', toolCallId: 'call-1', toolName: 'searchTrains',
          args: { from: 'Paris', to: 'Lyon' }, result: { trains: ['9:04', '10:04'], price: 49.5 } } },
        { type: 'text', text: 'The 9:04 from Paris' },
      ],
      toolInvocations: [{ state: 'result', toolCallId: 'call-1', toolName: 'searchTrains', args: { from: 'Paris', to: 'Lyon' },
                          result: { trains: ['9:04', '10:04'], price: 49.5 } }],
      content: 'The 9:04 from Paris',
    }, { role: 'assistant' }),
    // Three messages with the same createdAt, written in an order that is not id order.
    m('tie-z', 'alpha', 3000, text('tie one')),
    m('tie-a', 'alpha', 3000, text('tie two'), { role: 'assistant' }),
    m('tie-m', 'alpha', 3000, text('tie three')),
    // Signals: a typed signal row, a data-signal part, legacy reminders (text prefix and metadata).
    m('sig-reactive', 'alpha', 4000, text('r', { metadata: { signal: { type: 'reactive' } } }), { role: 'signal' }),
    m('sig-part', 'alpha', 4001, { format: 2, parts: [{ type: 'data-signal', data: { type: 'state', value: 42 } }] }),
    m('rem-text', 'alpha', 4002, text('<system-reminder>be brief</system-reminder>')),
    m('rem-meta', 'alpha', 4003, text('reminder', { metadata: { systemReminder: { kind: 'x' } } })),
    m('sys', 'alpha', 4004, text('You are a helpful assistant.'), { role: 'system' }),
    m('data-part', 'alpha', 4005, { format: 2, parts: [{ type: 'data-chart', data: { points: [[0, 1], [1, 2]] } },
                                                       { type: 'file', data: 'https://example.com/a.png', mimeType: 'image/png' }] },
      { role: 'assistant' }),
    m('ms-precision', 'alpha', 4999, text('  untrimmed, with "quotes", \\ and\nnewline  ')),
    m('v3-type', 'alpha', 5000, text('stored with type v3'), { type: 'v3' }),
    // Written after later messages but with an earlier createdAt: rowid order is not time order.
    m('late-early', 'alpha', 1500, text('inserted late, created early')),
    // Legacy (format 1) rows: a plain string and a v1 part array with a tool call and a tool result.
    m('legacy-str', 'beta', 1000, 'legacy v1 string content', { type: 'v1' }),
    m('legacy-arr', 'beta', 2000, [
      { type: 'text', text: 'legacy v1 array' },
      { type: 'tool-call', toolCallId: 'c1', toolName: 'lookup', args: { q: 1 } },
      { type: 'tool-result', toolCallId: 'c1', toolName: 'lookup', result: { ok: true } },
    ], { type: 'v1', role: 'assistant' }),
    m('legacy-tool', 'beta', 3000, [{ type: 'tool-result', toolCallId: 'c2', toolName: 'lookup', result: 'r2' }],
      { type: 'v1', role: 'tool' }),
    m('legacy-media', 'beta', 4000, [
      { type: 'text', text: 'see attached' },
      { type: 'image', image: 'https://example.com/cat.png', mimeType: 'image/png' },
      { type: 'file', data: 'data:application/pdf;base64,JVBERi0=', mimeType: 'application/pdf', filename: 'a.pdf' },
      { type: 'file', data: 'SGVsbG8=' },
      { type: 'reasoning', text: 'thinking', signature: 'sig' },
      { type: 'redacted-reasoning', data: 'xyz' },
      { type: 'tool-call', toolCallId: 'c3', toolName: 'search', args: {} },
      { type: 'text', text: 'after the tool' },
      { type: 'mystery', foo: 1 },
      { type: 'text', text: '' },
    ], { type: 'v1', role: 'assistant' }),
    m('legacy-empty', 'beta', 5000, [{ type: 'text', text: '' }], { type: 'v1' }),
    m('g-001', 'gamma', 1000, text('bob speaks')),
    m('g-002', 'gamma', 1000, text('bob again, same millisecond'), { role: 'assistant' }),
  ] });
  // Re-saving an id is an upsert that keeps createdAt and rowid: the content changes, the position does not.
  await store.saveMessages({ messages: [m('a-001', 'alpha', 9000, text('Find me a train to Lyon, please', { metadata: { topic: 'travel', urgent: true } }))] });
  // Rows Mastra's own client wrote without saveMessages' checks: NULL resourceId, content that is not JSON.
  await storage.client.execute({
    sql: 'INSERT INTO mastra_messages (id, thread_id, content, role, type, "createdAt", "resourceId") VALUES (?,?,?,?,?,?,?)',
    args: ['raw-null-resource', 'gamma', JSON.stringify(text('no resource on the row')), 'user', 'v2', at(6000).toISOString(), null],
  });
  await storage.client.execute({
    sql: 'INSERT INTO mastra_messages (id, thread_id, content, role, type, "createdAt", "resourceId") VALUES (?,?,?,?,?,?,?)',
    args: ['raw-not-json', 'gamma', 'not json at all', 'user', 'v2', at(7000).toISOString(), 'bob'],
  });

  // Working memory: resource scope (mastra_resources), thread scope (thread metadata).
  await memory.updateWorkingMemory({ threadId: 'alpha', resourceId: 'alice', workingMemory: '# User\n- **Name**: Alice\n- likes trains' });
  await memory.updateWorkingMemory({ threadId: 'gamma', resourceId: 'bob', workingMemory: '# Bob\n' });
  await threadMemory.updateWorkingMemory({ threadId: 'beta', resourceId: 'alice', workingMemory: '# Thread notes\nbeta only' });
  await store.updateResource({ resourceId: 'dave', workingMemory: undefined, metadata: { plan: 'pro', seats: 3 } });
}

async function report() {
  const iso = (d) => (d instanceof Date ? d.toISOString() : d == null ? null : new Date(d).toISOString());
  const rows = (await storage.client.execute(
    'SELECT rowid, id, thread_id, content, role, type, "createdAt", "resourceId" FROM mastra_messages ORDER BY rowid',
  )).rows;
  const threadIds = (await storage.client.execute('SELECT id FROM mastra_threads ORDER BY rowid')).rows.map((r) => r.id);
  const resourceIds = (await storage.client.execute('SELECT id FROM mastra_resources ORDER BY rowid')).rows.map((r) => r.id);
  const expected = { counts: { threads: threadIds.length, messages: rows.length, resources: resourceIds.length } };
  if (bulk === 0) {
    const parsed = new Map();
    const ids = rows.map((r) => r.id);
    for (let i = 0; i < ids.length; i += 100) {
      const { messages } = await store.listMessagesById({ messageIds: ids.slice(i, i + 100) });
      for (const msg of messages) parsed.set(msg.id, msg);
    }
    expected.messages = rows.map((r) => {
      const msg = parsed.get(r.id);
      return {
        id: r.id, threadId: r.thread_id, resourceId: r.resourceId, role: r.role, type: r.type, createdAt: r.createdAt,
        storedContent: r.content,
        mastra: msg ? { role: msg.role, type: msg.type ?? 'v2', content: msg.content, createdAt: iso(msg.createdAt) } : null,
      };
    });
    expected.threads = [];
    for (const id of threadIds) {
      const t = await store.getThreadById({ threadId: id });
      expected.threads.push({ id: t.id, resourceId: t.resourceId, title: t.title, metadata: t.metadata ?? null,
                              createdAt: iso(t.createdAt), updatedAt: iso(t.updatedAt) });
    }
    expected.resources = [];
    for (const id of resourceIds) {
      const r = await store.getResourceById({ resourceId: id });
      expected.resources.push({ id: r.id, workingMemory: r.workingMemory ?? null, metadata: r.metadata ?? null,
                                createdAt: iso(r.createdAt), updatedAt: iso(r.updatedAt) });
    }
  }
  writeFileSync(expectedPath, JSON.stringify(expected, null, 1) + '\n');
}

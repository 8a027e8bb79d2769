// The tabs GraphiQL opens with (when the browser has no saved tabs of its own): recall examples
// with variables. Replace the ids in the variables with a thread of yours.

// A message's fields, each line after the first indented to `indent` spaces (the first takes the
// indentation of the line it is put in).
const messageFields = (indent) =>
  [
    'id',
    'role',
    'createdAt',
    'signalType',
    'isSystemReminder',
    'content {',
    '  parts {',
    '    __typename',
    '    ... on TextPart { text }',
    '  }',
    '}',
  ].join(`\n${' '.repeat(indent)}`);

export const DEFAULT_TABS = [
  {
    query: `# recall: a thread's newest page.
# A fresh server: run the Seed tab first.
# Run: play button or Ctrl-Enter.
# Docs: the book icon, top left.
query NewestPage($threadId: ID!, $perPage: PerPage) {
  recall(threadId: $threadId, perPage: $perPage) {
    total
    page
    perPage
    hasMore
    messages {
      ${messageFields(6)}
    }
  }
}
`,
    variables: JSON.stringify({ threadId: 't1', perPage: 10 }, null, 2),
  },
  {
    query: `# Sample data for the other tabs
# (run once, on a fresh server).
mutation Seed($messages: [MessageInput!]!) {
  createThread(input: {id: "t1", resourceId: "alice", title: "Trip planning"}) { id createdAt }
  saveMessages(messages: $messages) { messages { id createdAt } acknowledged }
}
`,
    variables: JSON.stringify(
      {
        messages: [
          {
            id: 'm1',
            threadId: 't1',
            role: 'user',
            content: {
              format: 2,
              parts: [{ type: 'text', text: 'Find me a train to Lyon' }],
              metadata: { topic: 'travel' },
            },
          },
          {
            id: 'm2',
            threadId: 't1',
            role: 'assistant',
            content: { format: 2, parts: [{ type: 'text', text: 'The 9:04 from Paris' }] },
          },
        ],
      },
      null,
      2,
    ),
  },
  {
    query: `# recall with filters, signals
# hidden and an included message.
query FilteredWindow(
  $threadId: ID!
  $resourceId: String
  $filter: RecallFilter
  $include: [IncludeInput!]
) {
  recall(
    threadId: $threadId
    resourceId: $resourceId
    perPage: 20
    page: 0
    orderBy: {field: CREATED_AT, direction: DESC}
    filter: $filter
    include: $include
    hideSignals: {all: true}
  ) {
    total
    hasMore
    messages {
      ${messageFields(6)}
    }
  }
}
`,
    variables: JSON.stringify(
      {
        threadId: 't1',
        resourceId: 'alice',
        filter: {
          dateRange: { start: '2026-01-01T00:00:00Z' },
          metadata: { topic: 'travel' },
        },
        include: [{ id: 'm1', withPreviousMessages: 1, withNextMessages: 1 }],
      },
      null,
      2,
    ),
  },
  {
    query: `# Scrolling back with cursors (beyond Mastra).
# Run, then set "before" to the startCursor it
# returned: the page before, however many
# messages arrived meanwhile. hideInPageQuery:
# signals are left out by the page query, so
# pages are full and total counts what shows.
query ScrollBack($threadId: ID!, $before: String) {
  recall(
    threadId: $threadId
    perPage: 1
    before: $before
    hideSignals: {all: true}
    hideInPageQuery: true
  ) {
    total
    hasMore
    startCursor
    endCursor
    messages {
      cursor
      ${messageFields(6)}
    }
  }
}
`,
    variables: JSON.stringify({ threadId: 't1', before: null }, null, 2),
  },
  {
    query: `# Live changes to a thread's messages (Run, then save a message in another tab). After a
# reconnect, pass the cursor of the newest message seen as $after: what came after it is replayed first.
# On a server that keeps changes (RECALLQL_CHANGE_RETENTION), pass the \`at\` of the last event received
# as $changedSince too: edits and deletions of older messages made meanwhile are replayed before that.
subscription LiveMessages($threadId: ID!, $after: String, $changedSince: DateTime) {
  messageSaved(threadId: $threadId, after: $after, changedSince: $changedSince) {
    kind
    messageId
    at
    message { id role createdAt cursor }
  }
}
`,
    variables: JSON.stringify({ threadId: 't1', after: null, changedSince: null }, null, 2),
  },
  {
    query: `# A resource's threads, most recently active first. For the next page, pass endCursor as $after:
# a cursor, unlike page, does not show a thread again when another one moves to the top meanwhile.
query Threads($resourceId: String!, $after: String) {
  threads(resourceId: $resourceId, perPage: 20, orderBy: {field: UPDATED_AT}, after: $after) {
    total
    hasMore
    endCursor
    threads { id title createdAt updatedAt metadata }
  }
}
`,
    variables: JSON.stringify({ resourceId: 'alice', after: null }, null, 2),
  },
  {
    query: `# Live changes to a resource's threads, for a sidebar (Run, then create or rename a thread in another
# tab). After a reconnect, pass the startCursor of the sidebar's first page as $after: threads changed
# since come first. On a server that keeps changes (RECALLQL_CHANGE_RETENTION), pass the \`at\` of the
# last event received as $changedSince: the threads deleted since then come first, as DELETED.
subscription LiveThreads($resourceId: String!, $after: String, $changedSince: DateTime) {
  threadUpdated(resourceId: $resourceId, after: $after, changedSince: $changedSince) {
    kind
    threadId
    at
    thread { id title updatedAt }
  }
}
`,
    variables: JSON.stringify({ resourceId: 'alice', after: null, changedSince: null }, null, 2),
  },
  {
    query: `# Everything a user said, across all of their threads (Mastra's listMessagesByResourceId), a page at a
# time, newest first here (the default is oldest first). Select total only where you show it: without it the page runs no count.
# include adds given messages (with neighbours in their thread) whatever the filter, not counted.
query ResourceMessages($resourceId: String!, $page: Int!, $filter: RecallFilter) {
  resource(id: $resourceId) {
    id
    messages(page: $page, perPage: 20, filter: $filter, orderBy: {field: CREATED_AT, direction: DESC}) {
      total
      hasMore
      messages {
        threadId
        ${messageFields(8)}
      }
    }
  }
}
`,
    variables: JSON.stringify({ resourceId: 'alice', page: 0, filter: null }, null, 2),
  },
  {
    query: `# Branches: clone a thread, then follow clones both ways: where the clone came from (clonedFrom,
# cloneHistory: the original first) and every branch of its source (clones, newest first).
# To give a thread and its messages to another resource (an anonymous visitor who signed in):
#   mutation { updateThreadResourceId(threadId: "t1", resourceId: "bob") { id resourceId } }
mutation Branch($threadId: ID!) {
  cloneThread(input: {sourceThreadId: $threadId, title: "Plan B"}) {
    thread {
      id
      isClone
      cloneHistory { id title }
      clonedFrom {
        id
        clones { id title createdAt }
      }
    }
  }
}
`,
    variables: JSON.stringify({ threadId: 't1' }, null, 2),
  },

];

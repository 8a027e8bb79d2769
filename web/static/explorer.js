// RecallQL memory explorer: plain JavaScript over the GraphQL API (POST /graphql), no build step.
'use strict';

(() => {
  const ENDPOINT = new URL('graphql', document.baseURI).href;
  const RECENT_KEY = 'recallql.explorer.recentResources';
  const RECENT_MAX = 12;
  const THREADS_PER_PAGE = 50;

  const $ = (selector, root = document) => root.querySelector(selector);
  const $$ = (selector, root = document) => Array.from(root.querySelectorAll(selector));

  /** A DOM element: el('li', {class: 'x', dataset: {id: 'y'}}, 'text', child, ...). */
  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs)) {
      if (value === undefined || value === null || value === false) continue;
      if (key === 'class') node.className = value;
      else if (key === 'dataset') Object.assign(node.dataset, value);
      else if (key === 'text') node.textContent = value;
      else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? '' : String(value));
    }
    for (const child of children.flat()) {
      if (child === undefined || child === null || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  // ------------------------------------------------------------------------------------ the API
  class ApiError extends Error {
    constructor(errors) {
      super(errors.map((e) => e.message).join('; '));
      this.errors = errors;
    }
  }

  // With authentication on (README "Authentication"), the token the user types, kept for this tab only.
  const TOKEN_KEY = 'recallql.explorer.token';

  async function gql(query, variables = {}, retried = false) {
    let response;
    const token = sessionStorage.getItem(TOKEN_KEY);
    try {
      response = await fetch(ENDPOINT, {
        method: 'POST',
        headers: {
          'Content-Type': 'application/json',
          Accept: 'application/json',
          ...(token ? { Authorization: `Bearer ${token}` } : {}),
        },
        body: JSON.stringify({ query, variables }),
      });
    } catch (err) {
      throw new ApiError([{ message: `The server did not answer (${err.message}).` }]);
    }
    if (response.status === 401 && !retried) {
      // Ask once (concurrent requests that failed meanwhile retry with the token just typed).
      if (sessionStorage.getItem(TOKEN_KEY) === token) {
        const typed = window.prompt('This server requires a token (an API key or a JWT):', '');
        // "Bearer rql_…" as copied from an Authorization header: the header adds its own prefix.
        const bare = (typed || '').trim().replace(/^Bearer\s+/i, '').trim();
        if (bare) sessionStorage.setItem(TOKEN_KEY, bare);
      }
      if (sessionStorage.getItem(TOKEN_KEY) !== token) return gql(query, variables, true);
    }
    let body;
    try {
      body = await response.json();
    } catch {
      throw new ApiError([{ message: `HTTP ${response.status} ${response.statusText}` }]);
    }
    if (body.errors && body.errors.length) throw new ApiError(body.errors);
    if (!response.ok) throw new ApiError([{ message: `HTTP ${response.status}` }]);
    return body.data;
  }

  function showError(err, where = $('#errors')) {
    where.replaceChildren();
    const errors = err instanceof ApiError ? err.errors : [{ message: String(err && err.message ? err.message : err) }];
    const list = el('ul');
    for (const e of errors) {
      const code = e.extensions && e.extensions.code;
      list.append(el('li', {}, code ? el('code', { text: code }) : null, code ? ' ' : null, e.message));
    }
    where.append(el('strong', { text: 'The request failed' }), list);
    where.hidden = false;
  }

  function clearError(where = $('#errors')) {
    where.hidden = true;
    where.replaceChildren();
  }

  const MESSAGE_FIELDS = `
    id role type createdAt threadId resourceId signalType isSystemReminder
    content {
      metadata
      content
      parts {
        __typename
        ... on TextPart { text }
        ... on ReasoningPart { reasoning }
        ... on ToolInvocationPart { toolInvocation { state toolName args result } }
        ... on FilePart { mimeType filename }
        ... on SourcePart { source }
        ... on DataPart { name data }
        ... on UnknownPart { unknownType: type raw }
      }
    }`;

  // Paged by cursor: a thread created while the list is open does not push one already shown onto the next page.
  // Without a resourceId: every resource's threads (the "All" button).
  const THREADS_QUERY = `query ExplorerThreads($resourceId: String, $after: String, $perPage: PerPage!) {
  threads(resourceId: $resourceId, after: $after, perPage: $perPage) {
    total hasMore endCursor
    threads {
      id resourceId title createdAt updatedAt
      recall(perPage: 1, hideSignals: {all: true}) {
        total
        messages { role content { parts { ... on TextPart { text } } } }
      }
    }
  }
}`;

  const THREAD_QUERY = `query ExplorerThread($id: ID!, $perPage: PerPage) {
  thread(id: $id) { id resourceId title metadata createdAt updatedAt }
  recall(threadId: $id, perPage: $perPage, hideSignals: {all: false}) {
    total hasMore
    messages { ${MESSAGE_FIELDS} }
  }
}`;

  const RESOURCE_MESSAGES_PER_PAGE = 50;
  // Resource.messages (Mastra's listMessagesByResourceId): signals are not hidden there; the page hides them.
  const RESOURCE_MESSAGES_QUERY = `query ExplorerResourceMessages($id: String!, $page: Int!, $perPage: PerPage!, $direction: SortDirection!) {
  resource(id: $id) {
    messages(page: $page, perPage: $perPage, orderBy: {direction: $direction}) {
      total page hasMore
      messages { ${MESSAGE_FIELDS} }
    }
  }
}`;

  const RECALL_ARGS = [
    ['resourceId', 'String'],
    ['perPage', 'PerPage'],
    ['page', 'Int'],
    ['include', '[IncludeInput!]'],
    ['filter', 'RecallFilter'],
    ['orderBy', 'MessageOrderBy'],
    ['hideSignals', 'HideSignalsInput'],
    ['includeSystemReminders', 'Boolean'],
    ['threadConfig', 'MemoryConfigInput'],
    ['vectorSearchString', 'String'],
  ];

  /** The recall query for exactly the arguments given (omitted ones are not sent at all). */
  function recallQuery(variables) {
    const used = RECALL_ARGS.filter(([name]) => name in variables);
    const defs = ['$threadId: ID!', ...used.map(([name, type]) => `$${name}: ${type}`)].join(', ');
    const args = ['threadId: $threadId', ...used.map(([name]) => `${name}: $${name}`)].join(', ');
    return `query ExplorerRecall(${defs}) {
  recall(${args}) {
    total page perPage hasMore
    messages { ${MESSAGE_FIELDS} }
  }
}`;
  }

  // ------------------------------------------------------------------------------------ state
  const state = {
    resourceId: '',
    allThreads: false, // listing every resource's threads instead of one resource's
    threadsAfter: null,
    threadId: '',
    recallPage: 0,
    lastRecall: null,
    view: '', // 'messages': the resource's messages across its threads instead of a thread
    resourceMessagesPage: 0,
    listing: 0, // which listing of threads is shown: a load for an earlier one is dropped
  };

  function currentHash() {
    const params = new URLSearchParams();
    if (state.allThreads) params.set('all', '1');
    else if (state.resourceId) params.set('resource', state.resourceId);
    if (state.threadId) params.set('thread', state.threadId);
    else if (state.view === 'messages') params.set('view', 'messages');
    const hash = params.toString();
    return hash ? `#${hash}` : '';
  }

  // While the view follows the URL (the start, Back, a hash edited by hand), it makes no history entry.
  let followingUrl = false;

  /** Each view its own history entry, so that Back returns to the one before (it left the explorer). */
  function saveHash() {
    const hash = currentHash();
    if (hash === window.location.hash) return;
    const url = hash || window.location.pathname + window.location.search;
    if (followingUrl) history.replaceState(null, '', url);
    else history.pushState(null, '', url);
  }

  /** Shows what the URL's hash names: at the start, after Back or Forward, and after a hand edit. */
  function followHash() {
    if (window.location.hash === currentHash()) return; // popstate and hashchange both come for one Back
    const params = new URLSearchParams(window.location.hash.slice(1));
    const resource = params.get('resource');
    const thread = params.get('thread');
    if (!params.get('all') && !resource && !thread) {
      window.location.reload(); // back to the page as first opened
      return;
    }
    followingUrl = true;
    try {
      // The listing is loaded again only when it lists something else.
      if (params.get('all')) {
        if (!state.allThreads) loadAllThreads({ keepThread: Boolean(thread) });
      } else if (resource && (state.allThreads || resource !== state.resourceId)) {
        loadResource(resource, { keepThread: Boolean(thread) });
      } else if (!thread) {
        state.threadId = '';
        showThread(null);
        markCurrentThread();
      }
      if (thread) selectThread(thread);
      else if (resource && params.get('view') === 'messages') openResourceMessages(0);
    } finally {
      followingUrl = false;
    }
  }

  function recentResources() {
    try {
      const list = JSON.parse(localStorage.getItem(RECENT_KEY) || '[]');
      return Array.isArray(list) ? list.filter((x) => typeof x === 'string') : [];
    } catch {
      return [];
    }
  }

  function rememberResource(id) {
    const list = [id, ...recentResources().filter((x) => x !== id)].slice(0, RECENT_MAX);
    try {
      localStorage.setItem(RECENT_KEY, JSON.stringify(list));
    } catch {
      /* storage may be disabled: the list is a convenience */
    }
    renderRecent();
  }

  function renderRecent() {
    $('#recent-resources').replaceChildren(...recentResources().map((id) => el('option', { value: id })));
  }

  // ------------------------------------------------------------------------------------ formatting
  function formatTime(iso) {
    if (!iso) return '';
    return iso.replace('T', ' ').replace(/Z$/, ' Z');
  }

  function timeElement(iso) {
    const local = new Date(iso);
    return el('time', {
      datetime: iso,
      title: Number.isNaN(local.getTime()) ? iso : `${local.toLocaleString()} (local)`,
      text: formatTime(iso),
    });
  }

  function json(value) {
    return JSON.stringify(value, null, 2);
  }

  /** A one-line glimpse of a JSON value, for a closed disclosure. */
  function preview(value) {
    const text = JSON.stringify(value) ?? '';
    return text.length > 100 ? `${text.slice(0, 99)}…` : text;
  }

  function renderPart(part) {
    switch (part.__typename) {
      case 'TextPart':
        // An empty one shows nothing, and leaves room for the legacy content string (see renderMessage).
        return part.text ? el('div', { class: 'part text', text: part.text }) : null;
      case 'ReasoningPart':
        return el('div', { class: 'part reasoning' }, el('span', { class: 'tag', text: 'reasoning' }), ' ', part.reasoning ?? '');
      case 'ToolInvocationPart': {
        const t = part.toolInvocation || {};
        return el(
          'details',
          { class: 'part tool' },
          el('summary', {}, el('span', { class: 'tag', text: 'tool' }), ' ', el('code', { text: t.toolName ?? '?' }), ` · ${t.state ?? ''}`),
          el('pre', { text: json({ args: t.args, result: t.result }) }),
        );
      }
      case 'FilePart':
        return el('div', { class: 'part file' }, el('span', { class: 'tag', text: 'file' }), ` ${part.filename ?? ''} ${part.mimeType ?? ''}`);
      case 'SourcePart':
        return el('details', { class: 'part' }, el('summary', {}, el('span', { class: 'tag', text: 'source' })), el('pre', { text: json(part.source) }));
      case 'DataPart':
        return el(
          'details',
          { class: 'part data' },
          el('summary', {}, el('span', { class: 'tag', text: `data-${part.name}` }), el('span', { class: 'preview', text: preview(part.data) })),
          el('pre', { text: json(part.data) }),
        );
      case 'UnknownPart':
        return el('details', { class: 'part' }, el('summary', {}, el('span', { class: 'tag', text: part.unknownType })), el('pre', { text: json(part.raw) }));
      default:
        return null; // step-start markers carry nothing to read
    }
  }

  function renderMessage(message) {
    const isSignal = Boolean(message.signalType);
    const isReminder = Boolean(message.isSystemReminder);
    const parts = (message.content.parts || []).map(renderPart).filter(Boolean);
    if (!parts.length && message.content.content) parts.push(el('div', { class: 'part text', text: message.content.content }));
    const classes = ['msg', `role-${message.role.replace(/[^a-z-]/gi, '')}`];
    if (isSignal) classes.push('is-signal');
    if (isReminder) classes.push('is-reminder');
    if (isSignal || isReminder) classes.push('default-hidden');
    const label = [
      message.role,
      isSignal ? `signal ${message.signalType}` : null,
      isReminder ? 'system reminder' : null,
      message.createdAt,
    ]
      .filter(Boolean)
      .join(', ');
    return el(
      'li',
      { class: classes.join(' '), dataset: { messageId: message.id }, 'aria-label': label },
      el(
        'div',
        { class: 'msg-head' },
        el('span', { class: 'role', text: message.role }),
        // A legacy system reminder is also classified SYSTEM_REMINDER: one badge says it.
        isSignal && !(isReminder && message.signalType === 'SYSTEM_REMINDER')
          ? el('span', { class: 'badge signal', text: `signal · ${message.signalType}` })
          : null,
        isReminder ? el('span', { class: 'badge reminder', text: 'system reminder' }) : null,
        timeElement(message.createdAt),
        el('code', { class: 'msg-id', text: message.id }),
      ),
      el('div', { class: 'msg-body' }, parts.length ? parts : el('span', { class: 'muted', text: '(no text)' })),
      message.content.metadata && Object.keys(message.content.metadata).length
        ? el('details', { class: 'msg-meta' }, el('summary', { text: 'metadata' }), el('pre', { text: json(message.content.metadata) }))
        : null,
    );
  }

  // ------------------------------------------------------------------------------------ threads
  async function loadResource(resourceId, { keepThread = false } = {}) {
    state.listing += 1;
    state.allThreads = false;
    state.resourceId = resourceId;
    state.threadsAfter = null;
    $('#resource-messages-open').hidden = false;
    if (!keepThread) {
      state.threadId = '';
      showThread(null);
    }
    $('#resource-id').value = resourceId;
    $('#threads').replaceChildren();
    $('#threads-count').textContent = '';
    saveHash();
    loadWorkingMemory(resourceId);
    await loadThreads();
  }

  async function loadAllThreads({ keepThread = false } = {}) {
    state.listing += 1;
    state.allThreads = true;
    state.resourceId = '';
    state.threadsAfter = null;
    $('#resource-messages-open').hidden = true;
    if (!keepThread) {
      state.threadId = '';
      showThread(null);
    }
    $('#resource-id').value = '';
    $('#threads').replaceChildren();
    $('#threads-count').textContent = '';
    $('#wm-status').textContent = 'Pick a resource.';
    $('#wm-content').hidden = true;
    saveHash();
    await loadThreads();
  }

  async function loadThreads() {
    const status = $('#threads-status');
    status.textContent = 'Loading threads…';
    $('#threads-more').hidden = true;
    const listing = state.listing;
    try {
      const data = await gql(THREADS_QUERY, {
        resourceId: state.allThreads ? null : state.resourceId,
        after: state.threadsAfter,
        perPage: THREADS_PER_PAGE,
      });
      // Another listing began meanwhile (a resource opened twice quickly, Back): its own load shows it.
      if (listing !== state.listing) return;
      clearError();
      const page = data.threads;
      if (page.threads.length && !state.allThreads) rememberResource(state.resourceId);
      for (const thread of page.threads) $('#threads').append(renderThreadItem(thread));
      // total counts this page and those after it; the ones shown before it come on top.
      const shown = $$('#threads li').length;
      const total = shown - page.threads.length + page.total;
      $('#threads-count').textContent = `(${total})`;
      status.textContent = total
        ? `${shown} of ${total} thread${total === 1 ? '' : 's'}`
        : state.allThreads
          ? 'No threads yet.'
          : `No threads for resource “${state.resourceId}”.`;
      $('#threads-more').hidden = !page.hasMore;
      if (page.endCursor) state.threadsAfter = page.endCursor;
      markCurrentThread();
    } catch (err) {
      status.textContent = 'Could not load the threads.';
      showError(err);
    }
  }

  function renderThreadItem(thread) {
    return el(
      'li',
      {},
      el(
        'button',
        {
          type: 'button',
          class: 'thread',
          dataset: { threadId: thread.id },
          onclick: () => selectThread(thread.id),
        },
        el('span', { class: 'thread-title', text: thread.title || '(untitled)' }),
        el('code', { class: 'thread-id', text: thread.id }),
        state.allThreads ? el('code', { class: 'thread-resource small', text: thread.resourceId }) : null,
        threadPreview(thread.recall),
        el(
          'span',
          { class: 'muted small' },
          thread.recall ? `${thread.recall.total} message${thread.recall.total === 1 ? '' : 's'} · ` : '',
          'updated ',
          timeElement(thread.updatedAt),
        ),
      ),
    );
  }

  /** The newest message's text, one line (a signal or a message without text shows none). */
  function threadPreview(recall) {
    const newest = recall && recall.messages[recall.messages.length - 1];
    const text = newest
      ? newest.content.parts
          .map((part) => part.text || '')
          .join(' ')
          .replace(/\s+/g, ' ')
          .trim()
      : '';
    if (!text) return null;
    const attrs = { class: 'thread-preview small', dataset: { role: newest.role } };
    return el('span', attrs, `${newest.role}: ${text}`);
  }

  function markCurrentThread() {
    for (const button of $$('#threads button.thread')) {
      if (button.dataset.threadId === state.threadId) button.setAttribute('aria-current', 'true');
      else button.removeAttribute('aria-current');
    }
  }

  async function selectThread(threadId) {
    state.threadId = threadId;
    state.view = '';
    state.lastRecall = null;
    saveHash();
    markCurrentThread();
    $('#recall-messages').replaceChildren();
    $('#recall-summary').hidden = true;
    await loadThread();
  }

  function showThread(thread) {
    state.view = '';
    $('#resource-messages').hidden = true;
    $('#no-thread').hidden = Boolean(thread);
    $('#thread').hidden = !thread;
    if (!thread) return;
    $('#thread-title').textContent = thread.title || '(untitled thread)';
    const meta = $('#thread-meta');
    meta.replaceChildren();
    const add = (term, value) => meta.append(el('div', {}, el('dt', { text: term }), el('dd', {}, value)));
    add('id', el('code', { text: thread.id }));
    add('resource', el('code', { text: thread.resourceId }));
    add('created', timeElement(thread.createdAt));
    add('updated', timeElement(thread.updatedAt));
    if (thread.metadata && Object.keys(thread.metadata).length) add('metadata', el('code', { text: JSON.stringify(thread.metadata) }));
  }

  async function loadThread() {
    const limit = $('#thread-limit').value;
    const status = $('#thread-status');
    status.textContent = 'Loading messages…';
    try {
      const data = await gql(THREAD_QUERY, { id: state.threadId, perPage: limit === 'all' ? false : Number(limit) });
      clearError();
      if (!data.thread) {
        showThread(null);
        showError(new ApiError([{ message: `No thread with id “${state.threadId}”.` }]));
        return;
      }
      showThread(data.thread);
      if (!state.allThreads && data.thread.resourceId !== state.resourceId) {
        // Opened by link or id: follow the thread's own resource.
        await loadResource(data.thread.resourceId, { keepThread: true });
      }
      const messages = data.recall.messages;
      $('#thread-messages').replaceChildren(...messages.map(renderMessage));
      const hidden = messages.filter((m) => m.signalType || m.isSystemReminder).length;
      $('#hidden-count').textContent = `(${hidden})`;
      // total counts system-role rows too, which recall never returns: hasMore says whether more exist.
      const { total, hasMore } = data.recall;
      const system = hasMore ? 0 : total - messages.length;
      const shown = hasMore ? `the newest ${messages.length} of ${total}` : `all ${messages.length}`;
      const systemNote = system > 0 ? ` (and ${system} system ${system === 1 ? 'message' : 'messages'}, which recall never returns)` : '';
      status.textContent = `Showing ${shown} messages${systemNote}; ${hidden} ${hidden === 1 ? 'is a signal or system reminder' : 'are signals or system reminders'}${$('#show-hidden').checked ? '' : ' (hidden)'}.`;
    } catch (err) {
      status.textContent = 'Could not load the messages.';
      showError(err);
    }
  }

  // ------------------------------------------------------------------------------------ a resource's messages
  async function openResourceMessages(page = 0) {
    state.view = 'messages';
    state.threadId = '';
    state.resourceMessagesPage = page;
    markCurrentThread();
    saveHash();
    $('#thread').hidden = true;
    $('#no-thread').hidden = true;
    $('#resource-messages').hidden = false;
    $('#resource-messages-resource').textContent = state.resourceId;
    const status = $('#resource-messages-status');
    const list = $('#resource-message-list');
    const direction = $('#resource-messages-order').value;
    status.textContent = 'Loading messages…';
    try {
      const data = await gql(RESOURCE_MESSAGES_QUERY, {
        id: state.resourceId,
        page,
        perPage: RESOURCE_MESSAGES_PER_PAGE,
        direction,
      });
      clearError();
      const result = data.resource ? data.resource.messages : { total: 0, hasMore: false, messages: [] };
      list.replaceChildren(...result.messages.map(renderResourceMessage));
      const pages = Math.max(1, Math.ceil(result.total / RESOURCE_MESSAGES_PER_PAGE));
      const order = direction === 'DESC' ? 'newest first' : 'oldest first';
      status.textContent = result.total
        ? `Page ${page + 1} of ${pages}, ${order}: ${result.messages.length} of ${result.total} message${result.total === 1 ? '' : 's'}.`
        : `No messages are filed under “${state.resourceId}”.`;
      $('#resource-messages-prev').disabled = page === 0;
      $('#resource-messages-next').disabled = !result.hasMore;
    } catch (err) {
      status.textContent = 'Could not load the messages.';
      showError(err);
    }
  }

  /** A message of the resource's listing: as in a thread, with the thread it is in (a button to it). */
  function renderResourceMessage(message) {
    const item = renderMessage(message);
    const open = el(
      'button',
      { type: 'button', class: 'thread-link', title: 'Open this thread', onclick: () => selectThread(message.threadId) },
      'in ',
      el('code', { text: message.threadId }),
    );
    item.querySelector('.msg-head').insertBefore(open, item.querySelector('.msg-id'));
    return item;
  }

  // ------------------------------------------------------------------------------------ working memory
  // The introspection's promise, shared by the loads that ask meanwhile; null within it: the schema has
  // no working memory.
  let workingMemoryPlan;

  function unwrap(type) {
    let t = type;
    while (t && t.ofType) t = t.ofType;
    return t;
  }

  function typeRef(type) {
    if (!type) return '';
    if (type.kind === 'NON_NULL') return `${typeRef(type.ofType)}!`;
    if (type.kind === 'LIST') return `[${typeRef(type.ofType)}]`;
    return type.name;
  }

  const TYPE_REF = 'kind name ofType { kind name ofType { kind name ofType { kind name } } }';

  /** Introspects once whether Query.resource(id) { workingMemory } exists, and how to select it. A
   * failed introspection (no token yet, the server down) is asked again next time: remembered, it said
   * "does not offer working memory" for the life of the page. */
  function planWorkingMemory() {
    workingMemoryPlan ??= introspectWorkingMemory().catch((err) => {
      workingMemoryPlan = undefined;
      throw err;
    });
    return workingMemoryPlan;
  }

  async function introspectWorkingMemory() {
    const data = await gql(`{ __type(name: "Query") { fields { name args { name type { ${TYPE_REF} } } type { ${TYPE_REF} } } } }`);
    const resource = (data.__type?.fields || []).find((f) => f.name === 'resource');
    const idArg = resource && resource.args.find((a) => a.name === 'id');
    if (!resource || !idArg) return null;
    const resourceType = unwrap(resource.type).name;
    const rt = await gql(`query ($name: String!) { __type(name: $name) { fields { name args { name } type { ${TYPE_REF} } } } }`, { name: resourceType });
    const field = (rt.__type?.fields || []).find((f) => f.name === 'workingMemory');
    if (!field) return null;
    // What is stored, whatever the server's defaults: they may leave working memory off (it read "None"
    // beside a resource that has some), and the explorer shows data rather than a configuration.
    const stored = field.args.some((a) => a.name === 'memoryConfig')
      ? '(memoryConfig: { workingMemory: { enabled: true, scope: RESOURCE } })'
      : '';
    let selection = `workingMemory${stored}`;
    const inner = unwrap(field.type);
    if (inner.kind === 'OBJECT') {
      const wm = await gql(`query ($name: String!) { __type(name: $name) { fields { name args { name } type { ${TYPE_REF} } } } }`, { name: inner.name });
      const scalars = (wm.__type?.fields || [])
        .filter((f) => !f.args.length && ['SCALAR', 'ENUM'].includes(unwrap(f.type).kind))
        .map((f) => f.name);
      if (!scalars.length) return null;
      selection = `${selection} { ${scalars.join(' ')} }`;
    }
    return { query: `query ExplorerWorkingMemory($id: ${typeRef(idArg.type)}) { resource(id: $id) { ${selection} } }` };
  }

  async function loadWorkingMemory(resourceId) {
    const status = $('#wm-status');
    const pre = $('#wm-content');
    pre.hidden = true;
    try {
      const plan = await planWorkingMemory();
      if (!plan) {
        status.textContent = 'This server does not offer working memory yet.';
        return;
      }
      status.textContent = 'Loading…';
      const data = await gql(plan.query, { id: resourceId });
      if (resourceId !== state.resourceId) return;
      const wm = data.resource ? data.resource.workingMemory : null;
      if (wm === null || wm === undefined || wm === '') {
        status.textContent = data.resource
          ? 'None stored for this resource (thread-scoped working memory is kept on each thread).'
          : 'None: the server has no row for this resource yet.';
        return;
      }
      status.textContent = '';
      pre.textContent = typeof wm === 'string' ? wm : json(wm);
      pre.hidden = false;
    } catch (err) {
      status.textContent = `Could not load the working memory: ${err.message}`;
    }
  }

  // ------------------------------------------------------------------------------------ recall form
  class FormError extends Error {}

  function intField(form, name, { min = 0 } = {}) {
    const input = form.elements[name];
    const raw = input.value.trim();
    if (raw === '') return undefined;
    const value = Number(raw);
    if (!Number.isInteger(value) || value < min) {
      input.focus();
      throw new FormError(`${input.closest('label')?.firstChild?.textContent.trim() || name} must be a whole number >= ${min}.`);
    }
    return value;
  }

  function isoField(form, name) {
    const input = form.elements[name];
    const raw = input.value.trim();
    if (raw === '') return undefined;
    if (Number.isNaN(Date.parse(raw))) {
      input.focus();
      throw new FormError(`dateRange ${name} is not an ISO-8601 date-time (e.g. 2026-01-01T00:00:00Z).`);
    }
    return raw;
  }

  /** The recall variables the form describes: only what is set is sent. */
  function recallVariables(form) {
    const f = form.elements;
    const v = { threadId: state.threadId };
    const resourceId = f.resourceId.value.trim();
    if (resourceId) v.resourceId = resourceId;
    if (f.perPageAll.checked) v.perPage = false;
    else {
      const perPage = intField(form, 'perPage');
      if (perPage !== undefined) v.perPage = perPage;
    }
    const page = intField(form, 'page');
    if (page !== undefined) v.page = page;
    if (f.direction.value) v.orderBy = { field: 'CREATED_AT', direction: f.direction.value };

    const include = [];
    for (const row of $$('.include-row', form)) {
      const id = row.querySelector('[name=includeId]').value.trim();
      if (!id) continue;
      const item = { id };
      for (const [name, key] of [
        ['includePrev', 'withPreviousMessages'],
        ['includeNext', 'withNextMessages'],
      ]) {
        const raw = row.querySelector(`[name=${name}]`).value.trim();
        if (raw === '') continue;
        const n = Number(raw);
        if (!Number.isInteger(n) || n < 0) throw new FormError(`include ${key} must be a whole number >= 0.`);
        item[key] = n;
      }
      include.push(item);
    }
    if (include.length) v.include = include;

    const filter = {};
    const start = isoField(form, 'start');
    const end = isoField(form, 'end');
    if (start !== undefined || end !== undefined || f.startExclusive.checked || f.endExclusive.checked) {
      filter.dateRange = {};
      if (start !== undefined) filter.dateRange.start = start;
      if (end !== undefined) filter.dateRange.end = end;
      if (f.startExclusive.checked) filter.dateRange.startExclusive = true;
      if (f.endExclusive.checked) filter.dateRange.endExclusive = true;
    }
    const metadata = f.metadata.value.trim();
    if (metadata) {
      let parsed;
      try {
        parsed = JSON.parse(metadata);
      } catch (err) {
        f.metadata.focus();
        throw new FormError(`metadata is not valid JSON: ${err.message}`);
      }
      if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) {
        f.metadata.focus();
        throw new FormError('metadata must be a JSON object, e.g. {"topic": "travel"}.');
      }
      filter.metadata = parsed;
    }
    if (Object.keys(filter).length) v.filter = filter;

    const hide = form.querySelector('[name=hideSignals]:checked').value;
    if (hide === 'all') v.hideSignals = { all: true };
    else if (hide === 'none') v.hideSignals = { all: false };
    else if (hide === 'types') v.hideSignals = { types: $$('[name=signalType]:checked', form).map((c) => c.value) };
    if (f.includeSystemReminders.value) v.includeSystemReminders = f.includeSystemReminders.value === 'true';

    const threadConfig = {};
    if (f.lastMessagesOff.checked) threadConfig.lastMessages = false;
    else {
      const last = intField(form, 'lastMessages');
      if (last !== undefined) threadConfig.lastMessages = last;
    }
    const semantic = f.semantic.value;
    if (semantic === 'true' || semantic === 'false') threadConfig.semanticRecall = { enabled: semantic === 'true' };
    else if (semantic === 'options') {
      const options = {};
      const topK = intField(form, 'topK');
      if (topK !== undefined) options.topK = topK;
      if (f.scope.value) options.scope = f.scope.value;
      const threshold = f.threshold.value.trim();
      if (threshold !== '') {
        const t = Number(threshold);
        if (Number.isNaN(t)) throw new FormError('threshold must be a number.');
        options.threshold = t;
      }
      const size = intField(form, 'rangeSize');
      const before = intField(form, 'rangeBefore');
      const after = intField(form, 'rangeAfter');
      if (size !== undefined && (before !== undefined || after !== undefined)) {
        throw new FormError('messageRange is a size or a window (before/after), not both.');
      }
      if (size !== undefined) options.messageRange = { size };
      else if (before !== undefined || after !== undefined) {
        options.messageRange = { window: {} };
        if (before !== undefined) options.messageRange.window.before = before;
        if (after !== undefined) options.messageRange.window.after = after;
      }
      threadConfig.semanticRecall = { options };
    }
    if (Object.keys(threadConfig).length) v.threadConfig = threadConfig;
    const vector = f.vectorSearchString.value;
    if (vector.trim()) v.vectorSearchString = vector;
    return v;
  }

  async function runRecall() {
    const form = $('#recall-form');
    const formError = $('#form-error');
    formError.hidden = true;
    let variables;
    try {
      variables = recallVariables(form);
    } catch (err) {
      if (!(err instanceof FormError)) throw err;
      formError.textContent = err.message;
      formError.hidden = false;
      return;
    }
    const query = recallQuery(variables);
    $('#recall-request').textContent = `${query}\n\nvariables: ${json(variables)}`;
    const results = $('#recall-results');
    const submit = form.querySelector('button[type=submit]');
    results.setAttribute('aria-busy', 'true');
    submit.disabled = true;
    try {
      const data = await gql(query, variables);
      clearError();
      renderRecall(data.recall);
    } catch (err) {
      $('#recall-summary').hidden = true;
      $('#recall-messages').replaceChildren();
      $('#recall-status').textContent = 'Recall failed.';
      showError(err);
    } finally {
      results.setAttribute('aria-busy', 'false');
      submit.disabled = false;
    }
  }

  function renderRecall(result) {
    state.lastRecall = result;
    const set = (id, value) => {
      const node = $(id);
      node.textContent = String(value);
      node.dataset.value = JSON.stringify(value);
    };
    set('#recall-total', result.total);
    set('#recall-page', result.page);
    set('#recall-per-page', result.perPage);
    set('#recall-has-more', result.hasMore);
    set('#recall-count', result.messages.length);
    $('#recall-summary').hidden = false;
    $('#recall-prev').disabled = result.perPage === false || result.page <= 0;
    $('#recall-next').disabled = !result.hasMore;
    $('#recall-status').textContent =
      `Recall returned ${result.messages.length} message${result.messages.length === 1 ? '' : 's'}: ` +
      `total ${result.total}, page ${result.page}, perPage ${result.perPage}, hasMore ${result.hasMore}.`;
    const list = $('#recall-messages');
    list.replaceChildren(...result.messages.map(renderMessage));
    if (!result.messages.length) list.append(el('li', { class: 'muted empty-result', text: 'No messages.' }));
  }

  function turnPage(delta) {
    const form = $('#recall-form');
    const current = state.lastRecall ? state.lastRecall.page : Number(form.elements.page.value || 0);
    form.elements.page.value = String(Math.max(0, current + delta));
    runRecall();
  }

  function addIncludeRow() {
    const row = $('#include-row').content.firstElementChild.cloneNode(true);
    row.querySelector('.remove').addEventListener('click', () => {
      row.remove();
      $('#include-add').focus();
    });
    $('#include-rows').append(row);
    row.querySelector('input').focus();
  }

  function syncFormControls() {
    const f = $('#recall-form').elements;
    f.perPage.disabled = f.perPageAll.checked;
    f.lastMessages.disabled = f.lastMessagesOff.checked;
    $('#semantic-options').disabled = f.semantic.value !== 'options';
    const types = $('#recall-form').querySelector('[name=hideSignals]:checked').value === 'types';
    for (const box of $$('[name=signalType]')) box.disabled = !types;
    $('#signal-types').classList.toggle('disabled', !types);
  }

  // ------------------------------------------------------------------------------------ tabs
  function selectTab(tab, focus = false) {
    for (const t of $$('[role=tab]')) {
      const selected = t === tab;
      t.setAttribute('aria-selected', String(selected));
      t.tabIndex = selected ? 0 : -1;
      $(`#${t.getAttribute('aria-controls')}`).hidden = !selected;
    }
    if (focus) tab.focus();
  }

  function wireTabs() {
    const tabs = $$('[role=tab]');
    for (const tab of tabs) {
      tab.addEventListener('click', () => selectTab(tab));
      tab.addEventListener('keydown', (event) => {
        const i = tabs.indexOf(tab);
        const next = { ArrowRight: i + 1, ArrowLeft: i - 1, Home: 0, End: tabs.length - 1 }[event.key];
        if (next === undefined) return;
        event.preventDefault();
        selectTab(tabs[(next + tabs.length) % tabs.length], true);
      });
    }
  }

  // ------------------------------------------------------------------------------------ start
  function start() {
    renderRecent();
    wireTabs();
    $('#resource-form').addEventListener('submit', (event) => {
      event.preventDefault();
      const id = $('#resource-id').value.trim();
      if (id) loadResource(id);
    });
    $('#threads-more').addEventListener('click', loadThreads);
    $('#all-threads').addEventListener('click', () => loadAllThreads());
    $('#show-hidden').addEventListener('change', (event) => {
      $('#thread-messages').classList.toggle('hide-hidden', !event.target.checked);
      const status = $('#thread-status');
      status.textContent = status.textContent.replace(/ \(hidden\)\.$|\.$/, event.target.checked ? '.' : ' (hidden).');
    });
    $('#thread-limit').addEventListener('change', loadThread);
    $('#resource-messages-open').addEventListener('click', () => openResourceMessages(0));
    $('#resource-messages-order').addEventListener('change', () => openResourceMessages(0));
    $('#resource-messages-prev').addEventListener('click', () => openResourceMessages(state.resourceMessagesPage - 1));
    $('#resource-messages-next').addEventListener('click', () => openResourceMessages(state.resourceMessagesPage + 1));
    $('#resource-show-hidden').addEventListener('change', (event) => {
      $('#resource-message-list').classList.toggle('hide-hidden', !event.target.checked);
    });
    $('#thread-reload').addEventListener('click', loadThread);

    const form = $('#recall-form');
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      runRecall();
    });
    form.addEventListener('change', syncFormControls);
    form.addEventListener('reset', () => {
      $('#include-rows').replaceChildren();
      $('#form-error').hidden = true;
      setTimeout(syncFormControls);
    });
    $('#include-add').addEventListener('click', addIncludeRow);
    $('#recall-prev').addEventListener('click', () => turnPage(-1));
    $('#recall-next').addEventListener('click', () => turnPage(1));
    syncFormControls();

    window.addEventListener('popstate', followHash);
    window.addEventListener('hashchange', followHash);
    if (window.location.hash) followHash();
  }

  start();
})();

"""The recall engine: Mastra's `Memory.recall()` as the contract describes it, step by step.

The numbered steps follow mastra-behaviour.md §1; the storage half mirrors MemoryLibSQL.listMessages.
Pure application logic: it talks to the repository and (optionally) a semantic searcher.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from operator import attrgetter
from typing import Any, Literal, Protocol

from models.records import DateRange, IncludeWindow, MessageQuery, MessageRecord, PageRead, ThreadRecord
from models.repository import WINDOW_OVERLAP, Repository, WindowRowsExceeded, page_rows
from resolvers import cursors
from resolvers.auth import Principal
from resolvers.budget import RowBudget
from resolvers.config import deep_merge
from resolvers.errors import BadUserInput, Forbidden, NotFound, every_row_refused

PerPage = int | float | Literal[False]

_METADATA_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DISALLOWED_KEYS = frozenset({"__proto__", "constructor", "prototype"})
_MAX_METADATA_KEY_LENGTH = 128
# Each key is a condition of the statement, and SQLite refuses an expression tree over 1,000 deep (a
# threads listing failed at 300 keys, a recall at 499). Mastra sets no bound; none of its users need more.
MAX_METADATA_FILTER_KEYS = 64
RESOURCE_SCOPE_ERROR = (
    "Memory error: Resource-scoped semantic recall is enabled but no resourceId was provided. "
    "Either provide a resourceId or explicitly set semanticRecall.scope to 'thread'."
)
DEFAULT_TOP_K = 4
DEFAULT_MESSAGE_RANGE = 1
_SQL_INT_MAX = 2**63 - 1


# Mastra's listMessagesByResourceId pages by 40 unless told otherwise.
RESOURCE_MESSAGES_PER_PAGE = 40


@dataclass(slots=True, frozen=True)
class IncludeItem:
    id: str
    thread_id: str | None = None
    with_previous_messages: int | None = None
    with_next_messages: int | None = None


@dataclass(slots=True, frozen=True)
class OrderBy:
    field: str = "createdAt"
    direction: str = "ASC"


@dataclass(slots=True)
class RecallArgs:
    """One recall call. None always means "omitted"."""

    thread_id: str
    resource_id: str | None = None
    per_page: PerPage | None = None
    page: int | None = None
    include: Sequence[IncludeItem] | None = None
    date_range: DateRange | None = None
    metadata: Any = None
    order_by: OrderBy | None = None
    hide_signals: bool | Sequence[str] | None = None
    include_system_reminders: bool | None = None
    thread_config: dict[str, Any] | None = None
    vector_search_string: str | None = None
    # Cursors (resolvers.cursors): the page query reads only rows after / before these places.
    after: str | None = None
    before: str | None = None
    # Hidden rows are left out by the page query itself, not from the page it read (beyond Mastra).
    hide_in_page_query: bool | None = None
    # The thread (thread_id's) as this request already read it (Thread.recall): its owner is known, so
    # the ownership check does not read it again.
    thread: ThreadRecord | None = None


@dataclass(slots=True)
class RecallResult:
    messages: list[MessageRecord]
    total: int | None  # None: not counted (RecallEngine.resource_messages)
    page: int
    per_page: int | Literal[False]
    has_more: bool
    usage: dict[str, int] | None = None
    # The places of the page's oldest and newest rows (before signals are hidden); None without rows.
    start_cursor: str | None = None
    end_cursor: str | None = None


@dataclass(slots=True, frozen=True)
class SemanticHit:
    message_id: str
    thread_id: str
    score: float


@dataclass(slots=True)
class SemanticResult:
    hits: list[SemanticHit]
    usage: dict[str, int] | None = field(default=None)


class SemanticSearcher(Protocol):
    async def search(
        self,
        text: str,
        *,
        thread_id: str,
        resource_id: str | None,
        resource_scope: bool,
        top_k: int,
        own_resource_only: bool = False,
    ) -> SemanticResult: ...


class RecallEngine:
    def __init__(
        self,
        repository: Repository,
        *,
        defaults: dict[str, Any],
        semantic: SemanticSearcher | None = None,
        max_include_items: int | None = None,
        max_per_page: int | None = None,
        max_all_rows: int | None = None,
        max_search_chars: int | None = None,
    ) -> None:
        self.repository = repository
        self.defaults = defaults
        self.semantic = semantic
        self.max_include_items = max_include_items
        # Abuse limits (None: unlimited): the page size, the rows of a `perPage: false` read, the
        # length of a vector search text.
        self.max_per_page = max_per_page
        self.max_all_rows = max_all_rows
        self.max_search_chars = max_search_chars

    async def resource_messages(
        self,
        resource_id: str,
        *,
        page: int = 0,
        per_page: PerPage | None = None,
        date_range: DateRange | None = None,
        metadata: Any = None,
        descending: bool = False,
        include: Sequence[IncludeItem] | None = None,
        principal: Principal,
        budget: RowBudget | None = None,
        counted: bool = True,
    ) -> RecallResult:
        """Mastra's listMessagesByResourceId: the messages filed under a resource, across its threads,
        a page at a time (perPage default 40; false: all, from the first), oldest first unless
        `descending`, in that order; recall's date-range and metadata filters; no signal hidden, but
        system rows left out of the page (still counted), as recall leaves them out. As in Mastra, a
        page of 0 is answered without counting (total 0).

        `include`: recall's include windows (neighbours default 0), kept inside the resource (the
        target and its neighbours filed under it, in the target's thread), added to the page whatever
        the filters, never counted, all in the page's order; with perPage 0, the page is theirs alone.

        Not `counted` (the caller does not need the total): a page of a perPage is read without its
        count, total None, and hasMore comes from reading one message more than the page. The count
        is most of a page's cost (it walks every match; the page walks offset + perPage)."""
        if not resource_id or not resource_id.strip():
            raise BadUserInput("resourceId is required")
        principal.require(resource_id)
        if page < 0:
            raise BadUserInput("page must be >= 0")
        limit = _normalize_per_page(RESOURCE_MESSAGES_PER_PAGE if per_page is None else per_page)
        size: int | Literal[False] = False if limit is None else limit
        if size is not False and self.max_per_page is not None and size > self.max_per_page:
            raise BadUserInput(
                f"perPage may be at most {self.max_per_page}, got {size}.",
                limit="maxPerPage",
                max=self.max_per_page,
            )
        filters = validate_metadata_filter(metadata)
        windows = _merged(self._include_windows(include, default_context=0))
        empty = size is not False and size == 0  # (False == 0 in Python)
        if empty and not windows:
            return RecallResult([], 0, page, 0, False)
        offset = 0 if size is False else page * size
        budget = budget if budget is not None else RowBudget(None)
        messages: list[MessageRecord] = []
        total: int | None = 0
        has_more = False
        async with budget.turn():
            if not empty:
                every = self.max_all_rows if limit is None else None
                messages, total = await self.repository.list_resource_messages(
                    resource_id,
                    offset=offset,
                    limit=limit,
                    descending=descending,
                    date_range=date_range,
                    metadata=filters,
                    max_rows=budget.cap(every),  # counted first: over it, nothing is read
                    counted=counted,
                )
                if total is None:  # not counted: the page and the message after it, if any
                    assert limit is not None
                    has_more, messages = len(messages) > limit, messages[:limit]
                else:
                    if limit is None and every is not None and total > every:
                        found = f"this resource has {total} that match"
                        raise every_row_refused("messages", every, total, found)
                    has_more = size is not False and offset + size < total
                # An every-row read the budget capped read nothing: the total is what it would spend.
                budget.spend(len(messages) if limit is not None else total or 0, "this resource's messages")
            if windows:
                try:
                    included = await self.repository.include_windows(
                        windows, resource_id, max_rows=budget.cap(self.max_all_rows)
                    )
                except WindowRowsExceeded:
                    raise self._windows_refused(budget, "these include windows") from None
                seen = {m.id for m in messages}
                added = {m.id: m for m in included if m.id not in seen}
                budget.spend(len(added), "this resource's include windows")
                messages = sorted([*messages, *added.values()], key=lambda m: (m.created_at, m.seq))
                if descending:
                    messages.reverse()
        messages = listed(messages)
        return RecallResult(messages, total, page, size, has_more)

    def _windows_refused(self, budget: RowBudget, what: str) -> BadUserInput:
        """The refusal of include (and semantic) windows that read past their bound: the request's rows
        when those bind first, else RECALLQL_MAX_ALL_ROWS."""
        if budget.binds(self.max_all_rows):
            return budget.refusal(None, what)
        assert self.max_all_rows is not None
        return BadUserInput(
            f"include and semantic recall windows may return at most {self.max_all_rows} "
            f"messages, and read at most {self.max_all_rows * WINDOW_OVERLAP} rows (a "
            "message in several windows is read once for each); this read goes past "
            "that. Ask for fewer neighbours (withPreviousMessages, withNextMessages, "
            "messageRange) or fewer items.",
            limit="maxAllRows",
            max=self.max_all_rows,
        )

    def merged_config(self, thread_config: dict[str, Any] | None) -> dict[str, Any]:
        """The configuration a recall reads (and never changes): without threadConfig, the defaults
        themselves. Copying them cost every recall about 20 µs (a listing's 20 nested ones, 0.4 ms)."""
        if not thread_config:
            return self.defaults
        return deep_merge(self.defaults, thread_config)

    async def recall(
        self,
        args: RecallArgs,
        *,
        principal: Principal,
        budget: RowBudget | None = None,
        pages: PageBatch | None = None,
    ) -> RecallResult:
        """`budget`: the rows the request may still read (resolvers.budget); None: this call's limits
        only. `pages`: the request's batch of page reads (PageBatch, drawing on the same budget), for
        a recall of a thread the request already read (RecallArgs.thread): its page, when it has no
        windows, is read with the other recalls' of the same event loop turn."""
        # 0: who asks. A restricted credential always reads as one of its resources (see _scoped).
        if principal.restricted:
            args = await self._scoped(args, principal)
        # 1-2: configuration and message history.
        config = self.merged_config(args.thread_config)
        max_messages = _max_messages(config.get("lastMessages"))
        history_enabled = max_messages is not None and max_messages != 0
        history_disabled = not history_enabled and args.per_page is None
        sr = config.get("semanticRecall")
        search_requested = js_truthy(sr) and bool(args.vector_search_string)
        search_runs = search_requested and self.semantic is not None
        if search_runs:
            # The limit bounds what embedding the text costs: a text that nothing embeds (semantic
            # recall off, no embedder) has no effect, as in Mastra, and is not refused either.
            self._check_search_text(args.vector_search_string)

        # 4: nothing to read, and nothing else is validated on this path.
        if history_disabled and not search_runs:
            return RecallResult([], 0, args.page if args.page is not None else 0, 0, False)

        # 5: ownership. 7: resource scope needs a resource. Both are checked before the storage
        # arguments are; without a vector search, one database read serves the check and the page.
        resource_scope = sr is True or (isinstance(sr, dict) and sr.get("scope") != "thread")
        scope_error = (
            BadUserInput(RESOURCE_SCOPE_ERROR)
            if resource_scope and search_requested and not args.resource_id
            else None
        )
        # 6: the page size and which window is read.
        per_page: PerPage = args.per_page if args.per_page is not None else (max_messages or 0)
        if history_disabled:
            per_page = 0

        windows: list[IncludeWindow] = []
        usage: dict[str, int] | None = None
        if search_runs:
            if args.resource_id:
                thread = args.thread or await self.repository.get_thread(args.thread_id)
                self._check_owner(args, thread, resource_scope, principal)
            if scope_error is not None:
                raise scope_error
            # 8: semantic hits become include windows.
            assert self.semantic is not None and args.vector_search_string
            top_k, before, after = _semantic_options(sr)
            if self.max_all_rows is not None and top_k > self.max_all_rows:
                # Each hit is a window of at least its own message: more hits than that could never
                # be returned.
                raise BadUserInput(
                    f"semanticRecall.topK may be at most {self.max_all_rows}, got {top_k}.",
                    limit="maxAllRows",
                    max=self.max_all_rows,
                )
            found = await self.semantic.search(
                args.vector_search_string,
                thread_id=args.thread_id,
                resource_id=args.resource_id,
                resource_scope=resource_scope,
                top_k=top_k,
                own_resource_only=principal.restricted,
            )
            usage = found.usage
            threshold = sr.get("threshold") if isinstance(sr, dict) else None
            # A thread-scoped hit counts only while its message is still in the thread: its vector names
            # the thread the message was in when embedded, and a move's vector work may not be done yet.
            in_thread = None if resource_scope else args.thread_id
            windows.extend(
                IncludeWindow(hit.message_id, before, after, in_thread)
                for hit in found.hits
                if threshold is None or hit.score >= threshold
            )

        # 9: the storage query (MemoryLibSQL.listMessages).
        spec: _PageSpec | None = None
        spec_error: BadUserInput | None = None
        try:
            windows[:0] = self._include_windows(args.include, default_context=2 if search_runs else 0)
            spec = self._check_page_size(_page_spec(args, per_page), explicit=args.per_page is not None)
        except BadUserInput as exc:
            spec_error = exc
        check_owner = bool(args.resource_id) and not search_runs
        read: PageRead | None = None
        over_budget: BadUserInput | None = None
        if (
            spec is not None
            and spec.limit
            and pages is not None
            and args.thread is not None
            and not windows
            and spec.batched
        ):
            total, page, over_budget = await pages.read(
                spec.query, descending=spec.descending, limit=spec.limit, offset=spec.offset
            )
            read = PageRead(None, page, total, [])
        elif spec is not None:
            budget = budget if budget is not None else RowBudget(None)
            async with budget.turn():
                all_rows = self.max_all_rows if spec.limit is None else None
                try:
                    read = await self.repository.read_page(
                        spec.query,
                        descending=spec.descending,
                        limit=spec.limit,
                        offset=spec.offset,
                        windows=_merged(windows),
                        window_resource_id=args.resource_id or None,
                        with_thread=check_owner and args.thread is None,
                        # Counted first, and not read at all over the limit (perPage false) or over
                        # what is left of the request's rows.
                        max_rows=budget.cap(all_rows),
                        # Windows are bounded like perPage false: reading stops past the limit.
                        max_window_rows=budget.cap(self.max_all_rows),
                    )
                except WindowRowsExceeded:
                    refused = self._windows_refused(budget, "this recall's include and semantic windows")
                    if not budget.binds(self.max_all_rows):
                        raise refused from None
                    over_budget = refused
                # Over perPage false's own limit nothing was read (refused below, on the total).
                if read is not None and (all_rows is None or read.total <= all_rows):
                    rows = page_rows(read.total, spec.limit, spec.offset) + len(read.included)
                    if not budget.take(rows):
                        over_budget = budget.refusal(rows, "this recall")
        if check_owner:
            if args.thread is not None:
                thread = args.thread
            elif read is not None:
                thread = read.thread
            else:
                thread = await self.repository.get_thread(args.thread_id)
            self._check_owner(args, thread, resource_scope, principal)
        if scope_error is not None:
            raise scope_error
        if spec_error is not None:
            raise spec_error
        if over_budget is not None:
            raise over_budget
        assert spec is not None and read is not None
        if spec.limit is None and self.max_all_rows is not None and read.total > self.max_all_rows:
            matched = f"this read matches {read.total}"
            raise every_row_refused("messages", self.max_all_rows, read.total, matched)
        result = _page_result(args, spec, read)
        result.usage = usage
        # 10: signal filtering, after pagination: totals describe the unfiltered page.
        result.messages = filter_signals(result.messages, args.hide_signals, args.include_system_reminders)
        return result

    async def _scoped(self, args: RecallArgs, principal: Principal) -> RecallArgs:
        """The call as a restricted principal makes it: resourceId is always set to a granted resource
        (the one given, which must be granted; else the credential's only one; else the thread's owner
        when granted), so the ownership check runs and every row read (page, include windows, semantic
        hits) is limited to that resource."""
        resource_id = principal.effective_resource(args.resource_id or None)
        if resource_id is None:
            found = await self.repository.get_thread(args.thread_id)
            thread = principal.require_thread(found, args.thread_id)
            resource_id = thread.resource_id
        return replace(args, resource_id=resource_id)

    @staticmethod
    def _check_owner(
        args: RecallArgs, thread: ThreadRecord | None, resource_scope: bool, principal: Principal
    ) -> None:
        if thread is None and not resource_scope:
            raise NotFound(f"No thread found with id {args.thread_id}")
        if thread is not None and not principal.can_access(thread.resource_id):
            raise principal.thread_forbidden(args.thread_id)  # names no resource the caller may not see
        if thread is not None and thread.resource_id != args.resource_id:
            raise Forbidden(
                f"Thread with id {args.thread_id} is for resource with id {thread.resource_id} "
                f"but resource {args.resource_id} was queried."
            )

    def _check_search_text(self, text: str | None) -> None:
        if text and self.max_search_chars is not None and len(text) > self.max_search_chars:
            raise BadUserInput(
                f"vectorSearchString may be at most {self.max_search_chars} characters, got {len(text)}.",
                limit="maxSearchChars",
                max=self.max_search_chars,
            )

    def _check_page_size(self, spec: _PageSpec, *, explicit: bool) -> _PageSpec:
        """The page size limit, on perPage or (when perPage is omitted) the lastMessages it defaults to."""
        if spec.limit is not None and self.max_per_page is not None and spec.limit > self.max_per_page:
            name = "perPage" if explicit else "lastMessages"
            raise BadUserInput(
                f"{name} may be at most {self.max_per_page}, got {spec.limit}.",
                limit="maxPerPage",
                max=self.max_per_page,
            )
        return spec

    def _include_windows(
        self, items: Sequence[IncludeItem] | None, *, default_context: int
    ) -> list[IncludeWindow]:
        if not items:
            return []
        if self.max_include_items is not None and len(items) > self.max_include_items:
            raise BadUserInput(
                f"include accepts at most {self.max_include_items} items, got {len(items)}.",
                limit="maxIncludeItems",
            )
        windows = []
        for n, item in enumerate(items):
            if not item.id:  # no message has it: an unknown id, which Mastra skips silently
                continue
            before = default_context if item.with_previous_messages is None else item.with_previous_messages
            after = default_context if item.with_next_messages is None else item.with_next_messages
            if before < 0 or after < 0:
                raise BadUserInput(f"include[{n}]: withPreviousMessages and withNextMessages must be >= 0.")
            windows.append(IncludeWindow(item.id, before, after))
        return windows


_PageKey = tuple[MessageQuery, bool, int, int]  # the query without its thread, order, size, offset


class PageBatch:
    """The page reads of one request's nested recalls (Thread.recall), read together: a listing of 20
    threads with each one's newest message is two statements (every count, every page) rather than
    two for each thread, which on PostgreSQL is 40 round trips. Reads asked for in one turn of the
    event loop are batched by their page (filter, order, size, offset); in each batch the reads take
    their rows from the request's budget in the order they were asked for, as reads taking turns one
    after another would, and a page that would go past what is left is not read."""

    def __init__(self, repository: Repository, budget: RowBudget) -> None:
        self._repository = repository
        self._budget = budget
        self._pending: list[tuple[_PageKey, MessageQuery, asyncio.Future[_BatchedPage]]] = []
        self._tasks: set[asyncio.Future[None]] = set()
        self.batches = 0  # how many reads ran (tests read it)

    def read(
        self, query: MessageQuery, *, descending: bool, limit: int, offset: int
    ) -> asyncio.Future[_BatchedPage]:
        """(total, page rows, None), or (total, [], the refusal) over the request's budget."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_BatchedPage] = loop.create_future()
        if not self._pending:
            loop.call_soon(self._dispatch)
        self._pending.append(((replace(query, thread_id=""), descending, limit, offset), query, future))
        return future

    def _dispatch(self) -> None:
        pending, self._pending = self._pending, []
        batches: list[tuple[_PageKey, list[tuple[MessageQuery, asyncio.Future[_BatchedPage]]]]] = []
        for key, query, future in pending:
            batch = next((members for k, members in batches if k == key), None)
            if batch is None:
                batches.append((key, batch := []))
            batch.append((query, future))
        for key, members in batches:
            task = asyncio.ensure_future(self._run(key, members))
            # The loop keeps only weak references to tasks: hold this one until it is done.
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(
        self, key: _PageKey, members: list[tuple[MessageQuery, asyncio.Future[_BatchedPage]]]
    ) -> None:
        _, descending, limit, offset = key
        self.batches += 1
        try:
            async with self._budget.turn():
                reads = await self._repository.read_pages(
                    [query for query, _ in members],
                    descending=descending,
                    limit=limit,
                    offset=offset,
                    max_rows=self._budget.cap(None),
                )
                results: list[_BatchedPage] = []
                for total, rows in reads:
                    wanted = page_rows(total, limit, offset)
                    if rows is not None and self._budget.take(wanted):
                        results.append((total, rows, None))
                    else:
                        results.append((total, [], self._budget.refusal(wanted, "this recall")))
        except Exception as exc:  # every waiter sees the failure, none hangs
            for _, future in members:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, future), result in zip(members, results, strict=True):
            if not future.done():
                future.set_result(result)


_BatchedPage = tuple[int, list[MessageRecord], BadUserInput | None]


@dataclass(slots=True, frozen=True)
class _PageSpec:
    query: MessageQuery
    page: int
    limit: int | None  # None: every row (perPage false)
    offset: int
    descending: bool
    echo_per_page: int | Literal[False]
    metadata_filtered: bool

    @property
    def batched(self) -> bool:
        """Whether PageBatch reads this page: it reads no pages between places."""
        return self.query.after is None and self.query.before is None


def _page_spec(args: RecallArgs, per_page: PerPage) -> _PageSpec:
    """listMessages' argument checks, in its order, and the page they describe."""
    if not args.thread_id.strip():
        raise BadUserInput("threadId must be a non-empty string or array of non-empty strings")
    page = args.page if args.page is not None else 0
    if page < 0:
        raise BadUserInput("page must be >= 0")
    limit = _normalize_per_page(per_page)
    metadata = validate_metadata_filter(args.metadata)
    after = cursors.decode(args.after, "after") if args.after is not None else None
    before = cursors.decode(args.before, "before") if args.before is not None else None
    # Without orderBy the newest window is read (and returned chronologically, like every page).
    descending = args.order_by.direction == "DESC" if args.order_by is not None else per_page is not False
    query = MessageQuery(
        thread_id=args.thread_id,
        resource_id=args.resource_id or None,
        date_range=args.date_range,
        metadata=metadata or {},
        after=after,
        before=before,
        hidden=hidden_rows(args.hide_signals, args.include_system_reminders)
        if args.hide_in_page_query
        else None,
    )
    return _PageSpec(
        query=query,
        page=page,
        limit=limit,
        offset=0 if per_page is False else page * (limit or 0),
        descending=descending,
        echo_per_page=False if per_page is False else (limit or 0),
        metadata_filtered=bool(metadata),
    )


def _page_result(args: RecallArgs, spec: _PageSpec, read: PageRead) -> RecallResult:
    """Merges the include rows into the page and computes hasMore (Mastra's two formulas)."""
    messages = _merge(read.rows, read.included)
    if spec.limit == 0:  # perPage 0: include rows only, total 0
        return RecallResult(messages, 0, spec.page, spec.echo_per_page, False)
    if spec.limit is None:
        has_more = False
    elif spec.metadata_filtered:
        has_more = spec.offset + len(read.rows) < read.total
    else:
        same_thread = sum(1 for m in messages if m.thread_id == args.thread_id)
        has_more = same_thread < read.total and spec.offset + spec.limit < read.total
    result = RecallResult(messages, read.total, spec.page, spec.echo_per_page, has_more)
    if read.rows:
        first = min(read.rows, key=attrgetter("order_key"))
        last = max(read.rows, key=attrgetter("order_key"))
        result.start_cursor = cursors.encode(first.created_at, first.seq)
        result.end_cursor = cursors.encode(last.created_at, last.seq)
    return result


def js_truthy(value: Any) -> bool:
    """JavaScript truthiness, which Mastra's `if (...)` uses: {} and [] are true; 0, "", false and null
    are not (NaN cannot be stored)."""
    return isinstance(value, dict | list) or bool(value)


def _merge(page: list[MessageRecord], included: list[MessageRecord]) -> list[MessageRecord]:
    """Page rows, then include rows not already present; system rows dropped; one total order."""
    first: dict[str, MessageRecord] = {}
    for rec in (*page, *included):
        first.setdefault(rec.id, rec)
    out = listed(first.values())
    out.sort(key=lambda m: (m.created_at, m.seq))
    return out


def listed(messages: Iterable[MessageRecord]) -> list[MessageRecord]:
    """What Mastra lists of these messages (through its MessageList): system-role rows are set aside,
    counted where a total is, never returned (recall, a resource's messages, a clone's copies)."""
    return [m for m in messages if m.role != "system"]


def filter_signals(
    messages: list[MessageRecord],
    hide_signals: bool | Sequence[str] | None,
    include_system_reminders: bool | None,
) -> list[MessageRecord]:
    """The precedence table of §2.8, on the classification stored at write time."""
    if hide_signals is None:
        if include_system_reminders:
            return messages
        return [m for m in messages if not m.legacy_reminder]
    if hide_signals is False:
        return messages
    if hide_signals is True:
        return [m for m in messages if m.signal_type is None]
    hidden = set(hide_signals)
    if not hidden:
        return messages
    return [m for m in messages if m.signal_type is None or m.signal_type not in hidden]


def hidden_rows(
    hide_signals: bool | Sequence[str] | None, include_system_reminders: bool | None
) -> str | tuple[str, ...]:
    """What filter_signals (and _merge, which drops system rows) hides, as the page query's `hidden`."""
    if hide_signals is None:
        return "system" if include_system_reminders else "reminders"
    if hide_signals is True:
        return "signals"
    types = tuple(sorted(set(hide_signals))) if hide_signals is not False else ()
    return types or "system"


def validate_metadata_filter(metadata: Any) -> dict[str, Any] | None:
    """Mastra's validateStorageMetadataFilter, with its exact messages."""
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        raise BadUserInput("Metadata filter must be an object.")
    if len(metadata) > MAX_METADATA_FILTER_KEYS:
        raise BadUserInput(
            f"Metadata filter may have at most {MAX_METADATA_FILTER_KEYS} keys, got {len(metadata)}.",
            limit="maxMetadataFilterKeys",
            max=MAX_METADATA_FILTER_KEYS,
        )
    for key, value in metadata.items():
        if len(key) > _MAX_METADATA_KEY_LENGTH or not _METADATA_KEY.fullmatch(key) or key in _DISALLOWED_KEYS:
            raise BadUserInput(f'Invalid metadata filter key "{key}".')
        if isinstance(value, str) and "\x00" in value:
            raise BadUserInput(
                f'Invalid metadata filter value for key "{key}": U+0000 cannot be stored or matched.'
            )
        if not _is_scalar(value):
            raise BadUserInput(
                f'Invalid metadata filter value for key "{key}". '
                "Values must be string, finite number, boolean, or null."
            )
    # Integers are matched exactly, as saves store them (Mastra's JavaScript numbers round both sides
    # past 2^53 alike; RecallQL rounds neither). Beyond 64 bits, which SQL cannot bind, a double.
    return {k: float(v) if _huge_int(v) else v for k, v in metadata.items()} or None


def validate_thread_metadata_filter(metadata: Any) -> dict[str, Any] | None:
    """Mastra's listThreads checks of its metadata filter, in their order and with their texts (they
    are not the message filter's): every key, then every value. Then the message filter's own checks,
    which pass whatever these pass but for RecallQL's bounds (keys, U+0000, huge integers).

    Not an object: RecallQL's message-filter text. Mastra reads a string's or an array's indexes as
    keys ('Invalid metadata key: "0"...') and lists every thread for a number or a boolean."""
    if metadata is None or not isinstance(metadata, dict):
        return validate_metadata_filter(metadata)
    for key in metadata:
        if key in _DISALLOWED_KEYS:
            raise BadUserInput(f'Invalid metadata key: "{key}".')
        if not _METADATA_KEY.fullmatch(key):
            raise BadUserInput(
                f'Invalid metadata key: "{key}". Keys must start with a letter or underscore and contain '
                "only alphanumeric characters and underscores."
            )
        if len(key) > _MAX_METADATA_KEY_LENGTH:
            raise BadUserInput(
                f'Metadata key "{key}" exceeds maximum length of {_MAX_METADATA_KEY_LENGTH} characters.'
            )
    for key, value in metadata.items():
        if not _is_scalar(value):  # JSON's only other values are arrays and objects: typeof "object"
            raise BadUserInput(
                f'Metadata filter value for key "{key}" must be a scalar type (string, number, boolean, '
                "or null), got object"
            )
    return validate_metadata_filter(metadata)


def _huge_int(value: Any) -> bool:
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and not -_SQL_INT_MAX - 1 <= value <= _SQL_INT_MAX
    )


def _is_scalar(value: Any) -> bool:
    if value is None or isinstance(value, str | bool):
        return True
    return isinstance(value, int | float) and math.isfinite(value)


def _max_messages(last_messages: Any) -> int | None:
    if last_messages is False:
        return 0
    if last_messages is None:
        return None
    if not _whole(last_messages):
        raise BadUserInput("lastMessages must be a finite non-negative integer")
    return int(last_messages)


def _whole(value: Any) -> bool:
    """A finite whole number >= 0, as JSON gives it (2.0 included, booleans not)."""
    return (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and value >= 0
        and value == int(value)
    )


def _normalize_per_page(per_page: PerPage) -> int | None:
    """recall's and listMessagesByResourceId's perPage: None = every row (perPage false). A fraction is
    refused as Mastra's normalizePerPage refuses it (the PerPage scalar takes one: Mastra's recall
    answers some of them). The threads listing has checks of its own (threads.thread_page_size)."""
    if per_page is False:
        return None
    if isinstance(per_page, bool) or not math.isfinite(per_page) or per_page < 0 or per_page != int(per_page):
        raise BadUserInput("perPage must be >= 0")
    return int(per_page)


def check_semantic_config(sr: Any) -> None:
    """What a recall with a vector search checks of a semanticRecall config (topK, messageRange):
    BadUserInput when no search could run with it (the server's defaults are checked at start)."""
    if js_truthy(sr):
        _semantic_options(sr)


def _semantic_options(sr: Any) -> tuple[int, int, int]:
    options = sr if isinstance(sr, dict) else {}
    top_k = options.get("topK", DEFAULT_TOP_K)
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise BadUserInput("semanticRecall.topK must be a positive integer.")
    message_range = options.get("messageRange", DEFAULT_MESSAGE_RANGE)
    if isinstance(message_range, dict):
        before, after = message_range.get("before") or 0, message_range.get("after") or 0
    else:
        before = after = message_range
    return top_k, _neighbours(before), _neighbours(after)


def _neighbours(value: Any) -> int:
    """A messageRange side: a whole number >= 0 (2.0 from JSON too). Beyond what SQL counts it means
    "all of them", which the largest SQL integer says as well."""
    if not _whole(value):
        raise BadUserInput("semanticRecall.messageRange must be >= 0.")
    return min(int(value), _SQL_INT_MAX - 1)  # the SQL LIMIT of a window is its count plus one


def _merged(windows: list[IncludeWindow]) -> list[IncludeWindow]:
    """One window per target (and thread binding), with the most neighbours asked on each side: the
    rows are the same (windows are merged after reading anyway), read once."""
    if len(windows) < 2:
        return windows
    by_target: dict[tuple[str, str | None], IncludeWindow] = {}
    for w in windows:
        key = (w.message_id, w.thread_id)
        seen = by_target.get(key)
        by_target[key] = (
            w
            if seen is None
            else replace(seen, before=max(seen.before, w.before), after=max(seen.after, w.after))
        )
    return list(by_target.values()) if len(by_target) < len(windows) else windows

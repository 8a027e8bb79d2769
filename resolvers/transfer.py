"""Moving memory in and out: importing a Mastra store, and RecallQL's own JSON Lines export/import.

Both imports write through the same sink (repository.import_*): batched, one transaction per batch,
idempotent (ids are upserted; a message keeps its createdAt and insertion sequence; rows already stored
exactly so are not written again), and message signal columns are classified on write as saveMessages
does. New messages get their insertion sequence in the order they are read, so createdAt ties keep the
source's order: Mastra's rowid order on LibSQL, (createdAt, id) on PostgreSQL, file order for JSON Lines.

Message content: format-2 content ({"format": 2, ...}) is stored exactly as Mastra stored it. Anything
else (a legacy v1 string or part array, text that is not JSON, an object without format 2) is converted
to format 2 the way Mastra converts it when it reads such a row (mastra-behaviour.md §5, Mastra's
`AIV4Adapter.fromCoreMessage`), so RecallQL returns what Mastra's own recall returned; such messages are
stored with type "v2" (Mastra drops the type of a converted row) and counted in the report.
"""

from __future__ import annotations

import inspect
import json
import re
from collections import Counter
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeGuard

import orjson

from models.mastra_source import MESSAGES, RESOURCES, THREADS, MastraSource
from models.records import MessageRecord, ResourceRecord, ThreadRecord
from models.repository import Repository
from models.signals import is_legacy_reminder, signal_type
from resolvers.clock import now_ms, parse_iso, to_iso
from resolvers.errors import MAX_JSON_DEPTH, BadUserInput, id_size_fault, json_depth, value_fault

KINDS = ("resource", "thread", "message")
_MAX_WARNINGS = 20


class TransferError(Exception):
    """Input that cannot be imported (a malformed JSON Lines record, with its line number)."""


class ExportWriteError(Exception):
    """The export's output could not be written (a full disk, a closed pipe); `error` is the OSError.

    Not an OSError, and not chained to one: the repository reports an OSError raised under it as an
    unreachable database."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


class ProgressHook(Protocol):
    def start(self, kind: str, total: int | None) -> None: ...
    def advance(self, kind: str, n: int) -> None: ...


class _NoProgress:
    def start(self, kind: str, total: int | None) -> None:
        pass

    def advance(self, kind: str, n: int) -> None:
        pass


@dataclass
class KindStats:
    read: int = 0
    inserted: int = 0
    updated: int = 0
    skipped: int = 0

    @property
    def unchanged(self) -> int:
        return self.read - self.skipped - self.inserted - self.updated


@dataclass
class ImportReport:
    stats: dict[str, KindStats] = field(default_factory=lambda: {k: KindStats() for k in KINDS})
    converted: int = 0  # legacy (non-format-2) message contents converted to format 2
    orphans: int = 0  # messages whose thread neither the source nor the database has
    warnings: list[str] = field(default_factory=list)
    warning_count: int = 0

    def warn(self, text: str) -> None:
        self.warning_count += 1
        if len(self.warnings) < _MAX_WARNINGS:
            self.warnings.append(text)

    def lines(self) -> list[str]:
        out = []
        for kind in KINDS:
            s = self.stats[kind]
            line = (
                f"{kind + 's:':<11}{s.read:>9} read {s.inserted:>9} new {s.updated:>9} updated "
                f"{s.unchanged:>9} unchanged"
            )
            if s.skipped:
                line += f" {s.skipped:>6} skipped"
            out.append(line)
        if self.converted:
            out.append(f"{self.converted} legacy message content(s) converted to format 2")
        if self.orphans:
            out.append(
                f"{self.orphans} message(s) belong to threads that neither the source nor this database has "
                "(imported as they are; recall reaches them once such a thread exists)"
            )
        if self.warning_count:
            out.append(f"{self.warning_count} warning(s):")
            out.extend(f"  {w}" for w in self.warnings)
            if self.warning_count > len(self.warnings):
                out.append(f"  … and {self.warning_count - len(self.warnings)} more")
        return out


# ---------------------------------------------------------------------------------------------- content
def to_format2(role: str, content: Any) -> tuple[str, Any, bool]:
    """(role, format-2 content, converted?) for a stored message content.

    Format-2 content is returned as is. Anything else is converted as Mastra's MessageList converts a
    stored legacy row: a string becomes one text part (and `content`), a v1 part array becomes v2 parts
    (tool-call and tool-result become tool-invocation parts, images and files file parts, reasoning
    reasoning parts; unknown part types are dropped), and the role `tool` becomes `assistant`.
    Differences from Mastra, where Mastra would crash or lose data: non-object parts are skipped, a
    non-string image is kept as is, and a role other than user/assistant/tool/system is kept.
    """
    if isinstance(content, dict) and content.get("format") == 2:
        return role, content, False
    parts: list[dict[str, Any]] = []
    invocations: list[dict[str, Any]] = []
    if isinstance(content, str):
        parts.append({"type": "text", "text": content})
    elif isinstance(content, list):
        for part in content:
            if not isinstance(part, dict):
                continue
            converted = _v1_part(role, part, content, parts, invocations)
            if converted is not None:
                parts.append(converted)
    out: dict[str, Any] = {"format": 2, "parts": _without_empty_text(parts)}
    if invocations:
        out["toolInvocations"] = invocations
    if isinstance(content, str):
        out["content"] = content
    return ("assistant" if role == "tool" else role), out, True


def _copy(target: dict[str, Any], key: str, source: dict[str, Any], source_key: str | None = None) -> None:
    """JSON.stringify drops undefined: copy a key only when the source has it."""
    name = source_key or key
    if name in source:
        target[key] = source[name]


def _with_provider(part: dict[str, Any], source: dict[str, Any]) -> dict[str, Any]:
    if source.get("providerOptions"):
        part["providerMetadata"] = source["providerOptions"]
    return part


def _v1_part(
    role: str,
    part: dict[str, Any],
    message: list[Any],
    parts: list[dict[str, Any]],
    invocations: list[dict[str, Any]],
) -> dict[str, Any] | None:
    kind = part.get("type")
    if kind == "text":
        if role == "assistant" and parts and parts[-1].get("type") == "tool-invocation":
            parts.append({"type": "step-start"})
        out: dict[str, Any] = {"type": "text"}
        _copy(out, "text", part)
        return _with_provider(out, part)
    if kind == "tool-call":
        call: dict[str, Any] = {"state": "call"}
        for key in ("toolCallId", "toolName", "args"):
            _copy(call, key, part)
        return _with_provider({"type": "tool-invocation", "toolInvocation": call}, part)
    if kind == "tool-result":
        args: Any = {}
        for other in message:
            if (
                isinstance(other, dict)
                and other.get("type") == "tool-call"
                and other.get("toolCallId") == part.get("toolCallId")
            ):
                args = other.get("args")
                break
        result: dict[str, Any] = {"state": "result"}
        _copy(result, "toolCallId", part)
        _copy(result, "toolName", part)
        result["result"] = part["result"] if part.get("result") is not None else ""
        result["args"] = args
        invocations.append(result)
        return _with_provider({"type": "tool-invocation", "toolInvocation": result}, part)
    if kind == "reasoning":
        detail: dict[str, Any] = {"type": "text"}
        _copy(detail, "text", part)
        _copy(detail, "signature", part)
        out = {"type": "reasoning"}
        _copy(out, "reasoning", part, "text")
        out["details"] = [detail]
        return _with_provider(out, part)
    if kind == "redacted-reasoning":
        detail = {"type": "redacted"}
        _copy(detail, "data", part)
        return _with_provider({"type": "reasoning", "reasoning": "", "details": [detail]}, part)
    if kind == "image":
        out = {"type": "file"}
        _copy(out, "data", part, "image")
        _copy(out, "mimeType", part)
        return _with_provider(out, part)
    if kind == "file":
        data = part.get("data")
        if isinstance(data, str):
            mime = _data_uri_mime(data) or part.get("mimeType") or "image/png"
            if data.startswith(("data:", "file-")) or _is_url(data):
                out = {"type": "file", "data": data, "mimeType": mime}
            else:  # raw base64
                out = {"type": "file", "mimeType": mime, "data": data}
        else:
            out = {"type": "file"}
            _copy(out, "mimeType", part)
            _copy(out, "data", part)
        _with_provider(out, part)
        if part.get("filename"):
            out["filename"] = part["filename"]
        return out
    return None


def _without_empty_text(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if not any(not (p.get("type") == "text" and p.get("text") == "") for p in parts):
        return parts
    return [p for p in parts if not (p.get("type") == "text" and p.get("text") == "")]


def _data_uri_mime(data: str) -> str | None:
    match = re.match(r"^data:([^;,]+)?(?:;[^,]*)?,", data)
    return match.group(1) if match and match.group(1) else None


def _is_url(data: str) -> bool:
    return re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://\S+$", data) is not None


# ---------------------------------------------------------------------------------------------- the sink
class ImportSink:
    """Writes batches of records through the repository and keeps the report."""

    def __init__(self, repository: Repository, report: ImportReport, *, track_vectors: bool) -> None:
        self.repository = repository
        self.report = report
        self.track_vectors = track_vectors
        # Whether a server keeps changes (the change journal is open), asked at the first messages: an
        # overwrite is then recorded as a re-save is, whatever this process's own setting.
        self.record_changes: bool | None = None

    async def resources(self, records: list[ResourceRecord]) -> None:
        inserted, updated = await self.repository.import_resources(records)
        self._count("resource", inserted, updated)

    async def threads(self, records: list[ThreadRecord]) -> None:
        inserted, updated = await self.repository.import_threads(records)
        self._count("thread", inserted, updated)

    async def messages(self, records: list[MessageRecord]) -> None:
        if self.record_changes is None:
            self.record_changes = await self.repository.change_journal_since() is not None
        inserted, updated = await self.repository.import_messages(
            records, now=now_ms(), track_vectors=self.track_vectors, record_changes=self.record_changes
        )
        self._count("message", inserted, updated)

    def _count(self, kind: str, inserted: int, updated: int) -> None:
        self.report.stats[kind].inserted += inserted
        self.report.stats[kind].updated += updated


def _deep_fault(value: Any, what: str) -> str | None:
    """Why a JSON value cannot be imported: nested deeper than the API takes (recall answered HTTP 500
    for a message orjson could not write back), or None."""
    if json_depth(value) > MAX_JSON_DEPTH:
        return f"{what} nests deeper than {MAX_JSON_DEPTH} levels"
    return None


def message_record(
    *,
    id: str,
    thread_id: str,
    resource_id: str | None,
    role: str,
    type: str | None,
    created_at: int,
    content: Any,
    report: ImportReport,
    where: str,
) -> MessageRecord:
    """The message to store; raises TransferError (starting with `where`) for content nested too deep
    once converted (a legacy tool call's arguments nest two levels deeper in format 2)."""
    if resource_id is not None and resource_id and not resource_id.strip():
        raise TransferError(f"{where}: resourceId must be a non-empty string or null")
    unknown_form = isinstance(content, dict) and content.get("format") != 2
    role, content, converted = to_format2(role, content)
    if (fault := _deep_fault(content, "content")) is not None:
        raise TransferError(f"{where}: {fault}")
    if converted:
        report.converted += 1
        type = "v2"
    if unknown_form and not content["parts"]:
        # Mastra reads such a row with nothing in it too; said, since whatever text it held is gone.
        report.warn(f"{where}: content is an object of no known format; stored empty, as Mastra reads it")
    return MessageRecord(
        id=id,
        thread_id=thread_id,
        # "" is no resource, as in recall: its vectors went to a collection of "" that a thread's
        # search (which reads the thread's resources, "" as none) never looked in.
        resource_id=resource_id or None,
        role=role,
        type=type or "v2",
        created_at=created_at,
        content=content,
        signal_type=signal_type(role, content),
        legacy_reminder=is_legacy_reminder(role, content),
    )


def _stood_in(report: ImportReport, kind: str, id: str, unreadable: tuple[str, ...]) -> None:
    """Says which of a kept row's times could not be read, and what stands in for it (it was silent)."""
    for name in unreadable:
        other = "updatedAt" if name == "createdAt" else "createdAt"
        report.warn(f"{kind} {id!r}: {name} cannot be read; its {other} stands in")


def _nonempty(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and value.strip() != ""


def _object_or_none(value: Any, what: str, report: ImportReport) -> dict[str, Any] | None:
    if value is None or isinstance(value, dict):
        return value
    report.warn(f"{what}: metadata is not a JSON object ({type(value).__name__}); stored as null")
    return None


async def _orphans(repository: Repository, homeless: Counter[str]) -> int:
    """How many of these messages belong to threads the database does not have either (the source
    may hold only messages, for threads imported before)."""
    ids = list(homeless)
    stored: set[str] = set()
    for start in range(0, len(ids), 500):
        stored.update(await repository.get_threads(ids[start : start + 500]))
    return sum(n for thread_id, n in homeless.items() if thread_id not in stored)


def _unstorable(
    report: ImportReport, kind: str, id: str, values: tuple[Any, ...], ids: int, metadata: Any = None
) -> bool:
    """Skips (with a warning) a row holding a string or number no database can store, as the API
    refuses it (resolvers.errors.scalar_fault): U+0000, which LibSQL keeps and PostgreSQL refuses, a
    lone surrogate, NaN; an id (the first `ids` values) longer than any the API stores; or metadata
    nested deeper than the API takes."""
    fault = value_fault(values) or _oversized(values[:ids])
    return _skipped(
        report, kind, id, str(fault).rstrip(".") if fault is not None else _deep_fault(metadata, "metadata")
    )


def _unreadable(report: ImportReport, kind: str, columns: dict[str, Any]) -> bool:
    """Skips (with a warning) a row whose text column holds a BLOB that is not UTF-8 (models.mastra_source
    reads the others as text): stored as bytes, an export could not write it, and PostgreSQL refused the
    batch."""
    name = next((name for name, value in columns.items() if isinstance(value, bytes)), None)
    reason = None if name is None else f"{name} is a BLOB that is not UTF-8 text"
    return _skipped(report, kind, columns["id"], reason)


def _skipped(report: ImportReport, kind: str, id: Any, reason: str | None) -> bool:
    """Whether there is a reason to skip a row; if so, it is counted and warned of."""
    if reason is None:
        return False
    report.stats[kind].skipped += 1
    report.warn(f"{kind} {id!r}: {reason}; skipped")
    return True


def _oversized(ids: tuple[Any, ...]) -> BadUserInput | None:
    return next((fault for value in ids if (fault := id_size_fault(value, "an id")) is not None), None)


# ---------------------------------------------------------------------------------------------- Mastra
async def import_mastra(
    repository: Repository,
    source: MastraSource,
    *,
    batch: int = 1000,
    track_vectors: bool = False,
    progress: ProgressHook | None = None,
) -> ImportReport:
    """Copies a Mastra store's resources, threads and messages (in that order) into RecallQL."""
    progress = progress or _NoProgress()
    report = ImportReport()
    sink = ImportSink(repository, report, track_vectors=track_vectors)
    counts = await source.counts()

    progress.start("resources", counts[RESOURCES])
    async for resource_rows in source.resources(batch):
        resources: list[ResourceRecord] = []
        for r in resource_rows:
            report.stats["resource"].read += 1
            if _unreadable(report, "resource", {"id": r.id, "workingMemory": r.working_memory}):
                continue
            created = r.created_at if r.created_at is not None else r.updated_at
            if not _nonempty(r.id) or created is None:
                report.stats["resource"].skipped += 1
                report.warn(f"resource {r.id!r}: no id or no readable createdAt; skipped")
                continue
            if _unstorable(
                report, "resource", r.id, (r.id, r.working_memory, r.metadata), ids=1, metadata=r.metadata
            ):
                continue
            _stood_in(report, "resource", r.id, r.unreadable_times)
            resources.append(
                ResourceRecord(
                    id=r.id,
                    working_memory=r.working_memory,
                    metadata=_object_or_none(r.metadata, f"resource {r.id}", report),
                    created_at=created,
                    updated_at=r.updated_at if r.updated_at is not None else created,
                )
            )
        await sink.resources(resources)
        progress.advance("resources", len(resource_rows))

    thread_ids: set[str] = set()
    homeless: Counter[str] = Counter()  # messages by thread id, for threads the source lacks
    progress.start("threads", counts[THREADS])
    async for thread_rows in source.threads(batch):
        threads: list[ThreadRecord] = []
        for t in thread_rows:
            report.stats["thread"].read += 1
            if _unreadable(report, "thread", {"id": t.id, "resourceId": t.resource_id, "title": t.title}):
                continue
            created = t.created_at if t.created_at is not None else t.updated_at
            if not _nonempty(t.id) or not _nonempty(t.resource_id) or created is None:
                report.stats["thread"].skipped += 1
                report.warn(f"thread {t.id!r}: no id, resourceId or readable createdAt; skipped")
                continue
            if _unstorable(
                report, "thread", t.id, (t.id, t.resource_id, t.title, t.metadata), ids=2, metadata=t.metadata
            ):
                continue
            _stood_in(report, "thread", t.id, t.unreadable_times)
            thread_ids.add(t.id)
            threads.append(
                ThreadRecord(
                    id=t.id,
                    resource_id=t.resource_id,
                    title=t.title or "",
                    metadata=_object_or_none(t.metadata, f"thread {t.id}", report),
                    created_at=created,
                    updated_at=t.updated_at if t.updated_at is not None else created,
                )
            )
        await sink.threads(threads)
        progress.advance("threads", len(thread_rows))

    progress.start("messages", counts[MESSAGES])
    async for message_rows in source.messages(batch):
        messages: list[MessageRecord] = []
        for m in message_rows:
            report.stats["message"].read += 1
            columns = {"id": m.id, "thread_id": m.thread_id, "resourceId": m.resource_id, "role": m.role}
            if _unreadable(report, "message", {**columns, "type": m.type, "content": m.content}):
                continue
            if not (_nonempty(m.id) and _nonempty(m.thread_id) and _nonempty(m.role)) or m.created_at is None:
                report.stats["message"].skipped += 1
                report.warn(f"message {m.id!r}: no id, thread_id, role or readable createdAt; skipped")
                continue
            if _unstorable(
                report, "message", m.id, (m.id, m.thread_id, m.resource_id, m.role, m.type, m.content), ids=3
            ):
                continue
            try:
                record = message_record(
                    id=m.id,
                    thread_id=m.thread_id,
                    resource_id=m.resource_id,
                    role=m.role,
                    type=m.type,
                    created_at=m.created_at,
                    content=m.content,
                    report=report,
                    where=f"message {m.id!r}",
                )
            except TransferError as exc:
                report.stats["message"].skipped += 1
                report.warn(f"{exc}; skipped")
                continue
            if m.thread_id not in thread_ids:
                homeless[m.thread_id] += 1
            messages.append(record)
        await sink.messages(messages)
        progress.advance("messages", len(message_rows))
    report.orphans = await _orphans(repository, homeless)
    return report


# ---------------------------------------------------------------------------------------------- JSON Lines
def dumps_line(obj: dict[str, Any]) -> bytes:
    try:
        return orjson.dumps(obj) + b"\n"
    except TypeError:  # integers beyond 64 bits
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def resource_line(r: ResourceRecord) -> dict[str, Any]:
    return {
        "kind": "resource",
        "id": r.id,
        "workingMemory": r.working_memory,
        "metadata": r.metadata,
        "createdAt": to_iso(r.created_at),
        "updatedAt": to_iso(r.updated_at),
    }


def thread_line(t: ThreadRecord) -> dict[str, Any]:
    return {
        "kind": "thread",
        "id": t.id,
        "resourceId": t.resource_id,
        "title": t.title,
        "metadata": t.metadata,
        "createdAt": to_iso(t.created_at),
        "updatedAt": to_iso(t.updated_at),
    }


def message_line(m: MessageRecord) -> dict[str, Any]:
    return {
        "kind": "message",
        "id": m.id,
        "threadId": m.thread_id,
        "resourceId": m.resource_id,
        "role": m.role,
        "type": m.type,
        "createdAt": to_iso(m.created_at),
        "content": m.content,
    }


_TO_LINE: dict[str, Callable[[Any], dict[str, Any]]] = {
    "resource": resource_line,
    "thread": thread_line,
    "message": message_line,
}


async def export_jsonl(
    repository: Repository,
    write: Callable[[bytes], Awaitable[Any] | Any],
    *,
    resource_id: str | None = None,
    batch: int = 1000,
    progress: ProgressHook | None = None,
) -> dict[str, int]:
    """Writes resources, threads and messages (insertion order) as JSON Lines, from one snapshot.

    With resource_id: that resource, its threads and every message in them. Returns the counts."""
    hook = progress or _NoProgress()

    async def emit(kind: str, records: list[Any]) -> None:
        if kind == "counts":
            for name in KINDS:
                hook.start(f"{name}s", records[0][name])
            return
        to_line = _TO_LINE[kind]
        chunk = b"".join(dumps_line(to_line(r)) for r in records)
        try:
            result = write(chunk)
            if inspect.isawaitable(result):
                await result
        except OSError as exc:
            raise ExportWriteError(exc) from None
        hook.advance(f"{kind}s", len(records))

    return await repository.export_rows(emit, resource_id=resource_id, batch=batch)


def _required_str(obj: dict[str, Any], key: str, where: str) -> str:
    value = obj.get(key)
    if not _nonempty(value):
        raise TransferError(f"{where}: {key} must be a non-empty string")
    if (key == "id" or key.endswith("Id")) and (fault := _oversized((value,))) is not None:
        raise TransferError(f"{where}: {key}: {fault.message}")
    return value


def _optional_str(obj: dict[str, Any], key: str, where: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise TransferError(f"{where}: {key} must be a string or null")
    if key.endswith("Id") and (fault := _oversized((value,))) is not None:
        raise TransferError(f"{where}: {key}: {fault.message}")
    return value


def _time(obj: dict[str, Any], key: str, where: str, default: int | None = None) -> int:
    value = obj.get(key)
    if value is None and default is not None:
        return default
    if not isinstance(value, str):
        raise TransferError(f"{where}: {key} must be an ISO-8601 date-time string")
    try:
        return parse_iso(value)
    except ValueError as exc:
        raise TransferError(f"{where}: {key}: {exc}") from exc


def _metadata(obj: dict[str, Any], where: str) -> dict[str, Any] | None:
    value = obj.get("metadata")
    if value is not None and not isinstance(value, dict):
        raise TransferError(f"{where}: metadata must be an object or null")
    if (fault := _deep_fault(value, "metadata")) is not None:
        raise TransferError(f"{where}: {fault}")
    return value


def parse_line(obj: Any, where: str, report: ImportReport) -> tuple[str, Any]:
    """One JSON Lines record as (kind, record)."""
    if not isinstance(obj, dict):
        raise TransferError(f"{where}: not a JSON object")
    kind = obj.get("kind")
    if kind == "resource":
        created = _time(obj, "createdAt", where)
        return kind, ResourceRecord(
            id=_required_str(obj, "id", where),
            working_memory=_optional_str(obj, "workingMemory", where),
            metadata=_metadata(obj, where),
            created_at=created,
            updated_at=_time(obj, "updatedAt", where, created),
        )
    if kind == "thread":
        created = _time(obj, "createdAt", where)
        return kind, ThreadRecord(
            id=_required_str(obj, "id", where),
            resource_id=_required_str(obj, "resourceId", where),
            title=_optional_str(obj, "title", where) or "",
            metadata=_metadata(obj, where),
            created_at=created,
            updated_at=_time(obj, "updatedAt", where, created),
        )
    if kind == "message":
        content = obj.get("content")
        if not isinstance(content, dict | list | str):
            raise TransferError(f"{where}: content must be an object")
        return kind, message_record(
            id=_required_str(obj, "id", where),
            thread_id=_required_str(obj, "threadId", where),
            resource_id=_optional_str(obj, "resourceId", where),
            role=_required_str(obj, "role", where),
            type=_optional_str(obj, "type", where),
            created_at=_time(obj, "createdAt", where),
            content=content,
            report=report,
            where=where,
        )
    raise TransferError(f'{where}: unknown kind {kind!r} (expected "resource", "thread" or "message")')


async def import_jsonl(
    repository: Repository,
    lines: AsyncIterator[bytes] | Iterable[bytes],
    *,
    batch: int = 1000,
    track_vectors: bool = False,
    on_bytes: Callable[[int], None] | None = None,
) -> ImportReport:
    """Loads a JSON Lines export, in file order (so messages keep their insertion order).

    Each batch is its own transaction: an error stops the import at its line with the batches before
    it written; the import is idempotent, so running it again after a fix completes it."""
    report = ImportReport()
    sink = ImportSink(repository, report, track_vectors=track_vectors)
    # A batch holds records of its kind only (pending_kind), so each writer gets the list it expects.
    writers: dict[str, Callable[[list[Any]], Awaitable[None]]] = {
        "resource": sink.resources,
        "thread": sink.threads,
        "message": sink.messages,
    }
    pending: list[Any] = []
    pending_ids: set[str] = set()
    pending_kind: str | None = None
    thread_ids: set[str] = set()
    homeless: Counter[str] = Counter()

    async def flush() -> None:
        nonlocal pending
        if pending_kind is not None and pending:
            await writers[pending_kind](pending)
        pending = []
        pending_ids.clear()

    async def each() -> AsyncIterator[bytes]:
        if isinstance(lines, AsyncIterable):
            async for line in lines:
                yield line
        else:
            for line in lines:
                yield line

    number = 0
    async for raw in each():
        number += 1
        if on_bytes is not None:
            on_bytes(len(raw))
        if not raw.strip():
            continue
        where = f"line {number}"
        # orjson alone: it refuses NaN, Infinity, numbers beyond a double and lone surrogates, which
        # Python's json module lets in (the first three were stored as null), as the API refuses them.
        # Integers beyond 64 bits become doubles, as in JavaScript.
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise TransferError(f"{where}: not valid JSON ({exc})") from exc
        fault = value_fault(obj)
        if fault is not None:
            raise TransferError(f"{where}: {fault}")
        kind, record = parse_line(obj, where, report)
        report.stats[kind].read += 1
        if kind == "thread":
            thread_ids.add(record.id)
        elif kind == "message" and record.thread_id not in thread_ids:
            homeless[record.thread_id] += 1
        # A repeated id starts a new batch: the later record is then imported over the earlier one,
        # as by a second run (a message keeps its first createdAt), whatever the batch size.
        if kind != pending_kind or record.id in pending_ids:
            await flush()
            pending_kind = kind
        pending.append(record)
        pending_ids.add(record.id)
        if len(pending) >= batch:  # written when full: a bad line after it does not hold it back
            await flush()
    await flush()
    report.orphans = await _orphans(repository, homeless)
    return report


# ---------------------------------------------------------------------------------------------- vectors
class VectorDrain(Protocol):
    async def drain(self, *, on_progress: Callable[[int], None] | None = None) -> int: ...


async def embed_pending(semantic: VectorDrain, on_progress: Callable[[int], None] | None = None) -> int:
    """Drains the vector outbox (what the import queued, and anything else pending); returns how many
    entries it settled."""
    return await semantic.drain(on_progress=on_progress)

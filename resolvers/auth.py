"""Who is asking: the principal a request acts as, and the checks every operation makes with it.

The resource a caller may touch comes from its credential (an API key's resource list, a JWT claim),
never from the arguments alone. Authentication (turning a bearer token into a Principal) lives in web/;
this module is the policy the services apply. Every service method requires a `principal` (there is no
default: an entry point that forgot it would act unchecked), so each entry point (root resolvers, the
compiled read path, DataLoader-backed fields, subscriptions, federation entity fetches) gets the same
checks; in-process callers that act for the operator (the CLI, tests) pass OPEN explicitly.

The rules, for a restricted principal (one with a resource list):
- a thread is accessible when its resource is granted; a message when its own `resourceId` is granted
  (a message stored without a resource is visible to admin credentials only);
- reads of another resource's thread or message answer null (single objects) or FORBIDDEN (listings
  and calls naming a resource); writes touching anything not accessible are FORBIDDEN and write
  nothing;
- errors never name a resource the principal was not granted (the Mastra ownership messages, which
  name the thread's owner, are kept for unrestricted principals and for owners the caller may see).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from models.records import MessageRecord, ThreadRecord
from resolvers.errors import Forbidden, NotFound


@dataclass(frozen=True, slots=True)
class Principal:
    """`resources` None means every resource (an admin key, or authentication switched off);
    `expires_at` is when the credential stops being valid (a JWT's `exp` plus the allowed leeway, in
    seconds since the epoch), None when it does not expire."""

    name: str
    resources: frozenset[str] | None = None
    expires_at: float | None = None

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    @property
    def admin(self) -> bool:
        return self.resources is None

    @property
    def restricted(self) -> bool:
        """Whether the principal is limited to a list of resources (not admin, not OPEN)."""
        return self.resources is not None

    def can_access(self, resource_id: str | None) -> bool:
        return self.resources is None or (resource_id is not None and resource_id in self.resources)

    def require(self, resource_id: str | None) -> None:
        if not self.can_access(resource_id):
            raise Forbidden(f"Access to resource {resource_id!r} is not granted to {self.name}.")

    def require_all(self, resource_ids: Iterable[str | None]) -> None:
        for resource_id in resource_ids:
            self.require(resource_id)

    def only_resource(self) -> str | None:
        """The single resource of a one-resource credential (used when a call names none)."""
        if self.resources is not None and len(self.resources) == 1:
            return next(iter(self.resources))
        return None

    def effective_resource(self, requested: str | None) -> str | None:
        """The resource a call acts for: the requested one (which must be granted), else the
        credential's only resource; None when neither (unrestricted principals: as asked)."""
        if requested:
            self.require(requested)
            return requested
        return self.only_resource()

    # ------------------------------------------------------------------ threads and messages
    def sees_thread(self, thread: ThreadRecord | None) -> bool:
        return thread is not None and self.can_access(thread.resource_id)

    def sees_message(self, message: MessageRecord | None) -> bool:
        return message is not None and self.can_access(message.resource_id)

    def thread_forbidden(self, thread_id: str) -> Forbidden:
        """The error for a thread that is not accessible (it names neither its owner nor whether it
        exists beyond what the caller asked)."""
        return Forbidden(f"Thread {thread_id} is not accessible to {self.name}.")

    def message_forbidden(self, message_id: str) -> Forbidden:
        return Forbidden(f"Message {message_id} is not accessible to {self.name}.")

    def require_thread(self, thread: ThreadRecord | None, thread_id: str) -> ThreadRecord:
        """The thread, which must exist (NOT_FOUND) and be accessible (FORBIDDEN). Thread ids are global
        (createThread answers CONFLICT for a taken one), so whether an id exists is not a secret; what
        another resource's thread holds is."""
        if thread is None:
            raise NotFound(f"No thread found with id {thread_id}")
        if not self.can_access(thread.resource_id):
            raise self.thread_forbidden(thread_id)
        return thread

    def require_messages(self, messages: Iterable[MessageRecord]) -> None:
        for message in messages:
            if not self.can_access(message.resource_id):
                raise self.message_forbidden(message.id)


# Authentication off (the default on loopback, and in-process callers such as the CLI).
OPEN = Principal(name="anonymous (authentication off)")
# A request that presented no valid credential while authentication is on: it may access nothing.
NOBODY = Principal(name="unauthenticated", resources=frozenset())

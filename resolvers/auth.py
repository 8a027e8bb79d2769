"""Who is asking: the principal a request acts as, and the checks every operation makes with it.

The resource a caller may touch comes from its credential (an API key's resource list, a JWT claim),
never from the arguments alone. Authentication (turning a bearer token into a Principal) lives in web/;
this module is the policy the services apply.
"""

from __future__ import annotations

from dataclasses import dataclass

from resolvers.errors import Forbidden


@dataclass(frozen=True, slots=True)
class Principal:
    """`resources` None means every resource (an admin key, or authentication switched off)."""

    name: str
    resources: frozenset[str] | None = None

    @property
    def admin(self) -> bool:
        return self.resources is None

    def can_access(self, resource_id: str | None) -> bool:
        return self.resources is None or (resource_id is not None and resource_id in self.resources)

    def require(self, resource_id: str | None) -> None:
        if not self.can_access(resource_id):
            raise Forbidden(f"Access to resource {resource_id!r} is not granted to {self.name}.")

    def only_resource(self) -> str | None:
        """The single resource of a one-resource credential (used when a call names none)."""
        if self.resources is not None and len(self.resources) == 1:
            return next(iter(self.resources))
        return None


# Authentication off (the default on loopback, and in-process callers such as the CLI).
OPEN = Principal(name="anonymous (authentication off)")

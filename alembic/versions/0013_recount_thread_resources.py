"""thread_resources recounted from the messages

Since 0012 a resource's unfiltered `total` (Resource.messages) is the sum of its rows here, as a
thread's recall total has always been; a filtered count is cached under the sum of their versions.
Older versions had bugs that could leave a count off by one (a deleteThread racing an import, a save
racing a move: fixed since); until now a resource's total was counted from its messages, so such an
error stayed out of it. This recounts every (thread, resource) from the messages once: a missing row is
added, a wrong count is set right and its version raised (a count cached under the old version is not
served again). Rows are never deleted and versions never lowered. It reads every message once
(grouped), and writes only the rows that were wrong.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# thread_resources' key for messages stored without a resource (models.repository._NO_RESOURCE).
_ACTUAL = """
CREATE TEMPORARY TABLE recount_actual AS
SELECT thread_id, COALESCE(resource_id, '') AS resource_id, COUNT(*) AS n
FROM messages GROUP BY thread_id, COALESCE(resource_id, '')
"""
_ACTUAL_COUNT = """
COALESCE((SELECT a.n FROM recount_actual a
          WHERE a.thread_id = thread_resources.thread_id AND a.resource_id = thread_resources.resource_id), 0)
"""


def upgrade() -> None:
    op.execute(_ACTUAL)
    op.execute("CREATE INDEX recount_actual_key ON recount_actual (thread_id, resource_id)")
    # WHERE true: SQLite's parser needs it before an upsert clause on INSERT ... SELECT.
    op.execute(
        "INSERT INTO thread_resources (thread_id, resource_id, message_count, version) "
        "SELECT thread_id, resource_id, 0, 0 FROM recount_actual WHERE true "
        "ON CONFLICT (thread_id, resource_id) DO NOTHING"
    )
    op.execute(
        f"UPDATE thread_resources SET message_count = {_ACTUAL_COUNT}, version = version + 1 "
        f"WHERE message_count <> {_ACTUAL_COUNT}"
    )
    op.execute("DROP TABLE recount_actual")


def downgrade() -> None:
    pass  # the counts are right at 0012 too

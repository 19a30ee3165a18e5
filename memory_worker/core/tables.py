"""Every SQL table, in one module (SQLAlchemy Core).

`persona_memory`, `users.memory_note/memory_on`, `persona_memory_mute` and `rooms.incognito`
are docs/design.md §1. The other app-side tables (personas, rooms, members, lines, notices) are the
contract an app integrates against; `cursors` and `spells` are the worker's own bookkeeping.
Migrations in `schema/versions/` must build exactly this (a test compares them).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    ForeignKey,
    Identity,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    UniqueConstraint,
    text,
)

from memory_worker.core.names import search_key

metadata = MetaData()


def _search_text(ctx: Any) -> str:
    """`persona_memory.search_text` for an insert that does not give it: from its text."""
    return search_key(str(ctx.get_current_parameters().get("text") or ""))


# --- the app's side: who, where, what was said ------------------------------------------

users = Table(
    "users",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("name", Text, nullable=False),
    Column("memory_note", Text, nullable=True),  # ≤ 400 chars, checked by controls
    Column("memory_on", Integer, nullable=False, server_default="1"),
)

personas = Table(
    "personas",
    metadata,
    Column("slug", Text, primary_key=True),  # the mind that holds memories: 'warren'
    Column("name", Text, nullable=False),  # display name, for toasts: 'Warren'
)

rooms = Table(
    "rooms",
    metadata,
    Column("id", Text, primary_key=True),
    Column("kind", Text, nullable=False),  # 'private' (one human) | 'group'
    Column("incognito", Integer, nullable=False, server_default="0"),  # neither reads nor writes
    Column("kit_mounted", Integer, nullable=False, server_default="0"),  # role-play: skipped
    Column("archived", Integer, nullable=False, server_default="0"),
    Column("topic", Text, nullable=True),  # the opener or topic the app reported
    Column("topic_embedding", LargeBinary, nullable=True),  # int8, computed off the floor
    Column("created", Text, nullable=False),
)

room_members = Table(
    "room_members",
    metadata,
    Column("room_id", Text, ForeignKey("rooms.id", ondelete="CASCADE"), nullable=False),
    Column("member", Text, nullable=False),  # 'u:42' for a human, a persona slug otherwise
    # The room's last line id when the member joined: they witnessed the lines after it, not
    # those before (0013). `join` writes it; 0 (a founding member) witnessed every line.
    Column("since_line", Integer, nullable=False, server_default="0"),
    PrimaryKeyConstraint("room_id", "member"),
)

lines = Table(
    "lines",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("room_id", Text, ForeignKey("rooms.id", ondelete="CASCADE"), nullable=False),
    Column("speaker", Text, nullable=False),  # 'u:42' or a persona slug
    Column("text", Text, nullable=False),
    Column("created", Text, nullable=False),
    Index("ix_lines_room_id_id", "room_id", "id"),
    Index("ix_lines_created", "created"),  # the frequent sweep scans recent lines only
    # Ids never repeat (0021): nothing that points at a line — a stamp, a row's evidence, a
    # cursor — can come to point at another.
    sqlite_autoincrement=True,
)

line_stamps = Table(
    "line_stamps",
    metadata,
    # A line's label, stamped for each persona member of its room by the store's trigger in the
    # transaction that stores the line (0021, docs/design.md §12): a switch, a join or a leave
    # later never changes it. `readable`: it may reach that persona's model; `heard`: the room's
    # human members then (JSON ids); `label`: of them who let the persona remember them, met for
    # a persona's line with the labels of the lines it had in view (JSON ids; NULL: public).
    Column("persona", Text, nullable=False),
    Column("room_id", Text, nullable=False),
    Column("line_id", Integer, ForeignKey("lines.id", ondelete="CASCADE"), nullable=False),
    Column("readable", Integer, nullable=False),
    Column("heard", Text, nullable=False),
    Column("label", Text, nullable=True),
    PrimaryKeyConstraint("persona", "room_id", "line_id"),
    Index("ix_line_stamps_line_id", "line_id"),
)

echo_reach = Table(
    "echo_reach",
    metadata,
    # One row (id 1): how many of the room's previous lines a persona's line is stamped with
    # (MW_ECHO_REACH_LINES, written by `store.init_db`; the stamp trigger reads it).
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("lines", Integer, nullable=False),
)

notices = Table(
    "notices",
    metadata,
    # Ids never repeat (AUTOINCREMENT / identity, schema/versions/0003): a stale undo can
    # never reach a newer notice or row.
    Column("id", Integer, Identity(), primary_key=True),
    Column("user_id", Integer, nullable=False),
    Column("persona", Text, nullable=False),
    Column("room_id", Text, nullable=False),
    Column("kind", Text, nullable=False),  # 'memory_toast'
    Column("text", Text, nullable=False),
    Column("row_ids", Text, nullable=False),  # JSON list of persona_memory ids it covers
    Column("spell_key", Text, nullable=False),  # persona/room/last line: one toast per spell
    Column("created", Text, nullable=False),
    Column("undone", Integer, nullable=False, server_default="0"),
    # The outbox: written with the rows in the commit's transaction, 1 once the commit task
    # (or the sweep, `tasks.delivery`) told it on the app's channel; the sweep finds those 0.
    Column("delivered", Integer, nullable=False, server_default="0"),
    UniqueConstraint("spell_key", "user_id", name="uq_notices_spell_user"),
    Index("ix_notices_user_id", "user_id"),
    Index(
        "ix_notices_undelivered",
        "created",
        sqlite_where=text("delivered = 0"),
        postgresql_where=text("delivered = 0"),
    ),
    sqlite_autoincrement=True,
)

# --- the row and the human's switches (docs/design.md §1) -----------------------------------

persona_memory = Table(
    "persona_memory",
    metadata,
    Column("id", Integer, Identity(), primary_key=True),  # never reused (0003)
    Column("persona", Text, nullable=False),
    Column("subject", Text, nullable=False),  # 'u:42' | 'self' | 'world'
    Column("counterpart", Text, nullable=True),  # self items: whom the promise/loop is with
    Column("witnessed", Text, nullable=False),  # JSON list of user ids present: the audience
    Column("room_id", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("text", Text, nullable=False),
    Column("importance", Integer, nullable=False),
    Column("valid_from", Text, nullable=True),
    Column("valid_to", Text, nullable=True),  # NULL while true
    Column("closed_by", Integer, nullable=True),
    Column("evidence", Text, nullable=False),  # JSON list of line ids
    Column("created", Text, nullable=False),
    Column("last_recalled", Text, nullable=True),
    Column("recall_count", Integer, nullable=False, server_default="0"),
    Column("embedding", LargeBinary, nullable=True),  # int8 vector
    # Every human the text names besides whom it is about (JSON ids; NULL: none): the row shows
    # only where they are in the audience too (0010).
    Column("named", Text, nullable=True),
    # A world row's audience: the humans who witnessed the lines it cites (JSON ids; NULL:
    # public — every line it cites is a dispatch) (0010, 0013). `memory_audience` indexes it.
    Column("private_to", Text, nullable=True),
    # Its text as `names.sentence_key` normalises it, written with the text (0020): the
    # commit's exactly-once check reads the open rows of a candidate's sentence, not every row.
    Column("sentence_key", Text, nullable=True),
    # Its text as `names.search_key` folds it, written with the text (0023): the page's search
    # is case-blind in every script on every database, whatever SQL's lower() knows. A plain
    # insert gets it from the text too (`_search_text`).
    Column("search_text", Text, nullable=True, default=lambda ctx: _search_text(ctx)),
    # When `valid_to` last changed (a close or a reopen), in microseconds since the epoch
    # (0023): a page walk begun before it says the list changed (`web.page_model.page_lines`).
    Column("toggled", BigInteger, nullable=True),
    Index("ix_persona_memory_open", "persona", "valid_to", "subject"),
    Index("ix_persona_memory_toggled", "toggled"),
    Index("ix_persona_memory_sentence", "persona", "sentence_key"),
    Index("ix_persona_memory_subject", "subject"),
    # The daily caps: today's rows about the spell's people, a range each (0009).
    Index("ix_persona_memory_day", "persona", "subject", "counterpart", "created"),
    sqlite_autoincrement=True,
)

memory_audience = Table(
    "memory_audience",
    metadata,
    # A `world` row's audience (`persona_memory.private_to`), one row per human: it is on their
    # page, theirs to delete (they leave it), and found by user in one indexed read (0013;
    # before, `memory_sources`: the humans whose lines it cited).
    Column("row_id", Integer, ForeignKey("persona_memory.id", ondelete="CASCADE"), nullable=False),
    Column("user_id", Integer, nullable=False),
    PrimaryKeyConstraint("row_id", "user_id"),
    Index("ix_memory_audience_user_id", "user_id"),
)

persona_memory_counts = Table(
    "persona_memory_counts",
    metadata,
    # The page's counts and meter (0019): per (whom rows concern, persona), how many of them are
    # open and closed and the characters of the open ones, kept by the store's triggers on
    # `persona_memory` and `memory_audience`. `ref`: 'u:42', as `storage.memories.about_user`
    # reads whom a row concerns. Never deleted: a counter back at zero shows nothing.
    Column("ref", Text, nullable=False),
    Column("persona", Text, nullable=False),
    Column("open_rows", Integer, nullable=False),
    Column("closed_rows", Integer, nullable=False),
    Column("open_chars", BigInteger, nullable=False),
    PrimaryKeyConstraint("ref", "persona"),
)

user_name_parts = Table(
    "user_name_parts",
    metadata,
    # Every distinctive part of each human's display name, folded (`core.names.name_parts`):
    # which humans a text may name, in one indexed read however many the store knows (0013).
    Column("part", Text, nullable=False),
    Column("user_id", Integer, nullable=False),
    PrimaryKeyConstraint("part", "user_id"),
    Index("ix_user_name_parts_user_id", "user_id"),
)

persona_memory_versions = Table(
    "persona_memory_versions",
    metadata,
    # Bumped by triggers (schema/versions/0002) on every insert, update and delete of a
    # persona's rows: the reader's cache asks it whether its columns are still true.
    Column("persona", Text, primary_key=True),
    Column("version", Integer, nullable=False),
    # Random, written with each bump (schema/versions/0011): a restored store's counter can
    # come back to a number this process holds, but not with the same stamp.
    Column("stamp", BigInteger, nullable=True),
)

persona_memory_changes = Table(
    "persona_memory_changes",
    metadata,
    # The row each version of a persona's counter changed, written by the same triggers
    # (schema/versions/0006), the last 1,024 versions per persona: a reader whose columns are
    # a few versions behind re-reads just those rows.
    Column("persona", Text, nullable=False),
    Column("version", Integer, nullable=False),
    Column("row_id", Integer, nullable=False),
    Column("stamp", BigInteger, nullable=True),  # the stamp that version wrote (0011)
    PrimaryKeyConstraint("persona", "version"),
)

store_identity = Table(
    "store_identity",
    metadata,
    # One row (id 1): a random id written when the store is made (schema/versions/0011). A
    # restore carries it, a store made anew gets another: the reader's cache is per store.
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("store_id", Text, nullable=False),
)

# --- the reader's packs (schema/versions/0015) ---------------------------------------------

persona_read_packs = Table(
    "persona_read_packs",
    metadata,
    # One persona's ranking columns (no text, no embedding) as of one version, in one blob: a
    # process that does not hold the persona reads this and the rows changed since, not every
    # row (memory_worker.storage.read_packs). Written by the reader's background threads.
    Column("persona", Text, primary_key=True),
    Column("version", Integer, nullable=False),
    Column("stamp", BigInteger, nullable=True),
    Column("rows", Integer, nullable=False),
    Column("columns", LargeBinary, nullable=False),
)

persona_read_topics = Table(
    "persona_read_topics",
    metadata,
    # The cosine of every open row of a persona to one room topic (sha256 of its vector), as
    # of one version: the rows' ids (int64) and their cosines (float64), in the same order.
    Column("persona", Text, nullable=False),
    Column("topic", Text, nullable=False),
    Column("version", Integer, nullable=False),
    Column("stamp", BigInteger, nullable=True),
    Column("ids", LargeBinary, nullable=False),
    Column("cosines", LargeBinary, nullable=False),
    PrimaryKeyConstraint("persona", "topic"),
)

persona_memory_mute = Table(
    "persona_memory_mute",
    metadata,
    Column("user_id", Integer, nullable=False),
    Column("persona", Text, nullable=False),
    PrimaryKeyConstraint("user_id", "persona"),
)

persona_memory_stays_private = Table(
    "persona_memory_stays_private",
    metadata,
    # "Bring up what I told you privately when I'm in a group": off for this persona. With the
    # group scope, what the user told the persona one-to-one stays in their private chats
    # (0014); the rest of the New applies.
    Column("user_id", Integer, nullable=False),
    Column("persona", Text, nullable=False),
    PrimaryKeyConstraint("user_id", "persona"),
)

exam_verdicts = Table(
    "exam_verdicts",
    metadata,
    # `memory-worker exam`'s verdicts, one per persona model a run measured (0014): the group
    # scope starts only on a passing one for what is in force (`core.verdict`).
    Column("id", Integer, Identity(), primary_key=True),
    Column("created", Text, nullable=False),
    Column("model", Text, nullable=False),
    Column("passed", Integer, nullable=False),
    Column("record", Text, nullable=False),  # JSON: core.verdict.Verdict, counts and hashes
    sqlite_autoincrement=True,
)

store_embedder = Table(
    "store_embedder",
    metadata,
    # One row (id 1): which embedder made this store's vectors, so another one's are never
    # mixed in (cosines across two models mean nothing). `pending_*` and the `after_*` cursors
    # are a `memory-worker reembed` under way: resumable, batch by batch.
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("name", Text, nullable=False),
    Column("dims", Integer, nullable=False),
    Column("pending_name", Text, nullable=True),
    Column("pending_dims", Integer, nullable=True),
    Column("after_row_id", Integer, nullable=False, server_default="0"),
    Column("after_room_id", Text, nullable=False, server_default=""),
)

# --- the worker's bookkeeping -------------------------------------------------------------

cursors = Table(
    "cursors",
    metadata,
    Column("persona", Text, nullable=False),
    Column("room_id", Text, nullable=False),
    Column("last_line_id", Integer, nullable=False),  # every line ≤ this has been read
    Column("updated", Text, nullable=False),
    PrimaryKeyConstraint("persona", "room_id"),
    # SQLite would store "abc" in an INTEGER column; a text cursor stops the sweep for good.
    CheckConstraint("typeof(last_line_id) = 'integer'", name="ck_cursors_integer").ddl_if(
        dialect="sqlite"
    ),
)

spells = Table(
    "spells",
    metadata,
    # One row per spell outcome: the commit's idempotency key and the operator's view.
    Column("persona", Text, nullable=False),
    Column("room_id", Text, nullable=False),
    Column("last_line_id", Integer, nullable=False),
    Column("status", Text, nullable=False),  # 'committed' | 'skipped' | 'parked'
    Column("reason", Text, nullable=True),  # why skipped or parked
    Column("row_ids", Text, nullable=False, server_default="[]"),  # JSON: rows written
    Column("tokens_in", Integer, nullable=False, server_default="0"),
    Column("tokens_out", Integer, nullable=False, server_default="0"),
    Column("created", Text, nullable=False),
    # JSON: candidates dropped by guard code ({"schema": 1, "cap": 3}) — counts, never text.
    Column("dropped", Text, nullable=False, server_default="{}"),
    PrimaryKeyConstraint("persona", "room_id", "last_line_id"),
    Index("ix_spells_status", "status"),
    CheckConstraint("typeof(last_line_id) = 'integer'", name="ck_spells_integer").ddl_if(
        dialect="sqlite"
    ),
)

spell_views = Table(
    "spell_views",
    metadata,
    # The rows each model call of a spell was shown (the extraction's view, the router's
    # neighbours), noted by the steps before the call (0021): the commit meets its label with
    # their audiences as they are then, so a row deleted or narrowed while the spell ran
    # narrows what it writes. Keyed by the spell's persona, room and the line it reads after;
    # `row_id` 0 notes that the extraction's view was recorded. A commit drops the views of the
    # room's spells that began before its own. `by_router` (0024): 1 when the router was shown
    # it — the only rows a spell may UPDATE or CLOSE.
    Column("persona", Text, nullable=False),
    Column("room_id", Text, nullable=False),
    Column("after_line", Integer, nullable=False),
    Column("row_id", Integer, nullable=False),
    Column("by_router", Integer, nullable=False, server_default=text("0")),
    PrimaryKeyConstraint("persona", "room_id", "after_line", "row_id"),
)

# --- the human's page (memory-worker serve) ---------------------------------------------

web_sessions = Table(
    "web_sessions",
    metadata,
    # A signed-in browser: the cookie holds a random id, the store its hash, so neither a
    # stolen cookie outlives sign-out nor a read of this table signs anyone in.
    Column("id_hash", Text, primary_key=True),  # sha256 of the cookie's session id, hex
    Column("user_id", Integer, nullable=False),
    Column("csrf", Text, nullable=False),  # the session's CSRF token
    Column("secret_tag", Text, nullable=False),  # which MW_WEB_SECRET minted it (rotation)
    Column("created", Integer, nullable=False),  # unix seconds
    Column("expires", Integer, nullable=False),  # unix seconds; after it the session is gone
    Index("ix_web_sessions_user_id", "user_id"),  # "sign out everywhere"
)

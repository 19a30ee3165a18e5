"""The storage seam: the only modules that build SQL against the tables in `tables.py`.

One small module per concern, each a set of named functions over a SQLAlchemy `Connection`
(Core, no ORM session: the SQL stays visible). Callers open the connection or transaction
(`memory_worker.store`) and call these; a newcomer finds every read and write of a table in
one file:

    memories   persona_memory (the rows) and persona_memory_versions
    rooms      rooms, room_members, lines (the transcript)
    spells     spells (outcomes, the commit's idempotency key) and cursors
    users      users (names, note, memory_on), personas, persona_memory_mute
    notices    notices (toasts and their undo)

The reader's ranking columns (`reader._fetch_columns` and friends) still build their own SQL
on the hot path; they move here with the reader's split (see docs/architecture.md).
"""

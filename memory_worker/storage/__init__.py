"""The storage seam: the only modules that build SQL against the tables in `tables.py`.

One small module per concern, each a set of named functions over a SQLAlchemy `Connection`
(Core, no ORM session: the SQL stays visible). Callers open the connection or transaction
(`memory_worker.storage.store`) and call these; a newcomer finds every read and write of a table in
one file:

    memories   persona_memory (the rows) and persona_memory_versions
    rooms      rooms, room_members, lines (the transcript)
    spells     spells (outcomes, the commit's idempotency key) and cursors
    users      users (names, note, memory_on), personas, persona_memory_mute
    notices    notices (toasts and their undo)
    embedder   store_embedder (which embedder the store's vectors are from)
    read_path  what a room open reads and touches, compiled once per process, and the change
               log persona_memory_changes (which rows each version changed)
    prepared   `Prepared`: a Core statement compiled once per process, run as driver SQL (the
               hot statements of a room open and of a spell)
    spell_context  what a spell reads about its room (switches, members, names, mutes, the
               cursor) in one statement
"""

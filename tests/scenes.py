"""Small worlds the tests write through `app_side`, as the app would."""

from __future__ import annotations

from sqlalchemy import Connection, Engine, column, insert, table

from memory_worker import app_side

DAN, CARA, NOLAN_H = 42, 17, 23


def people(eng: Engine) -> None:
    with eng.begin() as conn:
        app_side.add_user(conn, DAN, "Dan")
        app_side.add_user(conn, CARA, "Cara")
        app_side.add_persona(conn, "warren", "Warren")
        app_side.add_persona(conn, "nolan", "Nolan")


def private_chat(eng: Engine, room_id: str = "dm-dan", persona: str = "warren") -> list[int]:
    """Dan tells Warren about his flat and his interview. Returns the line ids."""
    with eng.begin() as conn:
        app_side.add_room(conn, room_id, "private", [f"u:{DAN}", persona])
        return [
            app_side.say(conn, room_id, DAN, "I bought a flat in Xuhui last July."),
            app_side.say(conn, room_id, persona, "Congratulations, Dan."),
            app_side.say(conn, room_id, DAN, "I have a job interview on Thursday, ask me."),
        ]


def extract_answer(line_ids: list[int]) -> dict:
    flat, _, interview = line_ids
    return {
        "candidates": [
            {
                "subject": "u:42",
                "kind": "fact",
                "text": "u:42 owns a flat in Xuhui.",
                "importance": 6,
                "valid_from": "2026-07",
                "evidence": [flat],
            },
            {
                "subject": "u:42",
                "kind": "open_loop",
                "text": "u:42 has a job interview on Thursday and asked to be asked about it.",
                "importance": 8,
                "evidence": [interview],
            },
        ]
    }


def row_as_stored_before(
    conn: Connection, subject: str, text: str, *, persona: str = "warren", closed: bool = False
) -> int:
    """A row written by an older version (a store downgraded to test a migration): only the
    columns the table has had since 0013, so it fits any schema a migration test goes back to."""
    values = dict(
        persona=persona,
        subject=subject,
        witnessed=f"[{DAN}]",
        room_id="dm-dan",
        kind="fact",
        text=text,
        importance=5,
        evidence="[1]",
        created="2026-12-06T10:00:00+00:00",
        valid_to="2026-12-06" if closed else None,
    )
    # A table of just these columns: `t.persona_memory` would add the columns it fills by
    # default (`search_text`, 0023), which an older schema has not got.
    older = table("persona_memory", column("id"), *(column(name) for name in values))
    return int(conn.execute(insert(older).values(values).returning(older.c.id)).scalar_one())

"""Task messages (memory_worker.core.messages): what a task refuses, and that the spell's message
model keeps up with the Spell it carries."""

from __future__ import annotations

import dataclasses

import pytest

from memory_worker.core.errors import MalformedMessage
from memory_worker.core.messages import SpellMessage, spell_json
from memory_worker.core.rows import Candidate, Spell


def test_the_spell_message_has_exactly_the_fields_of_the_spell() -> None:
    assert set(SpellMessage.model_fields) == {f.name for f in dataclasses.fields(Spell)}


def test_a_spell_round_trips_through_its_message() -> None:
    spell = Spell("warren", "dm-dan", 3, 9, present=[42], witnessed=[42, 17])
    assert Spell.from_json(spell.to_json()) == spell


def test_a_spells_message_holds_every_field_as_a_copy_the_spell_does_not_share() -> None:
    candidate = Candidate("u:42", "fact", "u:42 bakes.", 5, (7,), embedding="AAE=").to_json()
    spell = Spell(
        "warren", "dm-dan", 3, 9, present=[42], witnessed=[42, 17], candidates=[candidate],
        decisions=[{"candidate": 0, "event": "ADD", "old_row_id": None}], dropped={"cap": 1},
        began=1.5, inflight="t", renewed=2.5,
    )  # fmt: skip
    message = spell.to_json()
    assert message == dataclasses.asdict(spell)
    message["present"].append(7)
    message["candidates"][0]["evidence"].append(8)
    message["candidates"][0]["text"] = "changed"
    message["decisions"][0]["event"] = "NONE"
    message["dropped"]["cap"] = 9
    assert (spell.present, spell.dropped) == ([42], {"cap": 1})
    assert spell.candidates[0]["evidence"] == [7]
    assert spell.candidates[0]["text"] == "u:42 bakes." and spell.decisions[0]["event"] == "ADD"


@pytest.mark.parametrize(
    "change",
    [
        {"last_line_id": "abc"},
        {"last_line_id": "12"},  # a string is not a line id, however it looks
        {"after_line_id": -1},
        {"last_line_id": 3},  # not after the cursor
        {"persona": ""},
        {"present": ["u:42"]},
        {"candidates": [{"subject": "u:42", "text": "x" * 201}]},
        {"decisions": [{"candidate": 0, "event": "DELETE"}]},
        {"unexpected": 1},
    ],
)
def test_a_malformed_spell_message_is_refused_naming_fields_not_values(change: dict) -> None:
    message = {**Spell("warren", "dm-dan", 3, 9).to_json(), **change}
    with pytest.raises(MalformedMessage) as e:
        spell_json(message)
    assert "x" * 20 not in str(e.value) and "abc" not in str(e.value)

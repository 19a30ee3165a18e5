"""Task messages (memory_worker.messages): what a task refuses, and that the spell's message
model keeps up with the Spell it carries."""

from __future__ import annotations

import dataclasses

import pytest

from memory_worker.messages import MalformedMessage, SpellMessage, spell_json
from memory_worker.rows import Spell


def test_the_spell_message_has_exactly_the_fields_of_the_spell() -> None:
    assert set(SpellMessage.model_fields) == {f.name for f in dataclasses.fields(Spell)}


def test_a_spell_round_trips_through_its_message() -> None:
    spell = Spell("warren", "dm-dan", 3, 9, present=[42], witnessed=[42, 17])
    assert Spell.from_json(spell.to_json()) == spell


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

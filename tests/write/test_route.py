"""The router's pure parts: neighbours by cosine within one subject, numbering, and an
answer's numbers resolved — never trusting one that was not shown."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from memory_worker.core.rows import Candidate
from memory_worker.core.vectors import quantise, to_b64
from memory_worker.models.hashing import HashingEmbedder
from memory_worker.models.local import E5Embedder
from memory_worker.models.scripted import route_payload
from memory_worker.write.route import (
    OpenRow,
    RouteAnswer,
    build_prompt,
    neighbour_floor,
    neighbours,
    number,
    resolve,
)

EMB = HashingEmbedder()
FLOOR = neighbour_floor(EMB.name)


def vec(text: str) -> bytes:
    return quantise(EMB.embed([text])[0])


def cand(text: str, subject: str = "u:42") -> Candidate:
    return Candidate(subject, "fact", text, 5, (1,), embedding=to_b64(vec(text)))


def row(i: int, text: str, subject: str = "u:42") -> OpenRow:
    return OpenRow(i, subject, text, vec(text))


def test_neighbours_are_the_same_subjects_rows_at_or_above_the_cosine_bar() -> None:
    rows = [
        row(1, "u:42 owns a flat in Xuhui."),
        row(2, "u:42 plays jazz piano every Sunday."),  # cosine 0.26: under the bar
        row(3, "u:17 owns a flat in Xuhui.", subject="u:17"),
    ]
    (found,) = neighbours([cand("u:42 sold the flat in Xuhui.")], rows, FLOOR)
    assert found == [1]


def test_at_most_five_neighbours_best_first() -> None:
    rows = [row(i, f"u:42 owns a flat in Xuhui number {i}.") for i in range(1, 9)]
    rows.append(row(99, "u:42 owns a flat in Xuhui."))
    (found,) = neighbours([cand("u:42 owns a flat in Xuhui.")], rows, FLOOR)
    assert len(found) == 5 and found[0] == 99


def test_numbers_are_spell_wide_and_hide_row_ids() -> None:
    numbers = number([[40, 41], [41, 77], []])
    assert numbers == {"0": 40, "1": 41, "2": 77}
    cands = [cand("a b"), cand("c d"), cand("e f")]
    rows = [row(40, "x"), row(41, "y"), row(77, "z")]
    _, prompt = build_prompt("Warren", cands, [[40, 41], [41, 77], []], numbers, rows)
    memories, shown = route_payload(prompt)
    assert [m["id"] for m in memories] == ["0", "1", "2"]
    assert [c["neighbours"] for c in shown] == [["0", "1"], ["1", "2"], []]
    assert "40" not in prompt and "77" not in prompt


def answer(*decisions: tuple[int, str, str | None]) -> RouteAnswer:
    return RouteAnswer.model_validate(
        {"decisions": [{"candidate": c, "event": e, "old_id": o} for c, e, o in decisions]}
    )


def test_numbers_resolve_to_row_ids() -> None:
    cands = [cand("a"), cand("b"), cand("c"), cand("d")]
    per = [[40], [41], [], []]
    got, dropped = resolve(
        answer((0, "UPDATE", "0"), (1, "close", "1"), (2, "ADD", None), (3, "NONE", None)),
        cands,
        per,
        number(per),
    )
    assert dropped == 0
    assert [(d.event, d.old_row_id) for d in got] == [
        ("UPDATE", 40),
        ("CLOSE", 41),
        ("ADD", None),
        ("NONE", None),
    ]


def test_an_unknown_number_is_never_trusted() -> None:
    cands = [cand("a"), cand("b"), cand("c")]
    per = [[40], [41], []]
    got, _ = resolve(
        # "1" exists in the spell but was not shown for candidate 0; "7" was never shown.
        answer((0, "UPDATE", "1"), (1, "CLOSE", "7"), (2, "UPDATE", "40")),
        cands,
        per,
        number(per),
    )
    assert [(d.event, d.old_row_id) for d in got] == [("ADD", None), ("NONE", None), ("ADD", None)]


@pytest.mark.parametrize(
    "decisions",
    [
        [(0, "ADD", None)],  # one missing
        [(0, "ADD", None), (0, "NONE", None), (1, "ADD", None)],  # one repeated
        [(1, "ADD", None), (5, "ADD", None)],  # an unknown candidate
        [(0, "DELETE", "0"), (1, "ADD", None)],  # there is no DELETE
    ],
)
def test_a_candidate_without_one_valid_decision_is_dropped_and_its_siblings_go_on(
    decisions,
) -> None:  # type: ignore[no-untyped-def]
    """Hole 5, the router's half: one bad decision costs its candidate, not the spell."""
    cands = [cand("a"), cand("b")]
    raw = {"decisions": [{"candidate": c, "event": e, "old_id": o} for c, e, o in decisions]}
    got, dropped = resolve(
        RouteAnswer.model_validate_json(json.dumps(raw)), cands, [[40], []], number([[40], []])
    )
    assert dropped >= 1
    assert got[0].event == "NONE" or got[1].event == "NONE"
    assert any(d.event == "ADD" for d in got)


def test_the_router_schema_itself_allows_only_the_four_events() -> None:
    schema = json.dumps(RouteAnswer.model_json_schema())
    assert '"enum": ["ADD", "UPDATE", "CLOSE", "NONE"]' in schema


def test_an_answer_that_is_not_the_json_asked_for_is_malformed() -> None:
    with pytest.raises(ValidationError):
        RouteAnswer.model_validate_json('{"decisions": "all of them"}')


def test_an_e5_store_shows_the_row_a_candidate_restates_and_not_its_unrelated_rows() -> None:
    # e5's cosines between unrelated sentences about one person sit near 0.8: docs/design.md
    # §2.2's 0.6 would show them all (benchmarks/router_floor.py measured each embedder's
    # floor).
    e5 = E5Embedder()

    def e5_vec(text: str) -> bytes:
        return quantise(e5.embed([text])[0])

    rows = [
        OpenRow(
            1,
            "u:42",
            "u:42 went to an LGBTQ support group.",
            e5_vec("Caro went to an LGBTQ support group."),
        ),
        OpenRow(
            2,
            "u:42",
            "u:42 likes to paint sunsets by the lake.",
            e5_vec("Caro likes to paint sunsets by the lake."),
        ),
        OpenRow(
            3,
            "u:42",
            "u:42 is researching adoption agencies.",
            e5_vec("Caro is researching adoption agencies."),
        ),
    ]
    text = "Caro attends an LGBTQ support group for the first time."
    c = Candidate("u:42", "fact", text, 5, (1,), embedding=to_b64(e5_vec(text)))
    (found,) = neighbours([c], rows, neighbour_floor(e5.name))
    assert found == [1]

"""A random world the flow exam plays the app in, and what each human truly knows.

The world is the app's side: humans (some with memory off, some muting a persona), personas,
rooms (private chats, groups that people join mid-way, incognito and role-play rooms) and what
is said in them. Every line carries unique markers (`mk` and six hex digits), each with a
filler word: a fragment. The exam's ground truth is `knows`: a human knows the markers of every
line said in a room while they were a member of it (whatever their switches: they heard it),
and of every line they said themselves; a dispatch's markers are the world's news, everyone's.
Humans sometimes repeat fragments they know in other rooms, so knowledge travels the way it
does between people — which is the only way it may travel through the store.

None of this reads the store's labels: it is an independent account of who heard what.
"""

from __future__ import annotations

import random
import re
import unicodedata
from dataclasses import dataclass, field

MARKER = re.compile(r"mk[0-9a-f]{6}")
FILLER = (
    "kiwi harbour violet lantern copper meadow falcon quartz tundra saffron glacier orchid "
    "pepper cobalt juniper walnut thistle ember pylon basalt fennel marble nectar"
).split()
# Display names the hostile model disguises: two-word names, an accent, an unspaced script.
NAMES = ["Cara Wu", "Zoë Lind", "李雷", "Dan Okafor", "Eve Stone", "Nadia Petrov", "Omar Haddad"]
PERSONAS = ("warren", "nolan")
LOOKALIKE = str.maketrans("aceopxy", "асеорху")  # Latin → Cyrillic letters that look the same


def oracle_fold(text: str) -> str:
    """The exam's own reading of an output: compatibility forms and invisible characters
    undone, so a disguised marker still counts as the marker."""
    t = unicodedata.normalize("NFKC", text)
    return "".join(c for c in t if unicodedata.category(c) != "Cf").casefold()


def markers(text: str) -> set[str]:
    return set(MARKER.findall(oracle_fold(text)))


@dataclass
class Room:
    id: str
    kind: str  # 'private' | 'group'
    humans: dict[int, int]  # member → how many lines the room had when they joined
    personas: list[str]
    incognito: bool = False
    kit: bool = False
    lines: int = 0


@dataclass
class Human:
    id: int
    name: str
    memory_on: bool = True
    mutes: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Said:
    """A line as the exam saw it said: who said it, who was in the room, and every switch of
    theirs at that moment — the ground truth a call's label is checked against."""

    speaker: int | str
    members: frozenset[int]
    personas: frozenset[str]
    kit: bool
    switches: dict[int, tuple[bool, frozenset[str]]]  # human → (memory on, muted personas)
    in_view: tuple[int, ...] = ()  # a persona's line: the room's lines its model had in view

    def lets(self, human: int, persona: str) -> bool:
        on, mutes = self.switches.get(human, (False, frozenset()))
        return on and persona not in mutes

    def readable(self, persona: str) -> bool:
        """May a model of `persona` be shown this line at all?"""
        if self.kit or persona not in self.personas:
            return False
        if isinstance(self.speaker, int):
            return self.speaker in self.members and self.lets(self.speaker, persona)
        return True

    def label(self, persona: str) -> frozenset[int] | None:
        """Who may know what this line says, for `persona`: everyone for the news, else the
        members who let the persona remember them when it was said."""
        if isinstance(self.speaker, str) and self.speaker.startswith("dispatch:"):
            return None
        return frozenset(h for h in self.members if self.lets(h, persona))


@dataclass
class World:
    """The app's state as the exam sees it, and the ground truth of who heard what."""

    rng: random.Random
    humans: dict[int, Human] = field(default_factory=dict)
    rooms: dict[str, Room] = field(default_factory=dict)
    knows: dict[int, set[str]] = field(default_factory=dict)
    news: set[str] = field(default_factory=set)  # markers of dispatches: the world's
    fragments: dict[str, str] = field(default_factory=dict)  # marker → its fragment
    line_witnesses: dict[int, frozenset[int]] = field(default_factory=dict)  # line id → humans
    forms: list[tuple[str, int]] = field(default_factory=list)  # disguised names written
    recent: dict[int, list[str]] = field(default_factory=dict)  # human → markers, newest last
    said: dict[int, Said] = field(default_factory=dict)  # line id → the room as it was then
    room_lines: dict[str, list[int]] = field(default_factory=dict)  # room → its lines, in order
    line_markers: dict[int, list[str]] = field(default_factory=dict)
    echo_reach: int = 20  # how many previous lines a persona's line carries (MW_ECHO_REACH_LINES)

    judged: dict[tuple[int, str], tuple[bool, frozenset[int] | None]] = field(
        default_factory=dict
    )  # (line, persona) → readable, label: fixed once said

    def readable(self, line_id: int, persona: str) -> bool:
        """May a model of `persona` be shown this line? A persona's line only when every line
        it had in view may be too: it carries what its persona heard."""
        return self._judge(line_id, persona)[0]

    def label(self, line_id: int, persona: str) -> frozenset[int] | None:
        """Who may know what this line says, for `persona` (`Said.label`), a persona's line
        met with the labels of the lines it had in view."""
        return self._judge(line_id, persona)[1]

    def _judge(self, line_id: int, persona: str) -> tuple[bool, frozenset[int] | None]:
        key = (line_id, persona)
        if key not in self.judged:  # the lines in view are older: judged already, or now
            said = self.said.get(line_id)
            if said is None:
                return False, frozenset()
            ok, out = said.readable(persona), said.label(persona)
            for i in said.in_view:
                seen_ok, seen = self._judge(i, persona)
                ok = ok and seen_ok
                if seen is not None:
                    out = seen if out is None else out & seen
            self.judged[key] = (ok, out)
        return self.judged[key]

    def forget_line(self, room_id: str, line_id: int) -> None:
        """The app deleted the line: no later line has it in view (its hearers still know it)."""
        lines = self.room_lines.get(room_id, [])
        if line_id in lines:
            lines.remove(line_id)
        for persona in PERSONAS:  # an id the store gives again is another line's
            self.judged.pop((line_id, persona), None)

    def fragment(self) -> str:
        marker = f"mk{self.rng.getrandbits(24):06x}"
        text = f"{self.rng.choice(FILLER)} {marker}"
        self.fragments[marker] = text
        return text

    def line_text(self, speaker: int | str, room: Room | None = None) -> str:
        """What a speaker says: one or two new fragments, and sometimes one a human already
        knows (repeated to the room: that is how knowledge travels between people); a persona
        sometimes echoes a fragment of the room's last lines."""
        fresh = self.rng.randint(1, 2) if isinstance(speaker, int) else self.rng.randint(2, 3)
        parts = [self.fragment() for _ in range(fresh)]
        known = self.recent.get(speaker, [])[-6:] if isinstance(speaker, int) else []
        if isinstance(speaker, str) and room is not None and not speaker.startswith("dispatch:"):
            last = self.room_lines.get(room.id, [])[-5:]
            known = [m for i in last for m in self.line_markers.get(i, [])]
        if known and self.rng.random() < 0.5:  # people pass on what they heard lately
            parts.insert(self.rng.randrange(len(parts) + 1), self.fragments[self.rng.choice(known)])
        return " ".join(parts)

    def heard(self, line_id: int, room: Room, speaker: int | str, text: str) -> None:
        """Line `line_id` was said in `room`: its members and its speaker now know it."""
        said = markers(text)
        if isinstance(speaker, str) and speaker.startswith("dispatch:"):
            self.news |= said
        witnesses = set(room.humans) | ({speaker} if isinstance(speaker, int) else set())
        self.line_witnesses[line_id] = frozenset(room.humans)
        everyone = set(room.humans) | ({speaker} if isinstance(speaker, int) else set())
        by_persona = isinstance(speaker, str) and not speaker.startswith("dispatch:")
        lines = self.room_lines.setdefault(room.id, [])
        in_view = tuple(lines[-self.echo_reach :]) if by_persona and self.echo_reach else ()
        lines.append(line_id)
        self.line_markers[line_id] = sorted(said)
        self.said[line_id] = Said(
            speaker=speaker,
            members=frozenset(room.humans),
            personas=frozenset(room.personas),
            kit=room.kit,
            switches={
                h: (self.humans[h].memory_on, frozenset(self.humans[h].mutes))
                for h in everyone
                if h in self.humans
            },
            in_view=in_view,
        )
        for persona in PERSONAS:  # judged now, as the store stamps it: never rebuilt later
            self._judge(line_id, persona)
        for h in witnesses:
            self.knows.setdefault(h, set()).update(said)
            if h != speaker:
                self.recent.setdefault(h, []).extend(sorted(said))
        room.lines += 1

    def may_know(self, human: int, marker: str) -> bool:
        return marker in self.news or marker in self.knows.get(human, set())

    def lets_remember(self, human: int, persona: str) -> bool:
        """Their switches now: memory on, and this persona not muted."""
        h = self.humans[human]
        return h.memory_on and persona not in h.mutes

    def may_show(self, room: Room, persona: str, present: frozenset[int], marker: str) -> bool:
        """docs/design.md §4's subject-present rule (the group scope): a member persona may
        bring a marker into a room when a present member who lets it remember them heard it —
        the only way one enters a group is a row about (or held by) a present, consenting
        witness. Incognito rooms and personas that are not members bring nothing."""
        if room.incognito or persona not in room.personas:
            return False
        return any(
            self.may_know(x, marker)
            for x in present
            if x in room.humans and self.lets_remember(x, persona)
        )

    def disguise(self, human: int) -> str:
        """One spelling of a human's name that the store must still recognise."""
        name = self.humans[human].name
        parts = name.split()
        part = self.rng.choice(parts)
        forms = [
            name,
            part,
            part.upper(),
            f"{part}'s",
            f"Ms {parts[-1]}",
            unicodedata.normalize("NFKC", part).translate(FULL_WIDTH),
            part[:1] + "\u200b" + part[1:],
            part.translate(LOOKALIKE),
            "@" + "".join(parts),
            "@" + "_".join(p.lower() for p in parts),
            f"u:{human}",
            f"ｕ：{str(human).translate(FULL_WIDTH)}",
            _unaccented(part),
        ]
        if len(part) >= 3:  # a disguise read to two letters names nobody (`names.readings`)
            forms += [part.translate(DIGITS), part.translate(GREEK)]
        if not name.isascii() and " " not in name:
            forms.append(f"我和{name}去了")
        form = self.rng.choice(forms)
        self.forms.append((form, human))
        return form


FULL_WIDTH = {c: c + 0xFEE0 for c in range(0x21, 0x7F)}
DIGITS = str.maketrans("aeiostAEIOST", "431057431057")  # "C4r4", "3v3"
GREEK = str.maketrans(  # read aloud as the name: "Καρα", "Ζοε"
    "abdegiklmnoprstuzcABDEGIKLMNOPRSTUZC", "αβδεγικλμνοπρστυζκΑΒΔΕΓΙΚΛΜΝΟΠΡΣΤΥΖΚ"
)


def _unaccented(text: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))

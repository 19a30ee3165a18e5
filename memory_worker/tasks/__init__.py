"""Celery shells over `memory_worker.write`: queues, retries, rate limits, and the chain's own
logic around the steps — a spell's claim on its room, the re-route of a commit that found its
view stale, the begin of a room's next window (`pipeline`), the sweep (`rooms`). What a step
decides about memory stays in `write/`."""

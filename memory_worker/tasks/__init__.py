"""Thin Celery shells over `memory_worker.write`: queues, retries, rate limits — no logic."""

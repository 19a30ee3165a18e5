"""The write path's pure steps — spell, extract, embed, route, commit — with no Celery.

`memory_worker.tasks` wraps each in a thin Celery task; tests call them directly too.
"""

"""The plain shared core: settings, constants, rows and tables, and the pure rules every side
applies (the audience rule, ranking, rendering, toasts, the read cache's structure).

Imports no Celery, Redis or model SDK; nothing here touches the store.
"""

"""The human's side, served (docs/design.md §5): the manage page, the toast rail, the field and the
switches as a small web app — `memory-worker serve`. Server-rendered (Starlette + Jinja2), a
little plain JavaScript for the live parts, and a JSON API under /api/ with the same checks.

Every route acts as the signed-in user through `memory_worker.controls` and reads what the page
shows through `page_model` (its cursors: `cursors`; the export's reads: `export_model`);
nothing else here reads or writes a memory. Importing this package starts nothing.
"""

"""Alembic environment: migrations for the tables in memory_worker/tables.py.

`memory-worker init-db` hands us an open connection; the alembic CLI
(`alembic -c schema/alembic.ini upgrade head`) builds one from the URL.
"""

from alembic import context
from sqlalchemy import create_engine

from memory_worker.tables import metadata

config = context.config
target_metadata = metadata


def run() -> None:
    conn = config.attributes.get("connection")
    if conn is not None:
        context.configure(connection=conn, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    eng = create_engine(config.get_main_option("sqlalchemy.url"))
    with eng.begin() as c:
        context.configure(connection=c, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()


run()

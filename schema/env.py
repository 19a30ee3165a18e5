"""Alembic environment: migrations for the tables in memory_worker/core/tables.py.

`memory-worker init-db` hands us an open connection; the alembic CLI
(`alembic -c schema/alembic.ini upgrade head`) migrates the configured store — the URL
`store.alembic_config` set, else MW_DATABASE_URL / DATABASE_URL, exactly as the workers see it.
"""

from alembic import context
from sqlalchemy import create_engine

from memory_worker.core import settings as settings_mod
from memory_worker.core.tables import metadata

config = context.config
target_metadata = metadata


def run() -> None:
    conn = config.attributes.get("connection")
    if conn is not None:
        context.configure(connection=conn, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    url = config.get_main_option("sqlalchemy.url") or settings_mod.current().database_url
    eng = create_engine(url)
    with eng.begin() as c:
        context.configure(connection=c, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()


run()

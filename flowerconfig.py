"""Flower's settings (`celery flower --conf=flowerconfig.py`), read by Flower itself.

The credentials come from the environment, never the command line (where `ps` shows them),
and as one `user:password` string, so a password with a comma or a space stays whole.
`memory-worker run` sets them from the state folder when the deployer has not
(`memory_worker/ops/flower.py`); another Procfile runner must set them.
Flower binds all interfaces by default and `/metrics` and `/healthcheck` skip auth: loopback.
"""

import logging as _logging  # "_": every other name here is read as a Flower option
import os

# Flower inspects the workers as it starts, usually before they are up, and logs a WARNING
# per method that no worker answered (four at every `memory-worker run`). The supervisor says
# when each worker answers; a failure to reach the broker (logged with its error) still shows.
_logging.getLogger("flower.inspector").addFilter(
    lambda record: record.msg != "Inspect method %s failed"
)

_user, _password = os.environ.get("FLOWER_USER"), os.environ.get("FLOWER_PASSWORD")
if not (_user and _password):
    raise SystemExit("flower: set FLOWER_USER and FLOWER_PASSWORD (basic auth is always on)")

address = "127.0.0.1"
port = int(os.environ.get("FLOWER_PORT", "5555"))
basic_auth = [f"{_user}:{_password}"]

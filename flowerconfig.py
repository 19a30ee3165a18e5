"""Flower's settings (`celery flower --conf=flowerconfig.py`), read by Flower itself.

The credentials come from the environment, never the command line (where `ps` shows them),
and as one `user:password` string, so a password with a comma or a space stays whole.
`memory-worker run` sets them from the state folder when the deployer has not
(`memory_worker/ops/flower.py`); another Procfile runner must set them.
Flower binds all interfaces by default and `/metrics` and `/healthcheck` skip auth: loopback.
"""

import os

_user, _password = os.environ.get("FLOWER_USER"), os.environ.get("FLOWER_PASSWORD")
if not (_user and _password):
    raise SystemExit("flower: set FLOWER_USER and FLOWER_PASSWORD (basic auth is always on)")

address = "127.0.0.1"
port = int(os.environ.get("FLOWER_PORT", "5555"))
basic_auth = [f"{_user}:{_password}"]

"""The operations side: the broker and its embedded Redis, the model quota, the in-flight key,
the spell log, metrics, the toast bus, and the supervisor that runs the Procfile.

May import the core and the model interfaces, never the write or read paths.
"""

"""gunicorn -c gunicorn.conf.py wsgi:app — the same settings and hooks as ``layang serve``: the
schema is upgraded once, in the master, and the workers only open the database."""

from layang.config import Config
from layang.serving import gunicorn_settings

globals().update(gunicorn_settings(Config.from_env()))

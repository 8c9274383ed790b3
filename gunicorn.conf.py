"""gunicorn -c gunicorn.conf.py wsgi:app — the same settings and fork hooks as ``layang serve``."""

from layang.config import Config
from layang.serving import gunicorn_settings

globals().update(gunicorn_settings(Config.from_env()))

"""gunicorn -c gunicorn.conf.py wsgi:app, from a checkout: the settings of ``layang serve``
(installed: ``gunicorn -c python:layang.gunicorn_conf layang.wsgi:app``)."""

from layang.gunicorn_conf import *  # noqa: F403

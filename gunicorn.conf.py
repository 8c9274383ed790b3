"""gunicorn -c gunicorn.conf.py wsgi:app, from a checkout: the settings of ``layang serve``
(installed: ``gunicorn -c python:layang.serving.gunicorn_conf layang.serving.wsgi:app``)."""

from layang.serving.gunicorn_conf import *  # noqa: F403

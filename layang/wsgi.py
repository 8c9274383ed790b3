"""The WSGI application, for a WSGI server run by hand: ``gunicorn -c python:layang.gunicorn_conf
layang.wsgi:app`` (installed package) or ``gunicorn -c gunicorn.conf.py wsgi:app`` (checkout)."""

from layang.app import create_app

app = create_app()

"""The WSGI application, for a WSGI server run by hand: ``gunicorn -c
python:layang.serving.gunicorn_conf layang.serving.wsgi:app`` (installed package) or ``gunicorn -c
gunicorn.conf.py wsgi:app`` (checkout)."""

from layang.serving.app import create_app

app = create_app()

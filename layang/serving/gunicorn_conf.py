"""gunicorn's settings and hooks as ``layang serve`` uses them, for running gunicorn by hand::

    gunicorn -c python:layang.serving.gunicorn_conf layang.serving.wsgi:app

The configuration is checked first, as every ``layang`` command does: a setting that cannot work
stops gunicorn with one line naming the variable and exit status 2 (gunicorn binds the listen
address itself). An unreachable PostgreSQL is only reported: the API answers 503 until it is back.
"""

import sys

from layang.config import Config, ConfigError
from layang.serving.preflight import CREATE, DatabaseUnreachable, Needs, PreflightError, check
from layang.serving.processes import gunicorn_settings

try:
    _config = Config.from_env()
    check(_config, Needs(CREATE)).close()
except DatabaseUnreachable as error:
    print(f"{error}; starting anyway, answering 503 until it does", file=sys.stderr)
except (ConfigError, PreflightError) as error:
    print(error, file=sys.stderr)
    sys.exit(2)

_settings = gunicorn_settings(_config)
globals().update(_settings)
__all__ = list(_settings)

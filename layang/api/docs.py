"""``/docs``: Swagger UI over ``/openapi.json``, from the ``swagger-ui-bundle`` package.

Rendered here rather than by flask-smorest because its page starts Swagger UI from an inline
script, which the pages' Content-Security-Policy (``script-src 'self'``) rightly blocks: the
start-up code is served as a script of our own instead, so the policy stays the same everywhere.
"""

from __future__ import annotations

import flask
from markupsafe import escape
from swagger_ui_bundle import swagger_ui_path

ASSETS = "/docs/assets/"

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>{title}</title>
  <link rel="stylesheet" href="{assets}swagger-ui.css">
</head>
<body>
  <div id="swagger-ui"></div>
  <script src="{assets}swagger-ui-bundle.js"></script>
  <script src="/docs/start.js"></script>
</body>
</html>
"""

START = """window.addEventListener("load", function () {
  window.ui = SwaggerUIBundle({url: "/openapi.json", dom_id: "#swagger-ui", deepLinking: true});
});
"""


def register_docs(app: flask.Flask) -> None:
    @app.get("/docs")
    def docs() -> flask.Response:
        title = f"{app.config['API_TITLE']} API {app.config['API_VERSION']}"
        return flask.Response(PAGE.format(title=escape(title), assets=ASSETS), mimetype="text/html")

    @app.get("/docs/start.js")
    def docs_start() -> flask.Response:
        return flask.Response(START, mimetype="text/javascript")

    @app.get(ASSETS + "<path:filename>")
    def docs_assets(filename: str) -> flask.Response:
        # Swagger UI comes from a Python package so /docs works with no network access.
        return flask.send_from_directory(str(swagger_ui_path), filename, max_age=86400)

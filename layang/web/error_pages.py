"""Errors on the pages answered as pages, in the site's look: never the API's JSON body, never
a trace.

Flask hands a blueprint's handlers only the errors of requests routed to it; an unknown URL or
a wrong method belongs to no blueprint. So the web blueprint owns every URL under its page
prefixes: a catch-all rule takes what no page matches and answers 404, or 405 where the address
exists for other methods. Everything outside those prefixes keeps the API's error body.
"""

from __future__ import annotations

import logging
from typing import Any, NoReturn

import flask
from flask import current_app, render_template, request, url_for
from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound

from layang.db import UNAVAILABLE_ERRORS, discard_connection, error_summary
from layang.domain import errors as domain
from layang.web.csrf import FormExpired

log = logging.getLogger("layang.web")

PAGE_PREFIXES = ("/console/", "/consent/")
CATCH_ALL = "unknown_page"
# Methods the catch-all takes, so that a wrong one on a page address is a page too.
PAGE_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
RETRY_AFTER_SECONDS = "5"

_TITLES = {
    400: "Bad request",
    404: "Not found",
    405: "Not allowed",
    413: "Too large",
    500: "Something went wrong",
    503: "Unavailable right now",
}


def _under(prefix: str) -> bool:
    return request.path == prefix.rstrip("/") or request.path.startswith(prefix)


def _in_console() -> bool:
    return _under("/console/")


def page(
    status: int,
    message: str,
    *,
    link: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
) -> flask.Response:
    """An error page: the console's inside the console, a card elsewhere."""
    if link is None and _in_console():
        link = {"href": url_for("web.console_activity"), "label": "Back to the console"}
    template = "console/error.html" if _in_console() else "error.html"
    title = _TITLES.get(status, "Error")
    response = flask.make_response(
        render_template(template, title=title, message=message, link=link), status
    )
    response.headers.update(headers or {})
    return response


def not_found() -> flask.Response:
    if _in_console():
        return flask.make_response(render_template("console/not_found.html"), 404)
    if _under("/consent/"):
        return flask.make_response(render_template("consent_invalid.html"), 404)
    return page(404, "This link is not valid.")


def handle_http_exception(error: HTTPException) -> flask.Response:
    status = error.code or 500
    if isinstance(error, FormExpired):
        return page(400, error.description, link={"href": error.back, "label": "Reload the page"})
    if status == 404:
        return not_found()
    if status == 405:
        allowed = ", ".join(getattr(error, "valid_methods", None) or ())
        message = f"This page does not take {request.method} requests."
        return page(405, message, headers={"Allow": allowed} if allowed else None)
    if status == 413:
        return page(413, "The form is larger than this server accepts.")
    if status >= 500:
        return page(status, "Something went wrong; it has been logged.")
    return page(status, f"{error.name}.")


def handle_domain_error(error: domain.LayangError) -> flask.Response:
    """A refusal the page did not handle itself: what was asked for is missing, or not
    acceptable as given."""
    if isinstance(error, domain.NotFound):
        return not_found()
    if isinstance(error, domain.Forbidden):
        return page(403, error.message)
    return page(400, error.message)


def unavailable() -> flask.Response:
    return page(
        503,
        "The service cannot reach its database right now; try again in a moment.",
        headers={"Retry-After": RETRY_AFTER_SECONDS},
    )


def handle_database_unavailable(error: Exception) -> flask.Response:
    log.error("database unavailable path=%s error=%s", request.path, error_summary(error))
    discard_connection()  # the next request on this thread opens a fresh connection
    return unavailable()


def handle_unexpected(error: Exception) -> flask.Response:
    if isinstance(error, HTTPException):
        return handle_http_exception(error)
    log.exception("unhandled error path=%s", request.path)
    return page(500, "Something went wrong; it has been logged.")


def unknown_page(rest: str = "") -> NoReturn:
    """What no page under the page prefixes matches."""
    adapter = current_app.create_url_adapter(request)
    allowed = [method for method in PAGE_METHODS if _routes_to_a_page(adapter, method)]
    if allowed:
        raise MethodNotAllowed(valid_methods=allowed)
    raise NotFound()


def _routes_to_a_page(adapter: Any, method: str) -> bool:
    try:
        endpoint, _ = adapter.match(request.path, method=method)
    except HTTPException:  # no rule for this method (or a redirect to another address)
        return False
    return endpoint != f"{request.blueprint}.{CATCH_ALL}"


def register(blueprint: flask.Blueprint) -> None:
    for prefix in PAGE_PREFIXES:
        for rule in (prefix, prefix + "<path:rest>"):
            blueprint.add_url_rule(
                rule,
                CATCH_ALL,
                unknown_page,
                methods=list(PAGE_METHODS),
                provide_automatic_options=False,
                strict_slashes=False,  # "/consent" is a page's address too, not a redirect
            )
    blueprint.register_error_handler(HTTPException, handle_http_exception)
    blueprint.register_error_handler(domain.LayangError, handle_domain_error)
    for unavailable_error in UNAVAILABLE_ERRORS:
        blueprint.register_error_handler(unavailable_error, handle_database_unavailable)
    blueprint.register_error_handler(Exception, handle_unexpected)

"""Errors raised by the template store. None of them depends on a web framework: the HTTP layer
maps each class to a status and an error code."""

from __future__ import annotations


class TemplateStoreError(Exception):
    """Base class of every error raised by ``templates_store``."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class TemplateSyntaxError(TemplateStoreError):
    """A template part does not parse, or uses a construct the shortcode language refuses.

    ``part`` is ``"subject"``, ``"bodyHtml"`` or ``"bodyText"``; ``line`` is the 1-based line in
    that part as the client wrote it (``None`` when no line can be named). ``str()`` reads like
    ``bodyHtml line 3: unexpected '}'``.
    """

    def __init__(self, part: str, line: int | None, message: str) -> None:
        self.part = part
        self.line = line
        self.detail = message
        where = part if line is None else f"{part} line {line}"
        super().__init__(f"{where}: {message}")


class RenderError(TemplateStoreError):
    """Rendering failed: a limit was exceeded (output size, loop iterations, time) or the template
    did something invalid with the data (e.g. compared a missing value, iterated over a number).

    ``part`` and ``line`` locate the failure when known.
    """

    def __init__(self, message: str, part: str | None = None, line: int | None = None) -> None:
        self.part = part
        self.line = line
        self.detail = message
        if part is None:
            text = message
        elif line is None:
            text = f"{part}: {message}"
        else:
            text = f"{part} line {line}: {message}"
        super().__init__(text)


class InvalidTemplate(TemplateStoreError):
    """A field of a template is invalid (malformed id, empty name, …); ``field`` names it with
    the API's spelling (docs/api.md) (``id``, ``name``, …)."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(message)


class TemplateNotFound(TemplateStoreError):
    """No template (or template version) with that id exists for the account."""


class TemplateConflict(TemplateStoreError):
    """A template with that id already exists for the account."""


class PreconditionFailed(TemplateStoreError):
    """The expected version (If-Match) is not the template's current version.

    ``current_version`` is the version found, or ``None`` if it could not be determined.
    """

    def __init__(self, message: str, current_version: int | None = None) -> None:
        self.current_version = current_version
        super().__init__(message)

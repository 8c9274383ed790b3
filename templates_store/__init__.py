"""Email templates: storage with versions, the sandboxed shortcode language, CSS inlining.

Pure Python plus peewee models; it knows nothing of HTTP. See :mod:`templates_store.store` for
the account-scoped operations and :mod:`templates_store.render` for compiling and rendering.
"""

from templates_store.css import inline_css
from templates_store.errors import (
    InvalidTemplate,
    PreconditionFailed,
    RenderError,
    TemplateConflict,
    TemplateNotFound,
    TemplateStoreError,
    TemplateSyntaxError,
)
from templates_store.models import MODELS, Template, TemplateVersion
from templates_store.render import (
    CompiledTemplate,
    RenderedContent,
    RenderLimits,
    TemplateCache,
    compile_template,
    extract_shortcodes,
    render_subject,
    sample_data,
)
from templates_store.store import (
    ID_PATTERN,
    MAX_NAME_LENGTH,
    UNSET,
    TemplatePage,
    TemplateRecord,
    TemplateVersionRecord,
    bind,
    compiled_version,
    create_template,
    delete_template,
    get_template,
    get_version,
    list_templates,
    preview,
    render_version,
    update_template,
    version_from_etag,
)

__all__ = [
    "ID_PATTERN",
    "MAX_NAME_LENGTH",
    "MODELS",
    "UNSET",
    "CompiledTemplate",
    "InvalidTemplate",
    "PreconditionFailed",
    "RenderError",
    "RenderLimits",
    "RenderedContent",
    "Template",
    "TemplateCache",
    "TemplateConflict",
    "TemplateNotFound",
    "TemplatePage",
    "TemplateRecord",
    "TemplateStoreError",
    "TemplateSyntaxError",
    "TemplateVersion",
    "TemplateVersionRecord",
    "bind",
    "compile_template",
    "compiled_version",
    "create_template",
    "delete_template",
    "extract_shortcodes",
    "get_template",
    "get_version",
    "inline_css",
    "list_templates",
    "preview",
    "render_subject",
    "render_version",
    "sample_data",
    "update_template",
    "version_from_etag",
]

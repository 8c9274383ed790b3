from __future__ import annotations

import re

import peewee
import pytest

from templates_store import store
from templates_store.errors import (
    InvalidTemplate,
    PreconditionFailed,
    RenderError,
    TemplateConflict,
    TemplateNotFound,
    TemplateSyntaxError,
)
from templates_store.models import Template, TemplateVersion
from templates_store.store import (
    UNSET,
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

ACCOUNT = 1
OTHER = 2

STYLED = (
    "<html><head><style>p { color: red }</style></head>"
    '<body><p>Hi {{ name }}</p><a href="https://x.test/u/{{ id }}">x</a></body></html>'
)


def test_crud_lifecycle_with_versions(db: peewee.Database) -> None:
    created = create_template(
        ACCOUNT,
        template_id="welcome",
        name="Welcome",
        subject="Hi {{ name }}",
        body_html=STYLED,
        body_text="Hi {{ name }}",
    )
    assert created.id == "welcome"
    assert created.version == 1
    assert created.shortcodes == ("id", "name")
    assert created.body_html == STYLED
    assert created.etag == '"welcome-v1"'
    assert created.created_at == created.updated_at

    assert get_template(ACCOUNT, "welcome") == created

    sent = get_version(ACCOUNT, "welcome", 1)
    assert sent.source_html == STYLED
    assert '<p style="color:red">Hi {{ name }}</p>' in (sent.body_html or "")
    assert 'href="https://x.test/u/{{ id }}"' in (sent.body_html or "")

    updated = update_template(ACCOUNT, "welcome", subject="Hello {{ name }}", if_match_version=1)
    assert updated.version == 2
    assert updated.subject == "Hello {{ name }}"
    assert updated.body_text == "Hi {{ name }}"
    assert updated.body_html == STYLED
    assert updated.name == "Welcome"
    assert updated.created_at == created.created_at
    assert updated.updated_at >= created.updated_at
    assert get_template(ACCOUNT, "welcome") == updated

    with pytest.raises(PreconditionFailed) as stale:
        update_template(ACCOUNT, "welcome", name="Stale", if_match_version=1)
    assert stale.value.current_version == 2
    assert get_template(ACCOUNT, "welcome").name == "Welcome"

    renamed = update_template(ACCOUNT, "welcome", name="Renamed", body_text=None)
    assert (renamed.version, renamed.name, renamed.body_text) == (3, "Renamed", None)
    assert get_version(ACCOUNT, "welcome", 1).subject == "Hi {{ name }}"

    delete_template(ACCOUNT, "welcome")
    with pytest.raises(TemplateNotFound):
        get_template(ACCOUNT, "welcome")
    with pytest.raises(TemplateNotFound):
        get_version(ACCOUNT, "welcome", 1)
    with pytest.raises(TemplateNotFound):
        delete_template(ACCOUNT, "welcome")
    assert TemplateVersion.select().count() == 0


def test_pinned_old_version_renders_after_update(db: peewee.Database) -> None:
    create_template(ACCOUNT, template_id="order", name="Order", subject="v1 {{ n }}")
    update_template(ACCOUNT, "order", subject="v2 {{ n }}")
    assert render_version(ACCOUNT, "order", 1, {"n": 7}).subject == "v1 7"
    assert render_version(ACCOUNT, "order", 2, {"n": 7}).subject == "v2 7"
    assert preview(ACCOUNT, "order", {"n": 7}).subject == "v2 7"

    store.cache.clear()
    assert render_version(ACCOUNT, "order", 1, {"n": 8}).subject == "v1 8"
    with pytest.raises(TemplateNotFound):
        render_version(ACCOUNT, "order", 3, {})


def test_recreated_template_never_renders_a_cached_old_version(db: peewee.Database) -> None:
    create_template(ACCOUNT, template_id="t", name="T", subject="old")
    assert render_version(ACCOUNT, "t", 1, {}).subject == "old"
    # Deleted and recreated behind this process's back (e.g. by another worker).
    template = Template.get(Template.template_id == "t")
    TemplateVersion.delete().where(TemplateVersion.template == template.id).execute()
    template.delete_instance()
    create_template(ACCOUNT, template_id="t", name="T", subject="new")
    assert render_version(ACCOUNT, "t", 1, {}).subject == "new"


def test_html_is_rendered_from_the_inlined_copy(db: peewee.Database) -> None:
    create_template(ACCOUNT, template_id="s", name="S", body_html=STYLED)
    html = preview(ACCOUNT, "s", {"name": "<Ana>", "id": "42"}).body_html
    assert html is not None
    assert '<p style="color:red">Hi &lt;Ana&gt;</p>' in html
    assert 'href="https://x.test/u/42"' in html


def test_accounts_are_isolated(db: peewee.Database) -> None:
    create_template(ACCOUNT, template_id="shared", name="Mine", subject="mine")
    create_template(OTHER, template_id="shared", name="Theirs", subject="theirs")
    create_template(ACCOUNT, template_id="private", name="Private", subject="p")

    assert get_template(OTHER, "shared").name == "Theirs"
    for call in (
        lambda: get_template(OTHER, "private"),
        lambda: get_version(OTHER, "private", 1),
        lambda: render_version(OTHER, "private", 1, {}),
        lambda: preview(OTHER, "private", {}),
        lambda: update_template(OTHER, "private", name="x"),
        lambda: delete_template(OTHER, "private"),
    ):
        with pytest.raises(TemplateNotFound):
            call()
    assert [t.id for t in list_templates(OTHER).items] == ["shared"]
    delete_template(OTHER, "shared")
    assert get_template(ACCOUNT, "shared").subject == "mine"


def test_duplicate_id_conflicts(db: peewee.Database) -> None:
    create_template(ACCOUNT, template_id="dup", name="A")
    with pytest.raises(TemplateConflict):
        create_template(ACCOUNT, template_id="dup", name="B")
    assert get_template(ACCOUNT, "dup").name == "A"


@pytest.mark.parametrize(
    "template_id", ["", "Upper", "_lead", "-lead", "a" * 65, "sp ace", "é", "a\n", "a/b"]
)
def test_invalid_ids_are_refused(db: peewee.Database, template_id: str) -> None:
    with pytest.raises(InvalidTemplate) as caught:
        create_template(ACCOUNT, template_id=template_id, name="x")
    assert caught.value.field == "id"


def test_valid_and_generated_ids(db: peewee.Database) -> None:
    assert create_template(ACCOUNT, template_id="a" * 64, name="x").id == "a" * 64
    assert create_template(ACCOUNT, template_id="0_a-b", name="x").id == "0_a-b"
    generated = create_template(ACCOUNT, name="x").id
    assert re.fullmatch(r"[a-z2-7]{20}", generated)
    assert generated != create_template(ACCOUNT, name="x").id


def test_invalid_name_is_refused(db: peewee.Database) -> None:
    with pytest.raises(InvalidTemplate) as caught:
        create_template(ACCOUNT, template_id="n", name="  ")
    assert caught.value.field == "name"
    create_template(ACCOUNT, template_id="n", name="ok")
    with pytest.raises(InvalidTemplate):
        update_template(ACCOUNT, "n", name=None)  # type: ignore[arg-type]


def test_syntax_errors_are_refused_and_nothing_is_stored(db: peewee.Database) -> None:
    with pytest.raises(TemplateSyntaxError) as caught:
        create_template(ACCOUNT, template_id="bad", name="x", body_html="<p>\n{% if x %}")
    assert caught.value.part == "bodyHtml"
    assert Template.select().count() == 0

    create_template(ACCOUNT, template_id="good", name="x", body_text="ok")
    with pytest.raises(TemplateSyntaxError) as caught:
        update_template(ACCOUNT, "good", body_text="a\nb\n{{ x }")
    assert (caught.value.part, caught.value.line) == ("bodyText", 3)
    assert get_template(ACCOUNT, "good").version == 1


def test_syntax_error_lines_refer_to_the_client_source(db: peewee.Database) -> None:
    source = "<style>p { color: red }</style>\n<p>\n\n{{ x }</p>"
    with pytest.raises(TemplateSyntaxError) as caught:
        create_template(ACCOUNT, template_id="lines", name="x", body_html=source)
    assert caught.value.line == 4


def test_list_pages_by_id(db: peewee.Database) -> None:
    for template_id in ["c", "a", "e", "b", "d"]:
        create_template(ACCOUNT, template_id=template_id, name=template_id.upper())
    update_template(ACCOUNT, "b", name="B2")
    create_template(OTHER, template_id="aa", name="other")

    page = list_templates(ACCOUNT, limit=2)
    assert [t.id for t in page.items] == ["a", "b"]
    assert page.items[1].version == 2
    assert page.items[1].name == "B2"
    assert page.next_cursor == "b"
    page = list_templates(ACCOUNT, limit=2, after=page.next_cursor)
    assert [t.id for t in page.items] == ["c", "d"]
    page = list_templates(ACCOUNT, limit=2, after=page.next_cursor)
    assert [t.id for t in page.items] == ["e"]
    assert page.next_cursor is None
    page = list_templates(ACCOUNT, limit=5)
    assert len(page.items) == 5
    assert page.next_cursor is None
    with pytest.raises(ValueError):
        list_templates(ACCOUNT, limit=0)


def test_render_errors_surface(db: peewee.Database) -> None:
    create_template(ACCOUNT, template_id="r", name="R", body_text="{% for x in n %}{% endfor %}")
    with pytest.raises(RenderError):
        preview(ACCOUNT, "r", {"n": 3})


def test_update_without_changes_still_creates_a_version(db: peewee.Database) -> None:
    create_template(ACCOUNT, template_id="same", name="Same", subject="s")
    assert update_template(ACCOUNT, "same").version == 2
    assert get_version(ACCOUNT, "same", 2).subject == "s"


def test_unset_is_the_default_of_update_fields() -> None:
    assert repr(UNSET) == "UNSET"


def test_version_from_etag() -> None:
    assert version_from_etag('"welcome-v12"', "welcome") == 12
    assert version_from_etag('W/"welcome-v3"', "welcome") == 3
    assert version_from_etag('"other-v3"', "welcome") is None
    assert version_from_etag('"welcome-vx"', "welcome") is None
    assert version_from_etag("*", "welcome") is None


def test_concurrent_update_is_applied_on_top_of_the_newer_version(
    db: peewee.Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_template(ACCOUNT, template_id="race", name="Race", subject="s1", body_text="t1")
    prepare = store._prepare
    raced = []

    def prepare_then_race(*args):
        if not raced:
            raced.append(True)
            update_template(ACCOUNT, "race", body_text="t2")
        return prepare(*args)

    monkeypatch.setattr(store, "_prepare", prepare_then_race)
    result = update_template(ACCOUNT, "race", subject="s3")
    assert (result.version, result.subject, result.body_text) == (3, "s3", "t2")


def test_concurrent_update_with_if_match_fails(
    db: peewee.Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_template(ACCOUNT, template_id="race", name="Race", subject="s1")
    prepare = store._prepare
    raced = []

    def prepare_then_race(*args):
        if not raced:
            raced.append(True)
            update_template(ACCOUNT, "race", subject="s2")
        return prepare(*args)

    monkeypatch.setattr(store, "_prepare", prepare_then_race)
    with pytest.raises(PreconditionFailed):
        update_template(ACCOUNT, "race", subject="s3", if_match_version=1)
    assert get_template(ACCOUNT, "race").subject == "s2"

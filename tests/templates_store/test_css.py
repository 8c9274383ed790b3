from __future__ import annotations

from templates_store.render import compile_template, inline_css

DOCUMENT = """<!DOCTYPE html>
<html><head><title>{{ subject }}</title><style>
p { color: red; }
.btn { background: {{ brand.color }}; padding: {{pad}}px }
@media only screen and (max-width: 600px) { .col { width: 100% !important; } }
a:hover { color: green }
</style></head><body>
<table>{% for r in rows %}<tr><td class="col">{{ r.name }}</td></tr>{% endfor %}</table>
<p><a class="btn" href="https://x.test/u/{{ id }}?a={{name}}">Go</a> <img src="{{img}}"></p>
<p><a href="{{{ raw_url }}}">raw</a></p>
</body></html>"""

DATA = {
    "subject": "Hello",
    "brand": {"color": "#123456"},
    "pad": 4,
    "rows": [{"name": "one"}, {"name": "two"}],
    "id": "u 42",
    "name": "Ana & Bo",
    "img": "https://cdn.test/a.png",
    "raw_url": "https://x.test/?a=1&b=2",
}


def test_styles_are_inlined() -> None:
    inlined = inline_css(DOCUMENT)
    assert '<p style="color:red">' in inlined
    assert "p { color: red; }" not in inlined


def test_doctype_and_media_queries_survive() -> None:
    inlined = inline_css(DOCUMENT)
    assert inlined.startswith("<!DOCTYPE html>")
    assert "@media only screen and (max-width: 600px)" in inlined
    assert "!important" in inlined
    assert "a:hover" in inlined


def test_shortcodes_in_links_survive_inlining_intact() -> None:
    inlined = inline_css(DOCUMENT)
    assert 'href="https://x.test/u/{{ id }}?a={{name}}"' in inlined
    assert 'src="{{img}}"' in inlined
    assert 'href="{{{ raw_url }}}"' in inlined
    assert "<title>{{ subject }}</title>" in inlined
    assert "%20" not in inlined
    assert "%7B" not in inlined.upper()
    assert "{% for r in rows %}<tr>" in inlined
    assert "background:{{ brand.color }}; padding:{{pad}}px" in inlined


def test_inlined_template_renders_correctly() -> None:
    rendered = compile_template(None, inline_css(DOCUMENT), None).render(DATA).body_html
    assert rendered is not None
    assert 'href="https://x.test/u/u 42?a=Ana &amp; Bo"' in rendered
    assert 'src="https://cdn.test/a.png"' in rendered
    assert 'href="https://x.test/?a=1&b=2"' in rendered
    assert "<title>Hello</title>" in rendered
    assert 'style="background:#123456; padding:4px"' in rendered
    assert '<td class="col">one</td></tr><tr><td class="col">two</td>' in rendered


def test_nothing_to_inline_leaves_html_unchanged() -> None:
    fragment = "<p>Hi {{ name }}</p>"
    assert inline_css(fragment) == fragment
    assert inline_css("") == ""
    assert inline_css("   ") == "   "


def test_template_syntax_premailer_would_rewrite_keeps_the_source() -> None:
    # A matched element's style attribute made of a shortcode is not CSS premailer can merge.
    source = '<style>p { color: red }</style><p style="{{ styles }}">x</p>'
    assert inline_css(source) == source


def test_no_network_access_for_linked_stylesheets() -> None:
    source = (
        '<html><head><link rel="stylesheet" href="https://unreachable.invalid/a.css">'
        "<style>p { color: red }</style></head><body><p>x</p></body></html>"
    )
    assert '<p style="color:red">' in inline_css(source)

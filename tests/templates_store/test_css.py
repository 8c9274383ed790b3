from __future__ import annotations

import re

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


# Rules a mail designer writes, each with what premailer turns into presentational attributes.
STYLED = """<!DOCTYPE html>
<html><head><style>
body { background-color: #eeeeee; margin: 0 }
td.button { background-color: #ff6600 !important; width: 200px !important }
td.cell { background-color: rgb(0, 128, 255); width: 50%; height: 40px; text-align: right;
  vertical-align: top }
td.soft { background-color: rgba(255, 0, 0, 0.5); width: 12em; height: 2.5em }
td.named { background-color: teal; width: auto; vertical-align: 10px }
td.short { background-color: #abc; text-align: center }
table.outer { width: 600px; text-align: center; background-color: #FFF }
img.logo { width: 120px; height: 30px; text-align: right }
img.wide { width: 100% }
p.lead { text-align: justify; width: 300px; color: #333 }
div.box { background-color: #123456; width: 70%; text-align: right }
.keep { color: green !important }
@media only screen and (max-width: 480px) {
  td.button { width: 100% !important; background-color: #00aa00 !important }
  table.outer { width: 100% !important }
}
</style></head><body>
<table id="outer" class="outer" width="640"><tr>
<td id="button" class="button">Buy</td>
<td id="cell" class="cell">Cell</td>
<td id="soft" class="soft">Soft</td>
<td id="named" class="named">Named</td>
<td id="short" class="short" style="color: blue">Short</td>
</tr><tr><td colspan="5">
<img id="logo" class="logo" alt="logo" src="data:image/gif;base64,R0lGODlhAQABAAAAACw=">
<img id="wide" class="wide" alt="wide" src="data:image/gif;base64,R0lGODlhAQABAAAAACw=">
<p id="lead" class="lead">Lead <span id="keep" class="keep" style="color: red">kept</span></p>
<div id="box" class="box">Box</div>
</td></tr></table>
</body></html>"""
COMPUTED = (
    "backgroundColor",
    "color",
    "width",
    "height",
    "textAlign",
    "verticalAlign",
    "marginLeft",
    "float",
)
VALID_ATTRIBUTE = {
    "bgcolor": r"#[0-9a-fA-F]{6}",
    "width": r"\d+%?",
    "height": r"\d+",
    "align": r"left|right|center|justify",
    "valign": r"top|middle|bottom|baseline",
}


def drawn(browser, html: str, width: int) -> dict[str, dict[str, str]]:
    page = browser.new_page(viewport={"width": width, "height": 800})
    page.set_content(html)
    styles = page.evaluate(
        """(names) => Object.fromEntries([...document.querySelectorAll('[id]')].map(el => {
            const style = getComputedStyle(el);
            return [el.id, Object.fromEntries(names.map(n => [n, style[n]]))];
        }))""",
        list(COMPUTED),
    )
    page.close()
    return styles


def test_inlined_template_is_drawn_as_the_original(db, browser) -> None:
    from templates_store.store import create_template, get_version

    create_template(1, template_id="styled", name="Styled", body_html=STYLED)
    saved = get_version(1, "styled", 1).body_html
    assert saved is not None and "td.cell" not in saved  # inlined, not kept

    for name, value in re.findall(r'\s(bgcolor|width|height|align|valign)="([^"]*)"', saved):
        assert re.fullmatch(VALID_ATTRIBUTE[name], value), f'{name}="{value}"'
    assert 'bgcolor="#ff6600"' in saved and 'bgcolor="#aabbcc"' in saved
    assert "!important" in saved.split("</style>")[0]  # the media query still wins
    for width in (800, 400):
        assert drawn(browser, saved, width) == drawn(browser, STYLED, width), width

from __future__ import annotations

import threading

import pytest

from templates_store.render import (
    RenderError,
    RenderLimits,
    TemplateCache,
    TemplateSyntaxError,
    compile_template,
    extract_shortcodes,
)


def html(source: str, data: dict | None = None) -> str | None:
    return compile_template(None, source, None).render(data).body_html


def text(source: str, data: dict | None = None) -> str | None:
    return compile_template(None, None, source).render(data).body_text


def test_html_is_escaped_and_triple_braces_are_raw() -> None:
    data = {"name": "<b>Tom & Jerry</b>", "quote": '"hi"'}
    assert html("<p>{{name}}</p>", data) == "<p>&lt;b&gt;Tom &amp; Jerry&lt;/b&gt;</p>"
    assert html("<p>{{{name}}}</p>", data) == "<p><b>Tom & Jerry</b></p>"
    assert html("<a title='{{ quote }}'>", data) == "<a title='&#34;hi&#34;'>"
    assert html("{{{ name|upper }}}", data) == "<B>TOM & JERRY</B>"


def test_text_and_subject_are_raw() -> None:
    rendered = compile_template("Hi {{name}}", "{{name}}", "Hi {{name}}").render({"name": "<A&B>"})
    assert rendered.subject == "Hi <A&B>"
    assert rendered.body_text == "Hi <A&B>"
    assert rendered.body_html == "&lt;A&amp;B&gt;"


def test_absent_parts_stay_none() -> None:
    rendered = compile_template("S", None, None).render({})
    assert rendered.subject == "S"
    assert rendered.body_html is None
    assert rendered.body_text is None


def test_subject_line_breaks_cannot_inject_headers() -> None:
    subject = compile_template("Hello {{name}}\n", None, None).render(
        {"name": "x\r\nBcc: victim@example.test\rX\nY"}
    )
    assert subject.subject == "Hello x Bcc: victim@example.test X Y "
    assert "\r" not in subject.subject
    assert "\n" not in subject.subject


def test_spaces_inside_braces_are_allowed() -> None:
    assert text("{{ name }}|{{name}}|{{{ name }}}", {"name": "n"}) == "n|n|n"


def test_dotted_paths_and_missing_values() -> None:
    data = {"user": {"first": "Ana", "address": {"city": "Lisboa"}}, "none": None}
    assert text("{{user.first}} {{ user.address.city }}", data) == "Ana Lisboa"
    assert text("[{{missing}}][{{user.last}}][{{nobody.address.city}}][{{none}}]", data) == (
        "[][][][]"
    )
    assert text("[{{ user.first.x.y }}][{{ user['first'] }}]", data) == "[][Ana]"
    assert text("{{ missing|default('guest') }}", data) == "guest"


def test_keys_named_like_dict_methods_give_the_data() -> None:
    data = {
        "items": "I",
        "keys": "K",
        "values": "V",
        "get": "G",
        "user": {"items": "UI", "keys": "UK", "update": "UU", "pop": "UP"},
    }
    source = "{{items}} {{keys}} {{values}} {{get}} {{user.items}} {{user.keys}} {{user.update}}"
    assert text(source + " {{user.pop}}", data) == "I K V G UI UK UU UP"
    assert text("{{ user.values }}", {"user": {}}) == ""


def test_if_elif_else() -> None:
    source = "{% if n > 10 %}big{% elif n > 1 %}some{% else %}few{% endif %}"
    assert text(source, {"n": 20}) == "big"
    assert text(source, {"n": 5}) == "some"
    assert text(source, {"n": 0}) == "few"
    assert text("{% if vip %}VIP{% endif %}", {}) == ""


def test_for_loops_with_loop_variables_and_filters() -> None:
    source = (
        "{% for line in lines %}{{ loop.index }}/{{ loop.length }}:{{ line.name|upper }}"
        "{% if not loop.last %}, {% endif %}{% else %}empty{% endfor %}"
    )
    assert text(source, {"lines": [{"name": "a"}, {"name": "b"}]}) == "1/2:A, 2/2:B"
    assert text(source, {"lines": []}) == "empty"
    assert text(source, {}) == "empty"
    assert text("{% for i in range(3) %}{{ loop.cycle('x', 'y') }}{{ i }}{% endfor %}") == (
        "x0y1x2"
    )
    pairs = "{% for k, v in d|dictsort %}{{k}}={{v}};{% endfor %}"
    assert text(pairs, {"d": {"b": 2, "a": 1}}) == "a=1;b=2;"
    assert text("{{ rows|map(attribute='n')|join(',') }}", {"rows": [{"n": 1}, {"n": 2}]}) == "1,2"
    assert text("{{ xs|batch(2)|list|length }}", {"xs": [1, 2, 3]}) == "2"


def test_set_with_and_filter_blocks() -> None:
    source = (
        "{% set total = a + b %}{{ total }} {% with x = 'w' %}{{ x }}{% endwith %} "
        "{% filter upper %}up {{ name }}{% endfilter %}"
    )
    assert text(source, {"a": 1, "b": 2, "name": "n"}) == "3 w UP N"


def test_values_render_as_data() -> None:
    data = {"t": True, "f": False, "n": 1.5, "l": ["a", 1], "d": {"k": None}}
    assert text("{{t}} {{f}} {{n}} {{l}} {{d}}", data) == 'true false 1.5 ["a", 1] {"k": null}'


def test_trailing_newline_is_kept() -> None:
    assert text("Hi\n") == "Hi\n"


def test_syntax_error_names_part_and_line() -> None:
    with pytest.raises(TemplateSyntaxError) as caught:
        compile_template("ok", "<p>\n\n{{ name }</p>", None)
    assert caught.value.part == "bodyHtml"
    assert caught.value.line == 3
    assert str(caught.value).startswith("bodyHtml line 3: ")

    with pytest.raises(TemplateSyntaxError) as caught:
        compile_template("{% if x %}", None, None)
    assert caught.value.part == "subject"
    assert caught.value.line == 1

    with pytest.raises(TemplateSyntaxError) as caught:
        compile_template(None, None, "line\n{% for x in y %}\n{{ x|nofilter }}\n{% endfor %}")
    assert (caught.value.part, caught.value.line) == ("bodyText", 3)
    assert "nofilter" in str(caught.value)


def test_refused_constructs_are_syntax_errors_with_lines() -> None:
    with pytest.raises(TemplateSyntaxError) as caught:
        compile_template(None, "a\n{% include 'other' %}", None)
    assert caught.value.line == 2
    assert "include" in str(caught.value)


def test_shortcodes() -> None:
    names = extract_shortcodes(
        "Hi {{ user.first }}",
        "{% for item in items %}{{ item.name }}{{ loop.index }}{% endfor %}{{{ footer }}}"
        "{% set local = 1 %}{{ local }}{{ order.total|round(2) }}{% if vip %}{% endif %}",
        "{{ user.first }} {{ user }} {% for i in range(count) %}{{ i }}{% endfor %}",
    )
    assert names == ["count", "footer", "items", "order.total", "user", "user.first", "vip"]
    assert compile_template("{{b}}{{a}}", None, None).shortcodes == ["a", "b"]


def test_render_error_names_part_and_line() -> None:
    compiled = compile_template(None, None, "ok\n{% for x in n %}{% endfor %}")
    with pytest.raises(RenderError) as caught:
        compiled.render({"n": 5})
    assert caught.value.part == "bodyText"
    assert caught.value.line == 2


def test_output_size_is_bounded() -> None:
    limits = RenderLimits(max_part_chars=1000)
    compiled = compile_template(None, None, "{% for x in xs %}{{ x }}{% endfor %}", limits=limits)
    assert compiled.render({"xs": ["a"] * 10}).body_text == "a" * 10
    with pytest.raises(RenderError, match="longer than 1000"):
        compiled.render({"xs": ["a" * 100] * 11})


def test_iterations_are_bounded_across_nested_loops() -> None:
    limits = RenderLimits(max_iterations=1000)
    source = "{% for a in xs %}{% for b in xs %}{% endfor %}{% endfor %}"
    compiled = compile_template(None, None, source, limits=limits)
    compiled.render({"xs": list(range(30))})
    with pytest.raises(RenderError, match="1000 loop iterations"):
        compiled.render({"xs": list(range(40))})


def test_render_timeout() -> None:
    limits = RenderLimits(timeout=0.0)
    compiled = compile_template(None, None, "{% for x in xs %}{{ x }}{% endfor %}", limits=limits)
    with pytest.raises(RenderError, match="took longer"):
        compiled.render({"xs": list(range(100))})


def test_compiled_templates_are_reusable_and_independent() -> None:
    compiled = compile_template("{{a}}", "{{a}}", "{{a}}")
    assert compiled.render({"a": "1"}).subject == "1"
    assert compiled.render({"a": "2"}).body_text == "2"
    assert compiled.render(None).body_html == ""


def test_template_cache_is_lru() -> None:
    cache = TemplateCache(maxsize=2)
    calls: list[str] = []

    def factory(source: str):
        def build():
            calls.append(source)
            return compile_template(source, None, None)

        return build

    first = cache.get_or_compile("a", factory("A"))
    assert cache.get_or_compile("a", factory("A")) is first
    cache.get_or_compile("b", factory("B"))
    cache.get_or_compile("a", factory("A"))
    cache.get_or_compile("c", factory("C"))
    assert calls == ["A", "B", "C"]
    assert cache.get("b") is None
    assert cache.get("a") is first
    cache.discard(lambda key: key == "a")
    assert cache.get("a") is None
    assert len(cache) == 1


def test_template_cache_does_not_store_failures() -> None:
    cache = TemplateCache()
    with pytest.raises(TemplateSyntaxError):
        cache.get_or_compile("k", lambda: compile_template("{{", None, None))
    assert cache.get("k") is None


def test_loop_helpers_and_calls_inside_loops() -> None:
    source = (
        "{% for a in xs %}{{ range(2)|join }}{{ loop.cycle('o', 'e') }}"
        "{% if loop.changed(a) %}!{% endif %}{{ loop.previtem }}|{% endfor %}"
        "{% for g in people|groupby('city') %}{{ g.grouper }}:"
        "{{ g.list|map(attribute='n')|join(',') }};{% endfor %}"
        "{{ xs|select('odd')|list }} {{ 'a' in 'abc' }} {{ 1 < 2 < 3 }} "
        "{{ xs[-1] }} {{ 'abc'[1:] }}"
    )
    people = [{"city": "A", "n": "x"}, {"city": "B", "n": "y"}, {"city": "A", "n": "z"}]
    assert text(source, {"xs": [1, 1, 2], "people": people}) == (
        "01o!|01e1|01o!1|A:x,z;B:y;[1, 1] true true 2 bc"
    )


def test_absurd_nesting_is_a_syntax_error() -> None:
    with pytest.raises(TemplateSyntaxError, match="nested too deeply"):
        compile_template(None, "{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}", None)


def test_concurrent_renders_of_one_compiled_template() -> None:
    compiled = compile_template("{{ n }}", "{% for i in xs %}{{ i }}{% endfor %}", None)
    failures: list[str] = []

    def work(n: int) -> None:
        for _ in range(200):
            rendered = compiled.render({"n": n, "xs": [n, n]})
            if rendered.subject != str(n) or rendered.body_html != f"{n}{n}":
                failures.append(f"{n}: {rendered}")

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []

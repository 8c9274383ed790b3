"""Server-side template injection: each payload must render harmlessly or be refused, quickly."""

from __future__ import annotations

import re
import time

import pytest

from templates_store.render import RenderError, TemplateSyntaxError, compile_template

DATA = {
    "x": "value",
    "name": "Ana",
    "items": [1, 2, 3],
    "big": list(range(1000)),
    "user": {"first": "Ana"},
}

NESTED_1000 = (
    "{% for a in big %}{% for b in big %}{% for c in big %}{% endfor %}{% endfor %}{% endfor %}"
)

PAYLOADS = [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ ''.__class__.__mro__ }}",
    "{{ x.__class__ }}",
    "{{ x.__globals__ }}",
    "{{ x.__init__.__globals__ }}",
    "{{ items.__class__.__base__.__subclasses__() }}",
    "{{ x['__class__'] }}",
    "{{ user.__class__.__init__ }}",
    "{{ cycler.__init__.__globals__.os }}",
    "{{ cycler }}",
    "{{ joiner }}",
    "{{ lipsum.__globals__ }}",
    "{{ lipsum() }}",
    "{{ config }}",
    "{{ config.items() }}",
    "{{ request }}",
    "{{ request.application.__globals__ }}",
    "{{ self }}",
    "{{ self.__init__.__globals__ }}",
    "{{ namespace }}",
    "{{ namespace() }}",
    "{{ dict(a=1) }}",
    "{{ range }}",
    "{{ range|e }}",
    "{{ range|string }}",
    "{{ range.__init__ }}",
    '{{ "{0.__class__}".format(x) }}',
    '{{ "{0.__class__.__mro__}".format(x) }}',
    '{{ "%s"|format(x) }}',
    "{{ '%r' % x }}",
    "{{ '%s' % items }}",
    '{{ x|attr("__class__") }}',
    "{{ items|map('attr', '__class__')|list }}",
    "{{ items|map('layang:iterate', 0)|list }}",
    "{{ items|selectattr('__class__')|list }}",
    "{{ items|map(attribute='__class__')|list }}",
    "{{ items|pprint }}",
    "{{ items|xmlattr }}",
    "{{ items|reverse }}",
    "{{ items|map('upper') }}",
    "{{ items|map('upper')|e }}",
    "{% for i in items %}{{ loop }}{% endfor %}",
    "{% for i in items %}{{ loop|e }}{% endfor %}",
    "{% for i in items %}{{ loop.cycle }}{% endfor %}",
    "{% for i in items %}{{ loop.__class__ }}{% endfor %}",
    "{% for i in items %}{{ loop._iterator }}{% endfor %}",
    "{% for i in items recursive %}{{ loop(items) }}{% endfor %}",
    "{% for i in range(10**9) %}{% endfor %}",
    "{% for i in range(10**9)|list %}{% endfor %}",
    NESTED_1000,
    "{% for a in big %}{% for b in big %}{{ a }}{% endfor %}{% endfor %}",
    '{{ "a"*10**9 }}',
    "{{ 'a' * 1000000 * 1000000 }}",
    "{{ items * 1000000000 }}",
    "{{ 2 ** 1000000000 }}",
    "{{ (2 ** 4000) ** 4000 }}",
    "{{ 'a'|center(999999999) }}",
    "{{ 'a'|indent(999999999) }}",
    "{{ ('a' ~ '\\n') * 1000 |indent(100000) }}",
    "{{ 'aaaa'|replace('a', 'a' * 5000000) }}",
    "{{ 'x'|replace('', 'y' * 5000000) }}",
    "{{ big|join('x' * 1000000) }}",
    "{{ ('a' * 5000000)|wordwrap(1) }}",
    "{{ ('a ' * 2000000)|title }}",
    "{{ items|batch(1000000000, 'x')|list }}",
    "{{ items|slice(1000000000)|list }}",
    "{{ [[1]]|sum(start=[]) }}",
    "{% set x = [] %}{{ x.append(1) }}",
    "{% set x = [] %}{% for i in range(10) %}{{ x.append(i) }}{% endfor %}{{ x }}",
    "{% set x = {} %}{{ x.update(a=1) }}",
    "{% set ns = namespace(a=1) %}{% set ns.a = 2 %}{{ ns.a }}",
    "{% macro r() %}{{ r() }}{% endmacro %}{{ r() }}",
    "{% call x() %}{% endcall %}",
    "{% block b %}{{ self.b() }}{% endblock %}",
    "{% include '/etc/passwd' %}",
    "{% import 'os' as os %}{{ os.system('id') }}",
    "{% from 'os' import system %}",
    "{% extends 'base' %}",
    "{% set a = 'xxxxxxxxxx' %}" + "{% set a = a ~ a %}" * 40 + "{{ a|length }}",
    "{% set a = [1] %}" + "{% set a = [a, a] %}" * 60 + "{{ a }}",
    "{% set a = [1] %}" + "{% set a = [a, a] %}" * 60 + "{{ a == a }}",
    "{% set a = [1] %}" + "{% set a = a + a %}" * 60 + "{{ a|length }}",
    "{% set s %}{% for i in range(99999) %}{{ 'x' * 5000000 }}{% endfor %}{% endset %}{{ s }}",
    "{% for i in range(100000) %}{% filter upper %}{{ 'x' * 1000 }}{% endfilter %}{% endfor %}",
    "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}",
    "{{ x.mro() }}",
    "{{ x.upper() }}",
    "{{ x.ljust(999999999) }}",
    "{{ x.encode('utf-8') }}",
    "{{ [].__class__.__base__ }}",
    "{{ ().__class__ }}",
    "{{ 1.__class__ }}",
    "{{ environment }}",
    "{{ context }}",
    "{{ __builtins__ }}",
    "{{ _ }}",
    "{{ 10 ** 10 ** 10 ** 10 }}",
    "{% autoescape false %}{{ x.__class__ }}{% endautoescape %}",
    "{{ items|tojson }}",
    "{{ x|tojson }}",
    "{{ [x]|string }}",
    "{{ x ~ [self] }}",
    "{{ 9 ** 9 ** 9 }}",
]

# Python reprs and names of internals that must never reach an output.
LEAKS = re.compile(
    r"class|module|function|method|built-in|object at|<[A-Za-z_]|__|Undefined|LoopContext|"
    r"generator|iterator|TemplateReference|jinja",
    re.IGNORECASE,
)


@pytest.mark.parametrize("payload", PAYLOADS)
def test_payload_is_harmless(payload: str) -> None:
    for part in ("subject", "bodyHtml", "bodyText"):
        sources = {"subject": None, "bodyHtml": None, "bodyText": None, part: payload}
        started = time.perf_counter()
        try:
            compiled = compile_template(
                sources["subject"], sources["bodyHtml"], sources["bodyText"]
            )
            rendered = compiled.render(DATA)
        except (RenderError, TemplateSyntaxError):
            pass
        else:
            output = {
                "subject": rendered.subject,
                "bodyHtml": rendered.body_html,
                "bodyText": rendered.body_text,
            }[part]
            assert output is not None
            assert not LEAKS.search(output[:10000]), output[:200]
        assert time.perf_counter() - started < 1.5


def test_nested_loops_over_1000_items_stop_quickly() -> None:
    started = time.perf_counter()
    with pytest.raises(RenderError, match="loop iterations"):
        compile_template(None, NESTED_1000, None).render(DATA)
    assert time.perf_counter() - started < 1


def test_huge_string_is_refused_before_it_is_built() -> None:
    with pytest.raises(RenderError, match="longer than"):
        compile_template(None, '{{ "a"*10**9 }}', None).render({})


def test_range_is_bounded() -> None:
    with pytest.raises(RenderError, match="more than 100000 items"):
        compile_template(None, "{% for i in range(10**9) %}{% endfor %}", None).render({})
    assert compile_template(None, None, "{{ range(3)|join }}").render({}).body_text == "012"


def test_data_can_use_reserved_looking_keys() -> None:
    data = {"config": "c", "request": "r", "namespace": "n", "range": "g", "cycler": "y"}
    source = "{{ config }}{{ request }}{{ namespace }}{{ range }}{{ cycler }}"
    assert compile_template(None, None, source).render(data).body_text == "crngy"


def test_attribute_lookups_never_reach_python_attributes() -> None:
    source = "[{{ x.upper }}][{{ items.append }}][{{ user.copy }}][{{ name.__len__ }}]"
    assert compile_template(None, None, source).render(DATA).body_text == "[][][][]"


def test_lists_built_by_sharing_cannot_explode() -> None:
    source = "{% set a = [1] %}" + "{% set a = [a, a] %}" * 60 + "{{ a|length }}"
    started = time.perf_counter()
    with pytest.raises(RenderError, match="weigh more"):
        compile_template(None, None, source).render({})
    assert time.perf_counter() - started < 1

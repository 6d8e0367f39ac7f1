"""Jinja semantics, snippet by snippet: `mlxrt template --chat-template FILE --template-args CONTEXT` must
render each snippet exactly as transformers' own compiled template (jinja2's sandbox with transformers'
settings) renders it, and fail where it fails. The oracle runs here, in the same test run."""
import json
import os
import pathlib
import subprocess
import tempfile

from transformers.utils.chat_template_utils import _compile_jinja_template

BIN = os.environ["MLXRT_BIN"]

# (template, variables)
CASES = [
 ("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}", {"xs":[1,2]}),
 ("{% for x in xs if x > 1 %}{{ x }}{{ loop.index }}{% else %}none{% endfor %}", {"xs":[1,2,3]}),
 ("{% for x in xs %}{{ x }}{% else %}empty{% endfor %}", {"xs":[]}),
 ("{% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}", {"xs":[1,2,3,4,5]}),
 ("{% for x in xs %}{{ loop.previtem }}-{{ loop.nextitem }};{{ loop.cycle('a','b') }}{% endfor %}", {"xs":[1,2,3]}),
 ("{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}", {"d":{"b":1,"a":2}}),
 ("{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}", {"xs":[1,2,3]}),
 ("{% set n = 0 %}{% for x in xs %}{% set n = n + x %}{% endfor %}{{ n }}", {"xs":[1,2,3]}),
 ("{% macro m(a, b='B') %}[{{ a }}{{ b }}{{ varargs }}{{ kwargs }}]{% endmacro %}{{ m(1) }}{{ m(1, 2, 3, z=4) }}{{ m(b=5, a=6) }}", {}),
 ("{% macro w() %}<{{ caller('x') }}>{% endmacro %}{% call(v) w() %}in {{ v }}{% endcall %}", {}),
 ("{% filter upper %}abc {{ 'd' }}{% endfilter %}", {}),
 ("{% set x %}  block {{ 1 }}  {% endset %}[{{ x }}]{% set y | trim %}  t  {% endset %}[{{ y }}]", {}),
 ("{% raw %}{{ not }}{% endraw %}", {}),
 ("a\n  {% if true %}\n    b\n  {% endif %}\nc", {}),
 ("a  {%- if true -%}  b  {%- endif -%}  c", {}),
 ("x {{- ' y ' -}} z", {}),
 ("  {%+ if true %}k{% endif %}", {}),
 ("{# c #}\n  {# d #}\nx", {}),
 ("line\n", {}),
 ("{{ [1, 'a', none, true, 1.5, {'k': [2]}] }}", {}),
 ("{{ ('a',) }}{{ (1, 2) }}{{ \"it's\" }}{{ [\"it's\", 'q\"', 'n\\n', 'é\\u200b'] }}", {}),
 ("{{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 1/3 }} {{ 10/2 }} {{ 7//2 }} {{ -7//2 }} {{ -7 % 3 }} {{ 2**10 }} {{ 2.5 * 2 }}", {}),
 ("{{ x | tojson }}|{{ x | tojson(indent=2) }}|{{ x | tojson(sort_keys=true) }}|{{ 'é' | tojson }}|{{ 'é' | tojson(ensure_ascii=true) }}", {"x":{"b":[1,2.0,None,True],"a":"q\"\n"}}),
 ("{{ x | tojson(separators=(',', ':')) }}|{{ [] | tojson(indent=2) }}|{{ 1.0 | tojson }}", {"x":{"a":[1,{"b":2}]}}),
 ("{{ '  a b  ' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ 'abc' | length }}|{{ 'héllo' | length }}|{{ 'ab' | upper }}{{ 'AB' | lower }}|{{ 'hello world-x(y' | title }}|{{ 'hELLO' | capitalize }}", {}),
 ("{{ xs | join(', ') }}|{{ xs | map('upper') | join }}|{{ ds | map(attribute='n') | list }}|{{ ds | selectattr('n', 'equalto', 'a') | list }}|{{ ds | rejectattr('n') | list }}", {"xs":["a","b"],"ds":[{"n":"a"},{"n":""},{"m":1}]}),
 ("{{ xs | select('odd') | list }}|{{ xs | reject('even') | list }}|{{ xs | first }}{{ xs | last }}|{{ xs | sort(reverse=true) }}|{{ xs | unique | list }}|{{ xs | reverse | list }}|{{ xs | sum }}|{{ xs | min }}{{ xs | max }}", {"xs":[3,1,2,3]}),
 ("{{ ['b','A','a'] | sort }}|{{ ['b','A','a'] | unique | list }}|{{ d | dictsort }}|{{ d | items | list }}|{{ xs | batch(2) | list }}", {"d":{"b":1,"a":2},"xs":[1,2,3]}),
 ("{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'one two  three' | wordcount }}|{{ '%s-%d' | format('x', 3) }}|{{ '%05.1f|%-4s|%r' % (3.14159, 'ab', 'q') }}", {}),
 ("{{ '3' | int + 1 }}|{{ 'x' | int }}|{{ '2.5' | float }}|{{ 3 | float }}|{{ -3 | abs }}|{{ 2.5 | round }}|{{ 3.14159 | round(2) }}|{{ 7 | string }}|{{ none | string }}", {}),
 ("{{ u | default('d') }}|{{ '' | default('d') }}|{{ '' | default('d', true) }}|{{ u | d('x') }}|{{ none | default('n') }}", {}),
 ("{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x','c')) }}|{{ '  x '.strip() }}{{ 'xxa'.lstrip('x') }}{{ 'a  '.rstrip() }}|{{ 'aXbX'.replace('X', '-') }}|{{ 'a\\nb'.splitlines() }}|{{ 'abcb'.count('b') }}{{ 'abc'.find('c') }}|{{ '{} and {x}'.format(1, x='y') }}", {}),
 ("{{ d.get('a') }}{{ d.get('z') }}{{ d.get('z', 5) }}|{{ d.keys() | list }}{{ d.values() | list }}|{{ d['a'] }}{{ d.a }}|{{ 'a' in d }}{{ 'z' not in d }}{{ 2 in [1,2] }}{{ 'b' in 'abc' }}", {"d":{"a":1}}),
 ("{{ s[1:] }}|{{ s[:-1] }}|{{ s[::-1] }}|{{ s[::2] }}|{{ xs[1:3] }}|{{ xs[-1] }}|{{ xs[10] }}|{{ s[0] }}", {"s":"héllo","xs":[1,2,3,4]}),
 ("{{ x is defined }}{{ u is defined }}{{ u is undefined }}{{ none is none }}{{ 's' is string }}{{ d is mapping }}{{ xs is iterable }}{{ xs is sequence }}{{ 1 is number }}{{ 1 is integer }}{{ 1.0 is float }}{{ true is boolean }}{{ true is true }}{{ false is false }}{{ 4 is even }}{{ 3 is odd }}{{ 9 is divisibleby 3 }}{{ 1 is eq 1 }}{{ 2 is gt 1 }}{{ 1 is in [1] }}{{ d is not mapping }}", {"x":1,"d":{},"xs":[1]}),
 ("{{ u }}|{{ d.missing }}|{{ d.missing is defined }}|{{ (u or 'fallback') }}|{{ u | length }}|{{ 'x' ~ u ~ 'y' }}|{{ 1 if u else 2 }}|{{ 'v' if false }}", {"d":{}}),
 ("{{ d.missing.deeper }}", {"d":{}}),
 ("{{ u.attr }}", {}),
 ("{{ 1 + 'a' }}", {}),
 ("{{ u + 1 }}", {}),
 ("{{ raise_exception('boom') }}", {}),
 ("{{ xs.append(1) }}", {"xs":[]}),
 ("{{ true and 'x' }}|{{ false or 0 or 'z' }}|{{ not none }}|{{ 1 < 2 < 3 }}|{{ 1 == 1.0 }}|{{ 'a' != 'b' }}|{{ [1,2] == [1,2] }}|{{ -(3) }}|{{ 1 - -1 }}", {}),
 ("{{ 'a' ~ 1 ~ none ~ true }}|{{ 'ab' * 2 }}|{{ [1] + [2] }}|{{ 'x' + 'y' }}|{{ 10 - 2.5 }}", {}),
 ("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = (1, 2) %}{{ t[0] }}{% set l = [1, 2] %}{{ l | length }}", {}),
 ("{% if a %}A{% elif b %}B{% else %}C{% endif %}", {"a":0,"b":""}),
 ("{{ range(3) | list }}{{ range(1, 7, 2) | list }}{% for i in range(2) %}{{ i }}{% endfor %}", {}),
 ("{{ dict(a=1, b=2) }}{{ namespace(x=1).x }}", {}),
 ("{{ '\\t\\x41\\u00e9\\'' }}", {}),
 ("{{ x }}", {"x": 1.0}),
 ("{{ messages[0]['content'] | safe + ' & <b>' }}|{{ 'q' | safe + x | tojson }}|{{ 'a' | e }}{{ '<' | escape }}", {"messages":[{"content":"hi"}], "x": {"k": "v"}}),
 ("{{ xs | map('upper') | tojson }}", {"xs":["a"]}),
 ("{{ xs | map('upper') | length }}", {"xs":["a"]}),
 ("{% if false %}{{ x | nosuchfilter }}{% endif %}ok", {}),
 ("{{ x | nosuchfilter }}", {}),
 ("{{ 'ok' if true else x | nosuchfilter }}", {}),
 ("{% for x in 5 %}{% endfor %}", {}),
 ("{{ 'a' < 1 }}", {}),
 ("{% set x = {'a': 1, 'a': 2} %}{{ x }}", {}),
 ("{{ {'k': 'v'}.items() | list }}{{ [1, [2, 3]] | tojson }}", {}),
 ("{{ 'x' is filter }}", {}),
 ("{% for x in [1,2] %}{% if x == 1 %}{% set y = 'a' %}{% endif %}[{{ y }}]{% endfor %}", {}),
 ("{% macro m() %}{{ g }}{% endmacro %}{% set g = 'late' %}{{ m() }}", {}),
 ('{% set xs = [3, 1] %}{% for x in xs | sort %}{{ x }}{% endfor %}{{ xs }}', {}),
 ('{% for a, b in [(1, 2), (3, 4)] %}{{ a + b }}{% endfor %}', {}),
 ("{{ '%s' % 'x' }}{{ '%s and %s' % ('a', 'b') }}{{ '%(k)s' % {'k': 1} }}", {}),
 ("{{ 'abc' | list }}{{ 'a-b' | replace('-', '') }}{{ [1,2,3] | batch(2, 0) | list }}", {}),
 ('{% with a = 1 %}{{ a }}{% endwith %}{{ a }}', {}),
 ("{{ x.content if x.content is string else x.content | map(attribute='text') | join('') }}", {'x': {'content': [{'text': 'a'}, {'text': 'b'}]}}),
 ('{%- for m in msgs -%}\n  {{- m.role }}\n{% endfor -%}', {'msgs': [{'role': 'u'}, {'role': 'a'}]}),
 ("{{ msgs[-1].content.split('</think>')[-1].lstrip('\\n') }}", {'msgs': [{'content': 'x</think>\n\ny'}]}),
 ("{{ (msgs | selectattr('role', 'equalto', 'user') | list | last).content }}", {'msgs': [{'role': 'user', 'content': 'q'}]}),
 ('{{ tl | tojson(indent=4) }}', {'tl': [{'a': {'b': []}}]}),
 ("{{ 3 is divisibleby(3) }}{{ none is not none }}{{ 'a' is in 'abc' }}", {}),
 ("{{ [1, 2] | sum(start=10) }}{{ [{'v': 1}, {'v': 2}] | sum(attribute='v') }}", {}),
 ("{{ 1.5 | int }}{{ '0x1A' | int(0, 16) }}{{ '1e3' | float }}{{ 'nan' | float }}", {}),
]


def oracle(template, context):
    try:
        return _compile_jinja_template(template).render(**context), None
    except Exception as e:  # the snippet is meant to fail
        return None, f"{type(e).__name__}: {e}"


def test_snippets_match_jinja2():
    failures = []
    with tempfile.TemporaryDirectory() as root:
        model = pathlib.Path(root) / "m"
        model.mkdir()
        (model / "tokenizer_config.json").write_text("{}")
        messages = pathlib.Path(root) / "messages.json"
        messages.write_text('[{"role": "user", "content": "hi"}]')
        for i, (template, context) in enumerate(CASES):
            tf = pathlib.Path(root) / f"t{i}.jinja"
            tf.write_text(template, encoding="utf-8")
            want, err = oracle(template, context)
            p = subprocess.run([BIN, "template", "--model", str(model), "--messages", str(messages),
                                "--chat-template", str(tf), "--template-args", json.dumps(context)],
                               capture_output=True, timeout=30)
            got = p.stdout.decode("utf-8", "surrogateescape")
            if err is None and (p.returncode != 0 or got != want):
                failures.append(f"{template!r}: want {want!r}, got {got!r} {p.stderr.decode()[:200]}")
            elif err is not None and p.returncode == 0:
                failures.append(f"{template!r}: jinja2 raised {err!r}, mlxrt rendered {got!r}")
            elif err is not None and f"t{i}.jinja:1:" not in p.stderr.decode():
                failures.append(f"{template!r}: error without the template's line:column: {p.stderr.decode()!r}")
    assert not failures, "\n".join(failures)

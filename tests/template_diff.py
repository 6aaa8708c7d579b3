#!/usr/bin/env python3
"""template_diff.py: engine/template against jinja2, byte for byte.

Renders chat templates with jinja2 configured as Hugging Face transformers
configures it (an ImmutableSandboxedEnvironment with trim_blocks,
lstrip_blocks, the loop controls and the {% generation %} block; tojson as
json.dumps with ensure_ascii off; raise_exception and strftime_now, the
clock fixed) and with tmpl_render, over generated contexts (chats with and
without a system message, many turns, tools, tool calls with arguments as
objects or strings, tool results, reasoning, content as parts, unicode,
empty strings, nulls), and compares the text and the generation spans
(byte offsets). Both failing is agreement. Every difference is reported.

  template_diff.py --render BUILD/tmpl_render [--contexts N] [--random N]
                   [--seed S] [--verbose] TEMPLATE_OR_DIR...

--random N also renders N random templates built from the constructs the
language has, each with a few contexts. Exit status: 0 when nothing
differs, 1 when something does, 77 when python3 has no jinja2 3.1."""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import warnings

try:
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print('template_diff: no jinja2 in this python3: skipped', file=sys.stderr)
    sys.exit(77)
if tuple(int(x) for x in jinja2.__version__.split('.')[:2]) < (3, 1):
    print('template_diff: jinja2 %s, 3.1 needed: skipped' % jinja2.__version__,
          file=sys.stderr)
    sys.exit(77)

warnings.filterwarnings('ignore')  # jinja2's generated code warns
NOW = 1717243994  # the clock of strftime_now, both sides


# ---- jinja2 as transformers sets it up --------------------------------

class AssistantTracker(Extension):
    """transformers' {% generation %}: records where its output went."""
    tags = {'generation'}

    def __init__(self, environment):
        super().__init__(environment)
        environment.extend(activate_tracker=self.activate_tracker)
        self._rendered_blocks = None
        self._generation_indices = None

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(['name:endgeneration'],
                                       drop_needle=True)
        call = self.call_method('_generation_support')
        return nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    @jinja2.pass_eval_context
    def _generation_support(self, context, caller):
        rv = caller()
        if self._rendered_blocks is not None:
            start = len(''.join(self._rendered_blocks))
            self._generation_indices.append((start, start + len(rv)))
        return rv

    def activate_tracker(self, rendered_blocks, generation_indices):
        self._rendered_blocks = rendered_blocks
        self._generation_indices = generation_indices


def make_env():
    from datetime import datetime

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None,
               sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.fromtimestamp(NOW).strftime(format)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True,
        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters['tojson'] = tojson
    env.globals['raise_exception'] = raise_exception
    env.globals['strftime_now'] = strftime_now
    return env


def jinja_render(env, template, ctx):
    """{'text', 'gen'} (byte offsets) or {'error'}."""
    try:
        blocks, spans = [], []
        env.activate_tracker(blocks, spans)
        for b in template.generate(**ctx):
            blocks.append(b)
        text = ''.join(blocks)
        enc = [len(text[:i].encode('utf-8')) for s in spans for i in s]
        text.encode('utf-8')
        return {'text': text,
                'gen': [[enc[k], enc[k + 1]] for k in range(0, len(enc), 2)]}
    except RecursionError as e:
        return {'error': 'RecursionError: %s' % e}
    except Exception as e:  # every error of a template is an error
        return {'error': '%s: %s' % (type(e).__name__, e)}
    finally:
        env.activate_tracker(None, None)


def ours_render(render, path, contexts):
    with tempfile.NamedTemporaryFile('w', suffix='.jsonl', delete=False,
                                     encoding='utf-8') as f:
        for c in contexts:
            f.write(json.dumps(c, ensure_ascii=True) + '\n')
        batch = f.name
    try:
        env = dict(os.environ)
        p = subprocess.run([render, path, '--batch', batch, '--now', str(NOW)],
                           capture_output=True, env=env, timeout=600)
    finally:
        os.unlink(batch)
    lines = p.stdout.decode('utf-8').splitlines()
    if p.returncode or len(lines) != len(contexts):
        raise SystemExit('tmpl_render failed on %s (status %d): %s' %
                         (path, p.returncode, p.stderr.decode()[-2000:]))
    return [json.loads(x) for x in lines]


# ---- contexts ---------------------------------------------------------

TEXTS = [
    'Hello!', 'What is 2 + 2?', '', ' ', 'a\nb', '  padded  ', 'tab\there',
    'quotes \' and " and `', 'back\\slash', 'unicode: héllo wörld', '日本語のテキスト',
    'emoji 😀👍🏽', 'مرحبا', 'Ünïcödé ΣΑΣ ß', '<think>\nreasoning\n</think>\n\nanswer',
    '<tool_response>\nok\n</tool_response>', '{"json": [1, 2]}', 'line1\r\nline2',
    'zero\u200bwidth', 'nbsp\u00a0here', '\x07 bell', 'x' * 300, '{{ not a tag }}',
    '%s %d', 'trailing newline\n', '\n\nleading newlines', 'Ω≈ç√∫', '\u2028sep',
]
NAMES = ['get_weather', 'search', 'calc', 'run_python', 'f']


def rand_text(rng):
    if rng.random() < 0.7:
        return rng.choice(TEXTS)
    return ' '.join(rng.choice(TEXTS) for _ in range(rng.randint(1, 3)))


def rand_json(rng, depth=0):
    r = rng.random()
    if depth > 2 or r < 0.3:
        return rng.choice([1, 0, -7, 2.5, 1e-07, 1e20, 0.1, True, False, None,
                           'str', 'ünï', '', 'a"b', 12345678901234])
    if r < 0.6:
        return [rand_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(['a', 'location', 'unit', 'q', 'n', 'x y', 'é']):
            rand_json(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def rand_tool(rng):
    props = {}
    for _ in range(rng.randint(0, 3)):
        p = {'type': rng.choice(['string', 'integer', 'number', 'boolean',
                                 'array', 'object'])}
        if rng.random() < 0.7:
            p['description'] = rand_text(rng)
        if p['type'] == 'string' and rng.random() < 0.3:
            p['enum'] = ['celsius', 'fahrenheit']
        if p['type'] == 'array':
            p['items'] = {'type': 'string'}
        props[rng.choice(['location', 'unit', 'query', 'n', 'code', 'x'])] = p
    fn = {'name': rng.choice(NAMES), 'description': rand_text(rng),
          'parameters': {'type': 'object', 'properties': props,
                         'required': list(props)[:1]}}
    if rng.random() < 0.2:
        del fn['description']
    if rng.random() < 0.1:
        fn['return'] = {'type': 'string'}
    return {'type': 'function', 'function': fn}


def rand_tool_call(rng, i):
    args = {k: rand_json(rng) for k in rng.sample(['location', 'unit', 'n',
                                                   'query', 'x'],
                                                  rng.randint(0, 3))}
    tc = {'id': 'call%06d%s' % (i, rng.choice(['abc', 'xyz12'])),
          'type': 'function',
          'function': {'name': rng.choice(NAMES),
                       'arguments': json.dumps(args) if rng.random() < 0.25
                       else args}}
    if rng.random() < 0.05:
        tc = tc['function']
    return tc


def rand_context(rng, wellformed=True):
    """A chat: plain alternation, with a system turn, with tools and tool
    calls, with content as parts, or (wellformed False) broken."""
    mode = rng.choice(['plain', 'system', 'tools', 'tools', 'parts'])
    msgs = []
    if mode == 'system' or (mode in ('tools', 'parts') and
                            rng.random() < 0.5):
        msgs.append({'role': 'system', 'content': rand_text(rng)})
    nturns = rng.choice([1, 1, 2, 3, 5, 8])
    k = 0

    def content():
        if mode != 'parts':
            return rand_text(rng)
        parts = [{'type': 'text', 'text': rand_text(rng)}]
        if rng.random() < 0.4:
            parts.insert(rng.randint(0, 1), {'type': 'image'})
        return parts

    for t in range(nturns):
        msgs.append({'role': 'user', 'content': content()})
        if t == nturns - 1 and rng.random() < 0.4:
            break
        a = {'role': 'assistant', 'content': content()}
        if mode == 'tools' and rng.random() < 0.3:
            a['reasoning_content'] = rand_text(rng)
        if mode == 'tools' and rng.random() < 0.4:
            a['tool_calls'] = [rand_tool_call(rng, k + j)
                               for j in range(rng.randint(1, 2))]
            k += 2
            if rng.random() < 0.3:
                a['content'] = rng.choice([None, ''])
            msgs.append(a)
            for tc in a['tool_calls']:
                tm = {'role': 'tool', 'content': rand_text(rng)}
                if 'id' in tc and rng.random() < 0.8:
                    tm['tool_call_id'] = tc['id']
                if rng.random() < 0.3:
                    tm['name'] = rng.choice(NAMES)
                msgs.append(tm)
            msgs.append({'role': 'assistant', 'content': rand_text(rng)})
        else:
            msgs.append(a)
    if not wellformed:
        for _ in range(rng.randint(1, 3)):
            op = rng.random()
            if op < 0.3 and msgs:
                del msgs[rng.randrange(len(msgs))]
            elif op < 0.6 and msgs:
                m = rng.choice(msgs)
                m['content'] = rng.choice([None, 5, ['x'], {'a': 1}, ''])
            else:
                msgs.insert(rng.randrange(len(msgs) + 1),
                            {'role': rng.choice(['user', 'assistant', 'tool',
                                                 'system', 'developer']),
                             'content': rand_text(rng)})
    ctx = {'messages': msgs, 'bos_token': '<s>', 'eos_token': '</s>',
           'add_generation_prompt': rng.random() < 0.5}
    if mode == 'tools' and rng.random() < 0.8:
        ctx['tools'] = [rand_tool(rng) for _ in range(rng.randint(1, 3))]
    elif rng.random() < 0.1:
        ctx['tools'] = None
    if rng.random() < 0.3:
        ctx['enable_thinking'] = rng.random() < 0.5
    if rng.random() < 0.1:
        ctx['documents'] = [{'title': 't', 'text': rand_text(rng)}]
    if rng.random() < 0.1:
        ctx['custom_instructions'] = rand_text(rng)
    return ctx


# ---- random templates -------------------------------------------------

class Gen:
    """Small random templates from the language's constructs."""

    STR = ["'a'", '"b\\n"', "'x y'", "'ünï'", "''", "'%s-%d'", "'A,b,C'",
           "'  pad  '", "'<tag>'", "'it\\'s'", '"\\u00e9\\t"']
    NUM = ['0', '1', '-3', '2.5', '1e3', '7', '0.1', '10**2', '3//2', '7%3',
           '1/4', '2**-1']

    def __init__(self, rng):
        self.rng = rng
        self.depth = 0
        self.loops = 0

    def pick(self, xs):
        return self.rng.choice(xs)

    def atom(self):
        r = self.rng.random()
        if r < 0.2:
            return self.pick(self.STR)
        if r < 0.35:
            return self.pick(self.NUM)
        if r < 0.45:
            return self.pick(['true', 'false', 'none', 'True', 'None'])
        if r < 0.6:
            return self.pick(['messages', 'messages[0]', 'messages[-1]',
                              'messages[0].content', 'messages[0]["role"]',
                              'tools', 'x', 'ns.v', 'messages|length',
                              'bos_token', 'messages[0].role', 'y',
                              'tools is defined'] +
                             ['undefined_var'] * (self.rng.random() < 0.2))
        if r < 0.7:
            return '[' + ', '.join(self.expr() for _ in
                                   range(self.rng.randint(0, 3))) + ']'
        if r < 0.75:
            return '(' + self.expr() + ',)'
        if r < 0.8:
            return '{' + ', '.join('%s: %s' % (self.pick(self.STR), self.expr())
                                   for _ in range(self.rng.randint(0, 2))) + '}'
        inloop = ['i', 'loop.index', 'loop.last', 'loop.previtem',
                  'loop.revindex0', 'loop.cycle("a", "b")', 'loop.length'] \
            if self.loops else []
        return self.pick(['x', 'y', 'range(3)', 'dict(a=1, b=[2])',
                          'namespace(k=1).k'] + inloop * 2)

    FILTERS = ['length', 'upper', 'lower', 'title', 'capitalize', 'trim',
               'first', 'last', 'list', 'string', 'int', 'float', 'abs',
               'tojson', 'tojson(indent=2)', 'tojson(sort_keys=true)',
               'join(", ")', 'join', 'reverse|list', 'sort|list', 'unique|list',
               'default("d")', 'default("d", true)', 'replace("a", "b")',
               'center(9)', 'indent(2)', 'indent(2, true)', 'wordcount',
               'round(1)', 'round', 'sum', 'min', 'max', 'count', 'safe',
               'escape', 'e', 'items|list', 'dictsort', 'batch(2)|list',
               'slice(2)|list', 'map("string")|list', 'select|list',
               'reject("none")|list', 'truncate(5)', 'format(1, 2)',
               'selectattr("role", "eq", "user")|list', 'map(attribute="role")|list',
               'string|length', 'list|join("-")', 'title|trim']
    TESTS = ['defined', 'undefined', 'none', 'string', 'number', 'integer',
             'float', 'mapping', 'sequence', 'iterable', 'boolean', 'true',
             'false', 'odd', 'even', 'divisibleby 3', 'eq 1', 'in [1, 2]',
             'lower', 'upper', 'callable', 'sameas none', 'gt 0', 'escaped']
    METHODS = ['.upper()', '.lower()', '.strip()', '.split()', '.split(",")',
               '.startswith("a")', '.endswith(("x", "y"))', '.replace("a", "z")',
               '.title()', '.find("b")', '.count("a")', '.rsplit(",", 1)',
               '.splitlines()', '.lstrip("a")', '.rstrip()', '.isdigit()',
               '.isspace()', '.capitalize()', '.items()|list', '.keys()|list',
               '.values()|list', '.get("role")', '.get("zz", 3)', '.index(1)',
               '.format(1)', '.zfill(5)', '.partition(",")', '.isalpha()',
               '.ljust(4, "*")', '.rjust(4)', '.removeprefix("a")', '.swapcase()']

    def expr(self):
        self.depth += 1
        try:
            if self.depth > 3:
                return self.atom()
            r = self.rng.random()
            if r < 0.3:
                return self.atom()
            if r < 0.45:
                return '%s|%s' % (self.atom(), self.pick(self.FILTERS))
            if r < 0.55:
                return '(%s is %s%s)' % (self.atom(),
                                         self.pick(['', 'not ']),
                                         self.pick(self.TESTS))
            if r < 0.65:
                return '%s%s' % (self.atom(), self.pick(self.METHODS))
            if r < 0.8:
                return '(%s %s %s)' % (self.expr(), self.pick(
                    ['+', '-', '*', '/', '//', '%', '**', '~', '==', '!=', '<',
                     '>=', 'in', 'not in', 'and', 'or']), self.expr())
            if r < 0.85:
                return 'not ' + self.expr()
            if r < 0.9:
                return '-' + self.pick(self.NUM + ['x|length', '(y|int)'])
            if r < 0.95:
                return '(%s if %s else %s)' % (self.expr(), self.expr(),
                                               self.expr())
            return '%s[%s:%s]' % (self.atom(), self.pick(['', '1', '-1', '0']),
                                  self.pick(['', '2', '-1']))
        finally:
            self.depth -= 1

    def ws(self, open_):
        return open_ + self.pick(['', '', '-', '+']) if open_ != '{{' else \
            open_ + self.pick(['', '-'])

    def close(self, close_):
        return self.pick(['', '', '-']) + close_

    def stmt(self, depth=0):
        r = self.rng.random()
        nl = self.pick(['', '\n', '\n  ', ' ', '\n\n'])
        if depth > 2 or r < 0.35:
            return '%s %s %s%s' % (self.ws('{{'), self.expr(),
                                   self.close('}}'), nl)
        if r < 0.5:
            return '%s if %s %s%s%s%s else %s%s%s%s endif %s%s' % (
                self.ws('{%'), self.expr(), self.close('%}'), nl,
                self.body(depth + 1), self.ws('{%'), self.close('%}'), nl,
                self.body(depth + 1), self.ws('{%'), self.close('%}'), nl)
        if r < 0.65:
            two = self.rng.random() < 0.3
            head = '%s for %s in %s%s %s%s' % (
                self.ws('{%'), 'k, v' if two else self.pick(['i', 'x']),
                self.pick(['{"a": 1, "b": 2}.items()', 'x|items',
                           '[(1, 2), (3, 4)]', 'messages|dictsort']
                          if two else
                          ['messages', 'range(3)', '[1, 2, 3]', '"abc"',
                           'messages[::-1]', 'tools', '[]',
                           '(messages|selectattr("role"))', 'x', 'y']),
                self.pick(['', ' if i', ' if x', ' if not loop']),
                self.close('%}'), nl)
            self.loops += 1
            body = self.body(depth + 1)
            self.loops -= 1
            tail = ''
            if self.rng.random() < 0.2:
                tail = '%s else %s%s' % (self.ws('{%'), self.close('%}'),
                                         self.body(depth + 1))
            if self.loops and self.rng.random() < 0.1:
                body += '{% ' + self.pick(['break', 'continue']) + ' %}'
            return head + body + tail + '%s endfor %s%s' % (
                self.ws('{%'), self.close('%}'), nl)
        if r < 0.75:
            return '%s set %s = %s %s%s' % (
                self.ws('{%'), self.pick(['x', 'y', 'ns.v']), self.expr(),
                self.close('%}'), nl)
        if r < 0.8:
            return '%s macro m(a, b=2) %s%s%s endmacro %s%s %s m(%s) %s%s' % (
                self.ws('{%'), self.close('%}'), self.body(depth + 1),
                self.ws('{%'), self.close('%}'), nl, self.ws('{{'),
                self.expr(), self.close('}}'), nl)
        if r < 0.85:
            return '{#%s comment %s#}%s' % (self.pick(['', '-']),
                                             self.pick(['', '-']), nl)
        if r < 0.9:
            return '%s generation %s%s%s endgeneration %s%s' % (
                self.ws('{%'), self.close('%}'), self.body(depth + 1),
                self.ws('{%'), self.close('%}'), nl)
        if r < 0.93:
            return '%s set x%s %s%s%s endset %s%s' % (
                self.ws('{%'), self.pick(['', ' | upper', ' | trim | title',
                                           ' | replace(y|string, "q")']),
                self.close('%}'), self.body(depth + 1), self.ws('{%'),
                self.close('%}'), nl)
        if r < 0.95:
            return '%s filter %s %s%s%s endfilter %s%s' % (
                self.ws('{%'), self.pick(['upper', 'replace("a", "b")|trim',
                                          'indent(2)', 'center(12)']),
                self.close('%}'), self.body(depth + 1), self.ws('{%'),
                self.close('%}'), nl)
        if r < 0.97:
            return ('%s macro w(t) %s[{{ t }}:{{ caller(t) }}]%s endmacro %s'
                    '%s call(v) w(%s) %s{{ v }}%s%s endcall %s%s') % (
                self.ws('{%'), self.close('%}'), self.ws('{%'),
                self.close('%}'), self.ws('{%'), self.expr(),
                self.close('%}'), self.body(depth + 1), self.ws('{%'),
                self.close('%}'), nl)
        if r < 0.98:
            return '%s with a = %s %s{{ a }}%s%s endwith %s%s' % (
                self.ws('{%'), self.expr(), self.close('%}'),
                self.body(depth + 1), self.ws('{%'), self.close('%}'), nl)
        return self.pick(['  text %s', '\t\u00e9\u00a0%s', '\u3000 x %s',
                          '{%% raw %%}{{ r }}{%% endraw %%}%s']) % nl

    def body(self, depth):
        return ''.join(self.stmt(depth) for _ in range(self.rng.randint(1, 3)))

    def template(self):
        head = '{%- set ns = namespace(v=1) %}\n' if self.rng.random() < 0.7 \
            else ''
        return head + self.body(0) + self.pick(['', '\n', '\n\n'])


# ---- comparing --------------------------------------------------------

def raised_differently(a, b):
    """raise_exception(msg) in jinja2: ours must say msg too."""
    if not b['error'].startswith('TemplateError: '):
        return False
    msg = a['error'].split(': ', 1)[-1] if a['error'].startswith('line ') \
        else a['error']
    return msg != b['error'][len('TemplateError: '):]


def compare(render, path, src, contexts, verbose, report):
    env = make_env()
    try:
        template = env.from_string(src)
        theirs = [jinja_render(env, template, c) for c in contexts]
    except Exception as e:
        theirs = [{'error': 'compile: %s: %s' % (type(e).__name__, e)}] * \
            len(contexts)
    ours = ours_render(render, path, contexts)
    stats = {'contexts': len(contexts), 'same': 0, 'both_error': 0,
             'differ': 0, 'refused': 0}
    for ctx, a, b in zip(contexts, ours, theirs):
        if 'error' in a and 'error' not in b and \
                a['error'].endswith(' is not supported'):
            stats['refused'] += 1
            if stats['refused'] <= 1:
                report.append('  refused (jinja2 renders it): %s' %
                              a['error'])
            continue
        if 'error' in a and 'error' in b and not raised_differently(a, b):
            stats['both_error'] += 1
            if verbose:
                report.append('  both error: ours: %s | jinja2: %s' %
                              (a['error'][:200], b['error'][:200]))
            continue
        if a == b:
            stats['same'] += 1
            continue
        stats['differ'] += 1
        if stats['differ'] <= 3:
            report.append('  DIFFERENCE in %s\n    context: %s\n    ours:    '
                          '%s\n    jinja2:  %s' % (
                              path, json.dumps(ctx, ensure_ascii=False)[:1500],
                              json.dumps(a, ensure_ascii=False)[:1500],
                              json.dumps(b, ensure_ascii=False)[:1500]))
    return stats


def template_files(args):
    for p in args:
        if os.path.isdir(p):
            for name in sorted(os.listdir(p)):
                if name.endswith('.jinja'):
                    yield os.path.join(p, name)
        else:
            yield p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--render', required=True)
    ap.add_argument('--contexts', type=int, default=200)
    ap.add_argument('--random', type=int, default=0)
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--verbose', action='store_true')
    ap.add_argument('templates', nargs='*')
    a = ap.parse_args()
    os.environ.setdefault('TZ', 'UTC')
    rng = random.Random(a.seed)
    total_diff = 0
    for path in template_files(a.templates):
        with open(path, encoding='utf-8') as f:
            src = f.read()
        contexts = [rand_context(rng, wellformed=i % 4 != 3)
                    for i in range(a.contexts)]
        report = []
        s = compare(a.render, path, src, contexts, a.verbose, report)
        total_diff += s['differ']
        print('%-44s contexts %4d  same %4d  both error %4d  refused %d  '
              'differ %d' % (os.path.basename(path), s['contexts'], s['same'],
                             s['both_error'], s['refused'], s['differ']))
        for line in report:
            print(line)
    if a.random:
        gen = Gen(rng)
        agg = {'contexts': 0, 'same': 0, 'both_error': 0, 'differ': 0,
               'refused': 0}
        with tempfile.TemporaryDirectory() as d:
            for i in range(a.random):
                src = gen.template()
                path = os.path.join(d, 'random%d.jinja' % i)
                with open(path, 'w', encoding='utf-8') as f:
                    f.write(src)
                contexts = [rand_context(rng) for _ in range(3)]
                for c in contexts:
                    c['x'] = rand_json(rng)
                    c['y'] = rng.choice(['a,b', 3, [1, 'b'], None])
                report = []
                s = compare(a.render, path, src, contexts, a.verbose, report)
                for k in agg:
                    agg[k] += s[k]
                if s['differ'] or (a.verbose and report):
                    print('random template %d%s:\n---\n%s\n---' % (
                        i, ' differs' if s['differ'] else '', src))
                    for line in report:
                        print(line)
        total_diff += agg['differ']
        print('random templates %d: contexts %d  same %d  both error %d  '
              'refused %d  differ %d' % (a.random, agg['contexts'],
                                         agg['same'], agg['both_error'],
                                         agg['refused'], agg['differ']))
    print('template_diff: %d difference(s)' % total_diff)
    return 1 if total_diff else 0


if __name__ == '__main__':
    sys.exit(main())

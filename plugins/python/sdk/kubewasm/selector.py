"""Kubernetes label selectors (kubectl's grammar), parsed and matched in the
guest: ``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x,y)``, ``a``,
``!a``, ``a>N``, ``a<N``, joined by commas. The empty selector matches
everything. A port of the Rust SDK's selector.rs: same grammar, same errors.
"""

import re

_SPECIAL = "!=(),<>"
_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
_INT = re.compile(r"^[+-]?[0-9]+$")


def _lex(text):
    tokens = []
    i = 0
    while i < len(text):
        c = text[i]
        if c.isspace():
            i += 1
        elif text.startswith("!=", i):
            tokens.append(("!=", None))
            i += 2
        elif text.startswith("==", i):
            tokens.append(("=", None))
            i += 2
        elif c in _SPECIAL:
            tokens.append(("not" if c == "!" else c, None))
            i += 1
        else:
            j = i
            while j < len(text) and text[j] not in _SPECIAL and not text[j].isspace():
                j += 1
            tokens.append(("word", text[i:j]))
            i = j
    return tokens


def _is_name(s):
    return len(s) <= 63 and _NAME.match(s) is not None


def _check_key(key):
    prefix, name = key.split("/", 1) if "/" in key else (None, key)
    prefix_ok = prefix is None or (
        0 < len(prefix) <= 253
        and all(_is_name(p) and re.match(r"^[A-Za-z0-9-]+$", p) for p in prefix.split("."))
    )
    if not (prefix_ok and _is_name(name)):
        raise ValueError(f'"{key}" is not a valid label key')


def _check_value(value):
    if value != "" and not _is_name(value):
        raise ValueError(f'"{value}" is not a valid label value')


def _show(tok):
    return f'Word("{tok[1]}")' if tok[0] == "word" else tok[0]


class _Parser:
    def __init__(self, tokens):
        self.tokens = tokens
        self.pos = 0

    def peek(self):
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def next(self):
        t = self.peek()
        self.pos += 1
        return t

    def selector(self):
        reqs = []
        if self.peek() is None:
            return reqs
        while True:
            reqs.append(self.requirement())
            t = self.next()
            if t is None:
                return reqs
            if t[0] != ",":
                raise ValueError(f"expected ',' but found {_show(t)}")

    def key(self):
        t = self.next()
        if t is not None and t[0] == "word" and t[1] not in ("in", "notin"):
            _check_key(t[1])
            return t[1]
        if t is None:
            raise ValueError("expected a label key")
        raise ValueError(f"expected a label key but found {_show(t)}")

    def requirement(self):
        t = self.peek()
        if t is not None and t[0] == "not":
            self.pos += 1
            return ("!", self.key(), None)
        key = self.key()
        t = self.peek()
        if t is None or t[0] == ",":
            return ("exists", key, None)
        self.pos += 1
        if t[0] in ("=", "!="):
            return (t[0], key, self.value())
        if t[0] in (">", "<"):
            return (t[0], key, self.integer())
        if t == ("word", "in") or t == ("word", "notin"):
            return (t[1], key, self.set())
        raise ValueError(f'expected an operator after "{key}" but found {_show(t)}')

    def value(self):
        t = self.peek()
        if t is not None and t[0] == "word":
            self.pos += 1
            _check_value(t[1])
            return t[1]
        if t is None or t[0] == ",":
            return ""
        raise ValueError(f"expected a value but found {_show(t)}")

    def integer(self):
        t = self.next()
        if t is not None and t[0] == "word":
            if not _INT.match(t[1]):
                raise ValueError(f'"{t[1]}" is not an integer')
            return int(t[1])
        raise ValueError("expected an integer")

    def set(self):
        t = self.next()
        if t is None or t[0] != "(":
            raise ValueError("expected '(' to open a set of values")
        values = []
        while True:
            v = self.next()
            if v is None:
                raise ValueError("unterminated set of values")
            if v[0] != "word":
                raise ValueError(f"expected a value in the set but found {_show(v)}")
            _check_value(v[1])
            values.append(v[1])
            sep = self.next()
            if sep is None:
                raise ValueError("unterminated set of values")
            if sep[0] == ")":
                return values
            if sep[0] != ",":
                raise ValueError(f"expected ',' or ')' but found {_show(sep)}")


def _int(v):
    return int(v) if v is not None and _INT.match(v) else None


class Selector:
    """A parsed label selector: every requirement must hold."""

    def __init__(self, requirements):
        self.requirements = requirements

    @staticmethod
    def parse(text):
        """Parses kubectl's selector syntax; raises ValueError naming the problem."""
        try:
            return Selector(_Parser(_lex(text)).selector())
        except ValueError as e:
            raise ValueError(f'invalid label selector "{text}": {e}') from None

    def is_empty(self):
        return not self.requirements

    def matches(self, labels):
        """Whether labels, as WIT gives them (a list of (key, value)), match."""
        found = dict(labels)
        for op, key, arg in self.requirements:
            v = found.get(key)
            if op == "=":
                ok = v == arg
            elif op == "!=":
                ok = v != arg
            elif op == "in":
                ok = v is not None and v in arg
            elif op == "notin":
                ok = v is None or v not in arg
            elif op == "exists":
                ok = v is not None
            elif op == "!":
                ok = v is None
            elif op == ">":
                n = _int(v)
                ok = n is not None and n > arg
            else:
                n = _int(v)
                ok = n is not None and n < arg
            if not ok:
                return False
        return True

    def __str__(self):
        out = []
        for op, key, arg in self.requirements:
            if op == "exists":
                out.append(key)
            elif op == "!":
                out.append(f"!{key}")
            elif op in ("in", "notin"):
                out.append(f"{key} {op} ({','.join(arg)})")
            else:
                out.append(f"{key}{op}{arg}")
        return ",".join(out)

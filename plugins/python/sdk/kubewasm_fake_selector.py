"""Label selectors for the kubewasm fake host: a port of the host's parser
(``host/src/informer/selector.rs``, itself a port of apimachinery's
``labels.Parse``), so a selector means in a unit test what it means to the
host and the API server; checked against the same golden cases."""

import re
from typing import Callable, List, Optional, Tuple

_END, _CLOSED, _COMMA, _NOT, _DEQ, _EQ, _GT, _ID, _IN, _LT, _NEQ, _NOTIN, _OPEN = range(13)
_KEYWORDS = {")": _CLOSED, ",": _COMMA, "!": _NOT, "==": _DEQ, "=": _EQ, ">": _GT, "in": _IN, "<": _LT,
             "!=": _NEQ, "notin": _NOTIN, "(": _OPEN}
_SPECIAL = set("=!(),><")
_WHITESPACE = set(" \t\r\n")
_INT = re.compile(r"[+-]?[0-9]+")
_ALNUM = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")

#: Operators, as apimachinery's ``selection.Operator``.
IN, NOT_IN, EQUALS, DOUBLE_EQUALS, NOT_EQUALS, GREATER, LESS, EXISTS, DOES_NOT_EXIST = range(9)


def _lex(s: str) -> List[Tuple[int, str]]:
    items: List[Tuple[int, str]] = []
    pos, n = 0, len(s)
    while True:
        while pos < n and s[pos] in _WHITESPACE:
            pos += 1
        if pos >= n or s[pos] == "\0":
            items.append((_END, ""))
            return items
        start = pos
        if s[pos] in _SPECIAL:
            best, end = _END, start
            while pos < n and s[pos] in _SPECIAL and s[start:pos + 1] in _KEYWORDS:
                pos += 1
                best, end = _KEYWORDS[s[start:pos]], pos
            if pos < n and s[pos] == "\0":
                pos += 1  # the lexer reads a NUL as the end of a token and drops it
            items.append((best, s[start:end]))
            continue
        while pos < n and s[pos] != "\0" and s[pos] not in _SPECIAL and s[pos] not in _WHITESPACE:
            pos += 1
        lit = s[start:pos]
        if pos < n and s[pos] == "\0":
            pos += 1
        items.append((_KEYWORDS.get(lit, _ID), lit))


def _found(item: Tuple[int, str]) -> str:
    return "end of string" if item[0] == _END else f"'{item[1]}'"


def _label_name(s: str) -> bool:
    return bool(s) and s[0] in _ALNUM and s[-1] in _ALNUM and all(c in _ALNUM or c in "-_." for c in s)


def _dns_subdomain(s: str) -> bool:
    def lower_digit(c: str) -> bool:
        return "a" <= c <= "z" or "0" <= c <= "9"
    return all(
        label and lower_digit(label[0]) and lower_digit(label[-1]) and all(lower_digit(c) or c == "-" for c in label)
        for label in s.split(".")
    )


def _validate_key(key: str) -> None:
    parts = key.split("/")
    if len(parts) > 2:
        raise ValueError(f"invalid label key {key!r}: at most one '/'")
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix or len(prefix.encode()) > 253 or not _dns_subdomain(prefix):
            raise ValueError(f"invalid label key {key!r}: bad prefix")
    name = parts[-1]
    if len(name.encode()) > 63 or not _label_name(name):
        raise ValueError(f"invalid label key {key!r}: bad name part")


def _int(s: str) -> Optional[int]:
    if not _INT.fullmatch(s):
        return None
    v = int(s)
    return v if -(1 << 63) <= v < (1 << 63) else None


class _Requirement:
    def __init__(self, key: str, op: int, values: List[str]) -> None:
        if op in (EQUALS, DOUBLE_EQUALS, NOT_EQUALS) and len(values) != 1:
            raise ValueError("exact-match compatibility requires one single value")
        if op in (GREATER, LESS):
            if len(values) != 1:
                raise ValueError("for 'Gt', 'Lt' operators, exactly one value is required")
            if _int(values[0]) is None:
                raise ValueError(f"invalid value {values[0]!r} for key {key!r}: for 'Gt', 'Lt' operators, "
                                 "the value must be an integer")
        for v in values:
            if len(v.encode()) > 63 or (v and not _label_name(v)):
                raise ValueError(f"invalid label value {v!r} for key {key!r}")
        self.key, self.op, self.values = key, op, values

    def matches(self, label: Callable[[str], Optional[str]]) -> bool:
        v = label(self.key)
        if self.op in (IN, EQUALS, DOUBLE_EQUALS):
            return v is not None and v in self.values
        if self.op in (NOT_IN, NOT_EQUALS):
            return v is None or v not in self.values
        if self.op == EXISTS:
            return v is not None
        if self.op == DOES_NOT_EXIST:
            return v is None
        actual, bound = (_int(v) if v is not None else None), _int(self.values[0])
        if actual is None or bound is None:
            return False
        return actual > bound if self.op == GREATER else actual < bound

    def __str__(self) -> str:
        values = ",".join(sorted(self.values))
        head = ("!" if self.op == DOES_NOT_EXIST else "") + self.key
        return head + {
            EXISTS: "", DOES_NOT_EXIST: "", EQUALS: "=" + values, DOUBLE_EQUALS: "==" + values,
            NOT_EQUALS: "!=" + values, GREATER: ">" + values, LESS: "<" + values,
            IN: f" in ({values})", NOT_IN: f" notin ({values})",
        }[self.op]


class _Parser:
    def __init__(self, text: str) -> None:
        self.items = _lex(text)
        self.pos = 0

    def lookahead(self, values: bool) -> Tuple[int, str]:
        item = self.items[self.pos] if self.pos < len(self.items) else (_END, "")
        if values and item[0] in (_IN, _NOTIN):
            return (_ID, item[1])
        return item

    def consume(self, values: bool) -> Tuple[int, str]:
        item = self.lookahead(values)
        self.pos += 1
        return item

    def parse(self) -> List[_Requirement]:
        reqs: List[_Requirement] = []
        while True:
            item = self.lookahead(True)
            if item[0] in (_ID, _NOT):
                try:
                    reqs.append(self.requirement())
                except ValueError as e:
                    raise ValueError(f"unable to parse requirement: {e}") from None
                nxt = self.consume(True)
                if nxt[0] == _END:
                    return reqs
                if nxt[0] != _COMMA:
                    raise ValueError(f"found {_found(nxt)}, expected: ',' or 'end of string'")
                after = self.lookahead(True)
                if after[0] not in (_ID, _NOT):
                    raise ValueError(f"found {_found(after)}, expected: identifier after ','")
            elif item[0] == _END:
                return reqs
            else:
                raise ValueError(f"found {_found(item)}, expected: !, identifier, or 'end of string'")

    def requirement(self) -> _Requirement:
        item = self.consume(True)
        negated = item[0] == _NOT
        if negated:
            item = self.consume(True)
        if item[0] != _ID:
            raise ValueError(f"found {_found(item)}, expected: identifier")
        key = item[1]
        _validate_key(key)
        if negated:
            return _Requirement(key, DOES_NOT_EXIST, [])
        if self.lookahead(True)[0] in (_END, _COMMA):
            return _Requirement(key, EXISTS, [])
        op_item = self.consume(False)
        ops = {_IN: IN, _EQ: EQUALS, _DEQ: DOUBLE_EQUALS, _GT: GREATER, _LT: LESS, _NOTIN: NOT_IN,
               _NEQ: NOT_EQUALS}
        if op_item[0] not in ops:
            raise ValueError(f"found {_found(op_item)}, expected: in, notin, =, ==, !=, >, <")
        op = ops[op_item[0]]
        if op in (IN, NOT_IN):
            return _Requirement(key, op, self.values())
        return _Requirement(key, op, [self.exact_value()])

    def values(self) -> List[str]:
        item = self.consume(True)
        if item[0] != _OPEN:
            raise ValueError(f"found {_found(item)} expected: '('")
        nxt = self.lookahead(True)
        if nxt[0] in (_ID, _COMMA):
            values = self.identifiers()
            self.consume(True)
        elif nxt[0] == _CLOSED:
            self.consume(True)
            values = [""]
        else:
            raise ValueError(f"found {_found(nxt)}, expected: ',', ')' or identifier")
        return sorted(set(values))

    def identifiers(self) -> List[str]:
        values: List[str] = []
        while True:
            item = self.consume(True)
            if item[0] == _ID:
                values.append(item[1])
                nxt = self.lookahead(True)
                if nxt[0] == _CLOSED:
                    return values
                if nxt[0] != _COMMA:
                    raise ValueError(f"found {_found(nxt)}, expected: ',' or ')'")
            elif item[0] == _COMMA:
                nxt = self.lookahead(True)
                if not values or nxt[0] in (_COMMA, _CLOSED):
                    values.append("")
                if nxt[0] == _CLOSED:
                    return values
            else:
                raise ValueError(f"found {_found(item)}, expected: ',', or identifier")

    def exact_value(self) -> str:
        if self.lookahead(True)[0] in (_END, _COMMA):
            return ""
        item = self.consume(True)
        if item[0] == _ID:
            return item[1]
        raise ValueError(f"found {_found(item)}, expected: identifier")


class Selector:
    """A parsed label selector: the AND of its requirements, sorted by key."""

    def __init__(self, text: str) -> None:
        """Parses ``text`` as the host does; raises ValueError with the
        host's kind of message."""
        try:
            reqs = _Parser(text).parse()
        except ValueError as e:
            raise ValueError(f"invalid selector {text!r}: {e}") from None
        self.requirements = sorted(reqs, key=lambda r: r.key)

    def matches(self, label: Callable[[str], Optional[str]]) -> bool:
        """Whether a label set, given as a lookup, matches."""
        return all(r.matches(label) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)

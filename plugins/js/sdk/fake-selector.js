// Label selectors for the kubewasm fake host (fake.js): a port of the host's
// parser (host/src/informer/selector.rs, itself a port of apimachinery's
// labels.Parse), so a selector means in a unit test what it means to the
// host and the API server; checked against the same golden cases.

const END = 0, CLOSED = 1, COMMA = 2, NOT = 3, DEQ = 4, EQ = 5, GT = 6, ID = 7, IN = 8, LT = 9, NEQ = 10,
  NOTIN = 11, OPEN = 12;
const KEYWORDS = new Map([[')', CLOSED], [',', COMMA], ['!', NOT], ['==', DEQ], ['=', EQ], ['>', GT], ['in', IN],
  ['<', LT], ['!=', NEQ], ['notin', NOTIN], ['(', OPEN]]);
const SPECIAL = new Set('=!(),><');
const WHITESPACE = new Set(' \t\r\n');
const ALNUM = /^[A-Za-z0-9]$/;

const O_IN = 'in', O_NOTIN = 'notin', O_EQ = '=', O_DEQ = '==', O_NEQ = '!=', O_GT = '>', O_LT = '<',
  O_EXISTS = 'exists', O_NOT = '!';

// The lexer works on UTF-8 bytes in the host; every special symbol and
// whitespace is ASCII, so working on UTF-16 code units splits the same way.
function lex(s) {
  const items = [];
  let pos = 0;
  const n = s.length;
  for (;;) {
    while (pos < n && WHITESPACE.has(s[pos])) pos++;
    if (pos >= n || s[pos] === '\0') {
      items.push([END, '']);
      return items;
    }
    const start = pos;
    if (SPECIAL.has(s[pos])) {
      let best = END, end = start;
      while (pos < n && SPECIAL.has(s[pos]) && KEYWORDS.has(s.slice(start, pos + 1))) {
        pos++;
        best = KEYWORDS.get(s.slice(start, pos));
        end = pos;
      }
      if (pos < n && s[pos] === '\0') pos++; // a NUL ends a token and is dropped
      items.push([best, s.slice(start, end)]);
      continue;
    }
    while (pos < n && s[pos] !== '\0' && !SPECIAL.has(s[pos]) && !WHITESPACE.has(s[pos])) pos++;
    const lit = s.slice(start, pos);
    if (pos < n && s[pos] === '\0') pos++;
    items.push([KEYWORDS.get(lit) ?? ID, lit]);
  }
}

const found = ([tok, lit]) => (tok === END ? 'end of string' : `'${lit}'`);
const utf8Length = (s) => new TextEncoder().encode(s).length;
const labelName = (s) =>
  s.length > 0 && ALNUM.test(s[0]) && ALNUM.test(s[s.length - 1]) && /^[A-Za-z0-9._-]*$/.test(s);
const dnsSubdomain = (s) => s.split('.').every((l) => /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(l));

function validateKey(key) {
  const parts = key.split('/');
  if (parts.length > 2) throw new Error(`invalid label key "${key}": at most one '/'`);
  if (parts.length === 2 && (parts[0] === '' || utf8Length(parts[0]) > 253 || !dnsSubdomain(parts[0]))) {
    throw new Error(`invalid label key "${key}": bad prefix`);
  }
  const name = parts[parts.length - 1];
  if (utf8Length(name) > 63 || !labelName(name)) throw new Error(`invalid label key "${key}": bad name part`);
}

// An int64 as apimachinery's strconv.ParseInt reads it, or undefined.
function int64(s) {
  if (!/^[+-]?[0-9]+$/.test(s)) return undefined;
  const v = BigInt(s);
  return v >= -(1n << 63n) && v < 1n << 63n ? v : undefined;
}

function requirement(key, op, values) {
  if ([O_EQ, O_DEQ, O_NEQ].includes(op) && values.length !== 1) {
    throw new Error('exact-match compatibility requires one single value');
  }
  if (op === O_GT || op === O_LT) {
    if (values.length !== 1) throw new Error("for 'Gt', 'Lt' operators, exactly one value is required");
    if (int64(values[0]) === undefined) {
      throw new Error(`invalid value "${values[0]}" for key "${key}": for 'Gt', 'Lt' operators, the value must be an integer`);
    }
  }
  for (const v of values) {
    if (utf8Length(v) > 63 || (v !== '' && !labelName(v))) throw new Error(`invalid label value "${v}" for key "${key}"`);
  }
  return { key, op, values };
}

class Parser {
  constructor(text) {
    this.items = lex(text);
    this.pos = 0;
  }

  lookahead(values) {
    const item = this.items[this.pos] ?? [END, ''];
    return values && (item[0] === IN || item[0] === NOTIN) ? [ID, item[1]] : item;
  }

  consume(values) {
    const item = this.lookahead(values);
    this.pos++;
    return item;
  }

  parse() {
    const reqs = [];
    for (;;) {
      const item = this.lookahead(true);
      if (item[0] === ID || item[0] === NOT) {
        try {
          reqs.push(this.requirement());
        } catch (e) {
          throw new Error(`unable to parse requirement: ${e.message}`);
        }
        const next = this.consume(true);
        if (next[0] === END) return reqs;
        if (next[0] !== COMMA) throw new Error(`found ${found(next)}, expected: ',' or 'end of string'`);
        const after = this.lookahead(true);
        if (after[0] !== ID && after[0] !== NOT) throw new Error(`found ${found(after)}, expected: identifier after ','`);
      } else if (item[0] === END) {
        return reqs;
      } else {
        throw new Error(`found ${found(item)}, expected: !, identifier, or 'end of string'`);
      }
    }
  }

  requirement() {
    let item = this.consume(true);
    const negated = item[0] === NOT;
    if (negated) item = this.consume(true);
    if (item[0] !== ID) throw new Error(`found ${found(item)}, expected: identifier`);
    const key = item[1];
    validateKey(key);
    if (negated) return requirement(key, O_NOT, []);
    const next = this.lookahead(true);
    if (next[0] === END || next[0] === COMMA) return requirement(key, O_EXISTS, []);
    const opItem = this.consume(false);
    const op = new Map([[IN, O_IN], [EQ, O_EQ], [DEQ, O_DEQ], [GT, O_GT], [LT, O_LT], [NOTIN, O_NOTIN], [NEQ, O_NEQ]])
      .get(opItem[0]);
    if (op === undefined) throw new Error(`found ${found(opItem)}, expected: in, notin, =, ==, !=, >, <`);
    if (op === O_IN || op === O_NOTIN) return requirement(key, op, this.values());
    return requirement(key, op, [this.exactValue()]);
  }

  values() {
    const item = this.consume(true);
    if (item[0] !== OPEN) throw new Error(`found ${found(item)} expected: '('`);
    const next = this.lookahead(true);
    let values;
    if (next[0] === ID || next[0] === COMMA) {
      values = this.identifiers();
      this.consume(true);
    } else if (next[0] === CLOSED) {
      this.consume(true);
      values = [''];
    } else {
      throw new Error(`found ${found(next)}, expected: ',', ')' or identifier`);
    }
    return [...new Set(values)].sort(byCodeUnits);
  }

  identifiers() {
    const values = [];
    for (;;) {
      const item = this.consume(true);
      if (item[0] === ID) {
        values.push(item[1]);
        const next = this.lookahead(true);
        if (next[0] === CLOSED) return values;
        if (next[0] !== COMMA) throw new Error(`found ${found(next)}, expected: ',' or ')'`);
      } else if (item[0] === COMMA) {
        const next = this.lookahead(true);
        if (values.length === 0 || next[0] === COMMA || next[0] === CLOSED) values.push('');
        if (next[0] === CLOSED) return values;
      } else {
        throw new Error(`found ${found(item)}, expected: ',', or identifier`);
      }
    }
  }

  exactValue() {
    const next = this.lookahead(true);
    if (next[0] === END || next[0] === COMMA) return '';
    const item = this.consume(true);
    if (item[0] === ID) return item[1];
    throw new Error(`found ${found(item)}, expected: identifier`);
  }
}

// Byte order of UTF-8 for the ASCII that valid keys and values hold.
const byCodeUnits = (a, b) => (a < b ? -1 : a > b ? 1 : 0);

function matches(req, label) {
  const v = label(req.key);
  switch (req.op) {
    case O_IN: case O_EQ: case O_DEQ: return v !== undefined && req.values.includes(v);
    case O_NOTIN: case O_NEQ: return v === undefined || !req.values.includes(v);
    case O_EXISTS: return v !== undefined;
    case O_NOT: return v === undefined;
    default: {
      const actual = v === undefined ? undefined : int64(v);
      const bound = int64(req.values[0]);
      if (actual === undefined || bound === undefined) return false;
      return req.op === O_GT ? actual > bound : actual < bound;
    }
  }
}

function text(req) {
  const values = [...req.values].sort(byCodeUnits).join(',');
  const head = (req.op === O_NOT ? '!' : '') + req.key;
  switch (req.op) {
    case O_EXISTS: case O_NOT: return head;
    case O_IN: return `${head} in (${values})`;
    case O_NOTIN: return `${head} notin (${values})`;
    default: return head + req.op + values;
  }
}

/** A parsed label selector: the AND of its requirements, sorted by key. */
export class Selector {
  /** Parses `source` as the host does; throws an Error with the host's kind of message. */
  constructor(source) {
    let reqs;
    try {
      reqs = new Parser(source).parse();
    } catch (e) {
      throw new Error(`invalid selector ${JSON.stringify(source)}: ${e.message}`);
    }
    this.requirements = reqs.map((r, i) => [r, i]).sort(([a, i], [b, j]) => byCodeUnits(a.key, b.key) || i - j)
      .map(([r]) => r);
  }

  /** Whether a label set, given as a lookup `(key) => value | undefined`, matches. */
  matches(label) {
    return this.requirements.every((r) => matches(r, label));
  }

  toString() {
    return this.requirements.map(text).join(',');
  }
}

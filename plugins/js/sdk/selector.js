// Kubernetes label selectors (kubectl's grammar), parsed and matched in the
// guest: `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x,y)`, `a`, `!a`,
// `a>N`, `a<N`, joined by commas. The empty selector matches everything.
// A port of the Rust SDK's selector.rs: same grammar, same errors.

const SPECIAL = new Set(['!', '=', '(', ')', ',', '<', '>']);
const isSpace = (c) => /\s/.test(c);

function lex(text) {
  const tokens = [];
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    if (isSpace(c)) { i += 1; continue; }
    const two = text.slice(i, i + 2);
    if (two === '!=') { tokens.push({ t: '!=' }); i += 2; continue; }
    if (two === '==') { tokens.push({ t: '=' }); i += 2; continue; }
    if (SPECIAL.has(c)) { tokens.push({ t: c === '!' ? 'not' : c }); i += 1; continue; }
    let j = i;
    while (j < text.length && !SPECIAL.has(text[j]) && !isSpace(text[j])) j += 1;
    tokens.push({ t: 'word', v: text.slice(i, j) });
    i = j;
  }
  return tokens;
}

const NAME = /^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$/;
const isName = (s) => s.length <= 63 && NAME.test(s);

function checkKey(key) {
  const slash = key.indexOf('/');
  const prefix = slash >= 0 ? key.slice(0, slash) : null;
  const name = slash >= 0 ? key.slice(slash + 1) : key;
  const prefixOk = prefix === null || (prefix.length > 0 && prefix.length <= 253
    && prefix.split('.').every((p) => isName(p) && /^[A-Za-z0-9-]+$/.test(p)));
  if (!prefixOk || !isName(name)) throw new Error(`${JSON.stringify(key)} is not a valid label key`);
}

function checkValue(v) {
  if (v !== '' && !isName(v)) throw new Error(`${JSON.stringify(v)} is not a valid label value`);
}

const show = (tok) => (tok.t === 'word' ? `Word(${JSON.stringify(tok.v)})` : tok.t);

function parseRequirements(tokens) {
  let pos = 0;
  const peek = () => tokens[pos];
  const next = () => tokens[pos++];
  const key = () => {
    const t = next();
    if (t && t.t === 'word' && t.v !== 'in' && t.v !== 'notin') { checkKey(t.v); return t.v; }
    throw new Error(t ? `expected a label key but found ${show(t)}` : 'expected a label key');
  };
  const value = () => {
    const t = peek();
    if (t && t.t === 'word') { pos += 1; checkValue(t.v); return t.v; }
    if (!t || t.t === ',') return '';
    throw new Error(`expected a value but found ${show(t)}`);
  };
  const integer = () => {
    const t = next();
    if (t && t.t === 'word') {
      if (!/^[+-]?\d+$/.test(t.v)) throw new Error(`${JSON.stringify(t.v)} is not an integer`);
      return BigInt(t.v);
    }
    throw new Error('expected an integer');
  };
  const set = () => {
    if (!next() || tokens[pos - 1].t !== '(') throw new Error("expected '(' to open a set of values");
    const values = [];
    for (;;) {
      const v = next();
      if (!v) throw new Error('unterminated set of values');
      if (v.t !== 'word') throw new Error(`expected a value in the set but found ${show(v)}`);
      checkValue(v.v);
      values.push(v.v);
      const sep = next();
      if (!sep) throw new Error('unterminated set of values');
      if (sep.t === ')') return values;
      if (sep.t !== ',') throw new Error(`expected ',' or ')' but found ${show(sep)}`);
    }
  };
  const requirement = () => {
    if (peek() && peek().t === 'not') { pos += 1; return { op: '!', key: key() }; }
    const k = key();
    const t = peek();
    if (!t || t.t === ',') return { op: 'exists', key: k };
    pos += 1;
    switch (t.t) {
      case '=': return { op: '=', key: k, value: value() };
      case '!=': return { op: '!=', key: k, value: value() };
      case '>': return { op: '>', key: k, n: integer() };
      case '<': return { op: '<', key: k, n: integer() };
      case 'word':
        if (t.v === 'in') return { op: 'in', key: k, values: set() };
        if (t.v === 'notin') return { op: 'notin', key: k, values: set() };
      // fall through
      default:
        throw new Error(`expected an operator after ${JSON.stringify(k)} but found ${show(t)}`);
    }
  };
  const reqs = [];
  if (!peek()) return reqs;
  for (;;) {
    reqs.push(requirement());
    const t = next();
    if (!t) return reqs;
    if (t.t !== ',') throw new Error(`expected ',' but found ${show(t)}`);
  }
}

function toInt(v) {
  return v !== undefined && /^[+-]?\d+$/.test(v) ? BigInt(v) : undefined;
}

export class Selector {
  constructor(requirements) {
    this.requirements = requirements;
  }

  /** Parses kubectl's selector syntax; throws an Error naming the problem. */
  static parse(text) {
    try {
      return new Selector(parseRequirements(lex(text)));
    } catch (e) {
      throw new Error(`invalid label selector ${JSON.stringify(text)}: ${e.message}`);
    }
  }

  isEmpty() {
    return this.requirements.length === 0;
  }

  /** Whether labels, as WIT gives them (`[[key, value], ...]`), match. */
  matches(labels) {
    const get = (k) => {
      const found = labels.find(([key]) => key === k);
      return found === undefined ? undefined : found[1];
    };
    return this.requirements.every((r) => {
      const l = get(r.key);
      switch (r.op) {
        case '=': return l === r.value;
        case '!=': return l !== r.value;
        case 'in': return l !== undefined && r.values.includes(l);
        case 'notin': return l === undefined || !r.values.includes(l);
        case 'exists': return l !== undefined;
        case '!': return l === undefined;
        case '>': { const n = toInt(l); return n !== undefined && n > r.n; }
        case '<': { const n = toInt(l); return n !== undefined && n < r.n; }
        default: return false;
      }
    });
  }

  /** The canonical text, which the host's cache accepts. */
  toString() {
    return this.requirements.map((r) => {
      switch (r.op) {
        case 'exists': return r.key;
        case '!': return `!${r.key}`;
        case 'in': case 'notin': return `${r.key} ${r.op} (${r.values.join(',')})`;
        case '>': case '<': return `${r.key}${r.op}${r.n}`;
        default: return `${r.key}${r.op}${r.value}`;
      }
    }).join(',');
  }
}

/* kubewasm SDK for C plugins: see kubewasm.h. */
#include "kubewasm.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *xrealloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (!q) abort();
  return q;
}

/* ---- strings ----------------------------------------------------------------- */

kw_str kw_s(const char *s) {
  kw_str r = {(uint8_t *)s, s ? strlen(s) : 0};
  return r;
}

bool kw_eq(const kw_str *a, const char *b) {
  size_t n = strlen(b);
  return a->len == n && memcmp(a->ptr, b, n) == 0;
}

bool kw_str_eq(const kw_str *a, const kw_str *b) {
  return a->len == b->len && (a->len == 0 || memcmp(a->ptr, b->ptr, a->len) == 0);
}

char *kw_cstr(const kw_str *s) {
  char *r = xrealloc(NULL, s->len + 1);
  if (s->len) memcpy(r, s->ptr, s->len);
  r[s->len] = 0;
  return r;
}

static void buf_reserve(kw_buf *b, size_t more) {
  if (b->len + more + 1 > b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 64;
    while (cap < b->len + more + 1) cap *= 2;
    b->ptr = xrealloc(b->ptr, cap);
    b->cap = cap;
  }
}

void kw_buf_n(kw_buf *b, const char *s, size_t n) {
  buf_reserve(b, n);
  if (n) memcpy(b->ptr + b->len, s, n);
  b->len += n;
  b->ptr[b->len] = 0;
}

void kw_buf_s(kw_buf *b, const char *s) { kw_buf_n(b, s, strlen(s)); }
void kw_buf_str(kw_buf *b, const kw_str *s) { kw_buf_n(b, (const char *)s->ptr, s->len); }

void kw_buf_json(kw_buf *b, const char *s, size_t n) {
  kw_buf_n(b, "\"", 1);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\') {
      char e[2] = {'\\', (char)c};
      kw_buf_n(b, e, 2);
    } else if (c < 0x20) {
      char e[7];
      snprintf(e, sizeof e, "\\u%04x", c);
      kw_buf_n(b, e, 6);
    } else {
      kw_buf_n(b, (const char *)&c, 1);
    }
  }
  kw_buf_n(b, "\"", 1);
}

static void buf_vprintf(kw_buf *b, const char *fmt, va_list ap) {
  va_list copy;
  va_copy(copy, ap);
  int n = vsnprintf(NULL, 0, fmt, copy);
  va_end(copy);
  if (n < 0) return;
  buf_reserve(b, (size_t)n);
  vsnprintf(b->ptr + b->len, (size_t)n + 1, fmt, ap);
  b->len += (size_t)n;
}

void kw_buf_printf(kw_buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  buf_vprintf(b, fmt, ap);
  va_end(ap);
}

const char *kw_buf_cstr(kw_buf *b) {
  buf_reserve(b, 0);
  b->ptr[b->len] = 0;
  return b->ptr;
}

void kw_buf_free(kw_buf *b) {
  free(b->ptr);
  b->ptr = NULL;
  b->len = b->cap = 0;
}

char *kw_format(const char *fmt, ...) {
  kw_buf b = {0};
  va_list ap;
  va_start(ap, fmt);
  buf_vprintf(&b, fmt, ap);
  va_end(ap);
  return (char *)kw_buf_cstr(&b);
}

static void dup_string(plugin_string_t *out, const char *s) {
  size_t n = strlen(s);
  out->ptr = n ? xrealloc(NULL, n) : NULL;
  if (n) memcpy(out->ptr, s, n);
  out->len = n;
}

/* ---- kinds, deltas, metadata ------------------------------------------------ */

kw_kind kw_gvk(const char *group, const char *version, const char *kind) {
  kw_kind k;
  k.tag = KUBEWASM_PLUGIN_TYPES_KIND_REF_GVK;
  k.val.gvk.group = kw_s(group);
  k.val.gvk.version = kw_s(version);
  k.val.gvk.kind = kw_s(kind);
  return k;
}

bool kw_delta_is(const kw_delta *d, const char *group, const char *kind) {
  return kw_eq(&d->kind.group, group) && kw_eq(&d->kind.kind, kind);
}

kw_object kw_delta_object(const kw_delta *d, bool *ok) {
  kw_object o = {0};
  *ok = d->object.is_some;
  if (*ok) o = kubewasm_plugin_types_borrow_object(d->object.val);
  return o;
}

bool kw_delta_old_meta(const kw_delta *d, kw_meta *out) {
  if (!d->old_object.is_some) return false;
  kw_meta_of(kubewasm_plugin_types_borrow_object(d->old_object.val), out);
  return true;
}

const char *kw_delta_type_name(kubewasm_plugin_types_delta_type_t t) {
  static const char *names[] = {"added", "updated", "deleted", "resync", "synced"};
  return t < 5 ? names[t] : "unknown";
}

static const kw_str *lookup(const kw_pairs *pairs, const char *key) {
  for (size_t i = 0; i < pairs->len; i++)
    if (kw_eq(&pairs->ptr[i].f0, key)) return &pairs->ptr[i].f1;
  return NULL;
}

const kw_str *kw_label(const kw_meta *m, const char *key) { return lookup(&m->labels, key); }
const kw_str *kw_annotation(const kw_meta *m, const char *key) { return lookup(&m->annotations, key); }

bool kw_label_is(const kw_meta *m, const char *key, const char *value) {
  const kw_str *v = kw_label(m, key);
  return v && kw_eq(v, value);
}

bool kw_is_terminating(const kw_meta *m) { return m->deletion_timestamp.is_some; }

void kw_key(const kw_meta *m, kw_buf *b) {
  if (m->namespace_.is_some) {
    kw_buf_str(b, &m->namespace_.val);
    kw_buf_n(b, "/", 1);
  }
  kw_buf_str(b, &m->name);
}

void kw_meta_of(kw_object o, kw_meta *out) { kubewasm_plugin_types_method_object_meta(o, out); }

bool kw_field(kw_object o, const char *pointer, kw_field_value *out) {
  kw_str p = kw_s(pointer);
  return kubewasm_plugin_types_method_object_field(o, &p, out);
}

/* ---- errors ------------------------------------------------------------------ */

static bool set_error(kw_error *err, uint8_t tag, const char *fmt, va_list ap) {
  kw_buf b = {0};
  buf_vprintf(&b, fmt, ap);
  err->tag = tag;
  err->val.permanent.ptr = (uint8_t *)b.ptr;
  err->val.permanent.len = b.len;
  return false;
}

bool kw_permanent(kw_error *err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  set_error(err, EXPORTS_KUBEWASM_PLUGIN_HANDLER_HANDLER_ERROR_PERMANENT, fmt, ap);
  va_end(ap);
  return false;
}

bool kw_retry(kw_error *err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  set_error(err, EXPORTS_KUBEWASM_PLUGIN_HANDLER_HANDLER_ERROR_RETRY, fmt, ap);
  va_end(ap);
  return false;
}

/* ---- label selectors (a port of the Rust SDK's selector.rs) ------------------ */

enum op { OP_EQ, OP_NE, OP_IN, OP_NOTIN, OP_EXISTS, OP_NOT, OP_GT, OP_LT };

typedef struct {
  enum op op;
  char *key;
  char **values;
  size_t nvalues;
  long long n;
} requirement;

struct kw_selector {
  requirement *reqs;
  size_t n;
};

enum tok { T_WORD, T_NOT, T_EQ, T_NE, T_GT, T_LT, T_OPEN, T_CLOSE, T_COMMA, T_END };

typedef struct {
  const char *s;
  size_t len, pos;
  enum tok t;
  const char *w; /* word start */
  size_t wn;     /* word length */
} lexer;

static bool special(char c) {
  return c == '!' || c == '=' || c == '(' || c == ')' || c == ',' || c == '<' || c == '>' ||
         isspace((unsigned char)c);
}

static void advance(lexer *l) {
  while (l->pos < l->len && isspace((unsigned char)l->s[l->pos])) l->pos++;
  if (l->pos >= l->len) {
    l->t = T_END;
    return;
  }
  const char *p = l->s + l->pos;
  size_t rest = l->len - l->pos;
  if (rest >= 2 && p[0] == '!' && p[1] == '=') { l->t = T_NE; l->pos += 2; return; }
  if (rest >= 2 && p[0] == '=' && p[1] == '=') { l->t = T_EQ; l->pos += 2; return; }
  switch (p[0]) {
    case '!': l->t = T_NOT; l->pos++; return;
    case '=': l->t = T_EQ; l->pos++; return;
    case '>': l->t = T_GT; l->pos++; return;
    case '<': l->t = T_LT; l->pos++; return;
    case '(': l->t = T_OPEN; l->pos++; return;
    case ')': l->t = T_CLOSE; l->pos++; return;
    case ',': l->t = T_COMMA; l->pos++; return;
    default: break;
  }
  size_t n = 0;
  while (n < rest && !special(p[n])) n++;
  l->t = T_WORD;
  l->w = p;
  l->wn = n;
  l->pos += n;
}

static bool word_is(const lexer *l, const char *w) {
  return l->t == T_WORD && l->wn == strlen(w) && memcmp(l->w, w, l->wn) == 0;
}

static void show(kw_buf *b, const lexer *l) {
  static const char *names[] = {"", "not", "=", "!=", ">", "<", "(", ")", ","};
  if (l->t == T_WORD) {
    kw_buf_s(b, "Word(");
    kw_buf_json(b, l->w, l->wn);
    kw_buf_s(b, ")");
  } else {
    kw_buf_s(b, names[l->t]);
  }
}

static bool is_name(const char *s, size_t n) {
  if (n == 0 || n > 63 || !isalnum((unsigned char)s[0]) || !isalnum((unsigned char)s[n - 1])) return false;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.') return false;
  return true;
}

static bool check_key(const char *k, size_t n) {
  const char *slash = memchr(k, '/', n);
  if (!slash) return is_name(k, n);
  size_t pn = (size_t)(slash - k);
  if (pn == 0 || pn > 253) return false;
  size_t start = 0;
  for (size_t i = 0; i <= pn; i++) {
    if (i == pn || k[i] == '.') {
      if (!is_name(k + start, i - start)) return false;
      for (size_t j = start; j < i; j++)
        if (!isalnum((unsigned char)k[j]) && k[j] != '-') return false;
      start = i + 1;
    }
  }
  return is_name(slash + 1, n - pn - 1);
}

static char *dupn(const char *s, size_t n) {
  char *r = xrealloc(NULL, n + 1);
  memcpy(r, s, n);
  r[n] = 0;
  return r;
}

/* Each parse step returns false with the reason appended to e. */
static bool parse_key(lexer *l, kw_buf *e, char **key) {
  if (l->t == T_WORD && !word_is(l, "in") && !word_is(l, "notin")) {
    if (!check_key(l->w, l->wn)) {
      kw_buf_json(e, l->w, l->wn);
      kw_buf_s(e, " is not a valid label key");
      return false;
    }
    *key = dupn(l->w, l->wn);
    advance(l);
    return true;
  }
  if (l->t == T_END) {
    kw_buf_s(e, "expected a label key");
  } else {
    kw_buf_s(e, "expected a label key but found ");
    show(e, l);
  }
  return false;
}

static bool check_value(const lexer *l, kw_buf *e) {
  if (l->wn == 0 || is_name(l->w, l->wn)) return true;
  kw_buf_json(e, l->w, l->wn);
  kw_buf_s(e, " is not a valid label value");
  return false;
}

static void push_value(requirement *r, const char *s, size_t n) {
  r->values = xrealloc(r->values, (r->nvalues + 1) * sizeof(char *));
  r->values[r->nvalues++] = dupn(s, n);
}

static bool parse_requirement(lexer *l, kw_buf *e, requirement *r) {
  memset(r, 0, sizeof *r);
  if (l->t == T_NOT) {
    advance(l);
    r->op = OP_NOT;
    return parse_key(l, e, &r->key);
  }
  if (!parse_key(l, e, &r->key)) return false;
  if (l->t == T_END || l->t == T_COMMA) {
    r->op = OP_EXISTS;
    return true;
  }
  if (l->t == T_EQ || l->t == T_NE) {
    r->op = l->t == T_EQ ? OP_EQ : OP_NE;
    advance(l);
    if (l->t == T_WORD) {
      if (!check_value(l, e)) return false;
      push_value(r, l->w, l->wn);
      advance(l);
    } else if (l->t == T_END || l->t == T_COMMA) {
      push_value(r, "", 0);
    } else {
      kw_buf_s(e, "expected a value but found ");
      show(e, l);
      return false;
    }
    return true;
  }
  if (l->t == T_GT || l->t == T_LT) {
    r->op = l->t == T_GT ? OP_GT : OP_LT;
    advance(l);
    if (l->t != T_WORD) {
      kw_buf_s(e, "expected an integer");
      return false;
    }
    char *w = dupn(l->w, l->wn), *end = NULL;
    r->n = strtoll(w, &end, 10);
    bool ok = l->wn > 0 && *end == 0 && !isspace((unsigned char)w[0]);
    free(w);
    if (!ok) {
      kw_buf_json(e, l->w, l->wn);
      kw_buf_s(e, " is not an integer");
      return false;
    }
    advance(l);
    return true;
  }
  if (word_is(l, "in") || word_is(l, "notin")) {
    r->op = word_is(l, "in") ? OP_IN : OP_NOTIN;
    advance(l);
    if (l->t != T_OPEN) {
      kw_buf_s(e, "expected '(' to open a set of values");
      return false;
    }
    advance(l);
    for (;;) {
      if (l->t == T_END) {
        kw_buf_s(e, "unterminated set of values");
        return false;
      }
      if (l->t != T_WORD) {
        kw_buf_s(e, "expected a value in the set but found ");
        show(e, l);
        return false;
      }
      if (!check_value(l, e)) return false;
      push_value(r, l->w, l->wn);
      advance(l);
      if (l->t == T_CLOSE) {
        advance(l);
        return true;
      }
      if (l->t == T_END) {
        kw_buf_s(e, "unterminated set of values");
        return false;
      }
      if (l->t != T_COMMA) {
        kw_buf_s(e, "expected ',' or ')' but found ");
        show(e, l);
        return false;
      }
      advance(l);
    }
  }
  kw_buf_s(e, "expected an operator after ");
  kw_buf_json(e, r->key, strlen(r->key));
  kw_buf_s(e, " but found ");
  show(e, l);
  return false;
}

static void free_requirement(requirement *r) {
  free(r->key);
  for (size_t i = 0; i < r->nvalues; i++) free(r->values[i]);
  free(r->values);
}

void kw_selector_free(kw_selector *s) {
  if (!s) return;
  for (size_t i = 0; i < s->n; i++) free_requirement(&s->reqs[i]);
  free(s->reqs);
  free(s);
}

kw_selector *kw_selector_parse(const char *text, size_t len, char **error) {
  kw_selector *s = xrealloc(NULL, sizeof *s);
  s->reqs = NULL;
  s->n = 0;
  lexer l = {text, len, 0, T_END, NULL, 0};
  kw_buf e = {0};
  advance(&l);
  if (l.t != T_END) {
    for (;;) {
      requirement r;
      bool ok = parse_requirement(&l, &e, &r);
      if (!ok) {
        free_requirement(&r);
        break;
      }
      s->reqs = xrealloc(s->reqs, (s->n + 1) * sizeof(requirement));
      s->reqs[s->n++] = r;
      if (l.t == T_END) break;
      if (l.t != T_COMMA) {
        kw_buf_s(&e, "expected ',' but found ");
        show(&e, &l);
        break;
      }
      advance(&l);
    }
  }
  if (e.len == 0) return s;
  kw_selector_free(s);
  kw_buf msg = {0};
  kw_buf_s(&msg, "invalid label selector ");
  kw_buf_json(&msg, text, len);
  kw_buf_s(&msg, ": ");
  kw_buf_n(&msg, e.ptr, e.len);
  kw_buf_free(&e);
  *error = (char *)kw_buf_cstr(&msg);
  return NULL;
}

bool kw_selector_is_empty(const kw_selector *s) { return s->n == 0; }

static bool label_int(const kw_str *v, long long *out) {
  if (!v || v->len == 0 || v->len > 20) return false;
  char tmp[24], *end = NULL;
  memcpy(tmp, v->ptr, v->len);
  tmp[v->len] = 0;
  if (isspace((unsigned char)tmp[0])) return false;
  *out = strtoll(tmp, &end, 10);
  return *end == 0;
}

bool kw_selector_matches(const kw_selector *s, const kw_pairs *labels) {
  for (size_t i = 0; i < s->n; i++) {
    const requirement *r = &s->reqs[i];
    const kw_str *v = lookup(labels, r->key);
    bool in = false;
    long long n = 0;
    for (size_t j = 0; v && j < r->nvalues; j++)
      if (kw_eq(v, r->values[j])) in = true;
    bool ok = false;
    switch (r->op) {
      case OP_EQ: ok = v && kw_eq(v, r->values[0]); break;
      case OP_NE: ok = !v || !kw_eq(v, r->values[0]); break;
      case OP_IN: ok = in; break;
      case OP_NOTIN: ok = !in; break;
      case OP_EXISTS: ok = v != NULL; break;
      case OP_NOT: ok = v == NULL; break;
      case OP_GT: ok = label_int(v, &n) && n > r->n; break;
      case OP_LT: ok = label_int(v, &n) && n < r->n; break;
    }
    if (!ok) return false;
  }
  return true;
}

char *kw_selector_string(const kw_selector *s) {
  kw_buf b = {0};
  for (size_t i = 0; i < s->n; i++) {
    const requirement *r = &s->reqs[i];
    if (i) kw_buf_s(&b, ",");
    switch (r->op) {
      case OP_NOT: kw_buf_printf(&b, "!%s", r->key); break;
      case OP_EXISTS: kw_buf_s(&b, r->key); break;
      case OP_EQ: kw_buf_printf(&b, "%s=%s", r->key, r->values[0]); break;
      case OP_NE: kw_buf_printf(&b, "%s!=%s", r->key, r->values[0]); break;
      case OP_GT: kw_buf_printf(&b, "%s>%lld", r->key, r->n); break;
      case OP_LT: kw_buf_printf(&b, "%s<%lld", r->key, r->n); break;
      case OP_IN:
      case OP_NOTIN:
        kw_buf_printf(&b, "%s %s (", r->key, r->op == OP_IN ? "in" : "notin");
        for (size_t j = 0; j < r->nvalues; j++) kw_buf_printf(&b, "%s%s", j ? "," : "", r->values[j]);
        kw_buf_s(&b, ")");
        break;
    }
  }
  return (char *)kw_buf_cstr(&b);
}

/* ---- config: a flat JSON object of strings ------------------------------------ */

typedef struct {
  const char *s;
  size_t len, pos;
} json;

static void ws(json *j) {
  while (j->pos < j->len && strchr(" \t\r\n", j->s[j->pos])) j->pos++;
}

static void utf8(kw_buf *b, unsigned long c) {
  char o[4];
  size_t n;
  if (c < 0x80) { o[0] = (char)c; n = 1; }
  else if (c < 0x800) { o[0] = (char)(0xC0 | (c >> 6)); o[1] = (char)(0x80 | (c & 0x3F)); n = 2; }
  else if (c < 0x10000) { o[0] = (char)(0xE0 | (c >> 12)); o[1] = (char)(0x80 | ((c >> 6) & 0x3F)); o[2] = (char)(0x80 | (c & 0x3F)); n = 3; }
  else { o[0] = (char)(0xF0 | (c >> 18)); o[1] = (char)(0x80 | ((c >> 12) & 0x3F)); o[2] = (char)(0x80 | ((c >> 6) & 0x3F)); o[3] = (char)(0x80 | (c & 0x3F)); n = 4; }
  kw_buf_n(b, o, n);
}

static bool hex4(json *j, unsigned long *out) {
  if (j->pos + 4 > j->len) return false;
  char tmp[5] = {0}, *end = NULL;
  memcpy(tmp, j->s + j->pos, 4);
  *out = strtoul(tmp, &end, 16);
  j->pos += 4;
  return *end == 0;
}

/* A JSON string at j->pos into out (unescaped). */
static bool json_string(json *j, kw_buf *out) {
  if (j->pos >= j->len || j->s[j->pos] != '"') return false;
  j->pos++;
  while (j->pos < j->len) {
    char c = j->s[j->pos++];
    if (c == '"') return true;
    if ((unsigned char)c < 0x20) return false;
    if (c != '\\') {
      kw_buf_n(out, &c, 1);
      continue;
    }
    if (j->pos >= j->len) return false;
    char e = j->s[j->pos++];
    const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
    const char *k = strchr(from, e);
    if (e && k) {
      kw_buf_n(out, to + (k - from), 1);
    } else if (e == 'u') {
      unsigned long c1, c2;
      if (!hex4(j, &c1)) return false;
      if (c1 >= 0xD800 && c1 < 0xDC00) {
        if (j->pos + 2 > j->len || j->s[j->pos] != '\\' || j->s[j->pos + 1] != 'u') return false;
        j->pos += 2;
        if (!hex4(j, &c2) || c2 < 0xDC00 || c2 > 0xDFFF) return false;
        c1 = 0x10000 + ((c1 - 0xD800) << 10) + (c2 - 0xDC00);
      }
      utf8(out, c1);
    } else {
      return false;
    }
  }
  return false;
}

bool kw_config_strings(const kw_str *config, kw_config_field *fields, size_t n, char **error) {
  json j = {(const char *)config->ptr, config->len, 0};
  kw_buf key = {0}, val = {0};
  bool ok = false;
  for (size_t i = 0; i < n; i++) {
    free(fields[i].value);
    fields[i].value = dupn(fields[i].def, strlen(fields[i].def));
  }
  ws(&j);
  if (j.pos == j.len) return true;
  if (j.len - j.pos >= 4 && memcmp(j.s + j.pos, "null", 4) == 0) {
    j.pos += 4;
    ws(&j);
    if (j.pos == j.len) return true;
    *error = kw_format("invalid config: trailing characters at offset %zu", j.pos);
    return false;
  }
  if (j.s[j.pos] != '{') {
    *error = kw_format("invalid config: expected an object");
    return false;
  }
  j.pos++;
  ws(&j);
  if (j.pos < j.len && j.s[j.pos] == '}') {
    j.pos++;
    goto end;
  }
  for (;;) {
    key.len = 0;
    val.len = 0;
    ws(&j);
    if (!json_string(&j, &key)) goto bad;
    ws(&j);
    if (j.pos >= j.len || j.s[j.pos++] != ':') goto bad;
    ws(&j);
    size_t f = 0;
    while (f < n && !(strlen(fields[f].key) == key.len && memcmp(fields[f].key, key.ptr, key.len) == 0)) f++;
    if (f == n) {
      kw_buf msg = {0};
      kw_buf_printf(&msg, "invalid config: unknown field `%s`, expected one of ", kw_buf_cstr(&key));
      for (size_t i = 0; i < n; i++) kw_buf_printf(&msg, "%s`%s`", i ? ", " : "", fields[i].key);
      *error = (char *)kw_buf_cstr(&msg);
      goto out;
    }
    if (j.pos >= j.len || j.s[j.pos] != '"') {
      *error = kw_format("invalid config: `%s` must be a string", fields[f].key);
      goto out;
    }
    if (!json_string(&j, &val)) goto bad;
    free(fields[f].value);
    fields[f].value = dupn(val.ptr ? val.ptr : "", val.len);
    ws(&j);
    if (j.pos < j.len && j.s[j.pos] == ',') {
      j.pos++;
      continue;
    }
    if (j.pos < j.len && j.s[j.pos] == '}') {
      j.pos++;
      break;
    }
    goto bad;
  }
end:
  ws(&j);
  if (j.pos != j.len) goto bad;
  ok = true;
  goto out;
bad:
  *error = kw_format("invalid config: malformed JSON at offset %zu", j.pos);
out:
  kw_buf_free(&key);
  kw_buf_free(&val);
  return ok;
}

/* ---- registration -------------------------------------------------------------- */

static void owned_gvk(kw_kind *k, const char *group, const char *version, const char *kind) {
  k->tag = KUBEWASM_PLUGIN_TYPES_KIND_REF_GVK;
  dup_string(&k->val.gvk.group, group);
  dup_string(&k->val.gvk.version, version);
  dup_string(&k->val.gvk.kind, kind);
}

void kw_subscribe(kw_registration *r, const char *group, const char *version, const char *kind,
                  const kubewasm_plugin_types_delta_type_t *deltas, size_t ndeltas,
                  const char *const *fields, size_t nfields) {
  r->subscriptions.ptr = xrealloc(r->subscriptions.ptr, (r->subscriptions.len + 1) * sizeof *r->subscriptions.ptr);
  exports_kubewasm_plugin_handler_subscription_t *s = &r->subscriptions.ptr[r->subscriptions.len++];
  memset(s, 0, sizeof *s);
  owned_gvk(&s->kind, group, version, kind);
  if (ndeltas) {
    s->deltas.ptr = xrealloc(NULL, ndeltas);
    memcpy(s->deltas.ptr, deltas, ndeltas);
    s->deltas.len = ndeltas;
  }
  if (nfields) {
    s->fields.ptr = xrealloc(NULL, nfields * sizeof(plugin_string_t));
    for (size_t i = 0; i < nfields; i++) dup_string(&s->fields.ptr[i], fields[i]);
    s->fields.len = nfields;
  }
}

void kw_writes(kw_registration *r, const char *group, const char *version, const char *kind) {
  r->writes.ptr = xrealloc(r->writes.ptr, (r->writes.len + 1) * sizeof *r->writes.ptr);
  owned_gvk(&r->writes.ptr[r->writes.len++], group, version, kind);
}

/* ---- cache ----------------------------------------------------------------------- */

static bool cache_refused(kubewasm_plugin_cache_cache_error_t *e, kw_error *err) {
  static const char *why[] = {"kind not subscribed", "unknown index", "invalid selector"};
  kw_permanent(err, "cache read refused, %s: %.*s", why[e->tag < 3 ? e->tag : 2],
               (int)e->val.not_subscribed.len, (const char *)e->val.not_subscribed.ptr);
  kubewasm_plugin_cache_cache_error_free(e);
  return false;
}

static plugin_string_t opt(const char *s, plugin_string_t *storage) {
  *storage = kw_s(s);
  return *storage;
}

bool kw_cache_list(kw_kind kind, const char *ns, const char *selector, kw_objects *out, kw_error *err) {
  plugin_string_t nss, sels;
  kubewasm_plugin_cache_cache_error_t e;
  if (ns) opt(ns, &nss);
  if (selector) opt(selector, &sels);
  if (!kubewasm_plugin_cache_list(&kind, ns ? &nss : NULL, selector ? &sels : NULL, out, &e)) {
    out->ptr = NULL;
    out->len = 0;
    return cache_refused(&e, err);
  }
  return true;
}

kw_object kw_objects_at(const kw_objects *l, size_t i) { return kubewasm_plugin_types_borrow_object(l->ptr[i]); }

void kw_objects_free(kw_objects *l) {
  for (size_t i = 0; i < l->len; i++) kubewasm_plugin_types_object_drop_own(l->ptr[i]);
  kubewasm_plugin_cache_list_own_object_free(l);
  l->ptr = NULL;
  l->len = 0;
}

/* ---- actions ---------------------------------------------------------------------- */

static bool action_refused(kubewasm_plugin_actions_action_error_t *e, kw_error *err) {
  if (e->tag == KUBEWASM_PLUGIN_ACTIONS_ACTION_ERROR_NOT_DECLARED)
    kw_permanent(err, "action refused, kind not declared in writes: %.*s", (int)e->val.not_declared.len,
                 (const char *)e->val.not_declared.ptr);
  else
    kw_permanent(err, "action refused as invalid: %.*s", (int)e->val.invalid.len, (const char *)e->val.invalid.ptr);
  kubewasm_plugin_actions_action_error_free(e);
  return false;
}

bool kw_apply(const char *json_text, size_t len, bool force, kw_error *err) {
  plugin_string_t s = {(uint8_t *)json_text, len};
  kubewasm_plugin_actions_action_error_t e;
  return kubewasm_plugin_actions_apply(&s, force, &e) || action_refused(&e, err);
}

static kubewasm_plugin_actions_object_ref_t ref_of(kw_kind kind, const kw_meta *m) {
  kubewasm_plugin_actions_object_ref_t r;
  r.kind = kind;
  r.namespace_ = m->namespace_;
  r.name = m->name;
  r.uid.is_some = m->uid.len > 0;
  r.uid.val = m->uid;
  return r;
}

bool kw_delete(kw_kind kind, const kw_meta *m, kubewasm_plugin_actions_propagation_t propagation, kw_error *err) {
  kubewasm_plugin_actions_object_ref_t r = ref_of(kind, m);
  kubewasm_plugin_actions_action_error_t e;
  return kubewasm_plugin_actions_delete(&r, propagation, &e) || action_refused(&e, err);
}

bool kw_patch_merge(kw_kind kind, const kw_meta *m, const char *json_text, size_t len, kw_error *err) {
  kubewasm_plugin_actions_object_ref_t r = ref_of(kind, m);
  plugin_string_t s = {(uint8_t *)json_text, len};
  kubewasm_plugin_actions_action_error_t e;
  return kubewasm_plugin_actions_patch(&r, KUBEWASM_PLUGIN_ACTIONS_PATCH_TYPE_MERGE, &s, &e) || action_refused(&e, err);
}

/* ---- log ---------------------------------------------------------------------------- */

void kw_log(kubewasm_plugin_log_level_t level, const char *msg, const char *const *kv, size_t nkv) {
  if (!kubewasm_plugin_log_enabled(level)) return;
  plugin_tuple2_string_string_t pairs[16];
  size_t n = 0;
  for (size_t i = 0; i + 1 < nkv && n < 16; i += 2, n++) {
    pairs[n].f0 = kw_s(kv[i]);
    pairs[n].f1 = kw_s(kv[i + 1]);
  }
  plugin_list_tuple2_string_string_t list = {pairs, n};
  plugin_string_t m = kw_s(msg);
  kubewasm_plugin_log_write(level, &m, &list);
}

/* ---- the exports ------------------------------------------------------------------------ */

bool exports_kubewasm_plugin_handler_register(plugin_string_t *config, kw_registration *ret, plugin_string_t *err) {
  char *error = NULL;
  memset(ret, 0, sizeof *ret);
  bool ok = kw_plugin_register(config, ret, &error);
  plugin_string_free(config);
  if (!ok) {
    exports_kubewasm_plugin_handler_registration_free(ret);
    dup_string(err, error ? error : "register failed");
    free(error);
  }
  return ok;
}

bool exports_kubewasm_plugin_handler_handle(kw_delta *delta, kw_error *err) {
  bool ok = kw_plugin_handle(delta, err);
  if (delta->object.is_some) kubewasm_plugin_types_object_drop_own(delta->object.val);
  if (delta->old_object.is_some) kubewasm_plugin_types_object_drop_own(delta->old_object.val);
  exports_kubewasm_plugin_handler_delta_free(delta);
  return ok;
}

/* kubewasm SDK for C plugins (WIT 0.2): see kubewasm.h. */
#include "kubewasm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* plugin.c (wit-bindgen's bindings) references this symbol to link in the
 * `plugin_component_type.o` object that carries the world's type; the
 * bindings here come without it, since `kubewasm componentize` embeds the
 * type itself. */
void __component_type_object_force_link_plugin(void) {}

static void *xrealloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (!q) abort();
  return q;
}

static char *dupn(const char *s, size_t n) {
  char *r = xrealloc(NULL, n + 1);
  if (n) memcpy(r, s, n);
  r[n] = 0;
  return r;
}

/* An owned WIT string the host returned, turned into a malloc'd C string
 * (the buffer is reused: grown by one byte for the NUL). */
static char *take_cstr(plugin_string_t *s) {
  char *r;
  if (s->len == 0) {
    r = dupn("", 0); /* a zero-length string's pointer is not malloc'd */
  } else {
    r = xrealloc(s->ptr, s->len + 1);
    r[s->len] = 0;
  }
  s->ptr = NULL;
  s->len = 0;
  return r;
}

/* A malloc'd copy of a C string into a WIT string (what the exports hand
 * back to the host, which frees it after the call). */
static void dup_string(plugin_string_t *out, const char *s) {
  size_t n = s ? strlen(s) : 0;
  out->ptr = n ? xrealloc(NULL, n) : NULL;
  if (n) memcpy(out->ptr, s, n);
  out->len = n;
}

static void dup_option(plugin_option_string_t *out, const char *s) {
  plugin_option_string_free(out);
  out->is_some = s != NULL;
  if (s) dup_string(&out->val, s);
}

/* ---- strings ----------------------------------------------------------- */

kw_str kw_s(const char *s) {
  kw_str r = {(uint8_t *)s, s ? strlen(s) : 0};
  return r;
}

bool kw_eq(const kw_str *a, const char *b) {
  size_t n = strlen(b);
  return a->len == n && (n == 0 || memcmp(a->ptr, b, n) == 0);
}

bool kw_str_eq(const kw_str *a, const kw_str *b) {
  return a->len == b->len && (a->len == 0 || memcmp(a->ptr, b->ptr, a->len) == 0);
}

char *kw_cstr(const kw_str *s) { return dupn((const char *)s->ptr, s->len); }

void kw_str_free(kw_str *s) { plugin_string_free(s); }

kw_str kw_str_dup(const char *s) {
  kw_str r;
  dup_string(&r, s);
  return r;
}

void kw_strs_free(kw_strs *l) {
  plugin_list_string_free(l);
  l->ptr = NULL;
  l->len = 0;
}

void kw_pairs_free(kw_pairs *l) {
  plugin_list_tuple2_string_string_free(l);
  l->ptr = NULL;
  l->len = 0;
}

const kw_str *kw_pairs_get(const kw_pairs *pairs, const char *key) {
  for (size_t i = 0; i < pairs->len; i++)
    if (kw_eq(&pairs->ptr[i].f0, key)) return &pairs->ptr[i].f1;
  return NULL;
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

void kw_buf_json_s(kw_buf *b, const char *s) { kw_buf_json(b, s, strlen(s)); }
void kw_buf_json_str(kw_buf *b, const kw_str *s) { kw_buf_json(b, (const char *)s->ptr, s->len); }

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

kw_str kw_buf_view(const kw_buf *b) {
  kw_str r = {(uint8_t *)b->ptr, b->len};
  return r;
}

char *kw_buf_take(kw_buf *b) {
  kw_buf_cstr(b);
  char *r = b->ptr;
  b->ptr = NULL;
  b->len = b->cap = 0;
  return r;
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
  return kw_buf_take(&b);
}

/* ---- outcomes and errors ----------------------------------------------- */

bool kw_requeue_after(kw_handled *handled, uint64_t ms) {
  handled->tag = EXPORTS_KUBEWASM_PLUGIN_HANDLER_HANDLED_REQUEUE_AFTER;
  handled->val.requeue_after = ms;
  return true;
}

bool kw_handled_requeue(const kw_handled *handled, uint64_t *ms) {
  bool requeue = handled->tag == EXPORTS_KUBEWASM_PLUGIN_HANDLER_HANDLED_REQUEUE_AFTER;
  if (requeue && ms) *ms = handled->val.requeue_after;
  return requeue;
}

static bool set_error(kw_error *err, uint8_t tag, const char *fmt, va_list ap) {
  kw_buf b = {0};
  buf_vprintf(&b, fmt, ap);
  err->tag = tag;
  err->val.permanent.ptr = (uint8_t *)b.ptr;
  err->val.permanent.len = b.len;
  if (b.len == 0) {
    free(b.ptr);
    err->val.permanent.ptr = NULL;
  }
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

bool kw_error_is_retry(const kw_error *err) { return err->tag == EXPORTS_KUBEWASM_PLUGIN_HANDLER_HANDLER_ERROR_RETRY; }

const kw_str *kw_error_message(const kw_error *err) { return &err->val.permanent; }

/* ---- kinds --------------------------------------------------------------- */

kw_kind kw_gvk(const char *group, const char *version, const char *kind) {
  kw_kind k;
  k.tag = KUBEWASM_PLUGIN_TYPES_KIND_REF_GVK;
  k.val.gvk.group = kw_s(group);
  k.val.gvk.version = kw_s(version);
  k.val.gvk.kind = kw_s(kind);
  return k;
}

kw_kind kw_resource(const char *name) {
  kw_kind k;
  k.tag = KUBEWASM_PLUGIN_TYPES_KIND_REF_RESOURCE_NAME;
  k.val.resource_name = kw_s(name);
  return k;
}

bool kw_gvk_is(const kw_gvk_t *gvk, const char *group, const char *kind) {
  return kw_eq(&gvk->group, group) && kw_eq(&gvk->kind, kind);
}

void kw_api_version(kw_buf *b, const kw_str *group, const kw_str *version) {
  if (group->len) {
    kw_buf_str(b, group);
    kw_buf_n(b, "/", 1);
  }
  kw_buf_str(b, version);
}

/* The group part of an apiVersion: before the first `/`, "" without one. */
static kw_str api_group(const kw_str *api_version) {
  kw_str g = {api_version->ptr, 0};
  for (size_t i = 0; i < api_version->len; i++)
    if (api_version->ptr[i] == '/') {
      g.len = i;
      return g;
    }
  return g;
}

bool kw_api_version_in(const kw_str *api_version, const char *group) {
  kw_str g = api_group(api_version);
  return kw_eq(&g, group);
}

void kw_gvk_free(kw_gvk_t *gvk) { kubewasm_plugin_types_group_version_kind_free(gvk); }

/* ---- deltas ---------------------------------------------------------------- */

const kw_delta_type KW_OBJECT_DELTAS[4] = {KW_ADDED, KW_UPDATED, KW_DELETED, KW_RESYNC};

kw_object kw_delta_object(const kw_delta *d, bool *ok) {
  kw_object o = {0};
  if (ok) *ok = d->object.is_some;
  if (d->object.is_some) o = kubewasm_plugin_types_borrow_object(d->object.val);
  return o;
}

kw_object kw_delta_old_object(const kw_delta *d, bool *ok) {
  kw_object o = {0};
  if (ok) *ok = d->old_object.is_some;
  if (d->old_object.is_some) o = kubewasm_plugin_types_borrow_object(d->old_object.val);
  return o;
}

bool kw_delta_need_object(const kw_delta *d, kw_object *out, kw_error *err) {
  bool ok;
  *out = kw_delta_object(d, &ok);
  if (ok) return true;
  kw_buf key = {0};
  kw_delta_key(d, &key);
  if (key.len)
    kw_permanent(err, "%s delta for %s carries no object", kw_delta_type_name(d->delta_type), key.ptr);
  else
    kw_permanent(err, "%s delta carries no object", kw_delta_type_name(d->delta_type));
  kw_buf_free(&key);
  return false;
}

bool kw_delta_old_meta(const kw_delta *d, kw_meta *out) {
  if (!d->old_object.is_some) return false;
  kw_meta_of(kubewasm_plugin_types_borrow_object(d->old_object.val), out);
  return true;
}

void kw_delta_key(const kw_delta *d, kw_buf *b) {
  if (d->namespace_.is_some) {
    kw_buf_str(b, &d->namespace_.val);
    kw_buf_n(b, "/", 1);
  }
  kw_buf_str(b, &d->name);
}

bool kw_delta_is(const kw_delta *d, const char *group, const char *kind) {
  bool ok;
  kw_object o = kw_delta_object(d, &ok);
  return ok && kw_object_is(o, group, kind);
}

const char *kw_delta_type_name(kw_delta_type t) {
  static const char *names[] = {"added", "updated", "deleted", "resync", "synced", "requeue"};
  return t < 6 ? names[t] : "unknown";
}

bool kw_delta_retried(const kw_delta *d) { return d->attempt > 1; }

bool kw_delta_after_conflict(const kw_delta *d) {
  return d->last_failure.is_some && d->last_failure.val.tag == KUBEWASM_PLUGIN_TYPES_FAILURE_CONFLICT;
}

const char *kw_failure_kind(const kw_failure *f) {
  static const char *names[] = {"retry", "trapped", "conflict", "action-failed"};
  return f->tag < 4 ? names[f->tag] : "unknown";
}

const kw_str *kw_failure_message(const kw_failure *f) { return &f->val.retry; }

/* ---- objects ----------------------------------------------------------------- */

void kw_object_kind(kw_object o, kw_gvk_t *out) { kubewasm_plugin_types_method_object_kind(o, out); }

bool kw_object_is(kw_object o, const char *group, const char *kind) {
  kw_gvk_t g;
  kw_object_kind(o, &g);
  bool is = kw_gvk_is(&g, group, kind);
  kw_gvk_free(&g);
  return is;
}

char *kw_object_namespace(kw_object o) {
  plugin_string_t s;
  return kubewasm_plugin_types_method_object_namespace(o, &s) ? take_cstr(&s) : NULL;
}

char *kw_object_name(kw_object o) {
  plugin_string_t s;
  kubewasm_plugin_types_method_object_name(o, &s);
  return take_cstr(&s);
}

char *kw_object_uid(kw_object o) {
  plugin_string_t s;
  kubewasm_plugin_types_method_object_uid(o, &s);
  return take_cstr(&s);
}

char *kw_object_resource_version(kw_object o) {
  plugin_string_t s;
  kubewasm_plugin_types_method_object_resource_version(o, &s);
  return take_cstr(&s);
}

bool kw_object_generation(kw_object o, int64_t *out) { return kubewasm_plugin_types_method_object_generation(o, out); }

void kw_object_key(kw_object o, kw_buf *b) {
  plugin_string_t s;
  if (kubewasm_plugin_types_method_object_namespace(o, &s)) {
    kw_buf_str(b, &s);
    kw_buf_n(b, "/", 1);
    plugin_string_free(&s);
  }
  kubewasm_plugin_types_method_object_name(o, &s);
  kw_buf_str(b, &s);
  plugin_string_free(&s);
}

char *kw_label(kw_object o, const char *key) {
  plugin_string_t k = kw_s(key), v;
  return kubewasm_plugin_types_method_object_label(o, &k, &v) ? take_cstr(&v) : NULL;
}

char *kw_annotation(kw_object o, const char *key) {
  plugin_string_t k = kw_s(key), v;
  return kubewasm_plugin_types_method_object_annotation(o, &k, &v) ? take_cstr(&v) : NULL;
}

bool kw_label_is(kw_object o, const char *key, const char *value) {
  plugin_string_t k = kw_s(key), v;
  if (!kubewasm_plugin_types_method_object_label(o, &k, &v)) return false;
  bool is = kw_eq(&v, value);
  plugin_string_free(&v);
  return is;
}

void kw_labels(kw_object o, kw_pairs *out) { kubewasm_plugin_types_method_object_labels(o, out); }
void kw_annotations(kw_object o, kw_pairs *out) { kubewasm_plugin_types_method_object_annotations(o, out); }

void kw_owner_references(kw_object o, kw_owner_refs *out) {
  kubewasm_plugin_types_method_object_owner_references(o, out);
}

void kw_finalizers(kw_object o, kw_strs *out) { kubewasm_plugin_types_method_object_finalizers(o, out); }

static bool strs_contain(const kw_strs *l, const char *s) {
  for (size_t i = 0; i < l->len; i++)
    if (kw_eq(&l->ptr[i], s)) return true;
  return false;
}

bool kw_has_finalizer(kw_object o, const char *finalizer) {
  kw_strs l;
  kw_finalizers(o, &l);
  bool has = strs_contain(&l, finalizer);
  kw_strs_free(&l);
  return has;
}

char *kw_deletion_timestamp(kw_object o) {
  plugin_string_t s;
  return kubewasm_plugin_types_method_object_deletion_timestamp(o, &s) ? take_cstr(&s) : NULL;
}

bool kw_is_terminating(kw_object o) {
  plugin_string_t s;
  if (!kubewasm_plugin_types_method_object_deletion_timestamp(o, &s)) return false;
  plugin_string_free(&s);
  return true;
}

void kw_meta_of(kw_object o, kw_meta *out) { kubewasm_plugin_types_method_object_meta(o, out); }
void kw_meta_free(kw_meta *m) { kubewasm_plugin_types_object_meta_free(m); }

bool kw_field(kw_object o, const char *pointer, kw_field_value *out) {
  kw_str p = kw_s(pointer);
  return kubewasm_plugin_types_method_object_field(o, &p, out);
}

void kw_field_value_free(kw_field_value *v) { kubewasm_plugin_types_field_value_free(v); }

char *kw_field_string(kw_object o, const char *pointer) {
  kw_field_value v;
  if (!kw_field(o, pointer, &v)) return NULL;
  if (v.tag == KUBEWASM_PLUGIN_TYPES_FIELD_VALUE_TEXT) return take_cstr(&v.val.text);
  kw_field_value_free(&v);
  return NULL;
}

bool kw_field_int(kw_object o, const char *pointer, int64_t *out) {
  kw_field_value v;
  if (!kw_field(o, pointer, &v)) return false;
  bool is = v.tag == KUBEWASM_PLUGIN_TYPES_FIELD_VALUE_INTEGER;
  if (is) *out = v.val.integer;
  kw_field_value_free(&v);
  return is;
}

bool kw_field_bool(kw_object o, const char *pointer, bool *out) {
  kw_field_value v;
  if (!kw_field(o, pointer, &v)) return false;
  bool is = v.tag == KUBEWASM_PLUGIN_TYPES_FIELD_VALUE_BOOLEAN;
  if (is) *out = v.val.boolean;
  kw_field_value_free(&v);
  return is;
}

void kw_fields(kw_object o, const char *const *pointers, size_t n, kw_field_values *out) {
  plugin_string_t *ps = xrealloc(NULL, (n ? n : 1) * sizeof *ps);
  for (size_t i = 0; i < n; i++) ps[i] = kw_s(pointers[i]);
  plugin_list_string_t list = {ps, n};
  kubewasm_plugin_types_method_object_fields(o, &list, out);
  free(ps);
}

void kw_field_values_free(kw_field_values *l) {
  kubewasm_plugin_types_list_option_field_value_free(l);
  l->ptr = NULL;
  l->len = 0;
}

char *kw_to_json(kw_object o) {
  plugin_string_t s;
  kubewasm_plugin_types_method_object_to_json(o, &s);
  return take_cstr(&s);
}

/* ---- metadata records ------------------------------------------------------- */

const kw_str *kw_meta_label(const kw_meta *m, const char *key) { return kw_pairs_get(&m->labels, key); }
const kw_str *kw_meta_annotation(const kw_meta *m, const char *key) { return kw_pairs_get(&m->annotations, key); }

bool kw_meta_label_is(const kw_meta *m, const char *key, const char *value) {
  const kw_str *v = kw_meta_label(m, key);
  return v && kw_eq(v, value);
}

bool kw_meta_is_terminating(const kw_meta *m) { return m->deletion_timestamp.is_some; }

bool kw_meta_has_finalizer(const kw_meta *m, const char *finalizer) { return strs_contain(&m->finalizers, finalizer); }

const kw_owner_ref *kw_meta_controller(const kw_meta *m) {
  for (size_t i = 0; i < m->owner_references.len; i++)
    if (m->owner_references.ptr[i].controller) return &m->owner_references.ptr[i];
  return NULL;
}

void kw_meta_key(const kw_meta *m, kw_buf *b) {
  if (m->namespace_.is_some) {
    kw_buf_str(b, &m->namespace_.val);
    kw_buf_n(b, "/", 1);
  }
  kw_buf_str(b, &m->name);
}

/* ---- owner references --------------------------------------------------------- */

bool kw_owner_is(const kw_owner_ref *r, const char *group, const char *kind) {
  return kw_api_version_in(&r->api_version, group) && kw_eq(&r->kind, kind);
}

bool kw_find_owner(kw_object o, const char *group, const char *kind, kw_owner_ref *out) {
  kw_owner_refs l;
  kw_owner_references(o, &l);
  bool found = false;
  for (size_t i = 0; i < l.len; i++) {
    if (!found && kw_owner_is(&l.ptr[i], group, kind)) {
      *out = l.ptr[i]; /* moved out: not freed below */
      found = true;
    } else {
      kw_owner_ref_free(&l.ptr[i]);
    }
  }
  if (l.len) free(l.ptr); /* an empty list's pointer is not malloc'd */
  return found;
}

bool kw_controller_owner(kw_object o, kw_owner_ref *out) { return kubewasm_plugin_types_method_object_controller(o, out); }

void kw_controller_ref(kw_object o, kw_owner_ref *out) {
  kw_gvk_t g;
  kw_object_kind(o, &g);
  kw_buf av = {0};
  kw_api_version(&av, &g.group, &g.version);
  memset(out, 0, sizeof *out);
  dup_string(&out->api_version, kw_buf_cstr(&av));
  kw_buf_free(&av);
  out->kind = g.kind; /* moved */
  g.kind.ptr = NULL;
  g.kind.len = 0;
  kw_gvk_free(&g);
  kubewasm_plugin_types_method_object_name(o, &out->name);
  kubewasm_plugin_types_method_object_uid(o, &out->uid);
  out->controller = true;
  out->block_owner_deletion = true;
}

void kw_controller_ref_of(const char *group, const char *version, const char *kind, const char *name,
                          const char *uid, kw_owner_ref *out) {
  kw_str g = kw_s(group), v = kw_s(version);
  kw_buf av = {0};
  kw_api_version(&av, &g, &v);
  memset(out, 0, sizeof *out);
  dup_string(&out->api_version, kw_buf_cstr(&av));
  kw_buf_free(&av);
  dup_string(&out->kind, kind);
  dup_string(&out->name, name);
  dup_string(&out->uid, uid);
  out->controller = true;
  out->block_owner_deletion = true;
}

void kw_owner_ref_free(kw_owner_ref *r) { kubewasm_plugin_types_owner_reference_free(r); }

void kw_owner_refs_free(kw_owner_refs *l) {
  kubewasm_plugin_types_list_owner_reference_free(l);
  l->ptr = NULL;
  l->len = 0;
}

void kw_owner_ref_json(kw_buf *b, const kw_owner_ref *r) {
  kw_buf_s(b, "{\"apiVersion\":");
  kw_buf_json_str(b, &r->api_version);
  if (r->block_owner_deletion) kw_buf_s(b, ",\"blockOwnerDeletion\":true");
  if (r->controller) kw_buf_s(b, ",\"controller\":true");
  kw_buf_s(b, ",\"kind\":");
  kw_buf_json_str(b, &r->kind);
  kw_buf_s(b, ",\"name\":");
  kw_buf_json_str(b, &r->name);
  kw_buf_s(b, ",\"uid\":");
  kw_buf_json_str(b, &r->uid);
  kw_buf_s(b, "}");
}

/* ---- a little JSON reading (config, owner references) ------------------------- */

typedef struct {
  const char *s;
  size_t len, pos;
} json;

static void ws(json *j) {
  while (j->pos < j->len && strchr(" \t\r\n", j->s[j->pos]) && j->s[j->pos]) j->pos++;
}

static void utf8(kw_buf *b, unsigned long c) {
  char o[4];
  size_t n;
  if (c < 0x80) {
    o[0] = (char)c;
    n = 1;
  } else if (c < 0x800) {
    o[0] = (char)(0xC0 | (c >> 6));
    o[1] = (char)(0x80 | (c & 0x3F));
    n = 2;
  } else if (c < 0x10000) {
    o[0] = (char)(0xE0 | (c >> 12));
    o[1] = (char)(0x80 | ((c >> 6) & 0x3F));
    o[2] = (char)(0x80 | (c & 0x3F));
    n = 3;
  } else {
    o[0] = (char)(0xF0 | (c >> 18));
    o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3F));
    o[3] = (char)(0x80 | (c & 0x3F));
    n = 4;
  }
  kw_buf_n(b, o, n);
}

static bool hex4(json *j, unsigned long *out) {
  if (j->pos + 4 > j->len) return false;
  char tmp[5] = {0}, *end = NULL;
  memcpy(tmp, j->s + j->pos, 4);
  for (int i = 0; i < 4; i++)
    if (!strchr("0123456789abcdefABCDEF", tmp[i]) || !tmp[i]) return false;
  *out = strtoul(tmp, &end, 16);
  j->pos += 4;
  return *end == 0;
}

/* A JSON string at j->pos into out (unescaped; out may be NULL to skip). */
static bool json_string(json *j, kw_buf *out) {
  kw_buf skip = {0};
  kw_buf *o = out ? out : &skip;
  bool ok = false;
  if (j->pos >= j->len || j->s[j->pos] != '"') return false;
  j->pos++;
  while (j->pos < j->len) {
    char c = j->s[j->pos++];
    if (c == '"') {
      ok = true;
      break;
    }
    if ((unsigned char)c < 0x20) break;
    if (c != '\\') {
      if (out) kw_buf_n(o, &c, 1);
      continue;
    }
    if (j->pos >= j->len) break;
    char e = j->s[j->pos++];
    const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
    const char *k = e ? strchr(from, e) : NULL;
    if (k) {
      kw_buf_n(o, to + (k - from), 1);
    } else if (e == 'u') {
      unsigned long c1, c2;
      if (!hex4(j, &c1)) break;
      if (c1 >= 0xD800 && c1 < 0xDC00) {
        if (j->pos + 2 > j->len || j->s[j->pos] != '\\' || j->s[j->pos + 1] != 'u') break;
        j->pos += 2;
        if (!hex4(j, &c2) || c2 < 0xDC00 || c2 > 0xDFFF) break;
        c1 = 0x10000 + ((c1 - 0xD800) << 10) + (c2 - 0xDC00);
      }
      utf8(o, c1);
    } else {
      break;
    }
  }
  kw_buf_free(&skip);
  return ok;
}

static bool literal(json *j, const char *word) {
  size_t n = strlen(word);
  if (j->len - j->pos < n || memcmp(j->s + j->pos, word, n) != 0) return false;
  j->pos += n;
  return true;
}

/* Skips one JSON value at j->pos (after white space); false when it is
 * malformed. Nesting is bounded to keep the stack small. */
static bool skip_value(json *j, int depth) {
  ws(j);
  if (j->pos >= j->len || depth > 512) return false;
  char c = j->s[j->pos];
  if (c == '"') return json_string(j, NULL);
  if (c == '{' || c == '[') {
    char close = c == '{' ? '}' : ']';
    j->pos++;
    ws(j);
    if (j->pos < j->len && j->s[j->pos] == close) {
      j->pos++;
      return true;
    }
    for (;;) {
      if (c == '{') {
        ws(j);
        if (!json_string(j, NULL)) return false;
        ws(j);
        if (j->pos >= j->len || j->s[j->pos++] != ':') return false;
      }
      if (!skip_value(j, depth + 1)) return false;
      ws(j);
      if (j->pos >= j->len) return false;
      char d = j->s[j->pos++];
      if (d == close) return true;
      if (d != ',') return false;
    }
  }
  if (literal(j, "true") || literal(j, "false") || literal(j, "null")) return true;
  size_t start = j->pos;
  while (j->pos < j->len && j->s[j->pos] && strchr("0123456789+-.eE", j->s[j->pos])) j->pos++;
  return j->pos > start;
}

/* The members of a JSON object at j->pos: calls `member` for each with
 * its key and the span [start, end) of its value. False when malformed
 * or not an object; *close is set to the position of the closing brace. */
typedef bool (*member_fn)(const kw_buf *key, size_t start, size_t end, void *ctx);

static bool each_member(json *j, member_fn member, void *ctx, size_t *close) {
  ws(j);
  if (j->pos >= j->len || j->s[j->pos] != '{') return false;
  j->pos++;
  ws(j);
  kw_buf key = {0};
  bool ok = false;
  if (j->pos < j->len && j->s[j->pos] == '}') {
    *close = j->pos++;
    return true;
  }
  for (;;) {
    key.len = 0;
    ws(j);
    if (!json_string(j, &key)) break;
    kw_buf_cstr(&key);
    ws(j);
    if (j->pos >= j->len || j->s[j->pos++] != ':') break;
    ws(j);
    size_t start = j->pos;
    if (!skip_value(j, 0)) break;
    if (!member(&key, start, j->pos, ctx)) break;
    ws(j);
    if (j->pos >= j->len) break;
    char d = j->s[j->pos];
    if (d == '}') {
      *close = j->pos++;
      ok = true;
      break;
    }
    if (d != ',') break;
    j->pos++;
  }
  kw_buf_free(&key);
  return ok;
}

/* A span of the text, [start, end): start == end when absent. */
typedef struct {
  const char *name;
  size_t start, end;
  bool found;
} span_of;

static bool find_member(const kw_buf *key, size_t start, size_t end, void *ctx) {
  span_of *s = ctx;
  if (strcmp(key->ptr ? key->ptr : "", s->name) == 0) {
    s->start = start;
    s->end = end;
    s->found = true; /* the last one wins, as in a JSON decoder */
  }
  return true;
}

/* The fields of one ownerReferences entry that say which owner it is. */
typedef struct {
  kw_buf api_version, kind, name, uid;
  bool controller;
  const char *text;
} entry_fields;

static bool entry_member(const kw_buf *key, size_t start, size_t end, void *ctx) {
  entry_fields *e = ctx;
  const char *k = key->ptr ? key->ptr : "";
  kw_buf *into = strcmp(k, "apiVersion") == 0 ? &e->api_version
                 : strcmp(k, "kind") == 0     ? &e->kind
                 : strcmp(k, "name") == 0     ? &e->name
                 : strcmp(k, "uid") == 0      ? &e->uid
                                              : NULL;
  if (into) {
    into->len = 0;
    json v = {e->text, end, start};
    if (e->text[start] == '"') json_string(&v, into);
  } else if (strcmp(k, "controller") == 0) {
    e->controller = end - start == 4 && memcmp(e->text + start, "true", 4) == 0;
  }
  return true;
}

static void entry_free(entry_fields *e) {
  kw_buf_free(&e->api_version);
  kw_buf_free(&e->kind);
  kw_buf_free(&e->name);
  kw_buf_free(&e->uid);
}

static bool same_owner(entry_fields *e, const kw_owner_ref *ref) {
  kw_str uid = kw_buf_view(&e->uid), av = kw_buf_view(&e->api_version);
  kw_str kind = kw_buf_view(&e->kind), name = kw_buf_view(&e->name);
  kw_str g1 = api_group(&av), g2 = api_group(&ref->api_version);
  return kw_str_eq(&uid, &ref->uid) ||
         (kw_str_eq(&g1, &g2) && kw_str_eq(&kind, &ref->kind) && kw_str_eq(&name, &ref->name));
}

bool kw_set_owner_reference(kw_buf *dependent, const kw_owner_ref *ref, kw_error *err) {
  const char *text = dependent->ptr ? dependent->ptr : "";
  json j = {text, dependent->len, 0};
  span_of meta = {"metadata", 0, 0, false};
  size_t root_close = 0;
  ws(&j);
  if (!each_member(&j, find_member, &meta, &root_close) || (ws(&j), j.pos != j.len))
    return kw_permanent(err, "owner reference: the dependent is not a JSON object");
  kw_buf entry = {0}, out = {0};
  kw_owner_ref_json(&entry, ref);
  if (!meta.found) {
    /* {..., "metadata":{"ownerReferences":[REF]}} */
    bool empty = true;
    for (size_t i = 0; i < root_close; i++)
      if (!strchr(" \t\r\n{", text[i])) empty = false;
    kw_buf_n(&out, text, root_close);
    kw_buf_s(&out, empty ? "\"metadata\":{\"ownerReferences\":[" : ",\"metadata\":{\"ownerReferences\":[");
    kw_buf_n(&out, entry.ptr, entry.len);
    kw_buf_s(&out, "]}");
    kw_buf_n(&out, text + root_close, dependent->len - root_close);
    goto done;
  }
  json m = {text, meta.end, meta.start};
  span_of list = {"ownerReferences", 0, 0, false};
  size_t meta_close = 0;
  if (text[meta.start] != '{' || !each_member(&m, find_member, &list, &meta_close)) {
    kw_buf_free(&entry);
    return kw_permanent(err, "owner reference: metadata is not a JSON object");
  }
  if (!list.found || (list.end - list.start == 4 && memcmp(text + list.start, "null", 4) == 0)) {
    size_t at = list.found ? list.start : meta_close, resume = list.found ? list.end : meta_close;
    bool empty = true;
    for (size_t i = meta.start + 1; i < meta_close; i++)
      if (!strchr(" \t\r\n", text[i])) empty = false;
    kw_buf_n(&out, text, at);
    if (!list.found) kw_buf_s(&out, empty ? "\"ownerReferences\":" : ",\"ownerReferences\":");
    kw_buf_s(&out, "[");
    kw_buf_n(&out, entry.ptr, entry.len);
    kw_buf_s(&out, "]");
    kw_buf_n(&out, text + resume, dependent->len - resume);
    goto done;
  }
  if (text[list.start] != '[') {
    kw_buf_free(&entry);
    return kw_permanent(err, "owner reference: metadata.ownerReferences is not a list");
  }
  /* The entries: their spans, and which one is the same owner. */
  size_t pos = list.start + 1, same_start = 0, same_end = 0, last_end = 0, count = 0;
  bool same_found = false;
  for (;;) {
    json e = {text, list.end, pos};
    ws(&e);
    if (e.pos < list.end && text[e.pos] == ']') break;
    size_t start = e.pos;
    skip_value(&e, 0);
    size_t end = e.pos;
    entry_fields f = {{0}, {0}, {0}, {0}, false, text};
    json v = {text, end, start};
    size_t close;
    if (text[start] == '{') each_member(&v, entry_member, &f, &close);
    bool same = same_owner(&f, ref);
    if (ref->controller && f.controller && !same) {
      kw_permanent(err, "owner reference: already controlled by %s %s", kw_buf_cstr(&f.kind), kw_buf_cstr(&f.name));
      entry_free(&f);
      kw_buf_free(&entry);
      return false;
    }
    entry_free(&f);
    if (same && !same_found) {
      same_found = true;
      same_start = start;
      same_end = end;
    }
    last_end = end;
    count++;
    ws(&e);
    if (e.pos >= list.end || text[e.pos] != ',') break;
    pos = e.pos + 1;
  }
  if (same_found) {
    kw_buf_n(&out, text, same_start);
    kw_buf_n(&out, entry.ptr, entry.len);
    kw_buf_n(&out, text + same_end, dependent->len - same_end);
  } else {
    size_t at = count ? last_end : list.start + 1;
    kw_buf_n(&out, text, at);
    if (count) kw_buf_s(&out, ",");
    kw_buf_n(&out, entry.ptr, entry.len);
    kw_buf_n(&out, text + at, dependent->len - at);
  }
done:
  kw_buf_free(&entry);
  kw_buf_free(dependent);
  *dependent = out;
  return true;
}

bool kw_set_controller_reference(kw_buf *dependent, kw_object owner, kw_error *err) {
  kw_owner_ref r;
  kw_controller_ref(owner, &r);
  bool ok = kw_set_owner_reference(dependent, &r, err);
  kw_owner_ref_free(&r);
  return ok;
}

/* ---- label selectors (the host's) --------------------------------------------- */

struct kw_selector {
  kubewasm_plugin_selectors_own_label_selector_t handle;
};

static kubewasm_plugin_selectors_borrow_label_selector_t sel_borrow(const kw_selector *s) {
  return kubewasm_plugin_selectors_borrow_label_selector(s->handle);
}

kw_selector *kw_selector_parse(const char *text, size_t len, char **error) {
  plugin_string_t t = {(uint8_t *)text, len}, e;
  kubewasm_plugin_selectors_own_label_selector_t h;
  if (!kubewasm_plugin_selectors_static_label_selector_parse(&t, &h, &e)) {
    *error = take_cstr(&e);
    return NULL;
  }
  kw_selector *s = xrealloc(NULL, sizeof *s);
  s->handle = h;
  return s;
}

bool kw_selector_matches(const kw_selector *s, const kw_pairs *labels) {
  return kubewasm_plugin_selectors_method_label_selector_matches(sel_borrow(s), (kw_pairs *)labels);
}

bool kw_selector_matches_object(const kw_selector *s, kw_object o) {
  return kubewasm_plugin_selectors_method_label_selector_matches_object(sel_borrow(s), o);
}

char *kw_selector_string(const kw_selector *s) {
  plugin_string_t t;
  kubewasm_plugin_selectors_method_label_selector_to_string(sel_borrow(s), &t);
  return take_cstr(&t);
}

bool kw_selector_is_empty(const kw_selector *s) {
  char *t = kw_selector_string(s);
  bool empty = t[0] == 0;
  free(t);
  return empty;
}

void kw_selector_free(kw_selector *s) {
  if (!s) return;
  kubewasm_plugin_selectors_label_selector_drop_own(s->handle);
  free(s);
}

/* ---- config: a flat JSON object of strings ------------------------------------ */

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
  if (literal(&j, "null")) {
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
      *error = kw_buf_take(&msg);
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

static void owned_resource(kw_kind *k, const char *resource) {
  k->tag = KUBEWASM_PLUGIN_TYPES_KIND_REF_RESOURCE_NAME;
  dup_string(&k->val.resource_name, resource);
}

static kw_subscription *new_subscription(kw_registration *r, const kw_delta_type *deltas, size_t ndeltas,
                                         const char *const *fields, size_t nfields) {
  r->subscriptions.ptr = xrealloc(r->subscriptions.ptr, (r->subscriptions.len + 1) * sizeof *r->subscriptions.ptr);
  kw_subscription *s = &r->subscriptions.ptr[r->subscriptions.len++];
  memset(s, 0, sizeof *s);
  if (ndeltas) {
    s->deltas.ptr = xrealloc(NULL, ndeltas * sizeof *deltas);
    memcpy(s->deltas.ptr, deltas, ndeltas * sizeof *deltas);
    s->deltas.len = ndeltas;
  }
  if (nfields) {
    s->fields.ptr = xrealloc(NULL, nfields * sizeof(plugin_string_t));
    for (size_t i = 0; i < nfields; i++) dup_string(&s->fields.ptr[i], fields[i]);
    s->fields.len = nfields;
  }
  return s;
}

kw_subscription *kw_subscribe(kw_registration *r, const char *group, const char *version, const char *kind,
                              const kw_delta_type *deltas, size_t ndeltas, const char *const *fields,
                              size_t nfields) {
  kw_subscription *s = new_subscription(r, deltas, ndeltas, fields, nfields);
  owned_gvk(&s->kind, group, version, kind);
  return s;
}

kw_subscription *kw_subscribe_resource(kw_registration *r, const char *resource, const kw_delta_type *deltas,
                                       size_t ndeltas, const char *const *fields, size_t nfields) {
  kw_subscription *s = new_subscription(r, deltas, ndeltas, fields, nfields);
  owned_resource(&s->kind, resource);
  return s;
}

void kw_subscription_namespace(kw_subscription *s, const char *ns) { dup_option(&s->namespace_, ns); }
void kw_subscription_labels(kw_subscription *s, const char *selector) { dup_option(&s->label_selector, selector); }
void kw_subscription_field_selector(kw_subscription *s, const char *selector) {
  dup_option(&s->field_selector, selector);
}

void kw_subscription_resync(kw_subscription *s, uint32_t seconds) {
  s->resync_seconds.is_some = true;
  s->resync_seconds.val = seconds;
}

void kw_writes(kw_registration *r, const char *group, const char *version, const char *kind) {
  r->writes.ptr = xrealloc(r->writes.ptr, (r->writes.len + 1) * sizeof *r->writes.ptr);
  owned_gvk(&r->writes.ptr[r->writes.len++], group, version, kind);
}

void kw_writes_resource(kw_registration *r, const char *resource) {
  r->writes.ptr = xrealloc(r->writes.ptr, (r->writes.len + 1) * sizeof *r->writes.ptr);
  owned_resource(&r->writes.ptr[r->writes.len++], resource);
}

void kw_index(kw_registration *r, const char *name, const char *group, const char *version, const char *kind,
              const char *pointer) {
  r->indexes.ptr = xrealloc(r->indexes.ptr, (r->indexes.len + 1) * sizeof *r->indexes.ptr);
  exports_kubewasm_plugin_handler_index_t *i = &r->indexes.ptr[r->indexes.len++];
  dup_string(&i->name, name);
  owned_gvk(&i->kind, group, version, kind);
  dup_string(&i->pointer, pointer);
}

/* ---- cache ----------------------------------------------------------------------- */

static bool cache_refused(kubewasm_plugin_cache_cache_error_t *e, kw_error *err) {
  static const char *why[] = {"not subscribed", "unknown index", "invalid selector", "not granted"};
  kw_permanent(err, "cache read refused, %s: %.*s", why[e->tag < 4 ? e->tag : 2], (int)e->val.not_subscribed.len,
               (const char *)e->val.not_subscribed.ptr);
  kubewasm_plugin_cache_cache_error_free(e);
  return false;
}

bool kw_cache_get(kw_kind kind, const char *ns, const char *name, kw_own_object *out, bool *found, kw_error *err) {
  plugin_string_t nss = kw_s(ns), n = kw_s(name);
  kubewasm_plugin_cache_option_own_object_t r;
  kubewasm_plugin_cache_cache_error_t e;
  *found = false;
  if (!kubewasm_plugin_cache_get(&kind, ns ? &nss : NULL, &n, &r, &e)) return cache_refused(&e, err);
  *found = r.is_some;
  if (r.is_some) *out = r.val;
  return true;
}

bool kw_cache_list(kw_kind kind, const char *ns, const char *selector, kw_objects *out, kw_error *err) {
  plugin_string_t nss = kw_s(ns), sels = kw_s(selector);
  kubewasm_plugin_cache_cache_error_t e;
  bool has_sel = selector && selector[0];
  if (!kubewasm_plugin_cache_list(&kind, ns ? &nss : NULL, has_sel ? &sels : NULL, out, &e)) {
    out->ptr = NULL;
    out->len = 0;
    return cache_refused(&e, err);
  }
  return true;
}

bool kw_cache_list_selected(kw_kind kind, const char *ns, const kw_selector *selector, kw_objects *out,
                            kw_error *err) {
  char *text = selector ? kw_selector_string(selector) : NULL;
  bool ok = kw_cache_list(kind, ns, text, out, err);
  free(text);
  return ok;
}

bool kw_cache_by_index(const char *index, const char *value, kw_objects *out, kw_error *err) {
  plugin_string_t i = kw_s(index), v = kw_s(value);
  kubewasm_plugin_cache_cache_error_t e;
  if (!kubewasm_plugin_cache_by_index(&i, &v, out, &e)) {
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

kw_object kw_borrow(kw_own_object o) { return kubewasm_plugin_types_borrow_object(o); }
void kw_object_drop(kw_own_object o) { kubewasm_plugin_types_object_drop_own(o); }

/* ---- preconditions and references ------------------------------------------------ */

static plugin_option_string_t opt_str(const kw_str *s) {
  plugin_option_string_t o = {0};
  if (s && s->len) {
    o.is_some = true;
    o.val = *s;
  }
  return o;
}

kw_preconditions kw_preconditions_none(void) {
  kw_preconditions p = {0};
  return p;
}

kw_preconditions kw_preconditions_uid(const char *uid) {
  kw_str u = kw_s(uid);
  kw_preconditions p = {opt_str(&u), {0}};
  return p;
}

kw_preconditions kw_preconditions_uid_str(const kw_str *uid) {
  kw_preconditions p = {opt_str(uid), {0}};
  return p;
}

kw_preconditions kw_preconditions_of(const char *uid, const char *resource_version) {
  kw_str u = kw_s(uid), rv = kw_s(resource_version);
  kw_preconditions p = {opt_str(&u), opt_str(&rv)};
  return p;
}

kw_preconditions kw_preconditions_of_delta(const kw_delta *d) {
  kw_preconditions p = {opt_str(&d->uid), opt_str(&d->resource_version)};
  return p;
}

kw_preconditions kw_preconditions_uid_of_delta(const kw_delta *d) { return kw_preconditions_uid_str(&d->uid); }

void kw_preconditions_of_object(kw_object o, kw_preconditions *out) {
  plugin_string_t uid, rv;
  kubewasm_plugin_types_method_object_uid(o, &uid);
  kubewasm_plugin_types_method_object_resource_version(o, &rv);
  memset(out, 0, sizeof *out);
  if (uid.len) out->uid = opt_str(&uid);
  if (rv.len) out->resource_version = opt_str(&rv);
}

void kw_preconditions_free(kw_preconditions *p) {
  kubewasm_plugin_actions_preconditions_free(p);
  memset(p, 0, sizeof *p);
}

kw_ref kw_ref_of(kw_kind kind, const char *ns, const char *name) {
  kw_ref r;
  r.kind = kind;
  r.namespace_.is_some = ns != NULL;
  r.namespace_.val = kw_s(ns);
  r.name = kw_s(name);
  return r;
}

kw_ref kw_ref_of_delta(kw_kind kind, const kw_delta *d) {
  kw_ref r;
  r.kind = kind;
  r.namespace_ = d->namespace_;
  r.name = d->name;
  return r;
}

kw_ref kw_ref_of_meta(kw_kind kind, const kw_meta *m) {
  kw_ref r;
  r.kind = kind;
  r.namespace_ = m->namespace_;
  r.name = m->name;
  return r;
}

void kw_ref_of_object(kw_object o, kw_ref *out) {
  memset(out, 0, sizeof *out);
  out->kind.tag = KUBEWASM_PLUGIN_TYPES_KIND_REF_GVK;
  kw_object_kind(o, &out->kind.val.gvk);
  out->namespace_.is_some = kubewasm_plugin_types_method_object_namespace(o, &out->namespace_.val);
  kubewasm_plugin_types_method_object_name(o, &out->name);
}

void kw_ref_free(kw_ref *r) {
  kubewasm_plugin_actions_object_ref_free(r);
  memset(r, 0, sizeof *r);
}

/* ---- actions ---------------------------------------------------------------------- */

static bool action_refused(kubewasm_plugin_actions_action_error_t *e, kw_error *err) {
  static const char *why[] = {"action refused, not declared in writes", "action refused as invalid",
                              "action refused, not granted"};
  kw_permanent(err, "%s: %.*s", why[e->tag < 3 ? e->tag : 1], (int)e->val.invalid.len,
               (const char *)e->val.invalid.ptr);
  kubewasm_plugin_actions_action_error_free(e);
  return false;
}

static kw_preconditions *pre_or_none(const kw_preconditions *pre, kw_preconditions *none) {
  memset(none, 0, sizeof *none);
  return pre ? (kw_preconditions *)pre : none;
}

bool kw_apply(const char *json_text, size_t len, bool force, const kw_preconditions *pre, kw_error *err) {
  plugin_string_t s = {(uint8_t *)json_text, len};
  kw_preconditions none;
  kubewasm_plugin_actions_action_error_t e;
  return kubewasm_plugin_actions_apply(&s, force, pre_or_none(pre, &none), &e) || action_refused(&e, err);
}

bool kw_apply_status(const char *json_text, size_t len, const kw_preconditions *pre, kw_error *err) {
  plugin_string_t s = {(uint8_t *)json_text, len};
  kw_preconditions none;
  kubewasm_plugin_actions_action_error_t e;
  return kubewasm_plugin_actions_apply_status(&s, pre_or_none(pre, &none), &e) || action_refused(&e, err);
}

bool kw_patch(const kw_ref *target, kubewasm_plugin_actions_patch_type_t type, const char *patch, size_t len,
              const kw_preconditions *pre, kw_error *err) {
  plugin_string_t s = {(uint8_t *)patch, len};
  kw_preconditions none;
  kubewasm_plugin_actions_action_error_t e;
  return kubewasm_plugin_actions_patch((kw_ref *)target, type, &s, pre_or_none(pre, &none), &e) ||
         action_refused(&e, err);
}

bool kw_patch_merge(const kw_ref *target, const char *json_text, size_t len, const kw_preconditions *pre,
                    kw_error *err) {
  return kw_patch(target, KW_MERGE, json_text, len, pre, err);
}

/* By key, then in the order given (so that the last of a repeated key is
 * the last of its run). */
static int cmp_keys(const void *a, const void *b) {
  const char *const *x = *(const char *const *const *)a, *const *y = *(const char *const *const *)b;
  int c = strcmp(x[0], y[0]);
  return c ? c : (x < y ? -1 : x > y);
}

bool kw_annotate(const kw_ref *target, const char *const *kv, size_t nkv, const kw_preconditions *pre,
                 kw_error *err) {
  size_t n = nkv / 2;
  const char *const **order = xrealloc(NULL, (n ? n : 1) * sizeof *order);
  for (size_t i = 0; i < n; i++) order[i] = &kv[2 * i];
  qsort(order, n, sizeof *order, cmp_keys);
  kw_buf b = {0};
  kw_buf_s(&b, "{\"metadata\":{\"annotations\":{");
  for (size_t i = 0; i < n; i++) {
    /* A repeated key: the last given wins, as in a JSON object. */
    if (i + 1 < n && strcmp(order[i][0], order[i + 1][0]) == 0) continue;
    if (b.ptr[b.len - 1] != '{') kw_buf_s(&b, ",");
    kw_buf_json_s(&b, order[i][0]);
    kw_buf_s(&b, ":");
    kw_buf_json_s(&b, order[i][1]);
  }
  kw_buf_s(&b, "}}}");
  free(order);
  bool ok = kw_patch_merge(target, b.ptr, b.len, pre, err);
  kw_buf_free(&b);
  return ok;
}

bool kw_annotate_object(kw_object o, const char *const *kv, size_t nkv, kw_error *err) {
  kw_ref r;
  kw_ref_of_object(o, &r);
  plugin_string_t uid;
  kubewasm_plugin_types_method_object_uid(o, &uid);
  kw_preconditions pre = kw_preconditions_uid_str(&uid);
  bool ok = kw_annotate(&r, kv, nkv, &pre, err);
  plugin_string_free(&uid);
  kw_ref_free(&r);
  return ok;
}

bool kw_delete(const kw_ref *target, kw_propagation propagation, const kw_preconditions *pre, kw_error *err) {
  kw_preconditions none;
  kubewasm_plugin_actions_action_error_t e;
  return kubewasm_plugin_actions_delete((kw_ref *)target, propagation, pre_or_none(pre, &none), &e) ||
         action_refused(&e, err);
}

bool kw_delete_object(kw_object o, kw_propagation propagation, kw_error *err) {
  kw_ref r;
  kw_ref_of_object(o, &r);
  plugin_string_t uid;
  kubewasm_plugin_types_method_object_uid(o, &uid);
  kw_preconditions pre = kw_preconditions_uid_str(&uid);
  bool ok = kw_delete(&r, propagation, &pre, err);
  plugin_string_free(&uid);
  kw_ref_free(&r);
  return ok;
}

/* ---- JSON patches ------------------------------------------------------------------ */

static void patch_op(kw_json_patch *p, const char *op, const char *path, const char *value, bool quote) {
  if (p->n++) kw_buf_s(&p->ops, ",");
  kw_buf_s(&p->ops, "{\"op\":\"");
  kw_buf_s(&p->ops, op);
  kw_buf_s(&p->ops, "\",\"path\":");
  kw_buf_json_s(&p->ops, path);
  if (value) {
    kw_buf_s(&p->ops, ",\"value\":");
    if (quote)
      kw_buf_json_s(&p->ops, value);
    else
      kw_buf_s(&p->ops, value);
  }
  kw_buf_s(&p->ops, "}");
}

void kw_json_patch_add(kw_json_patch *p, const char *path, const char *value_json) {
  patch_op(p, "add", path, value_json, false);
}
void kw_json_patch_add_string(kw_json_patch *p, const char *path, const char *value) {
  patch_op(p, "add", path, value, true);
}
void kw_json_patch_remove(kw_json_patch *p, const char *path) { patch_op(p, "remove", path, NULL, false); }
void kw_json_patch_replace(kw_json_patch *p, const char *path, const char *value_json) {
  patch_op(p, "replace", path, value_json, false);
}
void kw_json_patch_replace_string(kw_json_patch *p, const char *path, const char *value) {
  patch_op(p, "replace", path, value, true);
}
void kw_json_patch_test(kw_json_patch *p, const char *path, const char *value_json) {
  patch_op(p, "test", path, value_json, false);
}
void kw_json_patch_test_string(kw_json_patch *p, const char *path, const char *value) {
  patch_op(p, "test", path, value, true);
}

size_t kw_json_patch_len(const kw_json_patch *p) { return p->n; }

const char *kw_json_patch_text(kw_json_patch *p) {
  p->text.len = 0;
  kw_buf_s(&p->text, "[");
  kw_buf_n(&p->text, p->ops.ptr, p->ops.len);
  kw_buf_s(&p->text, "]");
  return p->text.ptr;
}

void kw_json_patch_free(kw_json_patch *p) {
  kw_buf_free(&p->ops);
  kw_buf_free(&p->text);
  p->n = 0;
}

bool kw_patch_json(const kw_ref *target, kw_json_patch *p, const kw_preconditions *pre, kw_error *err) {
  const char *text = kw_json_patch_text(p);
  return kw_patch(target, KW_JSON_PATCH, text, p->text.len, pre, err);
}

void kw_pointer_escape(kw_buf *b, const char *segment) {
  for (const char *c = segment; *c; c++) {
    if (*c == '~')
      kw_buf_s(b, "~0");
    else if (*c == '/')
      kw_buf_s(b, "~1");
    else
      kw_buf_n(b, c, 1);
  }
}

void kw_pointer(kw_buf *b, const char *const *segments, size_t n) {
  for (size_t i = 0; i < n; i++) {
    kw_buf_n(b, "/", 1);
    kw_pointer_escape(b, segments[i]);
  }
}

/* ---- finalizers ---------------------------------------------------------------------- */

bool kw_add_finalizer_patch(const kw_strs *current, const char *finalizer, kw_json_patch *out) {
  memset(out, 0, sizeof *out);
  if (strs_contain(current, finalizer)) return false;
  if (current->len == 0) {
    kw_buf v = {0};
    kw_buf_s(&v, "[");
    kw_buf_json_s(&v, finalizer);
    kw_buf_s(&v, "]");
    kw_json_patch_add(out, "/metadata/finalizers", v.ptr);
    kw_buf_free(&v);
  } else {
    kw_json_patch_add_string(out, "/metadata/finalizers/-", finalizer);
  }
  return true;
}

bool kw_remove_finalizer_patch(const kw_strs *current, const char *finalizer, kw_json_patch *out) {
  memset(out, 0, sizeof *out);
  for (size_t i = current->len; i-- > 0;) {
    if (!kw_eq(&current->ptr[i], finalizer)) continue;
    char path[48];
    snprintf(path, sizeof path, "/metadata/finalizers/%zu", i);
    kw_json_patch_remove(out, path);
  }
  return out->n > 0;
}

static bool finalizer_patch(kw_object o, bool (*build)(const kw_strs *, const char *, kw_json_patch *),
                            const char *finalizer, bool *queued, kw_error *err) {
  if (queued) *queued = false;
  kw_preconditions pre;
  kw_preconditions_of_object(o, &pre); /* read first: the patch is built on this state */
  kw_strs current;
  kw_finalizers(o, &current);
  kw_json_patch p;
  bool needed = build(&current, finalizer, &p);
  kw_strs_free(&current);
  bool ok = true;
  if (needed) {
    kw_ref r;
    kw_ref_of_object(o, &r);
    ok = kw_patch_json(&r, &p, &pre, err);
    kw_ref_free(&r);
    if (ok && queued) *queued = true;
  }
  kw_json_patch_free(&p);
  kw_preconditions_free(&pre);
  return ok;
}

bool kw_add_finalizer(kw_object o, const char *finalizer, bool *queued, kw_error *err) {
  return finalizer_patch(o, kw_add_finalizer_patch, finalizer, queued, err);
}

bool kw_remove_finalizer(kw_object o, const char *finalizer, bool *queued, kw_error *err) {
  return finalizer_patch(o, kw_remove_finalizer_patch, finalizer, queued, err);
}

/* ---- Events ---------------------------------------------------------------------------- */

bool kw_record_event(const kw_ref *regarding, const char *regarding_uid, kw_event_type type, const char *reason,
                     const char *note, kw_error *err) {
  kubewasm_plugin_actions_event_t ev;
  kw_str uid = kw_s(regarding_uid);
  ev.regarding = *regarding;
  ev.regarding_uid = opt_str(&uid);
  ev.event_type = type;
  ev.reason = kw_s(reason);
  ev.note = kw_s(note);
  kubewasm_plugin_actions_action_error_t e;
  return kubewasm_plugin_actions_record_event(&ev, &e) || action_refused(&e, err);
}

bool kw_event_about(kw_object o, kw_event_type type, const char *reason, const char *note, kw_error *err) {
  kw_ref r;
  kw_ref_of_object(o, &r);
  char *uid = kw_object_uid(o);
  bool ok = kw_record_event(&r, uid, type, reason, note, err);
  free(uid);
  kw_ref_free(&r);
  return ok;
}

/* ---- log ---------------------------------------------------------------------------- */

bool kw_log_enabled(kw_level level) { return kubewasm_plugin_log_enabled(level); }

void kw_log(kw_level level, const char *msg, const char *const *kv, size_t nkv) {
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

/* ---- clock ------------------------------------------------------------------------------ */

kw_instant kw_now(void) {
  kw_instant t;
  kubewasm_plugin_clock_now(&t);
  return t;
}

char *kw_now_rfc3339(void) {
  plugin_string_t s;
  kubewasm_plugin_clock_now_rfc3339(&s);
  return take_cstr(&s);
}

/* ---- the exports ------------------------------------------------------------------------ */

static char *plugin_name, *plugin_version, *field_manager;

const char *kw_plugin_name(void) { return plugin_name ? plugin_name : ""; }
const char *kw_plugin_version(void) { return plugin_version ? plugin_version : ""; }
const char *kw_field_manager(void) { return field_manager ? field_manager : "kubewasm/"; }

bool exports_kubewasm_plugin_handler_register(kw_context *context, kw_registration *ret, plugin_string_t *err) {
  char *error = NULL;
  free(plugin_name);
  free(plugin_version);
  free(field_manager);
  plugin_name = kw_cstr(&context->name);
  plugin_version = kw_cstr(&context->version);
  field_manager = kw_format("kubewasm/%s", plugin_name);
  memset(ret, 0, sizeof *ret);
  bool ok = kw_plugin_register(context, ret, &error);
  exports_kubewasm_plugin_handler_context_free(context);
  if (!ok) {
    exports_kubewasm_plugin_handler_registration_free(ret);
    dup_string(err, error ? error : "register failed");
    free(error);
  }
  return ok;
}

bool exports_kubewasm_plugin_handler_handle(kw_delta *delta, kw_handled *ret, kw_error *err) {
  ret->tag = EXPORTS_KUBEWASM_PLUGIN_HANDLER_HANDLED_DONE;
  ret->val.requeue_after = 0;
  bool ok = kw_plugin_handle(delta, ret, err);
  if (delta->object.is_some) kubewasm_plugin_types_object_drop_own(delta->object.val);
  if (delta->old_object.is_some) kubewasm_plugin_types_object_drop_own(delta->old_object.val);
  exports_kubewasm_plugin_handler_delta_free(delta);
  return ok;
}

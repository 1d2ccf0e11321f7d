/*
 * config-replicator in C: the same config, registration and actions as
 * plugins/config-replicator (see its README.md). No JSON is parsed: the
 * source's data and binaryData come from the host's field accessor as JSON
 * text and are embedded as they are in the applied copy.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kubewasm.h"

#define REPLICA "kubewasm.io/replica"
#define REPLICA_OF "kubewasm.io/replica-of"
#define REPLICATE_TO "kubewasm.io/replicate-to"

static kw_selector *source_sel, *namespace_sel;
static char *source_text; /* canonical source selector, NULL when empty */

bool kw_plugin_register(const kw_str *config, kw_registration *reg, char **error) {
  kw_config_field f[] = {
      {"sourceSelector", "kubewasm.io/replicate=true", NULL},
      {"namespaceSelector", "", NULL},
  };
  bool ok = kw_config_strings(config, f, 2, error);
  kw_selector *s = NULL, *n = NULL;
  if (ok) ok = (s = kw_selector_parse(f[0].value, strlen(f[0].value), error)) != NULL;
  if (ok) ok = (n = kw_selector_parse(f[1].value, strlen(f[1].value), error)) != NULL;
  free(f[0].value);
  free(f[1].value);
  if (!ok) {
    kw_selector_free(s);
    return false;
  }
  kw_selector_free(source_sel);
  kw_selector_free(namespace_sel);
  free(source_text);
  source_sel = s;
  namespace_sel = n;
  source_text = kw_selector_is_empty(s) ? NULL : kw_selector_string(s);

  const kubewasm_plugin_types_delta_type_t cm_deltas[] = {
      KUBEWASM_PLUGIN_TYPES_DELTA_TYPE_ADDED, KUBEWASM_PLUGIN_TYPES_DELTA_TYPE_UPDATED,
      KUBEWASM_PLUGIN_TYPES_DELTA_TYPE_DELETED, KUBEWASM_PLUGIN_TYPES_DELTA_TYPE_RESYNC};
  const char *cm_fields[] = {"/data", "/binaryData"};
  kw_subscribe(reg, "", "v1", "ConfigMap", cm_deltas, 4, cm_fields, 2);
  const kubewasm_plugin_types_delta_type_t ns_deltas[] = {KUBEWASM_PLUGIN_TYPES_DELTA_TYPE_ADDED,
                                                          KUBEWASM_PLUGIN_TYPES_DELTA_TYPE_UPDATED};
  const char *ns_fields[] = {"/metadata/labels"};
  kw_subscribe(reg, "", "v1", "Namespace", ns_deltas, 2, ns_fields, 1);
  kw_writes(reg, "", "v1", "ConfigMap");
  return true;
}

static bool is_source(const kw_meta *m) {
  return !kw_label_is(m, REPLICA, "true") && kw_selector_matches(source_sel, &m->labels);
}

/* The namespace selector for a source: its annotation (parsed into *owned,
 * to free) or the config's. NULL with *error when the annotation is bad. */
static const kw_selector *selector_for(const kw_meta *m, kw_selector **owned, char **error) {
  const kw_str *text = kw_annotation(m, REPLICATE_TO);
  *owned = NULL;
  if (!text) return namespace_sel;
  char *why = NULL;
  *owned = kw_selector_parse((const char *)text->ptr, text->len, &why);
  if (*owned) return *owned;
  kw_buf b = {0};
  kw_buf_s(&b, REPLICATE_TO " on ");
  kw_key(m, &b);
  kw_buf_printf(&b, ": %s", why);
  free(why);
  *error = (char *)kw_buf_cstr(&b);
  return NULL;
}

/* A copy of a source: its name, key, and the JSON text of binaryData/data. */
typedef struct {
  const kw_meta *meta;
  kw_buf of;
  kw_buf data; /* `,"binaryData":{..},"data":{..}` */
} copy_t;

static void copy_free(copy_t *c) {
  kw_buf_free(&c->of);
  kw_buf_free(&c->data);
}

static bool copy_of(const kw_meta *m, kw_object source, copy_t *c, kw_error *err) {
  memset(c, 0, sizeof *c);
  c->meta = m;
  kw_key(m, &c->of);
  const char *names[] = {"binaryData", "data"}, *pointers[] = {"/binaryData", "/data"};
  for (int i = 0; i < 2; i++) {
    kw_field_value v;
    if (!kw_field(source, pointers[i], &v)) continue;
    bool object = v.tag == KUBEWASM_PLUGIN_TYPES_FIELD_VALUE_JSON && v.val.json.len > 0 && v.val.json.ptr[0] == '{';
    if (object) {
      kw_buf_printf(&c->data, ",\"%s\":", names[i]);
      kw_buf_str(&c->data, &v.val.json);
    }
    bool null = v.tag == KUBEWASM_PLUGIN_TYPES_FIELD_VALUE_NULL;
    kubewasm_plugin_types_field_value_free(&v);
    if (!object && !null) {
      kw_permanent(err, "%s has a non-object %s", kw_buf_cstr(&c->of), names[i]);
      copy_free(c);
      return false;
    }
  }
  return true;
}

static bool apply_into(const copy_t *c, const kw_str *ns, kw_error *err) {
  kw_buf b = {0};
  kw_buf_s(&b, "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":");
  kw_buf_json(&b, (const char *)c->meta->name.ptr, c->meta->name.len);
  kw_buf_s(&b, ",\"namespace\":");
  kw_buf_json(&b, (const char *)ns->ptr, ns->len);
  kw_buf_s(&b, ",\"labels\":{\"" REPLICA "\":\"true\"},\"annotations\":{\"" REPLICA_OF "\":");
  kw_buf_json(&b, c->of.ptr, c->of.len);
  kw_buf_s(&b, "}}");
  kw_buf_n(&b, c->data.ptr ? c->data.ptr : "", c->data.len);
  kw_buf_s(&b, "}");
  bool ok = kw_apply(b.ptr, b.len, true, err);
  kw_buf_free(&b);
  return ok;
}

/* Which copies delete_copies removes, by namespace. */
typedef bool (*keep_fn)(const kw_str *ns, const void *ctx);

static bool keep_all(const kw_str *ns, const void *ctx) {
  (void)ns;
  (void)ctx;
  return true;
}

static bool keep_one(const kw_str *ns, const void *ctx) { return kw_str_eq(ns, (const kw_str *)ctx); }

/* Deletes (background) every cached copy of `source` in a namespace `keep`
 * accepts, in namespace order. */
static bool delete_copies(const kw_meta *source, keep_fn keep, const void *ctx, kw_error *err) {
  kw_buf of = {0};
  kw_key(source, &of);
  kw_objects copies;
  bool ok = kw_cache_list(KW_CONFIGMAP, NULL, REPLICA "=true", &copies, err);
  for (size_t i = 0; ok && i < copies.len; i++) {
    kw_meta m;
    kw_meta_of(kw_objects_at(&copies, i), &m);
    const kw_str *a = kw_annotation(&m, REPLICA_OF);
    kw_str ofs = {(uint8_t *)of.ptr, of.len};
    if (a && kw_str_eq(a, &ofs) && m.namespace_.is_some && keep(&m.namespace_.val, ctx)) {
      ok = kw_delete(KW_CONFIGMAP, &m, KUBEWASM_PLUGIN_ACTIONS_PROPAGATION_BACKGROUND, err);
      if (ok) {
        kw_buf key = {0};
        kw_key(&m, &key);
        const char *kv[] = {"copy", kw_buf_cstr(&key), "source", kw_buf_cstr(&of)};
        kw_log(KW_INFO, "copy deleted", kv, 4);
        kw_buf_free(&key);
      }
    }
    kubewasm_plugin_types_object_meta_free(&m);
  }
  kw_objects_free(&copies);
  kw_buf_free(&of);
  return ok;
}

typedef struct {
  kw_meta *namespaces;
  size_t n;
  bool *target;
} stale_ctx;

/* Not a target, and a cached namespace that is not terminating. */
static bool keep_stale(const kw_str *ns, const void *ctx) {
  const stale_ctx *s = ctx;
  for (size_t i = 0; i < s->n; i++)
    if (kw_str_eq(&s->namespaces[i].name, ns)) return !s->target[i] && !kw_is_terminating(&s->namespaces[i]);
  return false;
}

static bool replicate(const kw_meta *m, kw_object object, kw_error *err) {
  kw_selector *owned;
  char *why = NULL;
  const kw_selector *sel = selector_for(m, &owned, &why);
  if (!sel) {
    kw_permanent(err, "%s", why);
    free(why);
    return false;
  }
  copy_t c;
  kw_objects list = {0};
  stale_ctx s = {0};
  bool ok = copy_of(m, object, &c, err);
  if (!ok) goto done;
  ok = kw_cache_list(KW_NAMESPACE, NULL, NULL, &list, err);
  if (!ok) goto copied;
  s.n = list.len;
  s.namespaces = calloc(list.len ? list.len : 1, sizeof(kw_meta));
  s.target = calloc(list.len ? list.len : 1, sizeof(bool));
  size_t count = 0;
  for (size_t i = 0; i < list.len; i++) {
    kw_meta *ns = &s.namespaces[i];
    kw_meta_of(kw_objects_at(&list, i), ns);
    s.target[i] = !kw_is_terminating(ns) && !(m->namespace_.is_some && kw_str_eq(&ns->name, &m->namespace_.val)) &&
                  kw_selector_matches(sel, &ns->labels);
  }
  for (size_t i = 0; ok && i < s.n; i++) {
    if (!s.target[i]) continue;
    ok = apply_into(&c, &s.namespaces[i].name, err);
    count++;
  }
  if (ok) ok = delete_copies(m, keep_stale, &s, err);
  if (ok) {
    char n[24];
    kw_buf_cstr(&c.of);
    snprintf(n, sizeof n, "%zu", count);
    const char *kv[] = {"source", c.of.ptr, "namespaces", n};
    kw_log(KW_DEBUG, "replicated", kv, 4);
  }
  for (size_t i = 0; i < s.n; i++) kubewasm_plugin_types_object_meta_free(&s.namespaces[i]);
  free(s.namespaces);
  free(s.target);
  kw_objects_free(&list);
copied:
  copy_free(&c);
done:
  kw_selector_free(owned);
  return ok;
}

static bool config_map_changed(const kw_delta *d, kw_error *err) {
  bool has;
  kw_object object = kw_delta_object(d, &has);
  if (!has || !d->meta.is_some)
    return kw_permanent(err, "%s delta for %.*s carries no object", kw_delta_type_name(d->delta_type),
                        (int)d->kind.kind.len, (const char *)d->kind.kind.ptr);
  const kw_meta *m = &d->meta.val;
  if (kw_label_is(m, REPLICA, "true")) return true;
  bool source = is_source(m);
  switch (d->delta_type) {
    case KUBEWASM_PLUGIN_TYPES_DELTA_TYPE_DELETED:
      return source ? delete_copies(m, keep_all, NULL, err) : true;
    case KUBEWASM_PLUGIN_TYPES_DELTA_TYPE_ADDED:
    case KUBEWASM_PLUGIN_TYPES_DELTA_TYPE_RESYNC:
      return source ? replicate(m, object, err) : true;
    case KUBEWASM_PLUGIN_TYPES_DELTA_TYPE_UPDATED: {
      if (source) return replicate(m, object, err);
      kw_meta old;
      if (!kw_delta_old_meta(d, &old)) return true;
      bool was = is_source(&old);
      kubewasm_plugin_types_object_meta_free(&old);
      return was ? delete_copies(m, keep_all, NULL, err) : true;
    }
    default:
      return true;
  }
}

static bool namespace_changed(const kw_delta *d, kw_error *err) {
  bool has;
  kw_delta_object(d, &has);
  if (!has || !d->meta.is_some)
    return kw_permanent(err, "%s delta for %.*s carries no object", kw_delta_type_name(d->delta_type),
                        (int)d->kind.kind.len, (const char *)d->kind.kind.ptr);
  const kw_meta *ns = &d->meta.val;
  if (d->initial || kw_is_terminating(ns)) return true;
  kw_meta old;
  bool has_old = kw_delta_old_meta(d, &old);
  kw_objects sources;
  bool ok = kw_cache_list(KW_CONFIGMAP, NULL, source_text, &sources, err);
  for (size_t i = 0; ok && i < sources.len; i++) {
    kw_object source = kw_objects_at(&sources, i);
    kw_meta m;
    kw_meta_of(source, &m);
    if (!is_source(&m) || (m.namespace_.is_some && kw_str_eq(&m.namespace_.val, &ns->name))) {
      kubewasm_plugin_types_object_meta_free(&m);
      continue;
    }
    kw_selector *owned;
    char *why = NULL;
    const kw_selector *sel = selector_for(&m, &owned, &why);
    if (!sel) {
      kw_buf key = {0};
      kw_key(&m, &key);
      const char *kv[] = {"source", kw_buf_cstr(&key), "error", why};
      kw_log(KW_WARN, "source skipped", kv, 4);
      kw_buf_free(&key);
      free(why);
      kubewasm_plugin_types_object_meta_free(&m);
      continue;
    }
    bool now = kw_selector_matches(sel, &ns->labels);
    bool before = has_old && kw_selector_matches(sel, &old.labels);
    if (now && !before) {
      copy_t c;
      ok = copy_of(&m, source, &c, err);
      if (ok) {
        ok = apply_into(&c, &ns->name, err);
        copy_free(&c);
      }
    } else if (before && !now) {
      ok = delete_copies(&m, keep_one, &ns->name, err);
    }
    kw_selector_free(owned);
    kubewasm_plugin_types_object_meta_free(&m);
  }
  kw_objects_free(&sources);
  if (has_old) kubewasm_plugin_types_object_meta_free(&old);
  return ok;
}

bool kw_plugin_handle(const kw_delta *d, kw_error *err) {
  if (d->delta_type == KUBEWASM_PLUGIN_TYPES_DELTA_TYPE_SYNCED) return true;
  if (kw_delta_is(d, "", "Namespace")) return namespace_changed(d, err);
  if (kw_delta_is(d, "", "ConfigMap")) return config_map_changed(d, err);
  return true;
}

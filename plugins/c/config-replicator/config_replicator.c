/*
 * config-replicator in C: the same config, registration and actions as
 * plugins/config-replicator (see its README.md), on WIT 0.2. No JSON is
 * parsed: labels and annotations are read one by one through the host, the
 * selectors are the host's, and the source's data and binaryData come from
 * the host's field accessor as JSON text, embedded as they are in the
 * applied copy.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kubewasm.h"

/* Label on every copy; objects carrying it are never replicated. */
#define REPLICA "kubewasm.io/replica"
/* Annotation on every copy: `<namespace>/<name>` of its source. */
#define REPLICA_OF "kubewasm.io/replica-of"
/* Annotation on every copy: the name of the plugin that made it. A
 * replicator deletes only its own copies, so replicators with different
 * selectors share a cluster. */
#define REPLICATED_BY "kubewasm.io/replicated-by"
/* Annotation on a source overriding the configured namespace selector. */
#define REPLICATE_TO "kubewasm.io/replicate-to"

/* Subscription indexes, in registration order. */
enum { CONFIG_MAPS = 0, NAMESPACES = 1 };

static kw_selector *source_sel, *namespace_sel;
/* source_sel's canonical text, the filter of the cache lists of sources
 * (NULL for the empty selector). */
static char *source_filter;

bool kw_plugin_register(const kw_context *ctx, kw_registration *reg, char **error) {
  kw_config_field f[] = {
      {"sourceSelector", "kubewasm.io/replicate=true", NULL},
      {"namespaceSelector", "", NULL},
  };
  bool ok = kw_config_strings(&ctx->config, f, 2, error);
  kw_selector *s = NULL, *n = NULL;
  char *why = NULL;
  if (ok && !(s = kw_selector_parse(f[0].value, strlen(f[0].value), &why))) {
    *error = kw_format("invalid config: sourceSelector: %s", why);
    ok = false;
  }
  if (ok && !(n = kw_selector_parse(f[1].value, strlen(f[1].value), &why))) {
    *error = kw_format("invalid config: namespaceSelector: %s", why);
    ok = false;
  }
  free(why);
  free(f[0].value);
  free(f[1].value);
  if (!ok) {
    kw_selector_free(s);
    return false;
  }
  kw_selector_free(source_sel);
  kw_selector_free(namespace_sel);
  free(source_filter);
  source_sel = s;
  namespace_sel = n;
  source_filter = kw_selector_string(s);
  if (!source_filter[0]) {
    free(source_filter);
    source_filter = NULL;
  }

  const kw_delta_type cm_deltas[] = {KW_ADDED, KW_UPDATED, KW_DELETED, KW_RESYNC};
  const char *cm_fields[] = {"/data", "/binaryData"};
  kw_subscribe(reg, "", "v1", "ConfigMap", cm_deltas, 4, cm_fields, 2);
  const kw_delta_type ns_deltas[] = {KW_ADDED, KW_UPDATED};
  const char *ns_fields[] = {"/metadata/labels"};
  kw_subscribe(reg, "", "v1", "Namespace", ns_deltas, 2, ns_fields, 1);
  kw_writes(reg, "", "v1", "ConfigMap");
  return true;
}

static bool is_replica(kw_object o) { return kw_label_is(o, REPLICA, "true"); }

static bool is_source(kw_object o) { return !is_replica(o) && kw_selector_matches_object(source_sel, o); }

/* A copy this replicator made (its name in REPLICATED_BY); another
 * replicator's, or one made before copies were marked, is left alone. */
static bool is_mine(kw_object copy) {
  char *by = kw_annotation(copy, REPLICATED_BY);
  bool mine = by && strcmp(by, kw_plugin_name()) == 0;
  free(by);
  return mine;
}

/* The namespace selector a source names in its annotation, parsed into
 * *own (NULL: it names none, the config's applies). False with *error
 * (malloc'd) when the annotation does not parse. */
static bool own_selector(kw_object source, kw_selector **own, char **error) {
  *own = NULL;
  char *text = kw_annotation(source, REPLICATE_TO);
  if (!text) return true;
  char *why = NULL;
  *own = kw_selector_parse(text, strlen(text), &why);
  free(text);
  if (*own) return true;
  kw_buf b = {0};
  kw_buf_s(&b, REPLICATE_TO " on ");
  kw_object_key(source, &b);
  kw_buf_printf(&b, ": %s", why);
  free(why);
  *error = kw_buf_take(&b);
  return false;
}

/* What a copy is made of: the source's name, key, and the JSON text of
 * its binaryData/data. */
typedef struct {
  kw_buf name;
  kw_buf of;
  kw_buf data; /* `,"binaryData":{..},"data":{..}` */
} copy_t;

static void copy_free(copy_t *c) {
  kw_buf_free(&c->name);
  kw_buf_free(&c->of);
  kw_buf_free(&c->data);
}

/* The copy of `source`; c->name and c->of are filled by the caller. */
static bool copy_data(kw_object source, copy_t *c, kw_error *err) {
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
    kw_field_value_free(&v);
    if (!object && !null) return kw_permanent(err, "%s has a non-object %s", kw_buf_cstr(&c->of), names[i]);
  }
  return true;
}

static bool apply_into(const copy_t *c, const char *ns, kw_error *err) {
  kw_buf b = {0};
  kw_buf_s(&b, "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":");
  kw_buf_json(&b, c->name.ptr ? c->name.ptr : "", c->name.len);
  kw_buf_s(&b, ",\"namespace\":");
  kw_buf_json_s(&b, ns);
  kw_buf_s(&b, ",\"labels\":{\"" REPLICA "\":\"true\"},\"annotations\":{\"" REPLICA_OF "\":");
  kw_buf_json(&b, c->of.ptr ? c->of.ptr : "", c->of.len);
  kw_buf_s(&b, ",\"" REPLICATED_BY "\":");
  kw_buf_json_s(&b, kw_plugin_name());
  kw_buf_s(&b, "}}");
  kw_buf_n(&b, c->data.ptr ? c->data.ptr : "", c->data.len);
  kw_buf_s(&b, "}");
  bool ok = kw_apply(b.ptr, b.len, true, NULL, err);
  kw_buf_free(&b);
  return ok;
}

/* Which copies delete_copies removes, by namespace. */
typedef bool (*keep_fn)(const char *ns, const void *ctx);

static bool keep_all(const char *ns, const void *ctx) {
  (void)ns;
  (void)ctx;
  return true;
}

static bool keep_one(const char *ns, const void *ctx) { return strcmp(ns, (const char *)ctx) == 0; }

/* Deletes (background, guarded by the copy's uid) every cached copy of
 * ours of the source whose key is `of` in a namespace `keep` accepts, in
 * namespace order. */
static bool delete_copies(const char *of, keep_fn keep, const void *ctx, kw_error *err) {
  kw_objects copies;
  if (!kw_cache_list(KW_CONFIGMAP, NULL, REPLICA "=true", &copies, err)) return false;
  bool ok = true;
  for (size_t i = 0; ok && i < copies.len; i++) {
    kw_object copy = kw_objects_at(&copies, i);
    char *a = kw_annotation(copy, REPLICA_OF);
    bool mine = a && strcmp(a, of) == 0 && is_mine(copy);
    free(a);
    if (!mine) continue;
    char *ns = kw_object_namespace(copy);
    if (ns && keep(ns, ctx)) {
      char *name = kw_object_name(copy), *uid = kw_object_uid(copy);
      kw_ref ref = kw_ref_of(KW_CONFIGMAP, ns, name);
      kw_preconditions pre = kw_preconditions_uid(uid);
      ok = kw_delete(&ref, KW_BACKGROUND, &pre, err);
      if (ok) {
        kw_buf key = {0};
        kw_object_key(copy, &key);
        const char *kv[] = {"copy", kw_buf_cstr(&key), "source", of};
        kw_log(KW_INFO, "copy deleted", kv, 4);
        kw_buf_free(&key);
      }
      free(name);
      free(uid);
    }
    free(ns);
  }
  kw_objects_free(&copies);
  return ok;
}

/* A copy of ours whose source is gone (or no longer a source) is deleted.
 * Level, not edge: a source deleted while no replica led (a leadership
 * handover, a restart) never arrives as a delete; the next leader's replay
 * of the copies finds the orphans. */
static bool copy_seen(const kw_delta *d, kw_object copy, kw_error *err) {
  if (d->delta_type == KW_DELETED || !is_mine(copy)) return true;
  char *of = kw_annotation(copy, REPLICA_OF);
  char *slash = of ? strchr(of, '/') : NULL;
  if (!slash) {
    free(of);
    return true;
  }
  *slash = 0;
  const char *ns = of, *name = slash + 1;
  kw_own_object source;
  bool found;
  bool ok = kw_cache_get(KW_CONFIGMAP, ns, name, &source, &found, err);
  bool live = false;
  if (ok && found) {
    live = is_source(kw_borrow(source));
    kw_object_drop(source);
  }
  if (ok && !live) {
    kw_ref ref = kw_ref_of_delta(KW_CONFIGMAP, d);
    kw_preconditions pre = kw_preconditions_uid_of_delta(d);
    ok = kw_delete(&ref, KW_BACKGROUND, &pre, err);
    if (ok) {
      kw_buf key = {0}, src = {0};
      kw_delta_key(d, &key);
      kw_buf_printf(&src, "%s/%s", ns, name);
      const char *kv[] = {"copy", kw_buf_cstr(&key), "source", kw_buf_cstr(&src)};
      kw_log(KW_INFO, "orphan copy deleted", kv, 4);
      kw_buf_free(&key);
      kw_buf_free(&src);
    }
  }
  free(of);
  return ok;
}

/* The live (not terminating) namespaces, by name, and whether each is a
 * target of the source being replicated. */
typedef struct {
  char **names;
  bool *target;
  size_t n;
} live_t;

/* Not a target, and a live namespace. */
static bool keep_stale(const char *ns, const void *ctx) {
  const live_t *l = ctx;
  for (size_t i = 0; i < l->n; i++)
    if (strcmp(l->names[i], ns) == 0) return !l->target[i];
  return false;
}

/* Applies the source into each target namespace (by name), then deletes
 * its copies in namespaces that exist, are not terminating and are no
 * longer targets. */
static bool replicate(const kw_delta *d, kw_object object, kw_error *err) {
  kw_selector *own;
  char *why = NULL;
  if (!own_selector(object, &own, &why)) {
    kw_permanent(err, "%s", why);
    free(why);
    return false;
  }
  const kw_selector *sel = own ? own : namespace_sel;
  copy_t c = {{0}, {0}, {0}};
  kw_buf_str(&c.name, &d->name);
  kw_delta_key(d, &c.of);
  kw_objects list = {0};
  live_t live = {0};
  size_t count = 0;
  bool ok = copy_data(object, &c, err) && kw_cache_list(KW_NAMESPACE, NULL, NULL, &list, err);
  if (ok) {
    live.names = calloc(list.len ? list.len : 1, sizeof(char *));
    live.target = calloc(list.len ? list.len : 1, sizeof(bool));
    for (size_t i = 0; i < list.len; i++) {
      kw_object ns = kw_objects_at(&list, i);
      if (kw_is_terminating(ns)) continue;
      char *name = kw_object_name(ns);
      bool own_ns = d->namespace_.is_some && kw_eq(&d->namespace_.val, name);
      live.names[live.n] = name;
      live.target[live.n] = kw_selector_matches_object(sel, ns) && !own_ns;
      live.n++;
    }
    for (size_t i = 0; ok && i < live.n; i++) {
      if (!live.target[i]) continue;
      ok = apply_into(&c, live.names[i], err);
      count++;
    }
  }
  if (ok) ok = delete_copies(kw_buf_cstr(&c.of), keep_stale, &live, err);
  if (ok) {
    char n[24];
    snprintf(n, sizeof n, "%zu", count);
    const char *kv[] = {"source", kw_buf_cstr(&c.of), "namespaces", n};
    kw_log(KW_DEBUG, "replicated", kv, 4);
  }
  for (size_t i = 0; i < live.n; i++) free(live.names[i]);
  free(live.names);
  free(live.target);
  kw_objects_free(&list);
  copy_free(&c);
  kw_selector_free(own);
  return ok;
}

static bool config_map_changed(const kw_delta *d, kw_error *err) {
  kw_object object;
  if (!kw_delta_need_object(d, &object, err)) return false;
  if (is_replica(object)) return copy_seen(d, object, err);
  bool source = is_source(object);
  kw_buf key = {0};
  bool ok = true;
  switch (d->delta_type) {
    case KW_DELETED:
      if (source) {
        kw_delta_key(d, &key);
        ok = delete_copies(kw_buf_cstr(&key), keep_all, NULL, err);
      }
      break;
    case KW_ADDED:
    case KW_RESYNC:
      if (source) ok = replicate(d, object, err);
      break;
    case KW_UPDATED: {
      if (source) {
        ok = replicate(d, object, err);
        break;
      }
      /* No longer a source (labels changed): its copies go. */
      bool had_old;
      kw_object old = kw_delta_old_object(d, &had_old);
      if (had_old && is_source(old)) {
        kw_delta_key(d, &key);
        ok = delete_copies(kw_buf_cstr(&key), keep_all, NULL, err);
      }
      break;
    }
    default:
      break;
  }
  kw_buf_free(&key);
  return ok;
}

/* A live namespace appeared or changed labels: copies every source it now
 * matches (and did not before) into it, and deletes the copies of sources
 * it no longer matches. Initial namespaces are covered by the sources' own
 * initial deltas. */
static bool namespace_changed(const kw_delta *d, kw_error *err) {
  kw_object ns;
  if (!kw_delta_need_object(d, &ns, err)) return false;
  if (d->initial || kw_is_terminating(ns)) return true;
  char *name = kw_cstr(&d->name);
  bool has_old;
  kw_object old = kw_delta_old_object(d, &has_old);
  kw_objects sources;
  bool ok = kw_cache_list(KW_CONFIGMAP, NULL, source_filter, &sources, err);
  for (size_t i = 0; ok && i < sources.len; i++) {
    kw_object source = kw_objects_at(&sources, i);
    if (!is_source(source)) continue;
    char *source_ns = kw_object_namespace(source);
    bool here = source_ns && strcmp(source_ns, name) == 0;
    free(source_ns);
    if (here) continue;
    kw_selector *own;
    char *why = NULL;
    if (!own_selector(source, &own, &why)) {
      kw_buf key = {0};
      kw_object_key(source, &key);
      const char *kv[] = {"source", kw_buf_cstr(&key), "error", why};
      kw_log(KW_WARN, "source skipped", kv, 4);
      kw_buf_free(&key);
      free(why);
      continue;
    }
    const kw_selector *sel = own ? own : namespace_sel;
    bool now = kw_selector_matches_object(sel, ns);
    bool before = has_old && kw_selector_matches_object(sel, old);
    if (now && !before) {
      copy_t c = {{0}, {0}, {0}};
      char *source_name = kw_object_name(source);
      kw_buf_s(&c.name, source_name);
      free(source_name);
      kw_object_key(source, &c.of);
      ok = copy_data(source, &c, err) && apply_into(&c, name, err);
      copy_free(&c);
    } else if (before && !now) {
      kw_buf key = {0};
      kw_object_key(source, &key);
      ok = delete_copies(kw_buf_cstr(&key), keep_one, name, err);
      kw_buf_free(&key);
    }
    kw_selector_free(own);
  }
  kw_objects_free(&sources);
  free(name);
  return ok;
}

bool kw_plugin_handle(const kw_delta *d, kw_handled *handled, kw_error *err) {
  (void)handled; /* always done */
  if (d->delta_type == KW_SYNCED) return true;
  switch (d->subscription) {
    case NAMESPACES:
      return namespace_changed(d, err);
    case CONFIG_MAPS:
      return config_map_changed(d, err);
    default:
      return true;
  }
}

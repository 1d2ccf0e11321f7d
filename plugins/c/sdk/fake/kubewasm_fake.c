/* The kubewasm fake host for native unit tests of C plugins: see
 * kubewasm_fake.h. Implements the functions of the bindings header
 * (plugin.h) natively, over objects held as cJSON trees. */
#define _POSIX_C_SOURCE 200809L
#include "kubewasm_fake.h"

#include <stdarg.h>
#include <stdlib.h>
#include <time.h>

#include "cJSON.h"

/* ==== state ============================================================== */

#define LAST_APPLIED "kubectl.kubernetes.io/last-applied-configuration"

typedef struct {
  char *line;
  char *json;
} fake_action;

struct sel;

static struct {
  cJSON **objs; /* the cache */
  size_t nobjs, capobjs;
  cJSON **handles; /* object handle h is handles[h - 1]; NULL once dropped */
  size_t nhandles, caphandles;
  struct sel **sels; /* selector handle h is sels[h - 1] */
  size_t nsels, capsels;
  fake_action *actions;
  size_t nactions, capactions;
  char **logs;
  size_t nlogs, caplogs;
  int64_t now;
  uint32_t nanos;
  kw_level log_level;
  /* Handles up to these were handed out before the last kwf_reset: a
   * plugin dropping one it kept (a selector parsed at register) is fine. */
  size_t handle_base, sel_base;
  bool registered;
  kw_registration reg;
  char error[1024];
} fk;

static void sel_free(struct sel *s);

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("kubewasm fake host: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  abort();
}

static void *grow(void *ptr, size_t *cap, size_t need, size_t size) {
  if (need <= *cap) return ptr;
  size_t cap2 = *cap ? *cap * 2 : 8;
  while (cap2 < need) cap2 *= 2;
  void *p = realloc(ptr, cap2 * size);
  if (!p) die("out of memory");
  *cap = cap2;
  return p;
}

static char *dupn(const char *s, size_t n) {
  char *r = malloc(n + 1);
  if (!r) die("out of memory");
  if (n > 0) memcpy(r, s, n);
  r[n] = 0;
  return r;
}

static char *dups(const char *s) { return dupn(s, strlen(s)); }

/* ==== WIT strings and the free helpers of plugin.h ====================== */

/* An owned WIT string: malloc'd unless empty (the free helpers free only
 * non-empty strings, as the generated ones do). */
static void out_strn(plugin_string_t *ret, const char *s, size_t n) {
  if (n == 0) {
    ret->ptr = (uint8_t *)"";
    ret->len = 0;
    return;
  }
  ret->ptr = (uint8_t *)dupn(s, n);
  ret->len = n;
}

static void out_str(plugin_string_t *ret, const char *s) { out_strn(ret, s ? s : "", s ? strlen(s) : 0); }

static void out_opt(plugin_option_string_t *ret, const char *s) {
  ret->is_some = s != NULL;
  if (s) out_str(&ret->val, s);
  else memset(&ret->val, 0, sizeof ret->val);
}

static char *cstr_of(const plugin_string_t *s) { return dupn((const char *)s->ptr, s->len); }

static bool str_is(const plugin_string_t *s, const char *c) {
  size_t n = strlen(c);
  return s->len == n && (n == 0 || memcmp(s->ptr, c, n) == 0);
}

void plugin_string_set(plugin_string_t *ret, const char *s) {
  ret->ptr = (uint8_t *)s;
  ret->len = strlen(s);
}

void plugin_string_dup(plugin_string_t *ret, const char *s) { out_strn(ret, s, strlen(s)); }

void plugin_string_dup_n(plugin_string_t *ret, const char *s, size_t len) { out_strn(ret, s, len); }

void plugin_string_free(plugin_string_t *ret) {
  if (ret->len > 0) free(ret->ptr);
  ret->ptr = NULL;
  ret->len = 0;
}

void kubewasm_plugin_types_group_version_kind_free(kubewasm_plugin_types_group_version_kind_t *p) {
  plugin_string_free(&p->group);
  plugin_string_free(&p->version);
  plugin_string_free(&p->kind);
}

void kubewasm_plugin_types_kind_ref_free(kubewasm_plugin_types_kind_ref_t *p) {
  if (p->tag == KUBEWASM_PLUGIN_TYPES_KIND_REF_GVK) kubewasm_plugin_types_group_version_kind_free(&p->val.gvk);
  else plugin_string_free(&p->val.resource_name);
}

void kubewasm_plugin_types_owner_reference_free(kubewasm_plugin_types_owner_reference_t *p) {
  plugin_string_free(&p->api_version);
  plugin_string_free(&p->kind);
  plugin_string_free(&p->name);
  plugin_string_free(&p->uid);
}

void plugin_option_string_free(plugin_option_string_t *p) {
  if (p->is_some) plugin_string_free(&p->val);
}

void plugin_option_s64_free(plugin_option_s64_t *p) { (void)p; }

void plugin_tuple2_string_string_free(plugin_tuple2_string_string_t *p) {
  plugin_string_free(&p->f0);
  plugin_string_free(&p->f1);
}

void plugin_list_tuple2_string_string_free(plugin_list_tuple2_string_string_t *p) {
  if (p->len > 0) {
    for (size_t i = 0; i < p->len; i++) plugin_tuple2_string_string_free(&p->ptr[i]);
    free(p->ptr);
  }
}

void kubewasm_plugin_types_list_owner_reference_free(kubewasm_plugin_types_list_owner_reference_t *p) {
  if (p->len > 0) {
    for (size_t i = 0; i < p->len; i++) kubewasm_plugin_types_owner_reference_free(&p->ptr[i]);
    free(p->ptr);
  }
}

void plugin_list_string_free(plugin_list_string_t *p) {
  if (p->len > 0) {
    for (size_t i = 0; i < p->len; i++) plugin_string_free(&p->ptr[i]);
    free(p->ptr);
  }
}

void kubewasm_plugin_types_object_meta_free(kubewasm_plugin_types_object_meta_t *p) {
  plugin_string_free(&p->api_version);
  plugin_string_free(&p->kind);
  plugin_option_string_free(&p->namespace_);
  plugin_string_free(&p->name);
  plugin_string_free(&p->uid);
  plugin_string_free(&p->resource_version);
  plugin_list_tuple2_string_string_free(&p->labels);
  plugin_list_tuple2_string_string_free(&p->annotations);
  kubewasm_plugin_types_list_owner_reference_free(&p->owner_references);
  plugin_list_string_free(&p->finalizers);
  plugin_option_string_free(&p->creation_timestamp);
  plugin_option_string_free(&p->deletion_timestamp);
}

void kubewasm_plugin_types_field_value_free(kubewasm_plugin_types_field_value_t *p) {
  if (p->tag == KUBEWASM_PLUGIN_TYPES_FIELD_VALUE_TEXT) plugin_string_free(&p->val.text);
  if (p->tag == KUBEWASM_PLUGIN_TYPES_FIELD_VALUE_JSON) plugin_string_free(&p->val.json);
}

void kubewasm_plugin_types_failure_free(kubewasm_plugin_types_failure_t *p) {
  /* Every case holds one string at the same place. */
  plugin_string_free(&p->val.retry);
}

void kubewasm_plugin_types_option_own_object_free(kubewasm_plugin_types_option_own_object_t *p) { (void)p; }

void kubewasm_plugin_types_option_failure_free(kubewasm_plugin_types_option_failure_t *p) {
  if (p->is_some) kubewasm_plugin_types_failure_free(&p->val);
}

void kubewasm_plugin_types_delta_free(kubewasm_plugin_types_delta_t *p) {
  plugin_option_string_free(&p->namespace_);
  plugin_string_free(&p->name);
  plugin_string_free(&p->uid);
  plugin_string_free(&p->resource_version);
  kubewasm_plugin_types_option_failure_free(&p->last_failure);
}

void kubewasm_plugin_types_option_owner_reference_free(kubewasm_plugin_types_option_owner_reference_t *p) {
  if (p->is_some) kubewasm_plugin_types_owner_reference_free(&p->val);
}

void kubewasm_plugin_types_option_field_value_free(kubewasm_plugin_types_option_field_value_t *p) {
  if (p->is_some) kubewasm_plugin_types_field_value_free(&p->val);
}

void kubewasm_plugin_types_list_option_field_value_free(kubewasm_plugin_types_list_option_field_value_t *p) {
  if (p->len > 0) {
    for (size_t i = 0; i < p->len; i++) kubewasm_plugin_types_option_field_value_free(&p->ptr[i]);
    free(p->ptr);
  }
}

void kubewasm_plugin_cache_kind_ref_free(kubewasm_plugin_cache_kind_ref_t *p) { kubewasm_plugin_types_kind_ref_free(p); }

void kubewasm_plugin_cache_cache_error_free(kubewasm_plugin_cache_cache_error_t *p) {
  plugin_string_free(&p->val.not_subscribed);
}

void kubewasm_plugin_cache_option_own_object_free(kubewasm_plugin_cache_option_own_object_t *p) { (void)p; }

void kubewasm_plugin_cache_result_option_own_object_cache_error_free(
    kubewasm_plugin_cache_result_option_own_object_cache_error_t *p) {
  if (p->is_err) kubewasm_plugin_cache_cache_error_free(&p->val.err);
}

void kubewasm_plugin_cache_list_own_object_free(kubewasm_plugin_cache_list_own_object_t *p) {
  if (p->len > 0) free(p->ptr);
}

void kubewasm_plugin_cache_result_list_own_object_cache_error_free(
    kubewasm_plugin_cache_result_list_own_object_cache_error_t *p) {
  if (p->is_err) kubewasm_plugin_cache_cache_error_free(&p->val.err);
  else kubewasm_plugin_cache_list_own_object_free(&p->val.ok);
}

void kubewasm_plugin_actions_kind_ref_free(kubewasm_plugin_actions_kind_ref_t *p) { kubewasm_plugin_types_kind_ref_free(p); }

void kubewasm_plugin_actions_object_ref_free(kubewasm_plugin_actions_object_ref_t *p) {
  kubewasm_plugin_actions_kind_ref_free(&p->kind);
  plugin_option_string_free(&p->namespace_);
  plugin_string_free(&p->name);
}

void kubewasm_plugin_actions_preconditions_free(kubewasm_plugin_actions_preconditions_t *p) {
  plugin_option_string_free(&p->uid);
  plugin_option_string_free(&p->resource_version);
}

void kubewasm_plugin_actions_event_free(kubewasm_plugin_actions_event_t *p) {
  kubewasm_plugin_actions_object_ref_free(&p->regarding);
  plugin_option_string_free(&p->regarding_uid);
  plugin_string_free(&p->reason);
  plugin_string_free(&p->note);
}

void kubewasm_plugin_actions_action_error_free(kubewasm_plugin_actions_action_error_t *p) {
  plugin_string_free(&p->val.not_declared);
}

void kubewasm_plugin_actions_result_void_action_error_free(kubewasm_plugin_actions_result_void_action_error_t *p) {
  if (p->is_err) kubewasm_plugin_actions_action_error_free(&p->val.err);
}

void kubewasm_plugin_selectors_result_own_label_selector_string_free(
    kubewasm_plugin_selectors_result_own_label_selector_string_t *p) {
  if (p->is_err) plugin_string_free(&p->val.err);
}

void exports_kubewasm_plugin_handler_kind_ref_free(exports_kubewasm_plugin_handler_kind_ref_t *p) {
  kubewasm_plugin_types_kind_ref_free(p);
}

void exports_kubewasm_plugin_handler_delta_free(exports_kubewasm_plugin_handler_delta_t *p) {
  kubewasm_plugin_types_delta_free(p);
}

void exports_kubewasm_plugin_handler_list_delta_type_free(exports_kubewasm_plugin_handler_list_delta_type_t *p) {
  if (p->len > 0) free(p->ptr);
}

void plugin_option_u32_free(plugin_option_u32_t *p) { (void)p; }

void exports_kubewasm_plugin_handler_subscription_free(exports_kubewasm_plugin_handler_subscription_t *p) {
  exports_kubewasm_plugin_handler_kind_ref_free(&p->kind);
  plugin_option_string_free(&p->namespace_);
  plugin_option_string_free(&p->label_selector);
  plugin_option_string_free(&p->field_selector);
  exports_kubewasm_plugin_handler_list_delta_type_free(&p->deltas);
  plugin_list_string_free(&p->fields);
}

void exports_kubewasm_plugin_handler_index_free(exports_kubewasm_plugin_handler_index_t *p) {
  plugin_string_free(&p->name);
  exports_kubewasm_plugin_handler_kind_ref_free(&p->kind);
  plugin_string_free(&p->pointer);
}

void exports_kubewasm_plugin_handler_list_subscription_free(exports_kubewasm_plugin_handler_list_subscription_t *p) {
  if (p->len > 0) {
    for (size_t i = 0; i < p->len; i++) exports_kubewasm_plugin_handler_subscription_free(&p->ptr[i]);
    free(p->ptr);
  }
}

void exports_kubewasm_plugin_handler_list_kind_ref_free(exports_kubewasm_plugin_handler_list_kind_ref_t *p) {
  if (p->len > 0) {
    for (size_t i = 0; i < p->len; i++) exports_kubewasm_plugin_handler_kind_ref_free(&p->ptr[i]);
    free(p->ptr);
  }
}

void exports_kubewasm_plugin_handler_list_index_free(exports_kubewasm_plugin_handler_list_index_t *p) {
  if (p->len > 0) {
    for (size_t i = 0; i < p->len; i++) exports_kubewasm_plugin_handler_index_free(&p->ptr[i]);
    free(p->ptr);
  }
}

void exports_kubewasm_plugin_handler_registration_free(exports_kubewasm_plugin_handler_registration_t *p) {
  exports_kubewasm_plugin_handler_list_subscription_free(&p->subscriptions);
  exports_kubewasm_plugin_handler_list_kind_ref_free(&p->writes);
  exports_kubewasm_plugin_handler_list_index_free(&p->indexes);
}

void exports_kubewasm_plugin_handler_context_free(exports_kubewasm_plugin_handler_context_t *p) {
  plugin_string_free(&p->name);
  plugin_string_free(&p->version);
  plugin_string_free(&p->config);
}

void exports_kubewasm_plugin_handler_handled_free(exports_kubewasm_plugin_handler_handled_t *p) { (void)p; }

void exports_kubewasm_plugin_handler_handler_error_free(exports_kubewasm_plugin_handler_handler_error_t *p) {
  plugin_string_free(&p->val.retry);
}

void exports_kubewasm_plugin_handler_result_registration_string_free(
    exports_kubewasm_plugin_handler_result_registration_string_t *p) {
  if (p->is_err) plugin_string_free(&p->val.err);
  else exports_kubewasm_plugin_handler_registration_free(&p->val.ok);
}

void exports_kubewasm_plugin_handler_result_handled_handler_error_free(
    exports_kubewasm_plugin_handler_result_handled_handler_error_t *p) {
  if (p->is_err) exports_kubewasm_plugin_handler_handler_error_free(&p->val.err);
}

/* ==== objects ============================================================ */

static cJSON *meta(const cJSON *o) {
  cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "metadata");
  return cJSON_IsObject(m) ? m : NULL;
}

/* A string at key of o, or NULL. */
static const char *str_at(const cJSON *o, const char *key) {
  cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static const char *meta_str(const cJSON *o, const char *key) { return str_at(meta(o), key); }

static const char *or_empty(const char *s) { return s ? s : ""; }

/* The namespace, NULL when cluster-scoped. */
static const char *namespace_of(const cJSON *o) {
  const char *ns = meta_str(o, "namespace");
  return ns && *ns ? ns : NULL;
}

/* group and version of o's apiVersion (malloc'd) and its kind (borrowed). */
static void gvk_of(const cJSON *o, char **group, char **version, const char **kind) {
  const char *av = or_empty(str_at(o, "apiVersion"));
  const char *slash = strchr(av, '/');
  *group = slash ? dupn(av, (size_t)(slash - av)) : dups("");
  *version = dups(slash ? slash + 1 : av);
  *kind = or_empty(str_at(o, "kind"));
}

static void out_gvk(kw_gvk_t *ret, const cJSON *o) {
  char *group, *version;
  const char *kind;
  gvk_of(o, &group, &version, &kind);
  out_str(&ret->group, group);
  out_str(&ret->version, version);
  out_str(&ret->kind, kind);
  free(group);
  free(version);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The string entries of metadata.<which>, sorted by key. */
static void out_pairs(plugin_list_tuple2_string_string_t *ret, const cJSON *o, const char *which) {
  cJSON *m = meta(o) ? cJSON_GetObjectItemCaseSensitive(meta(o), which) : NULL;
  memset(ret, 0, sizeof *ret);
  if (!cJSON_IsObject(m)) return;
  size_t n = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, m) if (cJSON_IsString(e)) n++;
  if (n == 0) return;
  const char **keys = malloc(n * sizeof *keys);
  n = 0;
  cJSON_ArrayForEach(e, m) if (cJSON_IsString(e)) keys[n++] = e->string;
  qsort(keys, n, sizeof *keys, cmp_str);
  ret->ptr = malloc(n * sizeof *ret->ptr);
  ret->len = n;
  for (size_t i = 0; i < n; i++) {
    out_str(&ret->ptr[i].f0, keys[i]);
    out_str(&ret->ptr[i].f1, cJSON_GetObjectItemCaseSensitive(m, keys[i])->valuestring);
  }
  free(keys);
}

static const char *map_get(const cJSON *o, const char *which, const char *key) {
  cJSON *m = meta(o) ? cJSON_GetObjectItemCaseSensitive(meta(o), which) : NULL;
  return cJSON_IsObject(m) ? str_at(m, key) : NULL;
}

static void out_owner(kw_owner_ref *r, const cJSON *e) {
  out_str(&r->api_version, str_at(e, "apiVersion"));
  out_str(&r->kind, str_at(e, "kind"));
  out_str(&r->name, str_at(e, "name"));
  out_str(&r->uid, str_at(e, "uid"));
  r->controller = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "controller"));
  r->block_owner_deletion = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "blockOwnerDeletion"));
}

static cJSON *owners_of(const cJSON *o) {
  cJSON *refs = meta(o) ? cJSON_GetObjectItemCaseSensitive(meta(o), "ownerReferences") : NULL;
  return cJSON_IsArray(refs) ? refs : NULL;
}

static void out_owners(kw_owner_refs *ret, const cJSON *o) {
  memset(ret, 0, sizeof *ret);
  cJSON *refs = owners_of(o);
  size_t n = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, refs) if (cJSON_IsObject(e)) n++;
  if (n == 0) return;
  ret->ptr = malloc(n * sizeof *ret->ptr);
  ret->len = n;
  n = 0;
  cJSON_ArrayForEach(e, refs) if (cJSON_IsObject(e)) out_owner(&ret->ptr[n++], e);
}

static void out_finalizers(plugin_list_string_t *ret, const cJSON *o) {
  memset(ret, 0, sizeof *ret);
  cJSON *f = meta(o) ? cJSON_GetObjectItemCaseSensitive(meta(o), "finalizers") : NULL;
  size_t n = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, f) if (cJSON_IsString(e)) n++;
  if (!cJSON_IsArray(f) || n == 0) return;
  ret->ptr = malloc(n * sizeof *ret->ptr);
  ret->len = n;
  n = 0;
  cJSON_ArrayForEach(e, f) if (cJSON_IsString(e)) out_str(&ret->ptr[n++], e->valuestring);
}

static bool generation_of(const cJSON *o, int64_t *out) {
  cJSON *g = meta(o) ? cJSON_GetObjectItemCaseSensitive(meta(o), "generation") : NULL;
  if (!cJSON_IsNumber(g) || g->valuedouble != (double)(int64_t)g->valuedouble) return false;
  *out = (int64_t)g->valuedouble;
  return true;
}

/* RFC 6901; with `star`, a `*` segment iterates an array. Appends the
 * values found to found[] (at most max). */
static size_t pointer_at(const cJSON *o, const char *pointer, bool star, const cJSON **found, size_t max) {
  if (*pointer == 0) {
    if (max > 0) found[0] = o;
    return 1;
  }
  if (*pointer != '/') return 0;
  const char *seg_end = strchr(pointer + 1, '/');
  size_t seglen = seg_end ? (size_t)(seg_end - pointer - 1) : strlen(pointer + 1);
  char *seg = malloc(seglen + 1);
  size_t k = 0;
  for (size_t i = 0; i < seglen; i++) {
    char c = pointer[1 + i];
    if (c == '~' && i + 1 < seglen && (pointer[2 + i] == '0' || pointer[2 + i] == '1')) {
      seg[k++] = pointer[2 + i] == '0' ? '~' : '/';
      i++;
    } else {
      seg[k++] = c;
    }
  }
  seg[k] = 0;
  const char *rest = seg_end ? seg_end : "";
  size_t n = 0;
  if (cJSON_IsObject(o)) {
    cJSON *c = cJSON_GetObjectItemCaseSensitive(o, seg);
    if (c) n = pointer_at(c, rest, star, found, max);
  } else if (cJSON_IsArray(o)) {
    if (star && strcmp(seg, "*") == 0) {
      const cJSON *e;
      cJSON_ArrayForEach(e, o) n += pointer_at(e, rest, star, found + (n < max ? n : max), n < max ? max - n : 0);
    } else {
      bool digits = k > 0 && (seg[0] != '0' || k == 1);
      for (size_t i = 0; i < k; i++) digits = digits && seg[i] >= '0' && seg[i] <= '9';
      if (digits) {
        long idx = strtol(seg, NULL, 10);
        cJSON *c = cJSON_GetArrayItem(o, (int)idx);
        if (c && idx < cJSON_GetArraySize(o)) n = pointer_at(c, rest, star, found, max);
      }
    }
  }
  free(seg);
  return n;
}

static void out_field(kw_field_value *ret, const cJSON *v) {
  memset(ret, 0, sizeof *ret);
  if (cJSON_IsNull(v)) {
    ret->tag = KUBEWASM_PLUGIN_TYPES_FIELD_VALUE_NULL;
  } else if (cJSON_IsBool(v)) {
    ret->tag = KUBEWASM_PLUGIN_TYPES_FIELD_VALUE_BOOLEAN;
    ret->val.boolean = cJSON_IsTrue(v);
  } else if (cJSON_IsNumber(v)) {
    double d = v->valuedouble;
    if (d >= -9223372036854775808.0 && d < 9223372036854775808.0 && d == (double)(int64_t)d) {
      ret->tag = KUBEWASM_PLUGIN_TYPES_FIELD_VALUE_INTEGER;
      ret->val.integer = (int64_t)d;
    } else {
      ret->tag = KUBEWASM_PLUGIN_TYPES_FIELD_VALUE_FLOAT;
      ret->val.float_ = d;
    }
  } else if (cJSON_IsString(v)) {
    ret->tag = KUBEWASM_PLUGIN_TYPES_FIELD_VALUE_TEXT;
    out_str(&ret->val.text, v->valuestring);
  } else {
    ret->tag = KUBEWASM_PLUGIN_TYPES_FIELD_VALUE_JSON;
    char *text = cJSON_PrintUnformatted(v);
    out_str(&ret->val.json, text);
    cJSON_free(text);
  }
}

static cJSON *parse_or_die(const char *json) {
  cJSON *o = cJSON_Parse(json);
  if (!cJSON_IsObject(o)) die("not a JSON object: %s", json);
  char *g, *v;
  const char *k;
  gvk_of(o, &g, &v, &k);
  bool ok = *v && *k && meta_str(o, "name") && *meta_str(o, "name");
  free(g);
  free(v);
  if (!ok) die("objects need apiVersion, kind and metadata.name: %s", json);
  return o;
}

/* ==== handles ============================================================ */

static int32_t hand(const cJSON *o) {
  fk.handles = grow(fk.handles, &fk.caphandles, fk.nhandles + 1, sizeof *fk.handles);
  fk.handles[fk.nhandles++] = cJSON_Duplicate(o, true);
  return (int32_t)fk.nhandles;
}

static cJSON *obj(int32_t h) {
  if (h >= 1 && (size_t)h <= fk.handle_base) die("object handle %d is from before kwf_reset", h);
  if (h < 1 || (size_t)h > fk.nhandles || !fk.handles[h - 1]) die("object handle %d is not live", h);
  return fk.handles[h - 1];
}

void kubewasm_plugin_types_object_drop_own(kubewasm_plugin_types_own_object_t handle) {
  if (handle.__handle >= 1 && (size_t)handle.__handle <= fk.handle_base) return;
  cJSON *o = obj(handle.__handle);
  cJSON_Delete(o);
  fk.handles[handle.__handle - 1] = NULL;
}

void kubewasm_plugin_types_object_drop_borrow(kubewasm_plugin_types_borrow_object_t handle) { (void)handle; }

kubewasm_plugin_types_borrow_object_t kubewasm_plugin_types_borrow_object(kubewasm_plugin_types_own_object_t h) {
  return (kubewasm_plugin_types_borrow_object_t){h.__handle};
}

size_t kwf_live_handles(void) {
  size_t n = 0;
  for (size_t i = 0; i < fk.nhandles; i++) n += fk.handles[i] != NULL;
  for (size_t i = 0; i < fk.nsels; i++) n += fk.sels[i] != NULL;
  return n;
}

/* ==== the object resource ================================================ */

void kubewasm_plugin_types_method_object_kind(kw_object self, kw_gvk_t *ret) { out_gvk(ret, obj(self.__handle)); }

bool kubewasm_plugin_types_method_object_namespace(kw_object self, plugin_string_t *ret) {
  const char *ns = namespace_of(obj(self.__handle));
  if (ns) out_str(ret, ns);
  return ns != NULL;
}

void kubewasm_plugin_types_method_object_name(kw_object self, plugin_string_t *ret) {
  out_str(ret, meta_str(obj(self.__handle), "name"));
}

void kubewasm_plugin_types_method_object_uid(kw_object self, plugin_string_t *ret) {
  out_str(ret, meta_str(obj(self.__handle), "uid"));
}

void kubewasm_plugin_types_method_object_resource_version(kw_object self, plugin_string_t *ret) {
  out_str(ret, meta_str(obj(self.__handle), "resourceVersion"));
}

bool kubewasm_plugin_types_method_object_generation(kw_object self, int64_t *ret) {
  return generation_of(obj(self.__handle), ret);
}

static bool map_method(kw_object self, const char *which, plugin_string_t *key, plugin_string_t *ret) {
  char *k = cstr_of(key);
  const char *v = map_get(obj(self.__handle), which, k);
  free(k);
  if (v) out_str(ret, v);
  return v != NULL;
}

bool kubewasm_plugin_types_method_object_label(kw_object self, plugin_string_t *key, plugin_string_t *ret) {
  return map_method(self, "labels", key, ret);
}

void kubewasm_plugin_types_method_object_labels(kw_object self, plugin_list_tuple2_string_string_t *ret) {
  out_pairs(ret, obj(self.__handle), "labels");
}

bool kubewasm_plugin_types_method_object_annotation(kw_object self, plugin_string_t *key, plugin_string_t *ret) {
  return map_method(self, "annotations", key, ret);
}

void kubewasm_plugin_types_method_object_annotations(kw_object self, plugin_list_tuple2_string_string_t *ret) {
  out_pairs(ret, obj(self.__handle), "annotations");
}

void kubewasm_plugin_types_method_object_owner_references(kw_object self, kw_owner_refs *ret) {
  out_owners(ret, obj(self.__handle));
}

bool kubewasm_plugin_types_method_object_controller(kw_object self, kw_owner_ref *ret) {
  const cJSON *e;
  cJSON_ArrayForEach(e, owners_of(obj(self.__handle))) {
    if (cJSON_IsObject(e) && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "controller"))) {
      out_owner(ret, e);
      return true;
    }
  }
  return false;
}

void kubewasm_plugin_types_method_object_finalizers(kw_object self, plugin_list_string_t *ret) {
  out_finalizers(ret, obj(self.__handle));
}

bool kubewasm_plugin_types_method_object_deletion_timestamp(kw_object self, plugin_string_t *ret) {
  const char *t = meta_str(obj(self.__handle), "deletionTimestamp");
  if (t) out_str(ret, t);
  return t != NULL;
}

void kubewasm_plugin_types_method_object_meta(kw_object self, kw_meta *ret) {
  const cJSON *o = obj(self.__handle);
  memset(ret, 0, sizeof *ret);
  out_str(&ret->api_version, str_at(o, "apiVersion"));
  out_str(&ret->kind, str_at(o, "kind"));
  out_opt(&ret->namespace_, namespace_of(o));
  out_str(&ret->name, meta_str(o, "name"));
  out_str(&ret->uid, meta_str(o, "uid"));
  out_str(&ret->resource_version, meta_str(o, "resourceVersion"));
  ret->generation.is_some = generation_of(o, &ret->generation.val);
  out_pairs(&ret->labels, o, "labels");
  out_pairs(&ret->annotations, o, "annotations");
  out_owners(&ret->owner_references, o);
  out_finalizers(&ret->finalizers, o);
  out_opt(&ret->creation_timestamp, meta_str(o, "creationTimestamp"));
  out_opt(&ret->deletion_timestamp, meta_str(o, "deletionTimestamp"));
}

bool kubewasm_plugin_types_method_object_field(kw_object self, plugin_string_t *pointer, kw_field_value *ret) {
  char *p = cstr_of(pointer);
  const cJSON *found[1];
  size_t n = pointer_at(obj(self.__handle), p, false, found, 1);
  free(p);
  if (n > 0) out_field(ret, found[0]);
  return n > 0;
}

void kubewasm_plugin_types_method_object_fields(kw_object self, plugin_list_string_t *pointers, kw_field_values *ret) {
  memset(ret, 0, sizeof *ret);
  if (pointers->len == 0) return;
  ret->ptr = calloc(pointers->len, sizeof *ret->ptr);
  ret->len = pointers->len;
  for (size_t i = 0; i < pointers->len; i++) {
    ret->ptr[i].is_some = kubewasm_plugin_types_method_object_field(self, &pointers->ptr[i], &ret->ptr[i].val);
  }
}

void kubewasm_plugin_types_method_object_to_json(kw_object self, plugin_string_t *ret) {
  cJSON *o = cJSON_Duplicate(obj(self.__handle), true);
  cJSON *m = meta(o);
  if (m) {
    cJSON_DeleteItemFromObjectCaseSensitive(m, "managedFields");
    cJSON *a = cJSON_GetObjectItemCaseSensitive(m, "annotations");
    if (cJSON_IsObject(a) && cJSON_GetObjectItemCaseSensitive(a, LAST_APPLIED)) {
      cJSON_DeleteItemFromObjectCaseSensitive(a, LAST_APPLIED);
      if (a->child == NULL) cJSON_DeleteItemFromObjectCaseSensitive(m, "annotations");
    }
  }
  char *text = cJSON_PrintUnformatted(o);
  out_str(ret, text);
  cJSON_free(text);
  cJSON_Delete(o);
}

/* ==== kinds ============================================================== */

static char *plural(const char *kind) {
  size_t n = strlen(kind);
  char *low = malloc(n + 4);
  for (size_t i = 0; i <= n; i++) low[i] = (char)((kind[i] >= 'A' && kind[i] <= 'Z') ? kind[i] - 'A' + 'a' : kind[i]);
  const char *ends[] = {"s", "x", "ch", "sh"};
  if (n > 1 && low[n - 1] == 'y' && !strchr("aeiou", low[n - 2])) {
    strcpy(low + n - 1, "ies");
    return low;
  }
  for (size_t i = 0; i < 4; i++) {
    size_t e = strlen(ends[i]);
    if (n >= e && strcmp(low + n - e, ends[i]) == 0) {
      strcat(low, "es");
      return low;
    }
  }
  strcat(low, "s");
  return low;
}

/* Whether a kind-ref names objects of group/version/kind (group and kind,
 * any version); resource names resolve without discovery. */
static bool names(const kw_kind *k, const char *group, const char *version, const char *kind) {
  if (k->tag == KUBEWASM_PLUGIN_TYPES_KIND_REF_GVK) return str_is(&k->val.gvk.group, group) && str_is(&k->val.gvk.kind, kind);
  char *name = cstr_of(&k->val.resource_name);
  char *dot = strchr(name, '.');
  const char *g = "";
  if (dot) {
    *dot = 0;
    g = dot + 1;
  }
  char *pl = plural(kind), *singular = dups(pl);
  size_t n = strlen(kind);
  for (size_t i = 0; i < n; i++) singular[i] = (char)((kind[i] >= 'A' && kind[i] <= 'Z') ? kind[i] - 'A' + 'a' : kind[i]);
  singular[n] = 0;
  bool ok = strcmp(name, pl) == 0 || strcmp(name, singular) == 0;
  if (ok && !(*g == 0 || strcmp(g, group) == 0 || (strcmp(g, version) == 0 && *group == 0))) {
    const char *d2 = strchr(g, '.');
    ok = d2 && strlen(version) == (size_t)(d2 - g) && strncmp(g, version, (size_t)(d2 - g)) == 0 && strcmp(d2 + 1, group) == 0;
  }
  free(pl);
  free(singular);
  free(name);
  return ok;
}

static bool names_obj(const kw_kind *k, const cJSON *o) {
  char *g, *v;
  const char *kind;
  gvk_of(o, &g, &v, &kind);
  bool ok = names(k, g, v, kind);
  free(g);
  free(v);
  return ok;
}

static bool same_kind(const kw_kind *a, const kw_kind *b) {
  if (a->tag == KUBEWASM_PLUGIN_TYPES_KIND_REF_GVK || b->tag == KUBEWASM_PLUGIN_TYPES_KIND_REF_GVK) {
    const kw_kind *g = a->tag == KUBEWASM_PLUGIN_TYPES_KIND_REF_GVK ? a : b, *other = g == a ? b : a;
    char *group = cstr_of(&g->val.gvk.group), *version = cstr_of(&g->val.gvk.version), *kind = cstr_of(&g->val.gvk.kind);
    bool ok = names(other, group, version, kind);
    free(group);
    free(version);
    free(kind);
    return ok;
  }
  return a->val.resource_name.len == b->val.resource_name.len &&
         memcmp(a->val.resource_name.ptr, b->val.resource_name.ptr, a->val.resource_name.len) == 0;
}

static void describe(kw_buf *b, const kw_kind *k) {
  if (k->tag != KUBEWASM_PLUGIN_TYPES_KIND_REF_GVK) {
    kw_buf_str(b, &k->val.resource_name);
    return;
  }
  if (k->val.gvk.group.len > 0) {
    kw_buf_str(b, &k->val.gvk.group);
    kw_buf_s(b, "/");
  }
  kw_buf_str(b, &k->val.gvk.version);
  kw_buf_s(b, "/");
  kw_buf_str(b, &k->val.gvk.kind);
}

static const kw_str *kind_name(const kw_kind *k) {
  return k->tag == KUBEWASM_PLUGIN_TYPES_KIND_REF_GVK ? &k->val.gvk.kind : &k->val.resource_name;
}

/* ==== label selectors (a port of the host's parser) ===================== */

enum { T_END, T_CLOSED, T_COMMA, T_NOT, T_DEQ, T_EQ, T_GT, T_ID, T_IN, T_LT, T_NEQ, T_NOTIN, T_OPEN };
enum { O_IN, O_NOTIN, O_EQ, O_DEQ, O_NEQ, O_GT, O_LT, O_EXISTS, O_NOT };

typedef struct {
  int tok;
  const char *lit;
  size_t len;
} sel_item;

struct req {
  char *key;
  int op;
  char **values;
  size_t nvalues;
};

struct sel {
  struct req *reqs;
  size_t n;
};

static int keyword(const char *s, size_t n) {
  static const struct {
    const char *lit;
    int tok;
  } kw[] = {{")", T_CLOSED}, {",", T_COMMA}, {"!", T_NOT}, {"==", T_DEQ}, {"=", T_EQ}, {">", T_GT},
            {"in", T_IN},    {"<", T_LT},    {"!=", T_NEQ}, {"notin", T_NOTIN}, {"(", T_OPEN}};
  for (size_t i = 0; i < sizeof kw / sizeof kw[0]; i++) {
    if (strlen(kw[i].lit) == n && memcmp(kw[i].lit, s, n) == 0) return kw[i].tok;
  }
  return -1;
}

static bool special(char c) { return c && strchr("=!(),><", c); }
static bool white(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

static size_t sel_lex(const char *s, size_t n, sel_item **out) {
  size_t cap = 0, count = 0, pos = 0;
  sel_item *items = NULL;
  for (;;) {
    items = grow(items, &cap, count + 1, sizeof *items);
    while (pos < n && white(s[pos])) pos++;
    if (pos >= n || s[pos] == 0) {
      items[count++] = (sel_item){T_END, "", 0};
      *out = items;
      return count;
    }
    size_t start = pos;
    if (special(s[pos])) {
      int best = T_END;
      size_t end = start;
      while (pos < n && special(s[pos]) && keyword(s + start, pos + 1 - start) >= 0) {
        pos++;
        best = keyword(s + start, pos - start);
        end = pos;
      }
      if (pos < n && s[pos] == 0) pos++;
      items[count++] = (sel_item){best, s + start, end - start};
      continue;
    }
    while (pos < n && s[pos] != 0 && !special(s[pos]) && !white(s[pos])) pos++;
    int tok = keyword(s + start, pos - start);
    items[count++] = (sel_item){tok >= 0 ? tok : T_ID, s + start, pos - start};
    if (pos < n && s[pos] == 0) pos++;
  }
}

typedef struct {
  sel_item *items;
  size_t n, pos;
  char err[256];
} sel_parser;

static sel_item sp_look(sel_parser *p, bool values) {
  sel_item it = p->pos < p->n ? p->items[p->pos] : (sel_item){T_END, "", 0};
  if (values && (it.tok == T_IN || it.tok == T_NOTIN)) it.tok = T_ID;
  return it;
}

static sel_item sp_take(sel_parser *p, bool values) {
  sel_item it = sp_look(p, values);
  p->pos++;
  return it;
}

static bool sp_fail(sel_parser *p, const char *what, sel_item it) {
  if (it.tok == T_END) snprintf(p->err, sizeof p->err, "found end of string, expected: %s", what);
  else snprintf(p->err, sizeof p->err, "found '%.*s', expected: %s", (int)it.len, it.lit, what);
  return false;
}

static bool alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }

static bool label_name(const char *s, size_t n) {
  if (n == 0 || !alnum(s[0]) || !alnum(s[n - 1])) return false;
  for (size_t i = 0; i < n; i++) {
    if (!alnum(s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.') return false;
  }
  return true;
}

static bool dns_subdomain(const char *s, size_t n) {
  size_t start = 0;
  for (size_t i = 0; i <= n; i++) {
    if (i < n && s[i] != '.') continue;
    size_t len = i - start;
    if (len == 0) return false;
    for (size_t j = start; j < i; j++) {
      char c = s[j];
      bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (c == '-' && j != start && j != i - 1);
      if (!ok) return false;
    }
    start = i + 1;
  }
  return true;
}

static bool valid_key(const char *s, size_t n) {
  const char *slash = memchr(s, '/', n);
  if (!slash) return n <= 63 && label_name(s, n);
  size_t plen = (size_t)(slash - s);
  const char *name = slash + 1;
  size_t nlen = n - plen - 1;
  if (memchr(name, '/', nlen)) return false;
  return plen > 0 && plen <= 253 && dns_subdomain(s, plen) && nlen <= 63 && label_name(name, nlen);
}

/* strconv.ParseInt(s, 10, 64). */
static bool int64_of(const char *s, int64_t *out) {
  const char *p = s;
  bool neg = false;
  if (*p == '+' || *p == '-') neg = *p++ == '-';
  if (*p == 0) return false;
  uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
  for (; *p; p++) {
    if (*p < '0' || *p > '9') return false;
    uint64_t d = (uint64_t)(*p - '0');
    if (v > (limit - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = neg ? (int64_t)(0 - v) : (int64_t)v;
  return true;
}

static void req_free(struct req *r) {
  free(r->key);
  for (size_t i = 0; i < r->nvalues; i++) free(r->values[i]);
  free(r->values);
}

static bool req_new(sel_parser *p, struct req *r, const sel_item *key, int op, char **values, size_t nvalues) {
  r->key = dupn(key->lit, key->len);
  r->op = op;
  r->values = values;
  r->nvalues = nvalues;
  if ((op == O_EQ || op == O_DEQ || op == O_NEQ || op == O_GT || op == O_LT) && nvalues != 1) {
    snprintf(p->err, sizeof p->err, "exactly one value is required");
    return false;
  }
  int64_t ignored;
  if ((op == O_GT || op == O_LT) && !int64_of(values[0], &ignored)) {
    snprintf(p->err, sizeof p->err, "for 'Gt', 'Lt' operators, the value must be an integer");
    return false;
  }
  for (size_t i = 0; i < nvalues; i++) {
    size_t n = strlen(values[i]);
    if (n > 63 || (n > 0 && !label_name(values[i], n))) {
      snprintf(p->err, sizeof p->err, "invalid label value \"%s\"", values[i]);
      return false;
    }
  }
  return true;
}

static void push_value(char ***values, size_t *n, size_t *cap, const char *s, size_t len) {
  *values = grow(*values, cap, *n + 1, sizeof **values);
  (*values)[(*n)++] = dupn(s, len);
}

static bool sp_values(sel_parser *p, char ***out, size_t *nout) {
  char **values = NULL;
  size_t n = 0, cap = 0;
  sel_item it = sp_take(p, true);
  if (it.tok != T_OPEN) return sp_fail(p, "'('", it);
  sel_item next = sp_look(p, true);
  if (next.tok == T_CLOSED) {
    sp_take(p, true);
    push_value(&values, &n, &cap, "", 0);
  } else if (next.tok == T_ID || next.tok == T_COMMA) {
    for (;;) {
      it = sp_take(p, true);
      if (it.tok == T_ID) {
        push_value(&values, &n, &cap, it.lit, it.len);
        next = sp_look(p, true);
        if (next.tok == T_CLOSED) break;
        if (next.tok != T_COMMA) {
          *out = values;
          *nout = n;
          return sp_fail(p, "',' or ')'", next);
        }
      } else if (it.tok == T_COMMA) {
        next = sp_look(p, true);
        if (n == 0 || next.tok == T_COMMA || next.tok == T_CLOSED) push_value(&values, &n, &cap, "", 0);
        if (next.tok == T_CLOSED) break;
      } else {
        *out = values;
        *nout = n;
        return sp_fail(p, "',', or identifier", it);
      }
    }
    sp_take(p, true);
  } else {
    return sp_fail(p, "',', ')' or identifier", next);
  }
  qsort(values, n, sizeof *values, cmp_str);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (k > 0 && strcmp(values[k - 1], values[i]) == 0) free(values[i]);
    else values[k++] = values[i];
  }
  *out = values;
  *nout = k;
  return true;
}

static bool sp_requirement(sel_parser *p, struct req *r) {
  memset(r, 0, sizeof *r);
  sel_item it = sp_take(p, true);
  bool negated = it.tok == T_NOT;
  if (negated) it = sp_take(p, true);
  if (it.tok != T_ID) return sp_fail(p, "identifier", it);
  sel_item key = it;
  if (!valid_key(key.lit, key.len)) {
    snprintf(p->err, sizeof p->err, "invalid label key \"%.*s\"", (int)key.len, key.lit);
    return false;
  }
  if (negated) return req_new(p, r, &key, O_NOT, NULL, 0);
  sel_item next = sp_look(p, true);
  if (next.tok == T_END || next.tok == T_COMMA) return req_new(p, r, &key, O_EXISTS, NULL, 0);
  sel_item op = sp_take(p, false);
  int o;
  switch (op.tok) {
    case T_IN: o = O_IN; break;
    case T_NOTIN: o = O_NOTIN; break;
    case T_EQ: o = O_EQ; break;
    case T_DEQ: o = O_DEQ; break;
    case T_NEQ: o = O_NEQ; break;
    case T_GT: o = O_GT; break;
    case T_LT: o = O_LT; break;
    default: return sp_fail(p, "in, notin, =, ==, !=, >, <", op);
  }
  char **values = NULL;
  size_t nvalues = 0;
  if (o == O_IN || o == O_NOTIN) {
    if (!sp_values(p, &values, &nvalues)) {
      r->key = dupn(key.lit, key.len);
      r->values = values;
      r->nvalues = nvalues;
      return false;
    }
  } else {
    next = sp_look(p, true);
    size_t cap = 0;
    if (next.tok == T_END || next.tok == T_COMMA) {
      push_value(&values, &nvalues, &cap, "", 0);
    } else {
      it = sp_take(p, true);
      if (it.tok != T_ID) return sp_fail(p, "identifier", it);
      push_value(&values, &nvalues, &cap, it.lit, it.len);
    }
  }
  return req_new(p, r, &key, o, values, nvalues);
}

static int cmp_req(const void *a, const void *b) {
  return strcmp(((const struct req *)a)->key, ((const struct req *)b)->key);
}

/* Parses a selector; NULL with *error (malloc'd) when it does not parse. */
static struct sel *sel_parse(const char *text, size_t len, char **error) {
  sel_parser p = {0};
  p.n = sel_lex(text, len, &p.items);
  struct sel *s = calloc(1, sizeof *s);
  size_t cap = 0;
  bool ok = true;
  for (;;) {
    sel_item it = sp_look(&p, true);
    if (it.tok == T_END) break;
    if (it.tok != T_ID && it.tok != T_NOT) {
      ok = sp_fail(&p, "!, identifier, or 'end of string'", it);
      break;
    }
    s->reqs = grow(s->reqs, &cap, s->n + 1, sizeof *s->reqs);
    bool req_ok = sp_requirement(&p, &s->reqs[s->n]);
    s->n++;
    if (!req_ok) {
      ok = false;
      break;
    }
    sel_item next = sp_take(&p, true);
    if (next.tok == T_END) break;
    if (next.tok != T_COMMA) {
      ok = sp_fail(&p, "',' or 'end of string'", next);
      break;
    }
    sel_item after = sp_look(&p, true);
    if (after.tok != T_ID && after.tok != T_NOT) {
      ok = sp_fail(&p, "identifier after ','", after);
      break;
    }
  }
  free(p.items);
  if (!ok) {
    *error = kw_format("invalid selector \"%.*s\": %s", (int)len, text, p.err);
    sel_free(s);
    return NULL;
  }
  /* A stable sort by key: insertion sort keeps equal keys in order. */
  for (size_t i = 1; i < s->n; i++) {
    struct req r = s->reqs[i];
    size_t j = i;
    while (j > 0 && cmp_req(&s->reqs[j - 1], &r) > 0) {
      s->reqs[j] = s->reqs[j - 1];
      j--;
    }
    s->reqs[j] = r;
  }
  return s;
}

static void sel_free(struct sel *s) {
  if (!s) return;
  for (size_t i = 0; i < s->n; i++) req_free(&s->reqs[i]);
  free(s->reqs);
  free(s);
}

typedef const char *(*label_fn)(const void *ctx, const char *key);

static bool req_matches(const struct req *r, label_fn label, const void *ctx) {
  const char *v = label(ctx, r->key);
  bool has = false;
  for (size_t i = 0; v && i < r->nvalues; i++) has = has || strcmp(r->values[i], v) == 0;
  int64_t actual, bound;
  switch (r->op) {
    case O_IN: case O_EQ: case O_DEQ: return v && has;
    case O_NOTIN: case O_NEQ: return !v || !has;
    case O_EXISTS: return v != NULL;
    case O_NOT: return v == NULL;
    default:
      if (!v || !int64_of(v, &actual) || !int64_of(r->values[0], &bound)) return false;
      return r->op == O_GT ? actual > bound : actual < bound;
  }
}

static bool sel_matches(const struct sel *s, label_fn label, const void *ctx) {
  for (size_t i = 0; i < s->n; i++) {
    if (!req_matches(&s->reqs[i], label, ctx)) return false;
  }
  return true;
}

static char *sel_string(const struct sel *s) {
  kw_buf b = {0};
  kw_buf_s(&b, "");
  for (size_t i = 0; i < s->n; i++) {
    const struct req *r = &s->reqs[i];
    if (i > 0) kw_buf_s(&b, ",");
    if (r->op == O_NOT) kw_buf_s(&b, "!");
    kw_buf_s(&b, r->key);
    static const char *ops[] = {" in (", " notin (", "=", "==", "!=", ">", "<"};
    if (r->op == O_EXISTS || r->op == O_NOT) continue;
    kw_buf_s(&b, ops[r->op]);
    char **sorted = malloc(r->nvalues * sizeof *sorted);
    memcpy(sorted, r->values, r->nvalues * sizeof *sorted);
    qsort(sorted, r->nvalues, sizeof *sorted, cmp_str);
    for (size_t j = 0; j < r->nvalues; j++) {
      if (j > 0) kw_buf_s(&b, ",");
      kw_buf_s(&b, sorted[j]);
    }
    free(sorted);
    if (r->op == O_IN || r->op == O_NOTIN) kw_buf_s(&b, ")");
  }
  return kw_buf_take(&b);
}

static const char *label_of_pairs(const void *ctx, const char *key) {
  const kw_pairs *l = ctx;
  static char *last;
  for (size_t i = 0; i < l->len; i++) {
    if (str_is(&l->ptr[i].f0, key)) {
      free(last);
      last = cstr_of(&l->ptr[i].f1);
      return last;
    }
  }
  return NULL;
}

static const char *label_of_object(const void *ctx, const char *key) { return map_get(ctx, "labels", key); }

static struct sel *selector(int32_t h) {
  if (h >= 1 && (size_t)h <= fk.sel_base) die("selector handle %d is from before kwf_reset", h);
  if (h < 1 || (size_t)h > fk.nsels || !fk.sels[h - 1]) die("selector handle %d is not live", h);
  return fk.sels[h - 1];
}

bool kubewasm_plugin_selectors_static_label_selector_parse(plugin_string_t *text,
                                                            kubewasm_plugin_selectors_own_label_selector_t *ret,
                                                            plugin_string_t *err) {
  char *error = NULL;
  struct sel *s = sel_parse((const char *)text->ptr, text->len, &error);
  if (!s) {
    out_str(err, error);
    free(error);
    return false;
  }
  fk.sels = grow(fk.sels, &fk.capsels, fk.nsels + 1, sizeof *fk.sels);
  fk.sels[fk.nsels++] = s;
  ret->__handle = (int32_t)fk.nsels;
  return true;
}

bool kubewasm_plugin_selectors_method_label_selector_matches(kubewasm_plugin_selectors_borrow_label_selector_t self,
                                                             plugin_list_tuple2_string_string_t *labels) {
  return sel_matches(selector(self.__handle), label_of_pairs, labels);
}

bool kubewasm_plugin_selectors_method_label_selector_matches_object(
    kubewasm_plugin_selectors_borrow_label_selector_t self, kubewasm_plugin_selectors_borrow_object_t o) {
  return sel_matches(selector(self.__handle), label_of_object, obj(o.__handle));
}

void kubewasm_plugin_selectors_method_label_selector_to_string(kubewasm_plugin_selectors_borrow_label_selector_t self,
                                                               plugin_string_t *ret) {
  char *s = sel_string(selector(self.__handle));
  out_str(ret, s);
  free(s);
}

void kubewasm_plugin_selectors_label_selector_drop_own(kubewasm_plugin_selectors_own_label_selector_t handle) {
  if (handle.__handle >= 1 && (size_t)handle.__handle <= fk.sel_base) return;
  sel_free(selector(handle.__handle));
  fk.sels[handle.__handle - 1] = NULL;
}

void kubewasm_plugin_selectors_label_selector_drop_borrow(kubewasm_plugin_selectors_borrow_label_selector_t handle) {
  (void)handle;
}

kubewasm_plugin_selectors_borrow_label_selector_t kubewasm_plugin_selectors_borrow_label_selector(
    kubewasm_plugin_selectors_own_label_selector_t h) {
  return (kubewasm_plugin_selectors_borrow_label_selector_t){h.__handle};
}

/* ==== the cache ========================================================== */

static int cmp_objs(const void *a, const void *b) {
  const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
  int c = strcmp(or_empty(namespace_of(x)), or_empty(namespace_of(y)));
  if (c == 0) c = strcmp(or_empty(meta_str(x, "name")), or_empty(meta_str(y, "name")));
  if (c == 0) c = strcmp(or_empty(str_at(x, "apiVersion")), or_empty(str_at(y, "apiVersion")));
  if (c == 0) c = strcmp(or_empty(str_at(x, "kind")), or_empty(str_at(y, "kind")));
  return c;
}

static void sort_cache(void) { qsort(fk.objs, fk.nobjs, sizeof *fk.objs, cmp_objs); }

static void set_error(kw_buf *b, plugin_string_t *out) {
  out_str(out, kw_buf_cstr(b));
  kw_buf_free(b);
}

static bool check_read(const kw_kind *kind, kubewasm_plugin_cache_cache_error_t *err) {
  if (!fk.registered) return true;
  for (size_t i = 0; i < fk.reg.subscriptions.len; i++) {
    if (same_kind(&fk.reg.subscriptions.ptr[i].kind, kind)) return true;
  }
  kw_buf b = {0};
  describe(&b, kind);
  kw_buf_s(&b, " is not among the plugin's subscriptions (subscribe to it, with no delta types to only read it)");
  err->tag = KUBEWASM_PLUGIN_CACHE_CACHE_ERROR_NOT_SUBSCRIBED;
  set_error(&b, &err->val.not_subscribed);
  return false;
}

static bool same_group_kind(const cJSON *a, const cJSON *b) {
  char *ga, *va, *gb, *vb;
  const char *ka, *kb;
  gvk_of(a, &ga, &va, &ka);
  gvk_of(b, &gb, &vb, &kb);
  bool same = strcmp(ga, gb) == 0 && strcmp(ka, kb) == 0;
  free(ga);
  free(va);
  free(gb);
  free(vb);
  return same;
}

/* The cached object with o's group, kind, namespace and name, or -1. */
static long find(const cJSON *o) {
  for (size_t i = 0; i < fk.nobjs; i++) {
    const cJSON *c = fk.objs[i];
    if (same_group_kind(c, o) && strcmp(or_empty(namespace_of(c)), or_empty(namespace_of(o))) == 0 &&
        strcmp(meta_str(c, "name"), meta_str(o, "name")) == 0) {
      return (long)i;
    }
  }
  return -1;
}

bool kubewasm_plugin_cache_get(kubewasm_plugin_cache_kind_ref_t *kind, plugin_string_t *maybe_namespace,
                               plugin_string_t *name, kubewasm_plugin_cache_option_own_object_t *ret,
                               kubewasm_plugin_cache_cache_error_t *err) {
  if (!check_read(kind, err)) return false;
  sort_cache();
  ret->is_some = false;
  for (size_t i = 0; i < fk.nobjs; i++) {
    const cJSON *o = fk.objs[i];
    const char *ns = or_empty(namespace_of(o));
    bool ns_ok = maybe_namespace ? str_is(maybe_namespace, ns) : *ns == 0;
    if (ns_ok && str_is(name, meta_str(o, "name")) && names_obj(kind, o)) {
      ret->is_some = true;
      ret->val.__handle = hand(o);
      break;
    }
  }
  return true;
}

static void out_handles(kubewasm_plugin_cache_list_own_object_t *ret, const cJSON **found, size_t n) {
  memset(ret, 0, sizeof *ret);
  if (n == 0) return;
  ret->ptr = malloc(n * sizeof *ret->ptr);
  ret->len = n;
  for (size_t i = 0; i < n; i++) ret->ptr[i].__handle = hand(found[i]);
}

bool kubewasm_plugin_cache_list(kubewasm_plugin_cache_kind_ref_t *kind, plugin_string_t *maybe_namespace,
                                plugin_string_t *maybe_label_selector, kubewasm_plugin_cache_list_own_object_t *ret,
                                kubewasm_plugin_cache_cache_error_t *err) {
  if (!check_read(kind, err)) return false;
  char *error = NULL;
  struct sel *s = maybe_label_selector
                      ? sel_parse((const char *)maybe_label_selector->ptr, maybe_label_selector->len, &error)
                      : sel_parse("", 0, &error);
  if (!s) {
    err->tag = KUBEWASM_PLUGIN_CACHE_CACHE_ERROR_INVALID_SELECTOR;
    out_str(&err->val.invalid_selector, error);
    free(error);
    return false;
  }
  sort_cache();
  const cJSON **found = malloc((fk.nobjs + 1) * sizeof *found);
  size_t n = 0;
  for (size_t i = 0; i < fk.nobjs; i++) {
    const cJSON *o = fk.objs[i];
    if (maybe_namespace && !str_is(maybe_namespace, or_empty(namespace_of(o)))) continue;
    if (names_obj(kind, o) && sel_matches(s, label_of_object, o)) found[n++] = o;
  }
  out_handles(ret, found, n);
  free(found);
  sel_free(s);
  return true;
}

static char *index_key(const cJSON *v) {
  if (cJSON_IsString(v)) return dups(v->valuestring);
  if (cJSON_IsBool(v)) return dups(cJSON_IsTrue(v) ? "true" : "false");
  if (cJSON_IsNumber(v)) {
    if (v->valuedouble == (double)(int64_t)v->valuedouble) return kw_format("%lld", (long long)v->valuedouble);
    return kw_format("%.17g", v->valuedouble);
  }
  return NULL;
}

bool kubewasm_plugin_cache_by_index(plugin_string_t *index, plugin_string_t *value,
                                    kubewasm_plugin_cache_list_own_object_t *ret,
                                    kubewasm_plugin_cache_cache_error_t *err) {
  const exports_kubewasm_plugin_handler_index_t *idx = NULL;
  for (size_t i = 0; fk.registered && i < fk.reg.indexes.len; i++) {
    if (fk.reg.indexes.ptr[i].name.len == index->len &&
        memcmp(fk.reg.indexes.ptr[i].name.ptr, index->ptr, index->len) == 0) {
      idx = &fk.reg.indexes.ptr[i];
    }
  }
  if (!idx) {
    kw_buf b = {0};
    kw_buf_s(&b, "no index \"");
    kw_buf_str(&b, index);
    kw_buf_s(&b, "\" was declared at registration (kwf_load registers the plugin)");
    err->tag = KUBEWASM_PLUGIN_CACHE_CACHE_ERROR_UNKNOWN_INDEX;
    set_error(&b, &err->val.unknown_index);
    return false;
  }
  sort_cache();
  char *pointer = cstr_of(&idx->pointer), *want = cstr_of(value);
  const cJSON **found = malloc((fk.nobjs + 1) * sizeof *found);
  size_t n = 0;
  for (size_t i = 0; i < fk.nobjs; i++) {
    const cJSON *o = fk.objs[i];
    if (!names_obj(&idx->kind, o)) continue;
    const cJSON *vals[256];
    size_t nv = pointer_at(o, pointer, true, vals, 256);
    for (size_t j = 0; j < nv && j < 256; j++) {
      char *k = index_key(vals[j]);
      bool hit = k && strcmp(k, want) == 0;
      free(k);
      if (hit) {
        found[n++] = o;
        break;
      }
    }
  }
  out_handles(ret, found, n);
  free(found);
  free(pointer);
  free(want);
  return true;
}

/* ==== actions ============================================================ */

static bool check_write(const kw_kind *kind, kubewasm_plugin_actions_action_error_t *err) {
  if (!fk.registered) return true;
  for (size_t i = 0; i < fk.reg.writes.len; i++) {
    if (same_kind(&fk.reg.writes.ptr[i], kind)) return true;
  }
  kw_buf b = {0};
  describe(&b, kind);
  kw_buf_s(&b, " is not among the registration's writes");
  err->tag = KUBEWASM_PLUGIN_ACTIONS_ACTION_ERROR_NOT_DECLARED;
  set_error(&b, &err->val.not_declared);
  return false;
}

static bool invalid(kubewasm_plugin_actions_action_error_t *err, const char *why) {
  err->tag = KUBEWASM_PLUGIN_ACTIONS_ACTION_ERROR_INVALID;
  out_str(&err->val.invalid, why);
  return false;
}

static void record(kw_buf *line, char *json) {
  fk.actions = grow(fk.actions, &fk.capactions, fk.nactions + 1, sizeof *fk.actions);
  fk.actions[fk.nactions++] = (fake_action){kw_buf_take(line), json ? json : dups("")};
}

static void line_pre(kw_buf *b, const kw_preconditions *p) {
  if (p->uid.is_some && p->uid.val.len > 0) {
    kw_buf_s(b, " uid=");
    kw_buf_str(b, &p->uid.val);
  }
  if (p->resource_version.is_some && p->resource_version.val.len > 0) {
    kw_buf_s(b, " rv=");
    kw_buf_str(b, &p->resource_version.val);
  }
}

static void line_target(kw_buf *b, const kw_ref *t) {
  kw_buf_str(b, kind_name(&t->kind));
  kw_buf_s(b, " ");
  if (t->namespace_.is_some && t->namespace_.val.len > 0) {
    kw_buf_str(b, &t->namespace_.val);
    kw_buf_s(b, "/");
  }
  kw_buf_str(b, &t->name);
}

static bool applied(const char *verb, plugin_string_t *object_json, bool force, kw_preconditions *pre,
                    kubewasm_plugin_actions_action_error_t *err) {
  char *text = cstr_of(object_json);
  cJSON *o = cJSON_Parse(text);
  free(text);
  if (!cJSON_IsObject(o)) {
    cJSON_Delete(o);
    return invalid(err, "the object is not a JSON object");
  }
  char *g, *v;
  const char *k;
  gvk_of(o, &g, &v, &k);
  const char *name = meta_str(o, "name");
  if (!*v || !*k || !name || !*name) {
    free(g);
    free(v);
    cJSON_Delete(o);
    return invalid(err, "an applied object needs apiVersion, kind and metadata.name");
  }
  kw_kind kind = kw_gvk(g, v, k);
  bool ok = check_write(&kind, err);
  if (ok) {
    kw_buf b = {0};
    kw_buf_printf(&b, "%s %s ", verb, k);
    if (namespace_of(o)) kw_buf_printf(&b, "%s/", namespace_of(o));
    kw_buf_s(&b, name);
    if (force) kw_buf_s(&b, " force");
    line_pre(&b, pre);
    record(&b, cJSON_PrintUnformatted(o));
  }
  free(g);
  free(v);
  cJSON_Delete(o);
  return ok;
}

bool kubewasm_plugin_actions_apply(plugin_string_t *object_json, bool force, kw_preconditions *preconditions,
                                   kubewasm_plugin_actions_action_error_t *err) {
  return applied("apply", object_json, force, preconditions, err);
}

bool kubewasm_plugin_actions_apply_status(plugin_string_t *object_json, kw_preconditions *preconditions,
                                          kubewasm_plugin_actions_action_error_t *err) {
  return applied("apply-status", object_json, false, preconditions, err);
}

bool kubewasm_plugin_actions_patch(kw_ref *target, kubewasm_plugin_actions_patch_type_t patch_type,
                                   plugin_string_t *patch, kw_preconditions *preconditions,
                                   kubewasm_plugin_actions_action_error_t *err) {
  char *text = cstr_of(patch);
  cJSON *p = cJSON_Parse(text);
  free(text);
  bool merge = patch_type == KUBEWASM_PLUGIN_ACTIONS_PATCH_TYPE_MERGE;
  if (!p || (merge && !cJSON_IsObject(p)) || (!merge && !cJSON_IsArray(p))) {
    cJSON_Delete(p);
    return invalid(err, merge ? "a merge patch must be a JSON object" : "a JSON patch must be an array of operations");
  }
  if (!check_write(&target->kind, err)) {
    cJSON_Delete(p);
    return false;
  }
  char *compact = cJSON_PrintUnformatted(p);
  kw_buf b = {0};
  kw_buf_s(&b, "patch ");
  line_target(&b, target);
  kw_buf_printf(&b, " %s %s", merge ? "merge" : "json", compact);
  line_pre(&b, preconditions);
  record(&b, compact);
  cJSON_Delete(p);
  return true;
}

bool kubewasm_plugin_actions_delete(kw_ref *target, kubewasm_plugin_actions_propagation_t propagation,
                                    kw_preconditions *preconditions, kubewasm_plugin_actions_action_error_t *err) {
  if (!check_write(&target->kind, err)) return false;
  static const char *names_[] = {"background", "foreground", "orphan"};
  kw_buf b = {0};
  kw_buf_s(&b, "delete ");
  line_target(&b, target);
  kw_buf_printf(&b, " %s", names_[propagation % 3]);
  line_pre(&b, preconditions);
  record(&b, NULL);
  return true;
}

bool kubewasm_plugin_actions_record_event(kubewasm_plugin_actions_event_t *event,
                                          kubewasm_plugin_actions_action_error_t *err) {
  if (event->reason.len == 0) return invalid(err, "an Event needs a reason");
  kw_buf b = {0};
  kw_buf_s(&b, "event ");
  line_target(&b, &event->regarding);
  kw_buf_s(&b, event->event_type == KUBEWASM_PLUGIN_ACTIONS_EVENT_TYPE_WARNING ? " Warning " : " Normal ");
  kw_buf_str(&b, &event->reason);
  kw_buf_s(&b, ": ");
  kw_buf_str(&b, &event->note);
  if (event->regarding_uid.is_some && event->regarding_uid.val.len > 0) {
    kw_buf_s(&b, " uid=");
    kw_buf_str(&b, &event->regarding_uid.val);
  }
  record(&b, NULL);
  return true;
}

/* ==== log and clock ====================================================== */

bool kubewasm_plugin_log_enabled(kubewasm_plugin_log_level_t level) { return level >= fk.log_level; }

void kubewasm_plugin_log_write(kubewasm_plugin_log_level_t level, plugin_string_t *message,
                               plugin_list_tuple2_string_string_t *fields) {
  if (level < fk.log_level) return;
  static const char *levels[] = {"trace", "debug", "info", "warn", "error"};
  kw_buf b = {0};
  kw_buf_printf(&b, "%s ", levels[level % 5]);
  kw_buf_str(&b, message);
  for (size_t i = 0; i < fields->len; i++) {
    kw_buf_s(&b, " ");
    kw_buf_str(&b, &fields->ptr[i].f0);
    kw_buf_s(&b, "=");
    kw_buf_str(&b, &fields->ptr[i].f1);
  }
  fk.logs = grow(fk.logs, &fk.caplogs, fk.nlogs + 1, sizeof *fk.logs);
  fk.logs[fk.nlogs++] = kw_buf_take(&b);
}

void kubewasm_plugin_clock_now(kubewasm_plugin_clock_instant_t *ret) {
  ret->seconds = fk.now;
  ret->nanoseconds = fk.nanos;
}

static char *rfc3339(int64_t seconds) {
  time_t t = (time_t)seconds;
  struct tm tm;
  gmtime_r(&t, &tm);
  char buf[32];
  strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return dups(buf);
}

void kubewasm_plugin_clock_now_rfc3339(plugin_string_t *ret) {
  char *s = rfc3339(fk.now);
  out_str(ret, s);
  free(s);
}

/* ==== the test-side API ================================================== */

void kwf_clear_actions(void) {
  for (size_t i = 0; i < fk.nactions; i++) {
    free(fk.actions[i].line);
    free(fk.actions[i].json);
  }
  fk.nactions = 0;
}

void kwf_clear_logs(void) {
  for (size_t i = 0; i < fk.nlogs; i++) free(fk.logs[i]);
  fk.nlogs = 0;
}

void kwf_reset(void) {
  for (size_t i = 0; i < fk.nobjs; i++) cJSON_Delete(fk.objs[i]);
  fk.nobjs = 0;
  for (size_t i = 0; i < fk.nhandles; i++) cJSON_Delete(fk.handles[i]);
  for (size_t i = 0; i < fk.nhandles; i++) fk.handles[i] = NULL;
  fk.handle_base = fk.nhandles;
  for (size_t i = 0; i < fk.nsels; i++) sel_free(fk.sels[i]);
  for (size_t i = 0; i < fk.nsels; i++) fk.sels[i] = NULL;
  fk.sel_base = fk.nsels;
  kwf_clear_actions();
  kwf_clear_logs();
  if (fk.registered) exports_kubewasm_plugin_handler_registration_free(&fk.reg);
  fk.registered = false;
  fk.now = KWF_DEFAULT_NOW;
  fk.nanos = 0;
  fk.log_level = KW_TRACE;
  fk.error[0] = 0;
}

const char *kwf_error(void) { return fk.error; }

bool kwf_load(const char *name, const char *config) {
  kw_context ctx;
  out_str(&ctx.name, name);
  out_str(&ctx.version, "000000000000");
  out_str(&ctx.config, config ? config : "");
  kw_registration reg;
  plugin_string_t err = {0};
  fk.error[0] = 0;
  if (!exports_kubewasm_plugin_handler_register(&ctx, &reg, &err)) {
    snprintf(fk.error, sizeof fk.error, "%.*s", (int)err.len, (const char *)err.ptr);
    plugin_string_free(&err);
    return false;
  }
  if (fk.registered) exports_kubewasm_plugin_handler_registration_free(&fk.reg);
  fk.reg = reg;
  fk.registered = true;
  return true;
}

bool kwf_handle(kw_delta *d, int64_t *requeue_ms) {
  size_t mark = fk.nactions;
  kw_handled handled;
  kw_error err;
  memset(&err, 0, sizeof err);
  fk.error[0] = 0;
  bool ok = exports_kubewasm_plugin_handler_handle(d, &handled, &err);
  if (!ok) {
    while (fk.nactions > mark) {
      fk.nactions--;
      free(fk.actions[fk.nactions].line);
      free(fk.actions[fk.nactions].json);
    }
    snprintf(fk.error, sizeof fk.error, "%s: %.*s",
             err.tag == EXPORTS_KUBEWASM_PLUGIN_HANDLER_HANDLER_ERROR_RETRY ? "retry" : "permanent",
             (int)err.val.retry.len, (const char *)err.val.retry.ptr);
    exports_kubewasm_plugin_handler_handler_error_free(&err);
  }
  if (requeue_ms) {
    *requeue_ms = ok && handled.tag == EXPORTS_KUBEWASM_PLUGIN_HANDLER_HANDLED_REQUEUE_AFTER
                      ? (int64_t)handled.val.requeue_after
                      : -1;
  }
  return ok;
}

static void stamp(cJSON *o, const cJSON *before) {
  cJSON *m = meta(o);
  if (!cJSON_GetObjectItemCaseSensitive(m, "uid")) {
    const char *old = before ? meta_str(before, "uid") : NULL;
    char *uid = old ? dups(old)
                    : namespace_of(o) ? kw_format("uid-%s-%s", namespace_of(o), meta_str(o, "name"))
                                      : kw_format("uid-%s", meta_str(o, "name"));
    cJSON_AddStringToObject(m, "uid", uid);
    free(uid);
  }
  if (!cJSON_GetObjectItemCaseSensitive(m, "resourceVersion")) {
    const char *old = before ? meta_str(before, "resourceVersion") : NULL;
    int64_t rv;
    char *text = old && int64_of(old, &rv) ? kw_format("%lld", (long long)rv + 1) : dups("1");
    cJSON_AddStringToObject(m, "resourceVersion", text);
    free(text);
  }
  if (!cJSON_GetObjectItemCaseSensitive(m, "creationTimestamp")) {
    const char *old = before ? meta_str(before, "creationTimestamp") : NULL;
    char *ts = old ? dups(old) : rfc3339(fk.now);
    cJSON_AddStringToObject(m, "creationTimestamp", ts);
    free(ts);
  }
}

/* Puts o (owned) into the cache; returns the cached object. */
static cJSON *store(cJSON *o) {
  long i = find(o);
  stamp(o, i >= 0 ? fk.objs[i] : NULL);
  if (i >= 0) {
    cJSON_Delete(fk.objs[i]);
    fk.objs[i] = o;
  } else {
    fk.objs = grow(fk.objs, &fk.capobjs, fk.nobjs + 1, sizeof *fk.objs);
    fk.objs[fk.nobjs++] = o;
  }
  return o;
}

void kwf_put(const char *json) { store(parse_or_die(json)); }

bool kwf_remove(const char *json) {
  cJSON *o = parse_or_die(json);
  long i = find(o);
  cJSON_Delete(o);
  if (i < 0) return false;
  cJSON_Delete(fk.objs[i]);
  fk.objs[i] = fk.objs[--fk.nobjs];
  return true;
}

static uint32_t subscription_for(kw_delta_type t, const cJSON *o) {
  long first = -1;
  for (size_t i = 0; fk.registered && i < fk.reg.subscriptions.len; i++) {
    const kw_subscription *s = &fk.reg.subscriptions.ptr[i];
    if (!names_obj(&s->kind, o)) continue;
    if (first < 0) first = (long)i;
    if (s->namespace_.is_some && !str_is(&s->namespace_.val, or_empty(namespace_of(o)))) continue;
    if (s->label_selector.is_some) {
      char *error = NULL;
      struct sel *sel = sel_parse((const char *)s->label_selector.val.ptr, s->label_selector.val.len, &error);
      bool ok = sel && sel_matches(sel, label_of_object, o);
      sel_free(sel);
      free(error);
      if (!ok) continue;
    }
    bool wanted = t == KW_REQUEUE;
    for (size_t j = 0; j < s->deltas.len; j++) wanted = wanted || s->deltas.ptr[j] == t;
    if (wanted) return (uint32_t)i;
  }
  return first < 0 ? 0 : (uint32_t)first;
}

static kw_delta delta_of(kw_delta_type t, const cJSON *o, const cJSON *old) {
  kw_delta d;
  memset(&d, 0, sizeof d);
  d.delta_type = t;
  d.subscription = subscription_for(t, o);
  out_opt(&d.namespace_, namespace_of(o));
  out_str(&d.name, meta_str(o, "name"));
  out_str(&d.uid, meta_str(o, "uid"));
  out_str(&d.resource_version, meta_str(o, "resourceVersion"));
  d.object.is_some = true;
  d.object.val.__handle = hand(o);
  if (old) {
    d.old_object.is_some = true;
    d.old_object.val.__handle = hand(old);
  }
  d.attempt = 1;
  return d;
}

kw_delta kwf_added(const char *json) { return delta_of(KW_ADDED, store(parse_or_die(json)), NULL); }

kw_delta kwf_updated(const char *json) {
  cJSON *o = parse_or_die(json);
  long i = find(o);
  if (i < 0) die("kwf_updated: the object is not in the cache: put it first: %s", json);
  cJSON *old = cJSON_Duplicate(fk.objs[i], true);
  kw_delta d = delta_of(KW_UPDATED, store(o), old);
  cJSON_Delete(old);
  return d;
}

kw_delta kwf_deleted(const char *json) {
  cJSON *o = parse_or_die(json);
  long i = find(o);
  if (i >= 0) {
    cJSON_Delete(o);
    o = fk.objs[i];
    fk.objs[i] = fk.objs[--fk.nobjs];
  }
  kw_delta d = delta_of(KW_DELETED, o, NULL);
  cJSON_Delete(o);
  return d;
}

kw_delta kwf_resync(const char *json) { return delta_of(KW_RESYNC, store(parse_or_die(json)), NULL); }

kw_delta kwf_requeue(const char *json) { return delta_of(KW_REQUEUE, store(parse_or_die(json)), NULL); }

kw_delta kwf_synced(uint32_t subscription) {
  kw_delta d;
  memset(&d, 0, sizeof d);
  d.delta_type = KW_SYNCED;
  d.subscription = subscription;
  out_str(&d.name, "");
  out_str(&d.uid, "");
  out_str(&d.resource_version, "");
  d.attempt = 1;
  return d;
}

size_t kwf_action_count(void) { return fk.nactions; }
const char *kwf_action(size_t i) { return i < fk.nactions ? fk.actions[i].line : NULL; }
const char *kwf_action_json(size_t i) { return i < fk.nactions ? fk.actions[i].json : NULL; }
size_t kwf_log_count(void) { return fk.nlogs; }
const char *kwf_log(size_t i) { return i < fk.nlogs ? fk.logs[i] : NULL; }
void kwf_set_log_level(kw_level level) { fk.log_level = level; }

void kwf_set_clock(int64_t seconds) {
  fk.now = seconds;
  fk.nanos = 0;
}

void kwf_set_time(const char *text) {
  struct tm tm;
  memset(&tm, 0, sizeof tm);
  char z = 0;
  if (sscanf(text, "%4d-%2d-%2dT%2d:%2d:%2d%c", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
             &tm.tm_sec, &z) != 7 || z != 'Z') {
    die("kwf_set_time: %s is not YYYY-MM-DDTHH:MM:SSZ", text);
  }
  /* Days from the civil date (Howard Hinnant's days_from_civil). */
  int64_t y = tm.tm_year, m = tm.tm_mon, d = tm.tm_mday;
  y -= m <= 2;
  int64_t era = (y >= 0 ? y : y - 399) / 400;
  int64_t yoe = y - era * 400;
  int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  kwf_set_clock((era * 146097 + doe - 719468) * 86400 + tm.tm_hour * 3600 + tm.tm_min * 60 + tm.tm_sec);
}

void kwf_advance_ms(int64_t ms) {
  int64_t nanos = (int64_t)fk.nanos + (ms % 1000) * 1000000;
  fk.now += ms / 1000 + nanos / 1000000000;
  fk.nanos = (uint32_t)(nanos % 1000000000);
}

int kwf_failed_checks;
int kwf_tests_run;
int kwf_tests_failed;

bool kwf_check(bool cond, const char *what, const char *file, int line) {
  if (!cond) {
    kwf_failed_checks++;
    fprintf(stderr, "%s:%d: check failed: %s\n", file, line, what);
  }
  return cond;
}

bool kwf_expect_actions_at(const char *file, int line, ...) {
  va_list ap;
  va_start(ap, line);
  bool same = true;
  size_t n = 0;
  for (const char *want = va_arg(ap, const char *); want; want = va_arg(ap, const char *), n++) {
    same = same && n < fk.nactions && strcmp(fk.actions[n].line, want) == 0;
  }
  va_end(ap);
  same = same && n == fk.nactions;
  if (!kwf_check(same, "the expected actions", file, line)) {
    fprintf(stderr, "    got:\n");
    for (size_t i = 0; i < fk.nactions; i++) fprintf(stderr, "      %s\n", fk.actions[i].line);
    fprintf(stderr, "    want:\n");
    va_start(ap, line);
    for (const char *want = va_arg(ap, const char *); want; want = va_arg(ap, const char *)) {
      fprintf(stderr, "      %s\n", want);
    }
    va_end(ap);
  }
  kwf_clear_actions();
  return same;
}

int kwf_summary(void) {
  fprintf(stderr, "%d tests, %d failed\n", kwf_tests_run, kwf_tests_failed);
  return kwf_tests_failed == 0 ? 0 : 1;
}

/*
 * realistic in C: plugins/testing/realistic's twin (see its README.md): per
 * Pod delta, label `app`, two fields in one host call, the Pod's Node from
 * the cache, and one merge patch annotating the Pod with the Node's zone.
 * No JSON is parsed.
 */
#include <stdlib.h>

#include "kubewasm.h"

#define ZONE_LABEL "topology.kubernetes.io/zone"
#define ZONE_ANNOTATION "kubewasm.io/zone"

static const char *const pointers[] = {"/spec/nodeName", "/status/phase"};

bool kw_plugin_register(const kw_context *ctx, kw_registration *reg, char **error) {
  const kw_delta_type deltas[] = {KW_ADDED, KW_UPDATED, KW_RESYNC};
  kw_subscribe(reg, "", "v1", "Pod", deltas, 3, NULL, 0);
  kw_subscribe(reg, "", "v1", "Node", NULL, 0, NULL, 0);
  kw_writes(reg, "", "v1", "Pod");
  return true;
}

/* Element i of a fields() result as a string (borrowed), or NULL when
 * absent or not a string. */
static const kw_str *text_at(const kw_field_values *l, size_t i) {
  if (i >= l->len || !l->ptr[i].is_some || l->ptr[i].val.tag != KUBEWASM_PLUGIN_TYPES_FIELD_VALUE_TEXT) return NULL;
  return &l->ptr[i].val.val.text;
}

bool kw_plugin_handle(const kw_delta *delta, kw_handled *handled, kw_error *err) {
  if (delta->delta_type == KW_SYNCED) return true;
  kw_object pod;
  if (!kw_delta_need_object(delta, &pod, err)) return false;
  /* Read like a real handler would, used by none (as in the Rust plugin). */
  free(kw_label(pod, "app"));
  kw_field_values fields;
  kw_fields(pod, pointers, 2, &fields);
  const kw_str *node = text_at(&fields, 0);
  char *zone = NULL;
  bool ok = true;
  if (node) {
    char *name = kw_cstr(node);
    kw_own_object n;
    bool found;
    ok = kw_cache_get(KW_NODE, NULL, name, &n, &found, err);
    free(name);
    if (ok && found) {
      zone = kw_label(kw_borrow(n), ZONE_LABEL);
      kw_object_drop(n);
    }
  }
  kw_field_values_free(&fields);
  if (ok) {
    const char *kv[] = {ZONE_ANNOTATION, zone ? zone : "unknown"};
    kw_ref target = kw_ref_of_delta(KW_POD, delta);
    kw_preconditions pre = kw_preconditions_uid_of_delta(delta);
    ok = kw_annotate(&target, kv, 2, &pre, err);
  }
  free(zone);
  return ok;
}

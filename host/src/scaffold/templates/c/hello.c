/* {{name}}: a kubewasm plugin. It subscribes to ConfigMap `added` deltas and
 * annotates each ConfigMap with `kubewasm.io/hello: <plugin name>`. */
#include "kubewasm.h"

bool kw_plugin_register(const kw_context *ctx, kw_registration *reg, char **error) {
  (void)ctx; /* ctx->config: the sidecar's `config` as JSON (kw_config_strings) */
  (void)error;
  const kw_delta_type deltas[] = {KW_ADDED};
  /* The host's default resync; no selectors; every update would be
   * delivered (no fields listed). */
  kw_subscribe(reg, "", "v1", "ConfigMap", deltas, 1, NULL, 0);
  kw_writes(reg, "", "v1", "ConfigMap");
  return true;
}

bool kw_plugin_handle(const kw_delta *d, kw_handled *handled, kw_error *err) {
  (void)handled; /* done; kw_requeue_after(handled, ms) to see it again */
  if (d->delta_type == KW_SYNCED) return true;
  kw_buf name = {0};
  kw_buf_str(&name, &d->name);
  const char *kv[] = {"name", kw_buf_cstr(&name)};
  kw_log(KW_INFO, "hello", kv, 2);
  kw_buf_free(&name);
  /* {"metadata":{"annotations":{"kubewasm.io/hello":"<plugin name>"}}} */
  const char *annotations[] = {"kubewasm.io/hello", kw_plugin_name()};
  kw_ref target = kw_ref_of_delta(KW_CONFIGMAP, d);
  /* Only the object this delta is about: not a namesake created since. */
  kw_preconditions only_this = kw_preconditions_uid_of_delta(d);
  return kw_annotate(&target, annotations, 2, &only_this, err);
}

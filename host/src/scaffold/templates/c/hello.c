/* {{name}}: a kubewasm plugin. It subscribes to ConfigMap `added` deltas and
 * annotates each ConfigMap with `kubewasm.io/hello: {{name}}`. */
#include <stdlib.h>
#include <string.h>

#include "kubewasm.h"

bool kw_plugin_register(const kw_str *config, kw_registration *reg, char **error) {
  (void)config;
  (void)error;
  const kubewasm_plugin_types_delta_type_t deltas[] = {KUBEWASM_PLUGIN_TYPES_DELTA_TYPE_ADDED};
  kw_subscribe(reg, "", "v1", "ConfigMap", deltas, 1, NULL, 0);
  kw_writes(reg, "", "v1", "ConfigMap");
  return true;
}

bool kw_plugin_handle(const kw_delta *d, kw_error *err) {
  if (!d->meta.is_some) return true;
  const kw_meta *m = &d->meta.val;
  char *name = kw_cstr(&m->name);
  const char *kv[] = {"name", name};
  kw_log(KW_INFO, "hello", kv, 2);
  free(name);
  const char *patch = "{\"metadata\":{\"annotations\":{\"kubewasm.io/hello\":\"{{name}}\"}}}";
  return kw_patch_merge(KW_CONFIGMAP, m, patch, strlen(patch), err);
}

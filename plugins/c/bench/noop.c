/*
 * noop in C: plugins/testing/noop's twin (the floor of the per-delta
 * overhead): subscribes to every Pod delta and does nothing.
 */
#include "kubewasm.h"

bool kw_plugin_register(const kw_context *ctx, kw_registration *reg, char **error) {
  const kw_delta_type deltas[] = {KW_ADDED, KW_UPDATED, KW_DELETED, KW_RESYNC, KW_SYNCED};
  kw_subscribe(reg, "", "v1", "Pod", deltas, 5, NULL, 0);
  return true;
}

bool kw_plugin_handle(const kw_delta *delta, kw_handled *handled, kw_error *err) { return true; }

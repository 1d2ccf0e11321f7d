/*
 * parse-all in C: plugins/testing/parse-all's twin (see its README.md and
 * plugins/bench-logic): per Pod delta, the whole object from kw_to_json
 * parsed into a tree with cJSON (the SDK has no JSON parser; cJSON 1.7.19
 * is vendored in plugins/c/vendor/cjson), the same decision as
 * bench_logic::evaluate and its merge patch, when there is one, as the only
 * action. Config `{"repeat": N}` (default 1) runs the decision N times.
 */
#include <stdlib.h>
#include <string.h>

#include "cJSON.h"
#include "kubewasm.h"

#define ANNOTATION "kubewasm.io/health"

static long repeat = 1;

bool kw_plugin_register(const kw_context *ctx, kw_registration *reg, char **error) {
  cJSON *config = cJSON_ParseWithLength((const char *)ctx->config.ptr, ctx->config.len);
  if (!config && ctx->config.len) {
    *error = kw_format("invalid config: not JSON");
    return false;
  }
  bool ok = true;
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(config, "repeat");
  if (r) {
    if (cJSON_IsNumber(r) && r->valuedouble >= 0 && r->valuedouble == (double)(long)r->valuedouble)
      repeat = (long)r->valuedouble;
    else
      *error = kw_format("invalid config: repeat must be a count"), ok = false;
  }
  cJSON_Delete(config);
  if (!ok) return false;
  const kw_delta_type deltas[] = {KW_ADDED, KW_UPDATED, KW_RESYNC};
  kw_subscribe(reg, "", "v1", "Pod", deltas, 3, NULL, 0);
  kw_subscribe(reg, "", "v1", "Node", NULL, 0, NULL, 0);
  kw_writes(reg, "", "v1", "Pod");
  return true;
}

static bool has_memory_limit(const cJSON *c) {
  const cJSON *resources = cJSON_GetObjectItemCaseSensitive(c, "resources");
  const cJSON *limits = cJSON_GetObjectItemCaseSensitive(resources, "limits");
  return cJSON_GetObjectItemCaseSensitive(limits, "memory") != NULL;
}

static long sum_restarts(const cJSON *statuses) {
  long n = 0;
  const cJSON *c;
  cJSON_ArrayForEach(c, statuses) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(c, "restartCount");
    if (cJSON_IsNumber(r)) n += (long)r->valuedouble;
  }
  return n;
}

static void add_unlimited(const cJSON *containers, kw_buf *names) {
  const cJSON *c;
  cJSON_ArrayForEach(c, containers) {
    if (has_memory_limit(c)) continue;
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "name"));
    if (names->len) kw_buf_s(names, ",");
    kw_buf_s(names, name ? name : "");
  }
}

/* bench_logic::evaluate: *patch is the merge patch (malloc'd text)
 * reporting restarts, containers without a memory limit and a phase other
 * than Running or Succeeded, or NULL when there is nothing to report.
 * False (a permanent error) when the text is not an object. */
static bool evaluate(const char *json, size_t len, char **patch, kw_error *err) {
  *patch = NULL;
  cJSON *pod = cJSON_ParseWithLength(json, len);
  if (!cJSON_IsObject(pod)) {
    cJSON_Delete(pod);
    return kw_permanent(err, "not a Pod: not a JSON object");
  }
  const cJSON *spec = cJSON_GetObjectItemCaseSensitive(pod, "spec");
  const cJSON *status = cJSON_GetObjectItemCaseSensitive(pod, "status");
  long restarts = sum_restarts(cJSON_GetObjectItemCaseSensitive(status, "containerStatuses")) +
                  sum_restarts(cJSON_GetObjectItemCaseSensitive(status, "initContainerStatuses"));
  kw_buf unlimited = {0};
  add_unlimited(cJSON_GetObjectItemCaseSensitive(spec, "containers"), &unlimited);
  add_unlimited(cJSON_GetObjectItemCaseSensitive(spec, "initContainers"), &unlimited);
  const char *phase = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(status, "phase"));
  if (!phase) phase = "Unknown";
  if (restarts != 0 || unlimited.len != 0 || (strcmp(phase, "Running") != 0 && strcmp(phase, "Succeeded") != 0)) {
    const char *node = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(spec, "nodeName"));
    char *summary = kw_format("phase=%s node=%s restarts=%ld unlimited=%s", phase, node ? node : "-", restarts,
                              unlimited.len ? kw_buf_cstr(&unlimited) : "-");
    cJSON *out = cJSON_CreateObject();
    cJSON *annotations = cJSON_AddObjectToObject(cJSON_AddObjectToObject(out, "metadata"), "annotations");
    cJSON_AddStringToObject(annotations, ANNOTATION, summary);
    *patch = cJSON_PrintUnformatted(out);
    cJSON_Delete(out);
    free(summary);
  }
  kw_buf_free(&unlimited);
  cJSON_Delete(pod);
  return true;
}

bool kw_plugin_handle(const kw_delta *delta, kw_handled *handled, kw_error *err) {
  if (delta->delta_type == KW_SYNCED) return true;
  kw_object pod;
  if (!kw_delta_need_object(delta, &pod, err)) return false;
  char *json = kw_to_json(pod);
  size_t len = strlen(json);
  char *decided = NULL;
  bool ok = true;
  for (long i = 0; ok && i < repeat; i++) {
    free(decided);
    ok = evaluate(json, len, &decided, err);
  }
  free(json);
  if (ok && decided) {
    kw_ref target = kw_ref_of_delta(KW_POD, delta);
    kw_preconditions pre = kw_preconditions_uid_of_delta(delta);
    ok = kw_patch_merge(&target, decided, strlen(decided), &pre, err);
  }
  free(decided);
  return ok;
}

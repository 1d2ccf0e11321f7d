/* Native unit tests of config-replicator through the C SDK's fake host
 * (sdk/fake): no WebAssembly, no host. Built and run by
 * plugins/test-languages.sh (c). */
#include "kubewasm_fake.h"

#define NAMESPACE(name, labels) \
  "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"" name "\",\"labels\":" labels "}}"
#define SOURCE                                                                                     \
  "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"settings\",\"namespace\":\"default\"," \
  "\"labels\":{\"kubewasm.io/replicate\":\"true\"}},\"data\":{\"color\":\"blue\"}}"
#define COPY_IN(ns, by)                                                                              \
  "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"settings\",\"namespace\":\"" ns "\"," \
  "\"labels\":{\"kubewasm.io/replica\":\"true\"},\"annotations\":{\"kubewasm.io/replica-of\":\"default/settings\"," \
  "\"kubewasm.io/replicated-by\":\"" by "\"}}}"

static void load(void) {
  kwf_put(NAMESPACE("default", "{}"));
  kwf_put(NAMESPACE("team-a", "{\"team\":\"a\"}"));
  kwf_put(NAMESPACE("team-b", "{\"team\":\"b\"}"));
  KWF_CHECK(kwf_load("replicator", "{\"namespaceSelector\": \"team\"}"));
}

static void a_source_is_copied_into_each_matching_namespace(void) {
  load();
  kw_delta d = kwf_added(SOURCE);
  KWF_CHECK(d.subscription == 0);
  int64_t requeue = 0;
  KWF_CHECK(kwf_handle(&d, &requeue));
  KWF_CHECK(requeue == -1);
  KWF_EQ_STR(kwf_action_json(0),
             "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"settings\",\"namespace\":\"team-a\","
             "\"labels\":{\"kubewasm.io/replica\":\"true\"},\"annotations\":{\"kubewasm.io/replica-of\":\"default/settings\","
             "\"kubewasm.io/replicated-by\":\"replicator\"}},\"data\":{\"color\":\"blue\"}}");
  KWF_EXPECT_ACTIONS("apply ConfigMap team-a/settings force", "apply ConfigMap team-b/settings force");
  KWF_CHECK(kwf_live_handles() == 2); /* the two selectors the plugin keeps */
}

static void a_copy_whose_source_is_gone_is_deleted(void) {
  load();
  kwf_put(SOURCE);
  kwf_put(COPY_IN("team-b", "replicator"));
  /* The source goes: each of this replicator's copies is deleted, guarded
   * by its uid. */
  kw_delta d = kwf_deleted(SOURCE);
  KWF_CHECK(kwf_handle(&d, NULL));
  KWF_EXPECT_ACTIONS("delete ConfigMap team-b/settings background uid=uid-team-b-settings");
  /* A copy seen later with its source gone is an orphan; another
   * replicator's copy is left alone. */
  d = kwf_resync(COPY_IN("team-a", "replicator"));
  KWF_CHECK(kwf_handle(&d, NULL));
  d = kwf_resync(COPY_IN("team-c", "someone-else"));
  KWF_CHECK(kwf_handle(&d, NULL));
  KWF_EXPECT_ACTIONS("delete ConfigMap team-a/settings background uid=uid-team-a-settings");
  KWF_EQ_STR(kwf_log(kwf_log_count() - 1), "info orphan copy deleted copy=team-a/settings source=default/settings");
}

int main(void) {
  KWF_RUN(a_source_is_copied_into_each_matching_namespace);
  KWF_RUN(a_copy_whose_source_is_gone_is_deleted);
  return kwf_summary();
}

/* A unit test of the hello plugin through the SDK's fake host (`bash
 * test.sh`): no WebAssembly, no host. sdk/fake/kubewasm_fake.h stands in
 * for the host: put objects into its cache (kwf_put), load the plugin
 * (kwf_load), hand it deltas (kwf_added... then kwf_handle), then check the
 * actions it emitted (KWF_EXPECT_ACTIONS, kwf_action_json) and what it
 * logged (kwf_log). */
#include "kubewasm_fake.h"

static void annotates_each_config_map(void) {
  KWF_CHECK(kwf_load("{{name}}", "{}"));
  kw_delta d = kwf_added("{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\","
                         "\"metadata\":{\"name\":\"greeting\",\"namespace\":\"demo\"}}");
  KWF_CHECK(kwf_handle(&d, NULL));
  KWF_EXPECT_ACTIONS("patch ConfigMap demo/greeting merge "
                     "{\"metadata\":{\"annotations\":{\"kubewasm.io/hello\":\"{{name}}\"}}} uid=uid-demo-greeting");
  KWF_EQ_STR(kwf_log(0), "info hello name=greeting");
  KWF_CHECK(kwf_live_handles() == 0);
}

int main(void) {
  KWF_RUN(annotates_each_config_map);
  return kwf_summary();
}

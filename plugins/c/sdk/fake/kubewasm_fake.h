/*
 * A fake kubewasm host for unit tests of a C plugin, natively: no
 * WebAssembly, no kubewasm binary, no cluster.
 *
 * kubewasm_fake.c implements, for a native build, every function the
 * bindings header (`plugin.h`, from `wit-bindgen c`) declares: the imports
 * (cache reads, actions, label selectors, log, clock, the methods of
 * `object`) answer from the fake, and the `*_free` helpers free what it
 * allocated. Link the plugin, the SDK (kubewasm.c), kubewasm_fake.c and
 * cJSON (which holds the fake's objects) into a test program with a main,
 * and drive the plugin through the SDK's real exports:
 *
 *   #include "kubewasm_fake.h"
 *
 *   static void annotates(void) {
 *     kwf_reset();
 *     KWF_CHECK(kwf_load("hello", "{}"));
 *     kw_delta d = kwf_added("{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\","
 *                            "\"metadata\":{\"name\":\"greeting\",\"namespace\":\"demo\"}}");
 *     KWF_CHECK(kwf_handle(&d, NULL));
 *     KWF_EXPECT_ACTIONS("patch ConfigMap demo/greeting merge "
 *                        "{\"metadata\":{\"annotations\":{\"kubewasm.io/hello\":\"hello\"}}} uid=uid-demo-greeting");
 *   }
 *
 *   int main(void) { KWF_RUN(annotates); return kwf_summary(); }
 *
 *   cc -I GEN -I sdk -I sdk/fake -I CJSON test.c hello.c sdk/kubewasm.c sdk/fake/kubewasm_fake.c CJSON/cJSON.c
 *
 * What it does as the host does: objects are snapshots behind handles (the
 * SDK drops the delta's when kw_plugin_handle returns; kwf_live_handles()
 * counts the rest); kw_cache_list sorts by namespace then name and filters
 * with a port of the host's label-selector parser (checked against the
 * same apimachinery golden cases); kw_to_json strips managedFields and the
 * last-applied annotation. After kwf_load the registration is enforced:
 * reading a kind not subscribed to is `not-subscribed`, writing one not
 * declared `not-declared`, kw_cache_by_index answers declared indexes
 * only. Actions must be well formed (`invalid`), and kwf_handle drops the
 * actions of a call that fails. Not faked: the sidecar's access list,
 * executing actions (the cache changes only when the test changes it),
 * retries, time passing. Numbers are held as doubles (cJSON): an integral
 * value reads as an integer, and integers beyond 2^53 lose precision.
 *
 * Misuse by the test itself (JSON that does not parse, an object without
 * apiVersion, kind or name, a handle used after it was dropped) prints
 * what is wrong and aborts.
 */
#ifndef KUBEWASM_FAKE_H
#define KUBEWASM_FAKE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kubewasm.h"

/* The fake's clock starts here: 2026-01-01T00:00:00Z. */
#define KWF_DEFAULT_NOW 1767225600

/* Empties the fake: no objects, no registration (nothing enforced until
 * kwf_load), no actions or logs, every log level enabled, the clock at
 * KWF_DEFAULT_NOW. Handles still live are dropped. Call it first in each
 * test. */
void kwf_reset(void);

/* ---- the plugin ---- */

/* Registers the plugin as the host does: the SDK's export (which calls
 * kw_plugin_register) with a context named `name` (version 000000000000)
 * and `config` (JSON; "" or "{}" for none); the fake keeps and enforces the
 * registration. False when the plugin refuses: kwf_error() says why. */
bool kwf_load(const char *name, const char *config);

/* Hands `d` (from kwf_added...) to the plugin through the SDK's export
 * (which calls kw_plugin_handle, then drops the delta's handles and frees
 * it). True when handled; *requeue_ms (may be NULL) is the requeue delay
 * asked for, or -1 for done. False when it failed: kwf_error() is
 * `retry: MESSAGE` or `permanent: MESSAGE`, and the actions the call emitted
 * are dropped, as the host drops them. */
bool kwf_handle(kw_delta *d, int64_t *requeue_ms);

/* Why the last kwf_load or kwf_handle failed ("" when it did not). */
const char *kwf_error(void);

/* ---- the cache ---- */

/* Puts an object (JSON text with apiVersion, kind, metadata.name and, if
 * namespaced, metadata.namespace) into the cache, replacing one of the same
 * kind, namespace and name, and fills in what the API server would:
 * metadata.uid (`uid-NAMESPACE-NAME`, or the replaced object's),
 * resourceVersion (the replaced object's plus one, or "1") and
 * creationTimestamp (the clock). */
void kwf_put(const char *json);
/* Removes the object (by kind, namespace and name); whether it was there. */
bool kwf_remove(const char *json);

/* ---- deltas ----
 * Each returns a delta for kwf_handle (for the first subscription of its
 * kind whose namespace, selector and delta types fit, else the first of
 * its kind, else 0); set d.initial, d.attempt, d.subscription as a test
 * needs before handing it over. */

/* Puts the object and returns its `added` delta. */
kw_delta kwf_added(const char *json);
/* Replaces the cached object and returns the `updated` delta, the cached
 * one as its old state (aborts when it is not cached). */
kw_delta kwf_updated(const char *json);
/* Removes the object and returns its `deleted` delta, carrying the cached
 * state (or the given one when it was not cached). */
kw_delta kwf_deleted(const char *json);
/* Puts the object and returns its `resync` / `requeue` delta. */
kw_delta kwf_resync(const char *json);
kw_delta kwf_requeue(const char *json);
/* The `synced` delta of a subscription: no object. */
kw_delta kwf_synced(uint32_t subscription);

/* ---- what the plugin did ----
 * Actions as lines, the same in every language's fake:
 * `apply ConfigMap team-a/settings force`, `apply-status Widget ns/w`,
 * `patch ConfigMap demo/greeting merge {...} uid=U`,
 * `delete ConfigMap team-a/settings background uid=U`,
 * `event ConfigMap a/b Normal Reason: note uid=U`; preconditions last. */

/* How many actions were accepted since the last kwf_clear_actions. */
size_t kwf_action_count(void);
/* Action i as a line (owned by the fake), or NULL past the end. */
const char *kwf_action(size_t i);
/* Action i's JSON: the applied object or the patch, compact (owned by the
 * fake; "" for deletes and events), or NULL past the end. */
const char *kwf_action_json(size_t i);
void kwf_clear_actions(void);
/* Log records as lines (`info copy deleted copy=team-a/settings`). */
size_t kwf_log_count(void);
const char *kwf_log(size_t i);
void kwf_clear_logs(void);
/* Records below `level` are neither enabled nor kept (default: every level). */
void kwf_set_log_level(kw_level level);
/* Object and selector handles the plugin still holds. */
size_t kwf_live_handles(void);

/* ---- the clock ---- */

void kwf_set_clock(int64_t seconds);
/* An RFC 3339 UTC time: `2026-11-22T17:00:00Z`; aborts on another format. */
void kwf_set_time(const char *rfc3339);
void kwf_advance_ms(int64_t ms);

/* ---- a minimal test runner ---- */

extern int kwf_failed_checks;
extern int kwf_tests_run;
extern int kwf_tests_failed;

/* Records a failed check (printed with file and line); returns cond. */
bool kwf_check(bool cond, const char *what, const char *file, int line);
/* Compares the actions so far with the NULL-terminated expected lines,
 * prints both on a mismatch, then clears them. */
bool kwf_expect_actions_at(const char *file, int line, ...);

#define KWF_CHECK(cond) kwf_check((cond), #cond, __FILE__, __LINE__)
#define KWF_EQ_STR(a, b)                                                                        \
  do {                                                                                          \
    const char *kwf_a_ = (a), *kwf_b_ = (b);                                                    \
    if (!kwf_check(kwf_a_ && kwf_b_ && strcmp(kwf_a_, kwf_b_) == 0, #a " == " #b, __FILE__, __LINE__)) \
      fprintf(stderr, "    got:  %s\n    want: %s\n", kwf_a_ ? kwf_a_ : "(null)", kwf_b_ ? kwf_b_ : "(null)"); \
  } while (0)
#define KWF_EXPECT_ACTIONS(...) kwf_expect_actions_at(__FILE__, __LINE__, __VA_ARGS__, (const char *)NULL)
#define KWF_EXPECT_NO_ACTIONS() kwf_expect_actions_at(__FILE__, __LINE__, (const char *)NULL)
#define KWF_RUN(test)                                                                           \
  do {                                                                                          \
    int kwf_before_ = kwf_failed_checks;                                                        \
    kwf_reset();                                                                                \
    test();                                                                                     \
    kwf_tests_run++;                                                                            \
    if (kwf_failed_checks != kwf_before_) kwf_tests_failed++;                                   \
    fprintf(stderr, "%s %s\n", kwf_failed_checks == kwf_before_ ? "ok  " : "FAIL", #test);      \
  } while (0)
/* Prints `N tests, M failed` and returns the exit status for main. */
int kwf_summary(void);

#endif

/*
 * kubewasm SDK for C plugins, WIT 0.2 (`kubewasm:plugin@0.2.0`): helpers
 * over the bindings wit-bindgen's C generator writes for wit/v0.2.0's
 * `plugin` world (plugin.h and plugin.c beside this file, generated ahead
 * of time: host/src/toolchain/c_bindings.rs).
 *
 * A plugin defines kw_plugin_register() and kw_plugin_handle(); this SDK
 * exports the WIT `handler` functions around them (argument ownership,
 * dropping the delta's object handles) and offers: strings and buffers
 * with JSON escaping, kinds (KW_EVENT and friends), lazy object accessors
 * (each one host call that copies only what it returns), label selectors
 * parsed and matched by the host, config parsing (a flat JSON object of
 * strings), registration builders, cache reads, actions with uid /
 * resourceVersion preconditions, JSON patches, owner references,
 * finalizers, Events, logging and the clock.
 *
 * Conventions (the reference below repeats them where they matter):
 * - Functions that can fail return `bool`: true on success; on failure they
 *   fill a `kw_error *err` (a permanent error unless documented otherwise)
 *   that kw_plugin_handle can return as is: `return kw_apply(..., err);`.
 * - `char *` results are malloc'd, NUL-terminated, and the caller frees
 *   them with free(); a NULL result means "absent" (no such label...).
 * - Handles: a kw_object is a *borrowed* handle (valid while its owner is);
 *   a kw_own_object is owned and must be dropped (kw_object_drop, or
 *   kw_objects_free for lists): the host bounds the live handles of an
 *   instance (`limits.handles`) and traps a plugin that leaks them. The
 *   delta's own objects are dropped by the SDK when kw_plugin_handle
 *   returns: do not keep them. Selectors (kw_selector) are handles too:
 *   kw_selector_free them (keeping a few for the instance's life is fine).
 * - "Borrowed" structs (kw_gvk, kw_ref_of, kw_preconditions_uid...) point
 *   at the strings they were given and own nothing: keep those strings
 *   alive while the struct is used, and never free the struct. "Owned"
 *   structs say how to free them.
 * - Actions are validated by the host at once (kind declared in `writes`,
 *   granted by the sidecar, well-formed JSON) and buffered; the host runs
 *   them in order after kw_plugin_handle returns true, and drops them when
 *   it returns false. A refused action is a bug in the plugin or its
 *   sidecar: the SDK reports it as a permanent error.
 */
#ifndef KUBEWASM_H
#define KUBEWASM_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "plugin.h"

typedef plugin_string_t kw_str;
typedef plugin_list_string_t kw_strs;
typedef plugin_list_tuple2_string_string_t kw_pairs;
typedef kubewasm_plugin_types_group_version_kind_t kw_gvk_t;
typedef kubewasm_plugin_types_kind_ref_t kw_kind;
typedef kubewasm_plugin_types_object_meta_t kw_meta;
typedef kubewasm_plugin_types_owner_reference_t kw_owner_ref;
typedef kubewasm_plugin_types_list_owner_reference_t kw_owner_refs;
typedef kubewasm_plugin_types_field_value_t kw_field_value;
typedef kubewasm_plugin_types_list_option_field_value_t kw_field_values;
typedef kubewasm_plugin_types_delta_t kw_delta;
typedef kubewasm_plugin_types_delta_type_t kw_delta_type;
typedef kubewasm_plugin_types_failure_t kw_failure;
typedef kubewasm_plugin_types_borrow_object_t kw_object;
typedef kubewasm_plugin_types_own_object_t kw_own_object;
typedef kubewasm_plugin_cache_list_own_object_t kw_objects;
typedef kubewasm_plugin_actions_object_ref_t kw_ref;
typedef kubewasm_plugin_actions_preconditions_t kw_preconditions;
typedef kubewasm_plugin_actions_propagation_t kw_propagation;
typedef kubewasm_plugin_actions_event_type_t kw_event_type;
typedef kubewasm_plugin_log_level_t kw_level;
typedef kubewasm_plugin_clock_instant_t kw_instant;
typedef exports_kubewasm_plugin_handler_context_t kw_context;
typedef exports_kubewasm_plugin_handler_registration_t kw_registration;
typedef exports_kubewasm_plugin_handler_subscription_t kw_subscription;
typedef exports_kubewasm_plugin_handler_handled_t kw_handled;
typedef exports_kubewasm_plugin_handler_handler_error_t kw_error;

/* ==== the plugin's part ================================================= */

/* Called once per loaded version (per instance), before any delta.
 * `ctx->name` is the plugin's name (its file name without `.wasm`; the
 * field manager is `kubewasm/<name>`), `ctx->version` the first 12 hex
 * digits of the component's SHA-256, `ctx->config` the `config` section of
 * its sidecar as JSON (`{}` when absent; decode it with kw_config_strings).
 * Fill `reg` (zeroed) with kw_subscribe / kw_writes / kw_index and return
 * true. On failure set *error to a malloc'd message and return false: the
 * host refuses this version and keeps the previous one serving. The
 * context is freed when this returns: copy what you keep (kw_plugin_name()
 * and kw_plugin_version() keep the first two for you). */
bool kw_plugin_register(const kw_context *ctx, kw_registration *reg, char **error);

/* Handles one delta. Return true when handled: `*handled` is `done` unless
 * you call kw_requeue_after(handled, ms). Return false with `err` filled
 * (kw_permanent / kw_retry, or any failing SDK call) to fail it: actions
 * emitted during the call are dropped; `retry` is retried with backoff (the
 * next attempt's delta says why: d->attempt, d->last_failure), `permanent`
 * records the delta as dead. The delta and its object handles are freed
 * and dropped by the SDK after the call. */
bool kw_plugin_handle(const kw_delta *delta, kw_handled *handled, kw_error *err);

/* The plugin's name and version from its context ("" before register).
 * Owned by the SDK. */
const char *kw_plugin_name(void);
const char *kw_plugin_version(void);
/* `kubewasm/<name>`: the field manager the host applies and patches with.
 * Owned by the SDK. */
const char *kw_field_manager(void);

/* ==== outcomes and errors ================================================ */

/* Done for now: deliver this object again as a `requeue` delta after `ms`
 * milliseconds, unless a newer delta of it comes first. Returns true:
 * `return kw_requeue_after(handled, 30000);`. */
bool kw_requeue_after(kw_handled *handled, uint64_t ms);
/* Whether `handled` asks for a requeue, and after how many ms (*ms may be
 * NULL). */
bool kw_handled_requeue(const kw_handled *handled, uint64_t *ms);

/* Fill err and return false: `return kw_permanent(err, "bad %s", x);`.
 * Permanent: retrying will not help (bad input, refused action); the host
 * records the delta as dead. */
bool kw_permanent(kw_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Retry: a transient condition; the host retries the delta with backoff. */
bool kw_retry(kw_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Whether err is a retry (else permanent); its message (borrowed). */
bool kw_error_is_retry(const kw_error *err);
const kw_str *kw_error_message(const kw_error *err);
/* A malloc'd formatted string. */
char *kw_format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ==== strings ============================================================ */

/* A borrowed view of a C string (no copy; NULL gives the empty string). */
kw_str kw_s(const char *s);
/* Whether a WIT string equals a C string / another WIT string. */
bool kw_eq(const kw_str *a, const char *b);
bool kw_str_eq(const kw_str *a, const kw_str *b);
/* A malloc'd NUL-terminated copy. */
char *kw_cstr(const kw_str *s);
/* Frees an owned WIT string (one the host returned, or kw_str_dup made). */
void kw_str_free(kw_str *s);
/* An owned copy of a C string (free with kw_str_free). */
kw_str kw_str_dup(const char *s);
/* Frees lists the host returned (kw_labels, kw_finalizers...). */
void kw_strs_free(kw_strs *l);
void kw_pairs_free(kw_pairs *l);
/* The value of `key` in a list of pairs (borrowed), or NULL. */
const kw_str *kw_pairs_get(const kw_pairs *pairs, const char *key);

/* A growable byte buffer, always NUL-terminated once written to;
 * zero-initialise (`kw_buf b = {0};`), free with kw_buf_free. */
typedef struct {
  char *ptr;
  size_t len, cap;
} kw_buf;
void kw_buf_n(kw_buf *b, const char *s, size_t n);
void kw_buf_s(kw_buf *b, const char *s);
void kw_buf_str(kw_buf *b, const kw_str *s);
/* Appends s as a quoted, escaped JSON string. */
void kw_buf_json(kw_buf *b, const char *s, size_t n);
void kw_buf_json_s(kw_buf *b, const char *s);
void kw_buf_json_str(kw_buf *b, const kw_str *s);
void kw_buf_printf(kw_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The contents as a NUL-terminated string (owned by the buffer; "" when
 * empty). */
const char *kw_buf_cstr(kw_buf *b);
/* The contents as a borrowed WIT string. */
kw_str kw_buf_view(const kw_buf *b);
/* Hands the contents over as a malloc'd C string and empties the buffer. */
char *kw_buf_take(kw_buf *b);
void kw_buf_free(kw_buf *b);

/* ==== kinds ============================================================== */

/* A borrowed kind-ref by group/version/kind ("" is the core group). */
kw_kind kw_gvk(const char *group, const char *version, const char *kind);
/* A borrowed kind-ref by resource name as kubectl accepts it (`pods`,
 * `deployments.apps`, `widgets.v1.example.com`), resolved by the host. */
kw_kind kw_resource(const char *name);
#define KW_CONFIGMAP kw_gvk("", "v1", "ConfigMap")
#define KW_SECRET kw_gvk("", "v1", "Secret")
#define KW_NAMESPACE kw_gvk("", "v1", "Namespace")
#define KW_POD kw_gvk("", "v1", "Pod")
#define KW_NODE kw_gvk("", "v1", "Node")
#define KW_SERVICE kw_gvk("", "v1", "Service")
#define KW_DEPLOYMENT kw_gvk("apps", "v1", "Deployment")
#define KW_REPLICASET kw_gvk("apps", "v1", "ReplicaSet")
/* events.k8s.io/v1 Event: the kind kw_record_event records (recording
 * needs no `writes` declaration, only the sidecar's `events` grant;
 * reading Events back needs a subscription:
 * `kw_subscribe(reg, KW_EVENT_GROUP, KW_EVENT_VERSION, KW_EVENT_KIND, ...)`). */
#define KW_EVENT_GROUP "events.k8s.io"
#define KW_EVENT_VERSION "v1"
#define KW_EVENT_KIND "Event"
#define KW_EVENT kw_gvk(KW_EVENT_GROUP, KW_EVENT_VERSION, KW_EVENT_KIND)
/* Whether gvk is this group and kind (any version). */
bool kw_gvk_is(const kw_gvk_t *gvk, const char *group, const char *kind);
/* Appends the apiVersion of group/version: `apps/v1`, or `v1` for the
 * core group. */
void kw_api_version(kw_buf *b, const kw_str *group, const kw_str *version);
/* Whether an apiVersion (`apps/v1`, `v1`) is of `group` (any version). */
bool kw_api_version_in(const kw_str *api_version, const char *group);
/* Frees an owned group/version/kind (kw_object_kind). */
void kw_gvk_free(kw_gvk_t *gvk);

/* ==== deltas ============================================================= */

#define KW_ADDED KUBEWASM_PLUGIN_TYPES_DELTA_TYPE_ADDED
#define KW_UPDATED KUBEWASM_PLUGIN_TYPES_DELTA_TYPE_UPDATED
#define KW_DELETED KUBEWASM_PLUGIN_TYPES_DELTA_TYPE_DELETED
#define KW_RESYNC KUBEWASM_PLUGIN_TYPES_DELTA_TYPE_RESYNC
#define KW_SYNCED KUBEWASM_PLUGIN_TYPES_DELTA_TYPE_SYNCED
#define KW_REQUEUE KUBEWASM_PLUGIN_TYPES_DELTA_TYPE_REQUEUE
/* The object delta types (added, updated, deleted, resync): what most
 * subscriptions want: `kw_subscribe(reg, "", "v1", "Pod", KW_OBJECT_DELTAS,
 * 4, NULL, 0)`. */
extern const kw_delta_type KW_OBJECT_DELTAS[4];

/* The delta's scalars are plain fields: d->delta_type, d->subscription
 * (index in the registration's subscriptions: the free way to tell kinds
 * apart), d->namespace_ (none for cluster-scoped), d->name, d->uid,
 * d->resource_version, d->initial, d->final_state_unknown, d->attempt,
 * d->last_failure. */

/* The delta's object (borrowed: valid during this call); *ok is false for
 * `synced` deltas (ok may be NULL). */
kw_object kw_delta_object(const kw_delta *d, bool *ok);
/* The previous state (borrowed), `updated` deltas only. */
kw_object kw_delta_old_object(const kw_delta *d, bool *ok);
/* The delta's object into *out, or a permanent error "<type> delta for
 * <key> carries no object" (for deltas that must carry one). */
bool kw_delta_need_object(const kw_delta *d, kw_object *out, kw_error *err);
/* The previous state's whole metadata into *out (updated deltas only; one
 * host call): free with kw_meta_free. */
bool kw_delta_old_meta(const kw_delta *d, kw_meta *out);
/* Appends `namespace/name` (or `name`; nothing for synced) from the
 * delta's scalars: no host call. */
void kw_delta_key(const kw_delta *d, kw_buf *b);
/* Whether the delta's object is of this group and kind, any version (one
 * host call; false for synced). */
bool kw_delta_is(const kw_delta *d, const char *group, const char *kind);
/* `added`, `updated`, `deleted`, `resync`, `synced` or `requeue`. */
const char *kw_delta_type_name(kw_delta_type t);
/* Whether this delta was handled before and failed (attempt > 1;
 * d->last_failure says why). */
bool kw_delta_retried(const kw_delta *d);
/* Whether the previous attempt failed with a conflict (another field
 * manager, or a uid / resourceVersion precondition that did not hold):
 * re-read the cache and decide again. */
bool kw_delta_after_conflict(const kw_delta *d);
/* The WIT name of a failure: `retry`, `trapped`, `conflict` or
 * `action-failed`; and its message (borrowed). */
const char *kw_failure_kind(const kw_failure *f);
const kw_str *kw_failure_message(const kw_failure *f);

/* ==== objects (lazy: each call is one host call) ======================== */

/* The object's group/version/kind: free with kw_gvk_free. */
void kw_object_kind(kw_object o, kw_gvk_t *out);
/* Whether the object is of this group and kind (any version). */
bool kw_object_is(kw_object o, const char *group, const char *kind);
/* The namespace (NULL for cluster-scoped), name, uid, resourceVersion;
 * malloc'd. */
char *kw_object_namespace(kw_object o);
char *kw_object_name(kw_object o);
char *kw_object_uid(kw_object o);
char *kw_object_resource_version(kw_object o);
/* metadata.generation into *out; false when unset. */
bool kw_object_generation(kw_object o, int64_t *out);
/* Appends `namespace/name` (or `name`) to b (two host calls). */
void kw_object_key(kw_object o, kw_buf *b);
/* One label's / annotation's value (malloc'd), or NULL when not set. */
char *kw_label(kw_object o, const char *key);
char *kw_annotation(kw_object o, const char *key);
/* Whether label `key` is set to `value`. */
bool kw_label_is(kw_object o, const char *key, const char *value);
/* Every label / annotation, sorted by key: free with kw_pairs_free. */
void kw_labels(kw_object o, kw_pairs *out);
void kw_annotations(kw_object o, kw_pairs *out);
/* metadata.ownerReferences: free with kw_owner_refs_free. */
void kw_owner_references(kw_object o, kw_owner_refs *out);
/* metadata.finalizers: free with kw_strs_free. */
void kw_finalizers(kw_object o, kw_strs *out);
/* Whether `finalizer` is among the object's finalizers. */
bool kw_has_finalizer(kw_object o, const char *finalizer);
/* metadata.deletionTimestamp (RFC 3339, malloc'd), NULL when unset. */
char *kw_deletion_timestamp(kw_object o);
/* Whether the object is being finalized (has a deletion timestamp). */
bool kw_is_terminating(kw_object o);
/* The whole metadata record (one call, copies every label, annotation and
 * owner): free with kw_meta_free. */
void kw_meta_of(kw_object o, kw_meta *out);
void kw_meta_free(kw_meta *m);
/* The value at an RFC 6901 JSON pointer (`/spec/nodeName`); false when
 * absent. Arrays and objects come back as compact JSON text
 * (KUBEWASM_PLUGIN_TYPES_FIELD_VALUE_JSON). Free with kw_field_value_free. */
bool kw_field(kw_object o, const char *pointer, kw_field_value *out);
void kw_field_value_free(kw_field_value *v);
/* The string at `pointer` (malloc'd); NULL when absent or not a string. */
char *kw_field_string(kw_object o, const char *pointer);
/* The integer / boolean at `pointer`; false when absent or another type. */
bool kw_field_int(kw_object o, const char *pointer, int64_t *out);
bool kw_field_bool(kw_object o, const char *pointer, bool *out);
/* Several pointers at once, in order (one host call instead of n):
 * out->ptr[i].is_some says whether pointer i exists. Free with
 * kw_field_values_free. */
void kw_fields(kw_object o, const char *const *pointers, size_t n, kw_field_values *out);
void kw_field_values_free(kw_field_values *l);
/* The whole object as compact JSON (malloc'd; managedFields and the
 * last-applied annotation stripped unless the host keeps them). */
char *kw_to_json(kw_object o);

/* ==== metadata records (from kw_meta_of / kw_delta_old_meta) =========== */

/* The value of a label / annotation (borrowed), or NULL. */
const kw_str *kw_meta_label(const kw_meta *m, const char *key);
const kw_str *kw_meta_annotation(const kw_meta *m, const char *key);
bool kw_meta_label_is(const kw_meta *m, const char *key, const char *value);
bool kw_meta_is_terminating(const kw_meta *m);
bool kw_meta_has_finalizer(const kw_meta *m, const char *finalizer);
/* The owner reference marked controller (borrowed), or NULL. */
const kw_owner_ref *kw_meta_controller(const kw_meta *m);
/* Appends `namespace/name` (or `name`) to b. */
void kw_meta_key(const kw_meta *m, kw_buf *b);

/* ==== owner references =================================================== */

/* Whether the owner is of this group and kind (any version). */
bool kw_owner_is(const kw_owner_ref *r, const char *group, const char *kind);
/* The first owner reference of `o` (in metadata.ownerReferences order) of
 * this group and kind, any version, into *out (owned: kw_owner_ref_free);
 * false when none. One host call. */
bool kw_find_owner(kw_object o, const char *group, const char *kind, kw_owner_ref *out);
/* The owner reference of `o` marked `controller: true`, if any (owned:
 * kw_owner_ref_free). One host call. */
bool kw_controller_owner(kw_object o, kw_owner_ref *out);
/* A controller reference to `o` (its apiVersion, kind, name and uid;
 * controller and blockOwnerDeletion true), to embed in what the plugin
 * creates so that it is garbage-collected with `o` (owned:
 * kw_owner_ref_free). Three host calls. */
void kw_controller_ref(kw_object o, kw_owner_ref *out);
/* A controller reference to the object of kind group/version/kind named
 * `name` with uid `uid` (owned: kw_owner_ref_free). */
void kw_controller_ref_of(const char *group, const char *version, const char *kind, const char *name,
                          const char *uid, kw_owner_ref *out);
void kw_owner_ref_free(kw_owner_ref *r);
void kw_owner_refs_free(kw_owner_refs *l);
/* Appends the JSON form of a metadata.ownerReferences entry: apiVersion,
 * blockOwnerDeletion and controller (only when true), kind, name, uid. */
void kw_owner_ref_json(kw_buf *b, const kw_owner_ref *r);
/* Adds `ref` to the metadata.ownerReferences of the JSON object held in
 * `dependent` (the object you then kw_apply), rewriting the buffer:
 * creates metadata and the list as needed and replaces an entry for the
 * same owner (same uid, or same group, kind and name). A permanent error
 * (buffer unchanged) when `dependent` is not a JSON object, its metadata or
 * list is malformed, or `ref` is a controller and another owner already
 * is (an object has at most one controller). */
bool kw_set_owner_reference(kw_buf *dependent, const kw_owner_ref *ref, kw_error *err);
/* Makes `owner` the controller of the JSON object in `dependent`:
 * kw_set_owner_reference with kw_controller_ref(owner). */
bool kw_set_controller_reference(kw_buf *dependent, kw_object owner, kw_error *err);

/* ==== label selectors (parsed and matched by the host) ================== */

/* A label selector handle with the API server's grammar: `app=web,
 * tier!=db,env in (a,b),!legacy,release notin (canary),replicas>2`. The
 * empty selector matches everything. */
typedef struct kw_selector kw_selector;
/* Parses `text` (len bytes); NULL with *error (malloc'd: the host's
 * message naming the offending part) when invalid. Free with
 * kw_selector_free. */
kw_selector *kw_selector_parse(const char *text, size_t len, char **error);
/* Whether a label set matches (the labels are copied to the host). */
bool kw_selector_matches(const kw_selector *s, const kw_pairs *labels);
/* Whether an object's labels match (read on the host, nothing copied). */
bool kw_selector_matches_object(const kw_selector *s, kw_object o);
/* The canonical text, requirements sorted by key as the API server prints
 * them (malloc'd; "" for the empty selector): what the cache accepts. */
char *kw_selector_string(const kw_selector *s);
/* Whether this is the empty selector (matches everything). */
bool kw_selector_is_empty(const kw_selector *s);
/* Drops the handle (NULL is fine). */
void kw_selector_free(kw_selector *s);

/* ==== config ============================================================= */

/* One string-valued config key with its default; `value` is malloc'd by
 * kw_config_strings (free it). */
typedef struct {
  const char *key;
  const char *def;
  char *value;
} kw_config_field;
/* Decodes a JSON object whose values are strings into fields (an empty
 * config, `{}` or `null` keeps the defaults); unknown keys, other value
 * types and bad JSON set *error ("invalid config: ...") and return false.
 * `kw_config_strings(&ctx->config, fields, n, error)`. */
bool kw_config_strings(const kw_str *config, kw_config_field *fields, size_t n, char **error);

/* ==== registration ======================================================= */

/* Appends a subscription to group/version/kind in every namespace, with no
 * selectors, the host's default resync (10 hours unless the operator
 * changes it), these delta types (ndeltas 0: none, the kind is only made
 * readable through the cache) and these JSON pointers of the fields that
 * matter (nfields 0: every update is delivered; else an update changing
 * none of them, nor labels, annotations or the deletion timestamp, is
 * skipped). Everything is copied. Deltas name subscriptions by position, in
 * the order added. Returns the new subscription, to refine with the
 * kw_subscription_* setters (valid until the next kw_subscribe). */
kw_subscription *kw_subscribe(kw_registration *r, const char *group, const char *version, const char *kind,
                              const kw_delta_type *deltas, size_t ndeltas, const char *const *fields,
                              size_t nfields);
/* The same with a kind named by resource (`pods`, `deployments.apps`). */
kw_subscription *kw_subscribe_resource(kw_registration *r, const char *resource, const kw_delta_type *deltas,
                                       size_t ndeltas, const char *const *fields, size_t nfields);
/* Only objects in this namespace (default: all). */
void kw_subscription_namespace(kw_subscription *s, const char *ns);
/* Only objects whose labels match (default: all). */
void kw_subscription_labels(kw_subscription *s, const char *selector);
/* Only objects matching this field selector (`spec.nodeName=n1`; default:
 * all). */
void kw_subscription_field_selector(kw_subscription *s, const char *selector);
/* Replay every cached object as a `resync` delta this often; 0 turns
 * resync off (default: the host's period). */
void kw_subscription_resync(kw_subscription *s, uint32_t seconds);
/* Declares a kind the plugin writes (apply, patch, delete; Events need no
 * declaration). */
void kw_writes(kw_registration *r, const char *group, const char *version, const char *kind);
void kw_writes_resource(kw_registration *r, const char *resource);
/* Declares a secondary index `name` over group/version/kind, keyed by the
 * value(s) at `pointer` (`*` iterates an array:
 * `/metadata/ownerReferences/ * /uid` without the spaces); read it with
 * kw_cache_by_index. */
void kw_index(kw_registration *r, const char *name, const char *group, const char *version, const char *kind,
              const char *pointer);

/* ==== cache (the host's lister cache; never an API call) ================ */

/* Only subscribed kinds can be read (a subscription with no delta types
 * suffices); every refusal (not subscribed, unknown index, invalid
 * selector, not granted by the sidecar) is a permanent error. */

/* One object by kind, namespace (NULL if cluster-scoped) and name: *found
 * says whether it is cached; when it is, *out is an owned handle to
 * kw_object_drop. */
bool kw_cache_get(kw_kind kind, const char *ns, const char *name, kw_own_object *out, bool *found, kw_error *err);
/* Objects of a kind in one namespace or all (ns NULL), filtered by a label
 * selector (NULL or "": all), sorted by namespace then name. Free with
 * kw_objects_free (drops the handles). */
bool kw_cache_list(kw_kind kind, const char *ns, const char *selector, kw_objects *out, kw_error *err);
/* The same with a parsed selector (its canonical text is sent). */
bool kw_cache_list_selected(kw_kind kind, const char *ns, const kw_selector *selector, kw_objects *out,
                            kw_error *err);
/* Objects whose declared index yields `value`, sorted by namespace then
 * name. Free with kw_objects_free. */
bool kw_cache_by_index(const char *index, const char *value, kw_objects *out, kw_error *err);
/* Element i of a list (borrowed from the list). */
kw_object kw_objects_at(const kw_objects *l, size_t i);
/* Drops every handle of the list and frees it. */
void kw_objects_free(kw_objects *l);
/* A borrowed view of an owned handle; dropping an owned handle. */
kw_object kw_borrow(kw_own_object o);
void kw_object_drop(kw_own_object o);

/* ==== preconditions ====================================================== */

/* Conditions the server checks before a write; one that does not hold
 * fails the write as a conflict, which the next attempt's delta reports
 * (kw_delta_after_conflict). Empty strings and NULL set none. All but
 * kw_preconditions_of_object are borrowed. */
/* No precondition: the write happens whatever the object's state. */
kw_preconditions kw_preconditions_none(void);
/* The object must have this uid (not deleted and recreated since). */
kw_preconditions kw_preconditions_uid(const char *uid);
kw_preconditions kw_preconditions_uid_str(const kw_str *uid);
/* The object must have this uid and be at this resourceVersion (nobody
 * wrote it since it was read). */
kw_preconditions kw_preconditions_of(const char *uid, const char *resource_version);
/* The delta object's uid and resourceVersion (from its scalars, no host
 * call); kw_preconditions_uid_of_delta: the uid only. */
kw_preconditions kw_preconditions_of_delta(const kw_delta *d);
kw_preconditions kw_preconditions_uid_of_delta(const kw_delta *d);
/* The object's uid and resourceVersion as read (two host calls; owned:
 * kw_preconditions_free). */
void kw_preconditions_of_object(kw_object o, kw_preconditions *out);
void kw_preconditions_free(kw_preconditions *p);

/* ==== object references ================================================== */

/* A borrowed reference by kind, namespace (NULL if cluster-scoped) and
 * name. */
kw_ref kw_ref_of(kw_kind kind, const char *ns, const char *name);
/* A borrowed reference to the delta's object as `kind` (its scalars). */
kw_ref kw_ref_of_delta(kw_kind kind, const kw_delta *d);
/* A borrowed reference to the object a metadata record describes. */
kw_ref kw_ref_of_meta(kw_kind kind, const kw_meta *m);
/* A reference to `o` with its own group/version/kind (three host calls;
 * owned: kw_ref_free). */
void kw_ref_of_object(kw_object o, kw_ref *out);
void kw_ref_free(kw_ref *r);

/* ==== actions ============================================================ */

/* `pre` may be NULL in every action: no precondition. */

/* Server-side apply of a full JSON object (apiVersion, kind, metadata.name
 * and, if namespaced, metadata.namespace) as field manager
 * `kubewasm/<plugin>`; `force` takes over conflicting fields. */
bool kw_apply(const char *json, size_t len, bool force, const kw_preconditions *pre, kw_error *err);
/* Server-side apply to the status subresource (always forced). */
bool kw_apply_status(const char *json, size_t len, const kw_preconditions *pre, kw_error *err);
#define KW_MERGE KUBEWASM_PLUGIN_ACTIONS_PATCH_TYPE_MERGE
#define KW_JSON_PATCH KUBEWASM_PLUGIN_ACTIONS_PATCH_TYPE_JSON
/* A patch given as text: KW_MERGE (RFC 7386) or KW_JSON_PATCH (RFC 6902). */
bool kw_patch(const kw_ref *target, kubewasm_plugin_actions_patch_type_t type, const char *patch, size_t len,
              const kw_preconditions *pre, kw_error *err);
/* An RFC 7386 JSON merge patch. */
bool kw_patch_merge(const kw_ref *target, const char *json, size_t len, const kw_preconditions *pre, kw_error *err);
/* Sets annotations with one merge patch,
 * `{"metadata":{"annotations":{k:v,...}}}` (keys sorted); kv holds nkv/2
 * key, value pairs. */
bool kw_annotate(const kw_ref *target, const char *const *kv, size_t nkv, const kw_preconditions *pre,
                 kw_error *err);
/* kw_annotate on `o` itself (its kind, namespace and name), guarded by its
 * uid. */
bool kw_annotate_object(kw_object o, const char *const *kv, size_t nkv, kw_error *err);
#define KW_BACKGROUND KUBEWASM_PLUGIN_ACTIONS_PROPAGATION_BACKGROUND
#define KW_FOREGROUND KUBEWASM_PLUGIN_ACTIONS_PROPAGATION_FOREGROUND
#define KW_ORPHAN KUBEWASM_PLUGIN_ACTIONS_PROPAGATION_ORPHAN
/* Deletes an object; one already gone is not an error. */
bool kw_delete(const kw_ref *target, kw_propagation propagation, const kw_preconditions *pre, kw_error *err);
/* Deletes `o` itself, guarded by its uid (a namesake created since is left
 * alone). */
bool kw_delete_object(kw_object o, kw_propagation propagation, kw_error *err);

/* ==== JSON patches (RFC 6902) ============================================ */

/* A list of operations applied in order, all or nothing. Paths are JSON
 * pointers, already escaped (build them with kw_pointer when a segment may
 * hold `/` or `~`); `-` as the last segment of an `add` appends to an
 * array. Values are JSON text (`"1"`, `"{\"a\":true}"`; the *_string
 * variants take a plain string and quote it). Zero-initialise
 * (`kw_json_patch p = {0};`), free with kw_json_patch_free. The text is
 * `[{"op":"add","path":"/a","value":1},...]`, as the Rust SDK writes it. */
typedef struct {
  kw_buf ops; /* the operations, comma-separated */
  size_t n;
  kw_buf text;
} kw_json_patch;
/* `add`: sets path (creating an object member, or inserting into an array
 * at that index, `-` appending). */
void kw_json_patch_add(kw_json_patch *p, const char *path, const char *value_json);
void kw_json_patch_add_string(kw_json_patch *p, const char *path, const char *value);
/* `remove`: deletes path, which must exist. */
void kw_json_patch_remove(kw_json_patch *p, const char *path);
/* `replace`: sets path, which must exist. */
void kw_json_patch_replace(kw_json_patch *p, const char *path, const char *value_json);
void kw_json_patch_replace_string(kw_json_patch *p, const char *path, const char *value);
/* `test`: the whole patch fails unless path equals the value. */
void kw_json_patch_test(kw_json_patch *p, const char *path, const char *value_json);
void kw_json_patch_test_string(kw_json_patch *p, const char *path, const char *value);
/* How many operations. */
size_t kw_json_patch_len(const kw_json_patch *p);
/* The patch as JSON text (owned by the patch, valid until it changes). */
const char *kw_json_patch_text(kw_json_patch *p);
void kw_json_patch_free(kw_json_patch *p);
/* Sends it (kw_patch with KW_JSON_PATCH). */
bool kw_patch_json(const kw_ref *target, kw_json_patch *p, const kw_preconditions *pre, kw_error *err);
/* Appends one escaped JSON-pointer segment (`~` -> `~0`, `/` -> `~1`). */
void kw_pointer_escape(kw_buf *b, const char *segment);
/* Appends a JSON pointer made of these unescaped segments
 * (`metadata`, `labels`, `app.kubernetes.io/name` ->
 * `/metadata/labels/app.kubernetes.io~1name`). */
void kw_pointer(kw_buf *b, const char *const *segments, size_t n);

/* ==== finalizers ========================================================= */

/* The JSON patch adding `finalizer` to an object whose finalizers are
 * `current`: `add /metadata/finalizers/-` (or `add /metadata/finalizers`
 * with `[finalizer]` when there are none) into *out (zeroed first); false
 * (nothing written) when it is already there. Send it with a
 * resourceVersion precondition (as kw_add_finalizer does). */
bool kw_add_finalizer_patch(const kw_strs *current, const char *finalizer, kw_json_patch *out);
/* The JSON patch removing `finalizer`: one `remove
 * /metadata/finalizers/<i>` per occurrence, highest index first; false when
 * it is not there. Indexes are only safe with a resourceVersion
 * precondition. */
bool kw_remove_finalizer_patch(const kw_strs *current, const char *finalizer, kw_json_patch *out);
/* Adds `finalizer` to `o` unless it is already there: one JSON patch with
 * uid and resourceVersion preconditions, so a concurrent write fails it as
 * a conflict instead of losing either change. *queued (may be NULL) says
 * whether a patch was queued. */
bool kw_add_finalizer(kw_object o, const char *finalizer, bool *queued, kw_error *err);
/* Removes `finalizer` from `o` if it is there, likewise guarded. */
bool kw_remove_finalizer(kw_object o, const char *finalizer, bool *queued, kw_error *err);

/* ==== Events ============================================================= */

#define KW_NORMAL KUBEWASM_PLUGIN_ACTIONS_EVENT_TYPE_NORMAL
#define KW_WARNING KUBEWASM_PLUGIN_ACTIONS_EVENT_TYPE_WARNING
/* Records an events.k8s.io/v1 Event about `regarding` (regarding_uid may be
 * NULL). The host reports it with the plugin as reporter (controller
 * `kubewasm`, action `<plugin>`, instance `<host>/<plugin>@<version>`) and
 * folds repeats into one Event with a series count. `reason` is
 * UpperCamelCase (`ReplicaCreated`), `note` human-readable (1 KiB kept).
 * Needs no `writes` declaration, only the sidecar's `events` grant. */
bool kw_record_event(const kw_ref *regarding, const char *regarding_uid, kw_event_type type, const char *reason,
                     const char *note, kw_error *err);
/* An Event about `o` (its kind, namespace, name and uid). */
bool kw_event_about(kw_object o, kw_event_type type, const char *reason, const char *note, kw_error *err);

/* ==== log ================================================================ */

#define KW_TRACE KUBEWASM_PLUGIN_LOG_LEVEL_TRACE
#define KW_DEBUG KUBEWASM_PLUGIN_LOG_LEVEL_DEBUG
#define KW_INFO KUBEWASM_PLUGIN_LOG_LEVEL_INFO
#define KW_WARN KUBEWASM_PLUGIN_LOG_LEVEL_WARN
#define KW_ERROR KUBEWASM_PLUGIN_LOG_LEVEL_ERROR
/* Whether a record at `level` would be written: skip building costly
 * messages when it would not. */
bool kw_log_enabled(kw_level level);
/* Writes a record tagged with the plugin's name; kv holds nkv/2 key, value
 * pairs of C strings (at most 16 pairs). Skipped (nothing copied) when the
 * level is disabled. */
void kw_log(kw_level level, const char *msg, const char *const *kv, size_t nkv);

/* ==== clock ============================================================== */

/* Wall-clock time since the Unix epoch, as the host sees it. */
kw_instant kw_now(void);
/* Now as RFC 3339 with seconds precision (`2026-11-22T17:00:00Z`),
 * malloc'd. */
char *kw_now_rfc3339(void);

#endif

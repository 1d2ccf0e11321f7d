/*
 * kubewasm SDK for C plugins: helpers over the bindings wit-bindgen
 * generates from wit/v0.1.0 (`wit-bindgen c WIT --world plugin`, plugin.h).
 *
 * A plugin defines kw_plugin_register() and kw_plugin_handle(); this SDK
 * exports the WIT `handler` functions around them (argument ownership,
 * dropping the delta's object handles), and offers strings and buffers,
 * kinds, metadata helpers, kubectl label selectors, config parsing (a
 * flat JSON object of strings; objects are never parsed otherwise: the
 * host's field accessors return them as JSON text to embed), cache reads
 * and actions that report refusals as permanent handler errors, logging.
 * Memory: everything this SDK returns that needs freeing says so.
 */
#ifndef KUBEWASM_H
#define KUBEWASM_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "plugin.h"

typedef plugin_string_t kw_str;
typedef kubewasm_plugin_types_object_meta_t kw_meta;
typedef kubewasm_plugin_types_delta_t kw_delta;
typedef kubewasm_plugin_types_kind_ref_t kw_kind;
typedef kubewasm_plugin_types_borrow_object_t kw_object;
typedef kubewasm_plugin_types_field_value_t kw_field_value;
typedef kubewasm_plugin_cache_list_own_object_t kw_objects;
typedef exports_kubewasm_plugin_handler_handler_error_t kw_error;
typedef exports_kubewasm_plugin_handler_registration_t kw_registration;
typedef plugin_list_tuple2_string_string_t kw_pairs;

/* ---- the plugin's part ---------------------------------------------------- */

/* Parse `config` (JSON, maybe empty) and fill `reg` with kw_subscribe /
 * kw_writes. On failure set *error to a malloc'd message and return false. */
bool kw_plugin_register(const kw_str *config, kw_registration *reg, char **error);
/* Handle one delta; on failure fill `err` (kw_permanent / kw_retry). */
bool kw_plugin_handle(const kw_delta *delta, kw_error *err);

/* ---- strings ---------------------------------------------------------------- */

/* A borrowed view of a C string (no copy). */
kw_str kw_s(const char *s);
bool kw_eq(const kw_str *a, const char *b);
bool kw_str_eq(const kw_str *a, const kw_str *b);
/* A malloc'd NUL-terminated copy. */
char *kw_cstr(const kw_str *s);

/* A growable byte buffer; zero-initialise, free with kw_buf_free. */
typedef struct {
  char *ptr;
  size_t len, cap;
} kw_buf;
void kw_buf_n(kw_buf *b, const char *s, size_t n);
void kw_buf_s(kw_buf *b, const char *s);
void kw_buf_str(kw_buf *b, const kw_str *s);
/* Appends s as a quoted, escaped JSON string. */
void kw_buf_json(kw_buf *b, const char *s, size_t n);
void kw_buf_printf(kw_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The contents as a NUL-terminated string (owned by the buffer). */
const char *kw_buf_cstr(kw_buf *b);
void kw_buf_free(kw_buf *b);

/* ---- kinds and deltas ------------------------------------------------------- */

/* A borrowed kind-ref by group/version/kind ("" is the core group). */
kw_kind kw_gvk(const char *group, const char *version, const char *kind);
#define KW_CONFIGMAP kw_gvk("", "v1", "ConfigMap")
#define KW_NAMESPACE kw_gvk("", "v1", "Namespace")
#define KW_POD kw_gvk("", "v1", "Pod")
#define KW_NODE kw_gvk("", "v1", "Node")

/* Whether the delta's object is of this group and kind (any version). */
bool kw_delta_is(const kw_delta *d, const char *group, const char *kind);
/* The delta's object (borrowed); *ok is false for `synced` deltas. */
kw_object kw_delta_object(const kw_delta *d, bool *ok);
/* The previous state's metadata into *out (updated deltas only): free it
 * with kubewasm_plugin_types_object_meta_free. */
bool kw_delta_old_meta(const kw_delta *d, kw_meta *out);
const char *kw_delta_type_name(kubewasm_plugin_types_delta_type_t t);

/* ---- metadata ------------------------------------------------------------------ */

/* The value of a label / annotation, or NULL. */
const kw_str *kw_label(const kw_meta *m, const char *key);
const kw_str *kw_annotation(const kw_meta *m, const char *key);
bool kw_label_is(const kw_meta *m, const char *key, const char *value);
bool kw_is_terminating(const kw_meta *m);
/* Appends `namespace/name` (or `name`) to b. */
void kw_key(const kw_meta *m, kw_buf *b);
/* The metadata of an object: free with kubewasm_plugin_types_object_meta_free. */
void kw_meta_of(kw_object o, kw_meta *out);
/* The value at a JSON pointer; false when absent. Free with
 * kubewasm_plugin_types_field_value_free. */
bool kw_field(kw_object o, const char *pointer, kw_field_value *out);

/* ---- errors ---------------------------------------------------------------------- */

/* Fill err and return false: `return kw_permanent(err, "bad %s", x);` */
bool kw_permanent(kw_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool kw_retry(kw_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A malloc'd formatted string. */
char *kw_format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- label selectors --------------------------------------------------------- */

typedef struct kw_selector kw_selector;
/* Parses kubectl's grammar; NULL with *error (malloc'd) when invalid. */
kw_selector *kw_selector_parse(const char *text, size_t len, char **error);
bool kw_selector_matches(const kw_selector *s, const kw_pairs *labels);
bool kw_selector_is_empty(const kw_selector *s);
/* The canonical text (malloc'd), which the host's cache accepts. */
char *kw_selector_string(const kw_selector *s);
void kw_selector_free(kw_selector *s);

/* ---- config ------------------------------------------------------------------------ */

/* One string-valued config key with its default; `value` is malloc'd. */
typedef struct {
  const char *key;
  const char *def;
  char *value;
} kw_config_field;
/* Decodes a JSON object whose values are strings into fields (an empty
 * config or `null` keeps the defaults); unknown keys, other value types
 * and bad JSON set *error ("invalid config: ...") and return false. */
bool kw_config_strings(const kw_str *config, kw_config_field *fields, size_t n, char **error);

/* ---- registration ----------------------------------------------------------------- */

/* Appends a subscription for group/version/kind (all namespaces) with
 * these delta types and fields that matter. Everything is copied. */
void kw_subscribe(kw_registration *r, const char *group, const char *version, const char *kind,
                  const kubewasm_plugin_types_delta_type_t *deltas, size_t ndeltas,
                  const char *const *fields, size_t nfields);
/* Declares a kind the plugin writes. */
void kw_writes(kw_registration *r, const char *group, const char *version, const char *kind);

/* ---- cache ---------------------------------------------------------------------------- */

/* Objects of a kind (namespace and selector may be NULL), sorted by
 * namespace then name. Free with kw_objects_free (drops the handles). */
bool kw_cache_list(kw_kind kind, const char *ns, const char *selector, kw_objects *out, kw_error *err);
kw_object kw_objects_at(const kw_objects *l, size_t i);
void kw_objects_free(kw_objects *l);

/* ---- actions -------------------------------------------------------------------------- */

bool kw_apply(const char *json, size_t len, bool force, kw_error *err);
/* Deletes the object `m` describes (with its uid as precondition). */
bool kw_delete(kw_kind kind, const kw_meta *m, kubewasm_plugin_actions_propagation_t propagation, kw_error *err);
bool kw_patch_merge(kw_kind kind, const kw_meta *m, const char *json, size_t len, kw_error *err);

/* ---- log -------------------------------------------------------------------------------- */

/* Writes a record; kv holds nkv/2 key, value pairs of C strings. */
void kw_log(kubewasm_plugin_log_level_t level, const char *msg, const char *const *kv, size_t nkv);
#define KW_DEBUG KUBEWASM_PLUGIN_LOG_LEVEL_DEBUG
#define KW_INFO KUBEWASM_PLUGIN_LOG_LEVEL_INFO
#define KW_WARN KUBEWASM_PLUGIN_LOG_LEVEL_WARN

#endif

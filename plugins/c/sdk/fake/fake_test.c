/* The C SDK's fake host itself (kubewasm_fake.c): cache reads, actions,
 * registration checks, the clock, and label selectors against the same
 * apimachinery golden cases as the host's parser (argv[1]: the path of
 * host/src/informer/selector_golden.jsonl). A small plugin of its own
 * drives it through the SDK's exports. */
#include <stdlib.h>

#include "cJSON.h"
#include "kubewasm_fake.h"

static bool refuse;

bool kw_plugin_register(const kw_context *ctx, kw_registration *reg, char **error) {
  (void)ctx;
  if (refuse) {
    *error = kw_format("refused");
    return false;
  }
  const kw_delta_type added[] = {KW_ADDED};
  kw_subscription_labels(kw_subscribe(reg, "", "v1", "ConfigMap", added, 1, NULL, 0), "app=web");
  kw_subscribe(reg, "", "v1", "ConfigMap", KW_OBJECT_DELTAS, 4, NULL, 0);
  kw_subscribe(reg, "", "v1", "Pod", NULL, 0, NULL, 0);
  kw_writes(reg, "", "v1", "ConfigMap");
  kw_index(reg, "node", "", "v1", "Pod", "/spec/nodeName");
  return true;
}

bool kw_plugin_handle(const kw_delta *d, kw_handled *handled, kw_error *err) {
  kw_buf key = {0};
  kw_delta_key(d, &key);
  const char *kv[] = {"key", kw_buf_cstr(&key)};
  kw_log(KW_INFO, "seen", kv, 2);
  kw_buf_free(&key);
  if (d->delta_type == KW_DELETED) {
    kw_ref target = kw_ref_of_delta(KW_CONFIGMAP, d);
    kw_preconditions pre = kw_preconditions_uid_of_delta(d);
    if (!kw_delete(&target, KW_BACKGROUND, &pre, err)) return false;
    return kw_retry(err, "try later");
  }
  kw_object o;
  if (!kw_delta_need_object(d, &o, err)) return false;
  const char *by[] = {"by", kw_plugin_name()};
  if (!kw_annotate_object(o, by, 2, err)) return false;
  if (!kw_event_about(o, KW_NORMAL, "Annotated", "done", err)) return false;
  return kw_requeue_after(handled, 30000);
}

#define CM(ns, name, labels)                                                                      \
  "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"" name "\",\"namespace\":\"" ns \
  "\",\"labels\":" labels "},\"data\":{\"k\":\"v\"}}"

static void load_handle_and_registration_checks(void) {
  refuse = true;
  KWF_CHECK(!kwf_load("ann", "{}"));
  KWF_EQ_STR(kwf_error(), "refused");
  refuse = false;
  KWF_CHECK(kwf_load("ann", "{}"));
  kw_delta d = kwf_added(CM("a", "web", "{\"app\":\"web\"}"));
  KWF_CHECK(d.subscription == 0);
  int64_t requeue = 0;
  KWF_CHECK(kwf_handle(&d, &requeue));
  KWF_CHECK(requeue == 30000);
  KWF_EXPECT_ACTIONS("patch ConfigMap a/web merge {\"metadata\":{\"annotations\":{\"by\":\"ann\"}}} uid=uid-a-web",
                     "event ConfigMap a/web Normal Annotated: done uid=uid-a-web");
  KWF_CHECK(kwf_live_handles() == 0);
  kw_delta u = kwf_updated(CM("a", "web", "{\"app\":\"api\"}"));
  KWF_CHECK(u.subscription == 1);
  char *rv = kw_cstr(&u.resource_version);
  KWF_EQ_STR(rv, "2");
  free(rv);
  char *old = kw_label(kw_borrow(u.old_object.val), "app");
  KWF_EQ_STR(old, "web");
  free(old);
  KWF_CHECK(kwf_live_handles() == 2);
  /* A delta never handed to kwf_handle is the test's to drop and free. */
  kw_object_drop(u.object.val);
  kw_object_drop(u.old_object.val);
  kubewasm_plugin_types_delta_free(&u);
  kw_delta del = kwf_deleted(CM("a", "web", "{}"));
  KWF_CHECK(!kwf_handle(&del, NULL));
  KWF_EQ_STR(kwf_error(), "retry: try later");
  KWF_EXPECT_NO_ACTIONS(); /* a failed call's actions are dropped */
  KWF_CHECK(kwf_log_count() == 2);
  KWF_EQ_STR(kwf_log(0), "info seen key=a/web");

  kw_objects l;
  kw_error err;
  KWF_CHECK(!kw_cache_list(KW_NAMESPACE, NULL, NULL, &l, &err));
  KWF_CHECK(strstr((const char *)kw_error_message(&err)->ptr, "not subscribed") != NULL);
  exports_kubewasm_plugin_handler_handler_error_free(&err);
  kw_ref pod = kw_ref_of(KW_POD, "a", "p");
  KWF_CHECK(!kw_delete(&pod, KW_BACKGROUND, NULL, &err));
  KWF_CHECK(strstr((const char *)kw_error_message(&err)->ptr, "not declared") != NULL);
  exports_kubewasm_plugin_handler_handler_error_free(&err);
  KWF_CHECK(!kw_apply("{\"kind\":\"ConfigMap\"}", 20, true, NULL, &err));
  exports_kubewasm_plugin_handler_handler_error_free(&err);
  kwf_put("{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\",\"namespace\":\"a\"},"
          "\"spec\":{\"nodeName\":\"n1\"}}");
  KWF_CHECK(kw_cache_by_index("node", "n1", &l, &err) && l.len == 1);
  if (l.len == 1) {
    char *name = kw_object_name(kw_objects_at(&l, 0));
    KWF_EQ_STR(name, "p");
    free(name);
  }
  kw_objects_free(&l);
  KWF_CHECK(!kw_cache_by_index("owner", "x", &l, &err));
  exports_kubewasm_plugin_handler_handler_error_free(&err);
  KWF_CHECK(kwf_live_handles() == 0);
}

static void cache_reads_and_objects(void) {
  kwf_put(CM("b", "two", "{\"app\":\"web\",\"tier\":\"db\"}"));
  kwf_put(CM("a", "one", "{\"app\":\"web\"}"));
  kwf_put("{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"a\",\"generation\":3,"
          "\"managedFields\":[{}],\"annotations\":{\"kubectl.kubernetes.io/last-applied-configuration\":\"{}\"},"
          "\"ownerReferences\":[{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"name\":\"n\",\"uid\":\"u\","
          "\"controller\":true}]},\"spec\":{\"n\":1,\"f\":1.5,\"list\":[1,2]}}");
  kw_objects l;
  kw_error err;
  const char *want_all[] = {"a/one", "b/two"};
  KWF_CHECK(kw_cache_list(KW_CONFIGMAP, NULL, NULL, &l, &err) && l.len == 2);
  for (size_t i = 0; i < l.len && i < 2; i++) {
    kw_buf k = {0};
    kw_object_key(kw_objects_at(&l, i), &k);
    KWF_EQ_STR(kw_buf_cstr(&k), want_all[i]);
    kw_buf_free(&k);
  }
  kw_objects_free(&l);
  KWF_CHECK(kw_cache_list(KW_CONFIGMAP, NULL, "tier notin (db)", &l, &err) && l.len == 1);
  kw_objects_free(&l);
  KWF_CHECK(kw_cache_list(kw_resource("configmaps"), "b", "app", &l, &err) && l.len == 1);
  kw_objects_free(&l);
  KWF_CHECK(!kw_cache_list(KW_CONFIGMAP, NULL, "a in b", &l, &err));
  KWF_CHECK(strstr((const char *)kw_error_message(&err)->ptr, "invalid selector") != NULL);
  exports_kubewasm_plugin_handler_handler_error_free(&err);
  kw_own_object ns;
  bool found = false;
  KWF_CHECK(kw_cache_get(KW_NAMESPACE, NULL, "a", &ns, &found, &err) && found);
  kw_object o = kw_borrow(ns);
  int64_t n = 0;
  KWF_CHECK(kw_object_generation(o, &n) && n == 3);
  KWF_CHECK(kw_field_int(o, "/spec/n", &n) && n == 1);
  kw_field_value v;
  KWF_CHECK(kw_field(o, "/spec/f", &v) && v.tag == KUBEWASM_PLUGIN_TYPES_FIELD_VALUE_FLOAT && v.val.float_ == 1.5);
  kw_field_value_free(&v);
  KWF_CHECK(kw_field(o, "/spec/list", &v) && v.tag == KUBEWASM_PLUGIN_TYPES_FIELD_VALUE_JSON);
  kw_field_value_free(&v);
  kw_owner_ref c;
  KWF_CHECK(kw_controller_owner(o, &c));
  kw_owner_ref_free(&c);
  char *json = kw_to_json(o);
  KWF_CHECK(!strstr(json, "managedFields") && !strstr(json, "annotations"));
  free(json);
  kw_object_drop(ns);
  kw_own_object one;
  KWF_CHECK(kw_cache_get(KW_CONFIGMAP, "a", "one", &one, &found, &err) && found);
  kwf_put(CM("a", "one", "{\"app\":\"api\"}"));
  KWF_CHECK(kw_label_is(kw_borrow(one), "app", "web")); /* a handle is a snapshot */
  kw_object_drop(one);
  KWF_CHECK(kw_cache_get(KW_CONFIGMAP, "a", "one", &one, &found, &err) && found);
  char *uid = kw_object_uid(kw_borrow(one)), *rv = kw_object_resource_version(kw_borrow(one));
  KWF_EQ_STR(uid, "uid-a-one");
  KWF_EQ_STR(rv, "2");
  free(uid);
  free(rv);
  kw_object_drop(one);
  KWF_CHECK(kwf_live_handles() == 0);

  char *now = kw_now_rfc3339();
  KWF_EQ_STR(now, "2026-01-01T00:00:00Z");
  free(now);
  kwf_set_time("2024-02-29T23:59:59Z");
  kwf_advance_ms(1500);
  now = kw_now_rfc3339();
  KWF_EQ_STR(now, "2024-03-01T00:00:00Z");
  free(now);
  KWF_CHECK(kw_now().nanoseconds == 500000000);
  kwf_set_log_level(KW_INFO);
  KWF_CHECK(!kw_log_enabled(KW_DEBUG));
  kw_log(KW_DEBUG, "hidden", NULL, 0);
  KWF_CHECK(kwf_log_count() == 0);
}

static const char *golden_path;

static void utf8(char *out, size_t *n, uint32_t cp) {
  if (cp < 0x80) {
    out[(*n)++] = (char)cp;
  } else if (cp < 0x800) {
    out[(*n)++] = (char)(0xC0 | cp >> 6);
    out[(*n)++] = (char)(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out[(*n)++] = (char)(0xE0 | cp >> 12);
    out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[(*n)++] = (char)(0x80 | (cp & 0x3F));
  } else {
    out[(*n)++] = (char)(0xF0 | cp >> 18);
    out[(*n)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[(*n)++] = (char)(0x80 | (cp & 0x3F));
  }
}

/* Decodes the JSON string starting at the quote `s` into out (NULs kept);
 * returns its length in bytes. */
static size_t json_string(const char *s, char *out, size_t cap) {
  size_t n = 0;
  for (s++; *s && *s != '"' && n + 4 < cap; s++) {
    if (*s != '\\') {
      out[n++] = *s;
      continue;
    }
    s++;
    switch (*s) {
      case 'n': out[n++] = '\n'; break;
      case 't': out[n++] = '\t'; break;
      case 'r': out[n++] = '\r'; break;
      case 'b': out[n++] = '\b'; break;
      case 'f': out[n++] = '\f'; break;
      case 'u': {
        uint32_t cp = (uint32_t)strtoul((char[]){s[1], s[2], s[3], s[4], 0}, NULL, 16);
        s += 4;
        if (cp >= 0xD800 && cp < 0xDC00 && s[1] == '\\' && s[2] == 'u') {
          uint32_t lo = (uint32_t)strtoul((char[]){s[3], s[4], s[5], s[6], 0}, NULL, 16);
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          s += 6;
        }
        utf8(out, &n, cp);
        break;
      }
      default: out[n++] = *s;
    }
  }
  return n;
}

static void selectors_agree_with_apimachinery_golden(void) {
  FILE *f = fopen(golden_path, "r");
  if (!KWF_CHECK(f != NULL)) return;
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  cJSON *sets = NULL;
  int count = 0;
  while ((len = getline(&line, &cap, f)) > 0) {
    if (line[0] == '#') continue;
    cJSON *c = cJSON_Parse(line);
    if (!sets) {
      sets = cJSON_DetachItemFromObject(c, "label_sets");
      cJSON_Delete(c);
      continue;
    }
    /* The selector may hold a NUL, which cJSON's C strings cannot: decode
     * it from the line itself. */
    cJSON *canonical = cJSON_GetArrayItem(c, 1), *want = cJSON_GetArrayItem(c, 2);
    char text[1024];
    size_t n = json_string(strchr(line, '"'), text, sizeof text);
    char *error = NULL;
    kw_selector *s = kw_selector_parse(text, n, &error);
    if (!s) {
      if (!KWF_CHECK(cJSON_IsNull(canonical))) fprintf(stderr, "    %s: refused: %s\n", line, error);
      free(error);
    } else if (!KWF_CHECK(cJSON_IsString(canonical))) {
      fprintf(stderr, "    %s: parsed, apimachinery refuses it\n", line);
    } else {
      char *got = kw_selector_string(s);
      KWF_EQ_STR(got, canonical->valuestring);
      free(got);
      char matches[16] = {0};
      int i = 0;
      const cJSON *set;
      cJSON_ArrayForEach(set, sets) {
        kw_pairs pairs = {0};
        pairs.ptr = calloc(16, sizeof *pairs.ptr);
        const cJSON *kv;
        cJSON_ArrayForEach(kv, set) {
          pairs.ptr[pairs.len].f0 = kw_s(kv->string);
          pairs.ptr[pairs.len].f1 = kw_s(kv->valuestring);
          pairs.len++;
        }
        matches[i++] = kw_selector_matches(s, &pairs) ? '1' : '0';
        free(pairs.ptr);
      }
      if (strcmp(matches, want->valuestring) != 0) {
        KWF_CHECK(false);
        fprintf(stderr, "    %s: matches %s\n", line, matches);
      }
      kw_selector_free(s);
    }
    cJSON_Delete(c);
    count++;
  }
  free(line);
  cJSON_Delete(sets);
  fclose(f);
  KWF_CHECK(count > 1000);
}

int main(int argc, char **argv) {
  golden_path = argc > 1 ? argv[1] : "../../host/src/informer/selector_golden.jsonl";
  KWF_RUN(load_handle_and_registration_checks);
  KWF_RUN(cache_reads_and_objects);
  KWF_RUN(selectors_agree_with_apimachinery_golden);
  return kwf_summary();
}

// Where the scrubber's digit runs begin, in one pass over the text's UTF-16 units at memory speed: the part of
// daemon/scrub/runs.ts's scan that reads every character. Most text lies between numbers; this finds the runs, and
// the JavaScript reads each run that may hold a value (its groups, gaps and digits) itself. It knows no character
// lists of its own: daemon/scrub hands it its tables once (init), and a test checks both scans agree on random text.
//
// scan(text) returns { starts: Int32Array, runs: Int32Array }:
//   starts  where each run that may be an IBAN's check digits begins (after a Latin letter, separator, invisible
//           character or at the start of the text)
//   runs    where each run of at least ten digits begins
#define NAPI_VERSION 8
#include <node_api.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { OTHER = 0, DIGIT = 1, SEPARATOR = 2, INVISIBLE = 3, ARABIC_DECIMAL = 4, ASTRAL = 5, LINE_BREAK = 6 };

// Per BMP unit: its kind; whether a run starting right after it may be an IBAN's digits. Code points of planes 1 and
// 14 (the only ones above U+FFFF with digits, marks or invisible characters): their kind, at cp - 0x10000 for plane 1
// and cp - 0xE0000 + 0x10000 for plane 14 (characters.ts's astralIndex).
static uint8_t unit_kind[0x10000];
static uint8_t may_precede_iban[0x10000];
static uint8_t astral_kind[0x20000];
static int initialised;

enum { MAX_SEPARATORS = 2, SHORTEST_VALUE = 10 };

typedef struct {
  int32_t *data;
  size_t length, capacity;
} ints;

static int push(ints *list, int32_t value) {
  if (list->length == list->capacity) {
    size_t grown = list->capacity ? list->capacity * 2 : 256;
    int32_t *moved = realloc(list->data, grown * sizeof(int32_t));
    if (!moved) return 0;
    list->data = moved;
    list->capacity = grown;
  }
  list->data[list->length++] = value;
  return 1;
}

// A unit's kind (and width in units), reading a surrogate pair whole where it may matter.
static int kind_at(const char16_t *text, size_t length, size_t i, int *width) {
  uint16_t unit = text[i];
  int kind = unit_kind[unit];
  *width = 1;
  if (kind != ASTRAL) return kind;
  if (i + 1 >= length) return OTHER;
  uint16_t low = text[i + 1];
  if (low < 0xdc00 || low > 0xdfff) return OTHER;
  uint32_t cp = 0x10000 + (((uint32_t)unit - 0xd800) << 10) + (low - 0xdc00);
  *width = 2;
  return astral_kind[cp < 0xe0000 ? cp - 0x10000 : cp - 0xe0000 + 0x10000];
}

// Runs as runs.ts reads them: from a digit to the last digit joined to it, where between two digits there may be
// invisible characters and at most two separators, of which at most one line break (CR LF is one) and U+066B only
// alone.
static int scan_text(const char16_t *text, size_t length, ints *starts, ints *runs) {
  size_t i = 0;
  while (i < length) {
    int width;
    if (kind_at(text, length, i, &width) != DIGIT) {
      i += width;
      continue;
    }
    size_t start = i;
    if (start == 0 || may_precede_iban[text[start - 1]]) {
      if (!push(starts, (int32_t)start)) return 0;
    }
    int32_t digits = 0;
    int separators = 0, line_break = 0, after_cr = 0;
    while (i < length) {
      uint16_t unit = text[i];
      int kind = kind_at(text, length, i, &width);
      if (kind == DIGIT) {
        digits++;
        separators = line_break = after_cr = 0;
      } else if (kind == INVISIBLE) {
        // seen through
      } else if (kind == LINE_BREAK && unit == 0x0a && after_cr) {
        after_cr = 0;  // the LF of a CR LF: one line break
      } else if ((kind == LINE_BREAK && !line_break && separators < MAX_SEPARATORS) ||
                 (kind == SEPARATOR && separators < MAX_SEPARATORS) || (kind == ARABIC_DECIMAL && separators == 0)) {
        separators++;
        if (kind == LINE_BREAK) line_break = 1;
        after_cr = unit == 0x0d;
      } else {
        // Anything else ends the run at its last digit; this unit cannot start the next one.
        i += width;
        break;
      }
      i += width;
    }
    if (digits >= SHORTEST_VALUE && !push(runs, (int32_t)start)) return 0;
  }
  return 1;
}

#define CHECK(call)                                                  \
  do {                                                               \
    if ((call) != napi_ok) {                                         \
      napi_throw_error(env, NULL, "scrub-scan: N-API call failed");  \
      return NULL;                                                   \
    }                                                                \
  } while (0)

static napi_value int32_array(napi_env env, const ints *list) {
  napi_value buffer, array;
  void *data;
  if (napi_create_arraybuffer(env, list->length * sizeof(int32_t), &data, &buffer) != napi_ok) return NULL;
  if (list->length) memcpy(data, list->data, list->length * sizeof(int32_t));
  if (napi_create_typedarray(env, napi_int32_array, list->length, buffer, 0, &array) != napi_ok) return NULL;
  return array;
}

// init(unitKinds: Uint8Array(65536), mayPrecedeIban: Uint8Array(65536), astralKinds: Uint8Array(131072)). A second
// call (another thread's copy of the module) finds the same tables in place and changes nothing.
static napi_value init(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  void *tables[3];
  size_t lengths[3];
  napi_typedarray_type types[3];
  const size_t sizes[3] = {0x10000, 0x10000, 0x20000};
  for (int k = 0; k < 3; k++) {
    if (k >= (int)argc || napi_get_typedarray_info(env, argv[k], &types[k], &lengths[k], &tables[k], NULL, NULL) != napi_ok ||
        types[k] != napi_uint8_array || lengths[k] != sizes[k]) {
      napi_throw_type_error(env, NULL, "scrub-scan init: expected the three character tables");
      return NULL;
    }
  }
  if (initialised) return NULL;
  memcpy(unit_kind, tables[0], sizes[0]);
  memcpy(may_precede_iban, tables[1], sizes[1]);
  memcpy(astral_kind, tables[2], sizes[2]);
  initialised = 1;
  return NULL;
}

static napi_value scan(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  napi_valuetype type;
  if (!initialised || argc < 1 || napi_typeof(env, argv[0], &type) != napi_ok || type != napi_string) {
    napi_throw_type_error(env, NULL, initialised ? "scrub-scan: scan(text) takes a string" : "scrub-scan: init() first");
    return NULL;
  }
  size_t length;
  CHECK(napi_get_value_string_utf16(env, argv[0], NULL, 0, &length));
  char16_t *text = malloc((length + 1) * sizeof(char16_t));
  if (!text) {
    napi_throw_error(env, "ENOMEM", "scrub-scan: out of memory");
    return NULL;
  }
  size_t copied;
  ints starts = {0}, runs = {0};
  int ok = napi_get_value_string_utf16(env, argv[0], text, length + 1, &copied) == napi_ok &&
           scan_text(text, copied, &starts, &runs);
  free(text);
  napi_value result = NULL, starts_array = NULL, runs_array = NULL;
  if (ok) {
    starts_array = int32_array(env, &starts);
    runs_array = int32_array(env, &runs);
  }
  free(starts.data);
  free(runs.data);
  if (!ok || !starts_array || !runs_array) {
    napi_throw_error(env, "ENOMEM", "scrub-scan: out of memory");
    return NULL;
  }
  CHECK(napi_create_object(env, &result));
  CHECK(napi_set_named_property(env, result, "starts", starts_array));
  CHECK(napi_set_named_property(env, result, "runs", runs_array));
  return result;
}

NAPI_MODULE_INIT() {
  napi_value fn;
  if (napi_create_function(env, "init", NAPI_AUTO_LENGTH, init, NULL, &fn) != napi_ok ||
      napi_set_named_property(env, exports, "init", fn) != napi_ok ||
      napi_create_function(env, "scan", NAPI_AUTO_LENGTH, scan, NULL, &fn) != napi_ok ||
      napi_set_named_property(env, exports, "scan", fn) != napi_ok)
    return NULL;
  return exports;
}

// Where the scrubber's digit runs begin, in one pass over the text's UTF-16 units at memory speed: the part of
// daemon/scrub/runs.ts's scan that reads every character. Most text lies between numbers; this finds the runs, and
// the JavaScript reads each run that may hold a value (its groups, gaps and digits) itself. It knows no character
// lists of its own: daemon/scrub hands it its tables once (init), and a test checks both scans agree on random text.
//
// scan(text) returns { starts: Int32Array, runs: Int32Array }:
//   starts  where each run that may be an IBAN's check digits begins (after a Latin letter, separator, invisible
//           character or at the start of the text)
//   runs    where each run begins some of whose groups in a row have a value's length (runs.ts's mayBeValue: ten
//           digits starting with 1 or 2, or 13 to 19): no other run can hold a value, so JavaScript never reads it
#define NAPI_VERSION 8
#include <node_api.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { OTHER = 0, DIGIT = 1, SEPARATOR = 2, INVISIBLE = 3, ARABIC_DECIMAL = 4, ASTRAL = 5, LINE_BREAK = 6 };

// Per BMP unit: its kind and digit value; whether a run starting right after it may be an IBAN's digits. Code points
// of planes 1 and 14 (the only ones above U+FFFF with digits, marks or invisible characters): their kind and value,
// at cp - 0x10000 for plane 1 and cp - 0xE0000 + 0x10000 for plane 14 (characters.ts's astralIndex).
static uint8_t unit_kind[0x10000];
static int8_t unit_value[0x10000];
static uint8_t may_precede_iban[0x10000];
static uint8_t astral_kind[0x20000];
static int8_t astral_value[0x20000];
static int initialised;

enum { MAX_SEPARATORS = 2, SHORTEST_VALUE = 10, LONGEST_VALUE = 19 };

static int may_be_value(int length, int first) {
  return length == SHORTEST_VALUE ? (first == 1 || first == 2) : (length >= 13 && length <= LONGEST_VALUE);
}

// The last groups of the run being read (at most a value's length of them): their digit counts and first digits.
typedef struct {
  int length[LONGEST_VALUE], first[LONGEST_VALUE];
  int count;  // groups held, at most LONGEST_VALUE; the newest is at (count - 1)
} recent_groups;

// A group ended: whether it ends some groups in a row that make a value's length.
static int ends_value_length(recent_groups *recent, int length, int first) {
  if (recent->count == LONGEST_VALUE) {
    memmove(recent->length, recent->length + 1, (LONGEST_VALUE - 1) * sizeof(int));
    memmove(recent->first, recent->first + 1, (LONGEST_VALUE - 1) * sizeof(int));
    recent->count--;
  }
  recent->length[recent->count] = length;
  recent->first[recent->count] = first;
  recent->count++;
  int total = 0;
  for (int g = recent->count - 1; g >= 0; g--) {
    total += recent->length[g];
    if (total > LONGEST_VALUE) break;
    if (may_be_value(total, recent->first[g])) return 1;
  }
  return 0;
}

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

// A unit's kind, digit value and width in units, reading a surrogate pair whole where it may matter.
static int kind_at(const char16_t *text, size_t length, size_t i, int *width, int *value) {
  uint16_t unit = text[i];
  int kind = unit_kind[unit];
  *width = 1;
  *value = unit_value[unit];
  if (kind != ASTRAL) return kind;
  if (i + 1 >= length) return OTHER;
  uint16_t low = text[i + 1];
  if (low < 0xdc00 || low > 0xdfff) return OTHER;
  uint32_t cp = 0x10000 + (((uint32_t)unit - 0xd800) << 10) + (low - 0xdc00);
  uint32_t at = cp < 0xe0000 ? cp - 0x10000 : cp - 0xe0000 + 0x10000;
  *width = 2;
  *value = astral_value[at];
  return astral_kind[at];
}

// Runs as runs.ts reads them: from a digit to the last digit joined to it, where between two digits there may be
// invisible characters and at most two separators, of which at most one line break (CR LF is one) and U+066B only
// alone.
static int scan_text(const char16_t *text, size_t length, ints *starts, ints *runs) {
  size_t i = 0;
  while (i < length) {
    int width, value;
    if (kind_at(text, length, i, &width, &value) != DIGIT) {
      i += width;
      continue;
    }
    size_t start = i;
    if (start == 0 || may_precede_iban[text[start - 1]]) {
      if (!push(starts, (int32_t)start)) return 0;
    }
    recent_groups recent = {{0}, {0}, 0};
    int holds = 0, group_length = 0, group_first = 0;
    int separators = 0, line_break = 0, after_cr = 0;
    while (i < length) {
      uint16_t unit = text[i];
      int kind = kind_at(text, length, i, &width, &value);
      if (kind == DIGIT) {
        if (separators > 0) {
          holds = holds || ends_value_length(&recent, group_length, group_first);
          group_length = 0;
        }
        if (group_length == 0) group_first = value;
        // A group longer than any value ends every reading that includes it; its length only needs to say so.
        if (group_length <= LONGEST_VALUE) group_length++;
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
    holds = holds || ends_value_length(&recent, group_length, group_first);
    if (holds && !push(runs, (int32_t)start)) return 0;
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

// init(unitKinds: Uint8Array(65536), unitValues: Int8Array(65536), mayPrecedeIban: Uint8Array(65536),
//      astralKinds: Uint8Array(131072), astralValues: Int8Array(131072)). A second call (another thread's copy of the
// module) finds the same tables in place and changes nothing.
static napi_value init(napi_env env, napi_callback_info info) {
  size_t argc = 5;
  napi_value argv[5];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  void *tables[5];
  size_t lengths[5];
  napi_typedarray_type types[5];
  const napi_typedarray_type expected[5] = {napi_uint8_array, napi_int8_array, napi_uint8_array, napi_uint8_array,
                                            napi_int8_array};
  const size_t sizes[5] = {0x10000, 0x10000, 0x10000, 0x20000, 0x20000};
  for (int k = 0; k < 5; k++) {
    if (k >= (int)argc || napi_get_typedarray_info(env, argv[k], &types[k], &lengths[k], &tables[k], NULL, NULL) != napi_ok ||
        types[k] != expected[k] || lengths[k] != sizes[k]) {
      napi_throw_type_error(env, NULL, "scrub-scan init: expected the five character tables");
      return NULL;
    }
  }
  if (initialised) return NULL;
  memcpy(unit_kind, tables[0], sizes[0]);
  memcpy(unit_value, tables[1], sizes[1]);
  memcpy(may_precede_iban, tables[2], sizes[2]);
  memcpy(astral_kind, tables[3], sizes[3]);
  memcpy(astral_value, tables[4], sizes[4]);
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

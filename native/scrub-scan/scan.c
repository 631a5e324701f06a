// The scrubber's digit-run scanner in one pass over the text's UTF-16 units: what daemon/scrub/runs.ts does in
// JavaScript (digitRunsJs, the same state machine), at memory speed. It knows no character lists of its own: daemon/scrub hands it
// its tables once (init), so both scanners read the same digits, separators and invisible characters, and a test
// checks they agree on random text.
//
// scan(text) returns { starts: Int32Array, runs: Int32Array, digits: string }:
//   starts  where each run that may be an IBAN's check digits begins (after a Latin letter, separator, invisible
//           character or at the start of the text)
//   runs    per run whose groups may make a value: digitsOffset, usable digits, group count, then per group its
//           first and end digit index and its start and end in the text
//   digits  the digits of those runs, in ASCII, one after another
#define NAPI_VERSION 8
#include <node_api.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { OTHER = 0, DIGIT = 1, SEPARATOR = 2, INVISIBLE = 3, ARABIC_DECIMAL = 4, ASTRAL = 5 };

// Per BMP unit: its kind and, for digits, its value; whether a run starting right after it may be an IBAN's digits.
static uint8_t unit_kind[0x10000];
static int8_t unit_value[0x10000];
static uint8_t may_precede_iban[0x10000];
// Code points above U+FFFF: ranges of digits (first value 0 at `first`, repeating every ten) and of invisibles.
typedef struct {
  uint32_t first, last, kind;
} astral_range;
static astral_range astral[64];
static size_t astral_count;
static int initialised;

enum { MAX_SEPARATORS = 2, SHORTEST_VALUE = 10, LONGEST_VALUE = 19 };

// Makes room for one more element in a growing array (doubling from `initial`); 0 when memory runs out.
static int reserve(void **data, size_t *capacity, size_t length, size_t element, size_t initial) {
  if (length < *capacity) return 1;
  size_t grown = *capacity ? *capacity * 2 : initial;
  void *moved = realloc(*data, grown * element);
  if (!moved) return 0;
  *data = moved;
  *capacity = grown;
  return 1;
}

typedef struct {
  int32_t *data;
  size_t length, capacity;
} ints;

static int push(ints *list, int32_t value) {
  if (!reserve((void **)&list->data, &list->capacity, list->length, sizeof(int32_t), 256)) return 0;
  list->data[list->length++] = value;
  return 1;
}

typedef struct {
  char *data;
  size_t length, capacity;
} chars;

static int push_char(chars *list, char value) {
  if (!reserve((void **)&list->data, &list->capacity, list->length, 1, 1024)) return 0;
  list->data[list->length++] = value;
  return 1;
}

// The run being read: per group, its first digit's index among the run's digits, that digit's value, its span.
typedef struct {
  int32_t *from, *start, *end;
  int8_t *first;
  size_t capacity;
  uint8_t *digits;  // the run's digit values
  size_t digits_capacity;
} run_state;

static int grow_groups(run_state *run) {
  size_t capacity = run->capacity ? run->capacity * 2 : 64;
  int32_t *from = realloc(run->from, capacity * sizeof(int32_t));
  if (from) run->from = from;
  int32_t *start = realloc(run->start, capacity * sizeof(int32_t));
  if (start) run->start = start;
  int32_t *end = realloc(run->end, capacity * sizeof(int32_t));
  if (end) run->end = end;
  int8_t *first = realloc(run->first, capacity);
  if (first) run->first = first;
  if (!from || !start || !end || !first) return 0;
  run->capacity = capacity;
  return 1;
}

static int grow_digits(run_state *run) {
  return reserve((void **)&run->digits, &run->digits_capacity, run->digits_capacity, 1, 256);
}

static void free_run(run_state *run) {
  free(run->from);
  free(run->start);
  free(run->end);
  free(run->first);
  free(run->digits);
}

static int may_be_value(int32_t length, int first) {
  return length == SHORTEST_VALUE ? (first == 1 || first == 2) : (length >= 13 && length <= LONGEST_VALUE);
}

static int is_decimal_point(uint32_t unit) {
  return unit == 0x2e || unit == 0xff0e || unit == 0x066b;
}

// A unit's kind (and digit value, and width in units), reading a surrogate pair whole where it may matter.
static int kind_at(const char16_t *text, size_t length, size_t i, int *value, int *width) {
  uint16_t unit = text[i];
  int kind = unit_kind[unit];
  *width = 1;
  *value = unit_value[unit];
  if (kind != ASTRAL) return kind;
  if (unit < 0xd800 || unit > 0xdbff || i + 1 >= length) return OTHER;
  uint16_t low = text[i + 1];
  if (low < 0xdc00 || low > 0xdfff) return OTHER;
  uint32_t cp = 0x10000 + (((uint32_t)unit - 0xd800) << 10) + (low - 0xdc00);
  *width = 2;
  for (size_t r = 0; r < astral_count; r++) {
    if (cp < astral[r].first || cp > astral[r].last) continue;
    if (astral[r].kind == DIGIT) *value = (int)((cp - astral[r].first) % 10);
    return (int)astral[r].kind;
  }
  return OTHER;
}

typedef struct {
  ints starts, runs;
  chars digits;
} scan_out;

// A run ended: list its start, and its groups and digits when some of its groups in a row may make a value.
static int close_run(const char16_t *text, scan_out *out, run_state *run, int32_t start, int32_t end, int32_t count,
                     int32_t all_groups, int decimal_tail) {
  if (start == 0 || may_precede_iban[text[start - 1]]) {
    if (!push(&out->starts, start)) return 0;
  }
  if (end - start < SHORTEST_VALUE) return 1;
  int32_t groups = all_groups;
  // "1012345678.50" is an amount: a dot and one or two final digits end the run as a decimal number.
  if (decimal_tail && groups >= 2 && count - run->from[groups - 1] <= 2) groups -= 2;
  int32_t usable = groups == 0 ? 0 : groups < all_groups ? run->from[groups] : count;
  if (usable < SHORTEST_VALUE) return 1;
  int holds = 0;
  for (int32_t a = 0; a < groups && !holds; a++) {
    for (int32_t b = a; b < groups; b++) {
      int32_t to = b + 1 < all_groups ? run->from[b + 1] : count;
      int32_t span = to - run->from[a];
      if (span > LONGEST_VALUE) break;
      if (may_be_value(span, run->first[a])) {
        holds = 1;
        break;
      }
    }
  }
  if (!holds) return 1;
  if (!push(&out->runs, (int32_t)out->digits.length) || !push(&out->runs, usable) || !push(&out->runs, groups)) return 0;
  for (int32_t g = 0; g < groups; g++) {
    int32_t to = g + 1 < all_groups ? run->from[g + 1] : count;
    if (!push(&out->runs, run->from[g]) || !push(&out->runs, to) || !push(&out->runs, run->start[g]) ||
        !push(&out->runs, run->end[g]))
      return 0;
  }
  for (int32_t d = 0; d < usable; d++) {
    if (!push_char(&out->digits, (char)('0' + run->digits[d]))) return 0;
  }
  return 1;
}

// Runs as people write numbers: from a digit to the last digit joined to it, where between two digits there may be
// invisible characters and at most two separators (the Arabic decimal separator only as the first).
static int scan_text(const char16_t *text, size_t length, scan_out *out) {
  run_state run = {0};
  int ok = grow_groups(&run) && grow_digits(&run);
  int32_t start = -1, end = 0, count = 0, groups = 0, separators = 0, decimal_tail = 0;
  uint16_t last_separator = 0;
  for (size_t i = 0; ok && i < length;) {
    int value, width;
    int kind = kind_at(text, length, i, &value, &width);
    if (start < 0) {
      if (kind != DIGIT) {
        i += width;
        continue;
      }
      start = (int32_t)i;
      count = groups = separators = 0;
      decimal_tail = 0;
    }
    if (kind == DIGIT) {
      if (separators > 0 || count == 0) {
        if ((size_t)groups == run.capacity && !grow_groups(&run)) {
          ok = 0;
          break;
        }
        decimal_tail = separators == 1 && is_decimal_point(last_separator);
        run.from[groups] = count;
        run.first[groups] = (int8_t)value;
        run.start[groups] = (int32_t)i;
        groups++;
      }
      if ((size_t)count == run.digits_capacity && !grow_digits(&run)) {
        ok = 0;
        break;
      }
      run.digits[count++] = (uint8_t)value;
      end = run.end[groups - 1] = (int32_t)(i + width);
      separators = 0;
    } else if (kind == INVISIBLE) {
      // seen through
    } else if ((kind == SEPARATOR && separators < MAX_SEPARATORS) || (kind == ARABIC_DECIMAL && separators == 0)) {
      separators++;
      last_separator = text[i];
    } else {
      // Anything else ends the run at its last digit; this unit cannot start the next one.
      ok = close_run(text, out, &run, start, end, count, groups, decimal_tail);
      start = -1;
    }
    i += width;
  }
  if (ok && start >= 0) ok = close_run(text, out, &run, start, end, count, groups, decimal_tail);
  free_run(&run);
  return ok;
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
//      astral: Uint32Array of [first, last, kind] triples)
static napi_value init(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  void *tables[4];
  size_t lengths[4];
  napi_typedarray_type types[4];
  const napi_typedarray_type expected[4] = {napi_uint8_array, napi_int8_array, napi_uint8_array, napi_uint32_array};
  for (int k = 0; k < 4; k++) {
    if (k >= (int)argc || napi_get_typedarray_info(env, argv[k], &types[k], &lengths[k], &tables[k], NULL, NULL) != napi_ok ||
        types[k] != expected[k] || (k < 3 && lengths[k] != 0x10000) || (k == 3 && (lengths[k] % 3 || lengths[k] / 3 > 64))) {
      napi_throw_type_error(env, NULL, "scrub-scan init: expected the four character tables");
      return NULL;
    }
  }
  memcpy(unit_kind, tables[0], 0x10000);
  memcpy(unit_value, tables[1], 0x10000);
  memcpy(may_precede_iban, tables[2], 0x10000);
  const uint32_t *ranges = tables[3];
  astral_count = lengths[3] / 3;
  for (size_t r = 0; r < astral_count; r++) {
    astral[r].first = ranges[3 * r];
    astral[r].last = ranges[3 * r + 1];
    astral[r].kind = ranges[3 * r + 2];
  }
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
  scan_out out = {0};
  int ok = napi_get_value_string_utf16(env, argv[0], text, length + 1, &copied) == napi_ok &&
           scan_text(text, copied, &out);
  free(text);
  napi_value result = NULL, starts = NULL, runs = NULL, digits = NULL;
  if (ok) {
    starts = int32_array(env, &out.starts);
    runs = int32_array(env, &out.runs);
    if (napi_create_string_latin1(env, out.digits.length ? out.digits.data : "", out.digits.length, &digits) != napi_ok)
      digits = NULL;
  }
  free(out.starts.data);
  free(out.runs.data);
  free(out.digits.data);
  if (!ok || !starts || !runs || !digits) {
    napi_throw_error(env, "ENOMEM", "scrub-scan: out of memory");
    return NULL;
  }
  CHECK(napi_create_object(env, &result));
  CHECK(napi_set_named_property(env, result, "starts", starts));
  CHECK(napi_set_named_property(env, result, "runs", runs));
  CHECK(napi_set_named_property(env, result, "digits", digits));
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

/* The OTLP collector's per-span work in one pass over bytes: evalkit.otel._native.

   scan(body, cls, groups)
               walks an ExportTraceServiceRequest that protobuf (upb) has already parsed
               without error, and makes each span (a `cls`: Incoming) from its columns and
               its bytes as received, with its ScopeSpans' values from `groups`, which also
               give the span count protobuf parsed in each. It returns the spans and the
               counts of those refused for a bad id, a time past int64, and a kind or
               status code past int16. It returns None for a layout it does not follow (a
               singular field given twice, a known field of another wire type, a group) or
               other span counts than protobuf's: the caller then takes the Python path,
               which reads protobuf's parse.
   attributes(span_body, names)
               the encoded AnyValue of each of the span's attributes named in `names`,
               for the few spans whose session id is read (None: fall back likewise).
   copy_rows(spans, received_at_us, agent_id)
               the binary COPY data (header, rows, trailer) of `spans` (Incoming objects)
               for the `span_copy` statement.
   traces(spans, group_type)
               the spans grouped by trace (each a `group_type`, a tuple subclass), with
               each trace's times, bytes and root span, and whether a span comes twice:
               what the store counts before its claim.

   The Python path (evalkit/otel/otlp.py, evalkit/store/otel.py) is the reference: the
   tests compare both on generated and mutated bodies. Every read is bounds-checked, as
   the bytes come from the network. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#define SPAN_OVERHEAD 64
#define BAD_ID 1
#define BAD_TIME 2
#define BAD_CODE 3

enum { WIRE_VARINT = 0, WIRE_I64 = 1, WIRE_LEN = 2, WIRE_I32 = 5 };

typedef struct {
    const uint8_t *p;
    const uint8_t *end;
} Reader;

/* -1: the layout is one this pass does not follow (the caller falls back). */
static int read_varint(Reader *r, uint64_t *out) {
    uint64_t value = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (r->p >= r->end) return -1;
        uint8_t b = *r->p++;
        value |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *out = value;
            return 0;
        }
    }
    return -1;
}

/* The next field: its number, wire type and, for LEN, its bytes; others are skipped. */
typedef struct {
    uint32_t number;
    int wire;
    uint64_t varint;
    const uint8_t *data;
    size_t len;
} Field;

static int next_field(Reader *r, Field *f) {
    uint64_t tag;
    if (read_varint(r, &tag) < 0) return -1;
    if ((tag >> 3) == 0 || (tag >> 3) > 0x1FFFFFFF) return -1;
    f->number = (uint32_t)(tag >> 3);
    f->wire = (int)(tag & 7);
    f->data = NULL;
    f->len = 0;
    switch (f->wire) {
    case WIRE_VARINT:
        return read_varint(r, &f->varint);
    case WIRE_I64:
        if (r->end - r->p < 8) return -1;
        memcpy(&f->varint, r->p, 8); /* little-endian on the wire, as on x86 and arm */
        r->p += 8;
        return 0;
    case WIRE_I32: {
        uint32_t v;
        if (r->end - r->p < 4) return -1;
        memcpy(&v, r->p, 4);
        f->varint = v;
        r->p += 4;
        return 0;
    }
    case WIRE_LEN: {
        uint64_t len;
        if (read_varint(r, &len) < 0) return -1;
        if (len > (uint64_t)(r->end - r->p)) return -1;
        f->data = r->p;
        f->len = (size_t)len;
        r->p += len;
        return 0;
    }
    default: /* groups (3, 4) and the undefined 6, 7 */
        return -1;
    }
}

static int all_zero(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

/* Text as PostgreSQL stores it: NUL (which it cannot hold) becomes U+FFFD. */
static PyObject *text(const uint8_t *p, size_t n) {
    PyObject *s = PyUnicode_DecodeUTF8((const char *)p, (Py_ssize_t)n, "strict");
    if (s == NULL || memchr(p, 0, n) == NULL) return s;
    PyObject *nul = PyUnicode_FromOrdinal(0), *repl = PyUnicode_FromOrdinal(0xFFFD);
    PyObject *out = (nul && repl) ? PyUnicode_Replace(s, nul, repl, -1) : NULL;
    Py_XDECREF(nul);
    Py_XDECREF(repl);
    Py_DECREF(s);
    return out;
}

typedef struct {
    const uint8_t *trace_id, *span_id, *parent, *name, *status_message;
    size_t trace_len, span_len, parent_len, name_len, status_message_len;
    uint64_t kind, start, end, status_code;
    int has_status;
    uint32_t seen; /* bit n: field n was read (a second one means fall back) */
} SpanFields;

static int once(uint32_t *seen, uint32_t number) {
    if (*seen & (1u << number)) return -1;
    *seen |= 1u << number;
    return 0;
}

static int read_status(const uint8_t *p, size_t n, SpanFields *s) {
    Reader r = {p, p + n};
    uint32_t seen = 0;
    Field f;
    while (r.p < r.end) {
        if (next_field(&r, &f) < 0) return -1;
        if (f.number == 2) {
            if (f.wire != WIRE_LEN || once(&seen, 2) < 0) return -1;
            s->status_message = f.data;
            s->status_message_len = f.len;
        } else if (f.number == 3) {
            if (f.wire != WIRE_VARINT || once(&seen, 3) < 0) return -1;
            s->status_code = f.varint;
        }
    }
    return 0;
}

static int read_span(const uint8_t *p, size_t n, SpanFields *s) {
    Reader r = {p, p + n};
    Field f;
    memset(s, 0, sizeof *s);
    while (r.p < r.end) {
        if (next_field(&r, &f) < 0) return -1;
        int want;
        switch (f.number) {
        case 1: case 2: case 4: case 5: case 15: want = WIRE_LEN; break;
        case 6: want = WIRE_VARINT; break;
        case 7: case 8: want = WIRE_I64; break;
        default: continue; /* attributes, events, links, counts, flags: kept in the bytes */
        }
        if (f.wire != want || once(&s->seen, f.number) < 0) return -1;
        switch (f.number) {
        case 1: s->trace_id = f.data; s->trace_len = f.len; break;
        case 2: s->span_id = f.data; s->span_len = f.len; break;
        case 4: s->parent = f.data; s->parent_len = f.len; break;
        case 5: s->name = f.data; s->name_len = f.len; break;
        case 6: s->kind = f.varint; break;
        case 7: s->start = f.varint; break;
        case 8: s->end = f.varint; break;
        case 15:
            s->has_status = 1;
            if (read_status(f.data, f.len, s) < 0) return -1;
            break;
        }
    }
    return 0;
}

/* Protobuf keeps an enum's varint as its low 32 bits, signed. */
static long enum_value(uint64_t v) { return (long)(int32_t)(uint32_t)v; }

/* The fields of evalkit.otel.otlp.Incoming, in its order; a span is made by writing its
   slots (Incoming keeps its fields in __slots__ and has no __init__ logic of its own). */
enum {
    F_TRACE_ID, F_SPAN_ID, F_PARENT, F_NAME, F_KIND, F_START, F_END, F_CODE, F_MESSAGE,
    F_BODY, F_SIZE, F_RESOURCE_BODY, F_SCOPE, F_RESOURCE, NFIELDS
};
static const char *FIELD_NAMES[NFIELDS] = {
    "trace_id", "span_id", "parent_span_id", "name", "kind", "start_ns", "end_ns",
    "status_code", "status_message", "body", "size", "resource_body", "scope", "resource",
};

/* Where each of `names` lies in objects of `type`; -1 when one is not a plain slot. */
static int slot_offsets(PyTypeObject *type, const char *const names[], int count,
                        Py_ssize_t offsets[]) {
    for (int i = 0; i < count; i++) {
        PyObject *d = PyObject_GetAttrString((PyObject *)type, names[i]);
        if (d == NULL) {
            PyErr_Clear();
            return -1;
        }
        int slot = Py_IS_TYPE(d, &PyMemberDescr_Type) &&
                   ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
        offsets[i] = slot ? ((PyMemberDescrObject *)d)->d_member->offset : -1;
        Py_DECREF(d);
        if (!slot) return -1;
    }
    return 0;
}

typedef struct {
    PyTypeObject *type;
    Py_ssize_t offsets[NFIELDS];
    PyObject *resource_body, *scope, *resource; /* of the span's ScopeSpans, borrowed */
} Maker;

/* The span as an Incoming, or an int saying why it is refused (BAD_*); NULL with
   *fallback set for a layout this pass does not follow, NULL alone on an error. */
static PyObject *make_span(const uint8_t *p, size_t n, const Maker *m, int *fallback) {
    SpanFields s;
    if (read_span(p, n, &s) < 0) {
        *fallback = 1;
        return NULL;
    }
    if (s.trace_len != 16 || s.span_len != 8 || all_zero(s.trace_id, 16) ||
        all_zero(s.span_id, 8) || (s.parent_len && s.parent_len != 8))
        return PyLong_FromLong(BAD_ID);
    if (s.start > INT64_MAX || s.end > INT64_MAX) return PyLong_FromLong(BAD_TIME);
    long kind = enum_value(s.kind), code = s.has_status ? enum_value(s.status_code) : 0;
    if (kind < INT16_MIN || kind > INT16_MAX || code < INT16_MIN || code > INT16_MAX)
        return PyLong_FromLong(BAD_CODE);

    PyObject *v[NFIELDS] = {NULL};
    v[F_NAME] = text(s.name ? s.name : (const uint8_t *)"", s.name_len);
    v[F_MESSAGE] = s.has_status && s.status_message_len
                       ? text(s.status_message, s.status_message_len)
                       : Py_NewRef(Py_None);
    if (v[F_NAME] == NULL || v[F_MESSAGE] == NULL) { /* not UTF-8: protobuf decides */
        Py_XDECREF(v[F_NAME]);
        Py_XDECREF(v[F_MESSAGE]);
        *fallback = 1;
        return NULL;
    }
    v[F_TRACE_ID] = PyBytes_FromStringAndSize((const char *)s.trace_id, 16);
    v[F_SPAN_ID] = PyBytes_FromStringAndSize((const char *)s.span_id, 8);
    v[F_PARENT] = s.parent_len && !all_zero(s.parent, 8)
                      ? PyBytes_FromStringAndSize((const char *)s.parent, 8)
                      : Py_NewRef(Py_None);
    v[F_KIND] = PyLong_FromLong(kind);
    v[F_START] = PyLong_FromLongLong((long long)s.start);
    v[F_END] = PyLong_FromLongLong((long long)s.end);
    v[F_CODE] = PyLong_FromLong(code);
    v[F_BODY] = PyBytes_FromStringAndSize((const char *)p, (Py_ssize_t)n);
    v[F_SIZE] = PyLong_FromSsize_t((Py_ssize_t)n + PyUnicode_GET_LENGTH(v[F_NAME]) +
                                   SPAN_OVERHEAD);
    v[F_RESOURCE_BODY] = Py_NewRef(m->resource_body);
    v[F_SCOPE] = Py_NewRef(m->scope);
    v[F_RESOURCE] = Py_NewRef(m->resource);
    PyObject *span = m->type->tp_alloc(m->type, 0);
    for (int i = 0; i < NFIELDS; i++) {
        if (v[i] == NULL || span == NULL) {
            for (int j = 0; j < NFIELDS; j++) Py_XDECREF(v[j]);
            Py_XDECREF(span);
            return NULL;
        }
    }
    for (int i = 0; i < NFIELDS; i++) *(PyObject **)((char *)span + m->offsets[i]) = v[i];
    return span;
}

/* Appends each field `wanted` (LEN) of the message in p[0:n] to `out` as a Reader. */
typedef struct {
    Reader *items;
    size_t count, capacity;
} Readers;

static int collect(const uint8_t *p, size_t n, uint32_t wanted, Readers *out) {
    Reader r = {p, p + n};
    Field f;
    while (r.p < r.end) {
        if (next_field(&r, &f) < 0) return -1;
        if (f.number != wanted || f.wire != WIRE_LEN) continue;
        if (out->count == out->capacity) {
            size_t capacity = out->capacity ? out->capacity * 2 : 64;
            Reader *items = PyMem_Realloc(out->items, capacity * sizeof(Reader));
            if (items == NULL) return -2;
            out->items = items;
            out->capacity = capacity;
        }
        out->items[out->count++] = (Reader){f.data, f.data + f.len};
    }
    return 0;
}

static PyObject *scan(PyObject *module, PyObject *args) {
    Py_buffer view;
    PyObject *groups;
    Maker m;
    if (!PyArg_ParseTuple(args, "y*O!O!", &view, &PyType_Type, &m.type, &PyList_Type, &groups))
        return NULL;
    const uint8_t *body = view.buf;
    Readers resource_spans = {0}, scope_spans = {0};
    PyObject *spans = PyList_New(0), *result = NULL;
    Py_ssize_t refused[4] = {0};
    int fallback = 0, status;
    if (spans == NULL) goto done;
    if (slot_offsets(m.type, FIELD_NAMES, NFIELDS, m.offsets) < 0) {
        PyErr_SetString(PyExc_TypeError, "scan makes objects with Incoming's slots");
        goto done;
    }
    status = collect(body, (size_t)view.len, 1, &resource_spans);
    for (size_t i = 0; status == 0 && i < resource_spans.count; i++) {
        Reader rs = resource_spans.items[i];
        status = collect(rs.p, (size_t)(rs.end - rs.p), 2, &scope_spans);
    }
    if (status == -2) {
        PyErr_NoMemory();
        goto done;
    }
    if (status < 0 || (size_t)PyList_GET_SIZE(groups) != scope_spans.count) goto fall_back;
    for (size_t i = 0; i < scope_spans.count; i++) {
        Py_ssize_t expected;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(groups, i), "nOOO", &expected, &m.resource_body,
                              &m.scope, &m.resource))
            goto done;
        Reader r = scope_spans.items[i];
        Py_ssize_t count = 0;
        Field f;
        while (r.p < r.end) {
            if (next_field(&r, &f) < 0) goto fall_back;
            if (f.number != 2 || f.wire != WIRE_LEN) continue;
            PyObject *span = make_span(f.data, f.len, &m, &fallback);
            if (span == NULL) {
                if (fallback) goto fall_back;
                goto done;
            }
            count++;
            if (PyLong_CheckExact(span)) {
                refused[PyLong_AsLong(span)]++;
                Py_DECREF(span);
                continue;
            }
            int appended = PyList_Append(spans, span);
            Py_DECREF(span);
            if (appended < 0) goto done;
        }
        if (count != expected) goto fall_back; /* protobuf parsed other spans */
    }
    result = Py_BuildValue("(Onnn)", spans, refused[BAD_ID], refused[BAD_TIME],
                           refused[BAD_CODE]);
    goto done;

fall_back:
    PyErr_Clear();
    result = Py_NewRef(Py_None);
done:
    PyMem_Free(resource_spans.items);
    PyMem_Free(scope_spans.items);
    Py_XDECREF(spans);
    PyBuffer_Release(&view);
    return result;
}

/* One KeyValue: its key and its AnyValue's bytes (empty when it has none). */
static int read_key_value(const uint8_t *p, size_t n, Field *key, Field *value) {
    Reader r = {p, p + n};
    uint32_t seen = 0;
    Field f;
    key->data = value->data = (const uint8_t *)"";
    key->len = value->len = 0;
    while (r.p < r.end) {
        if (next_field(&r, &f) < 0) return -1;
        if (f.number != 1 && f.number != 2) continue;
        if (f.wire != WIRE_LEN || once(&seen, f.number) < 0) return -1;
        *(f.number == 1 ? key : value) = f;
    }
    return 0;
}

static PyObject *attributes(PyObject *module, PyObject *args) {
    Py_buffer view;
    PyObject *names, *found = NULL, *result = NULL;
    if (!PyArg_ParseTuple(args, "y*O", &view, &names)) return NULL;
    PyObject *seq = PySequence_Fast(names, "names must be a sequence of str");
    if (seq == NULL) goto done;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!PyUnicode_Check(PySequence_Fast_GET_ITEM(seq, i))) {
            PyErr_SetString(PyExc_TypeError, "names must be a sequence of str");
            goto done;
        }
    }
    if ((found = PyDict_New()) == NULL) goto done;
    Reader r = {view.buf, (const uint8_t *)view.buf + view.len};
    Field f, key, value;
    while (r.p < r.end) {
        if (next_field(&r, &f) < 0) goto fall_back;
        if (f.number != 9) continue;
        if (f.wire != WIRE_LEN || read_key_value(f.data, f.len, &key, &value) < 0)
            goto fall_back;
        for (Py_ssize_t i = 0; i < count; i++) {
            PyObject *name = PySequence_Fast_GET_ITEM(seq, i);
            Py_ssize_t size;
            const char *text = PyUnicode_AsUTF8AndSize(name, &size);
            if (text == NULL) goto done;
            if ((size_t)size != key.len || memcmp(text, key.data, key.len) != 0) continue;
            PyObject *raw = PyBytes_FromStringAndSize((const char *)value.data, value.len);
            int set = raw == NULL ? -1 : PyDict_SetItem(found, name, raw);
            Py_XDECREF(raw); /* a later attribute of the same key replaces it */
            if (set < 0) goto done;
            break;
        }
    }
    result = Py_NewRef(found);
    goto done;
fall_back:
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(seq);
    Py_XDECREF(found);
    PyBuffer_Release(&view);
    return result;
}

/* ------------------------------------------------------------------ binary COPY rows */

typedef struct {
    char *data;
    size_t len, capacity;
} Buffer;

static int grow(Buffer *b, size_t more) {
    if (b->len + more <= b->capacity) return 0;
    size_t capacity = b->capacity ? b->capacity : 65536;
    while (capacity < b->len + more) capacity *= 2;
    char *data = PyMem_Realloc(b->data, capacity);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->capacity = capacity;
    return 0;
}

static void put_be(Buffer *b, uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; i--) b->data[b->len++] = (char)(v >> (8 * i));
}

static int put_raw(Buffer *b, const char *p, Py_ssize_t n) {
    if (n > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "a COPY field is larger than 2 GiB");
        return -1;
    }
    if (grow(b, 4 + (size_t)n) < 0) return -1;
    put_be(b, (uint32_t)n, 4);
    memcpy(b->data + b->len, p, (size_t)n);
    b->len += (size_t)n;
    return 0;
}

static int put_null(Buffer *b) {
    if (grow(b, 4) < 0) return -1;
    put_be(b, 0xFFFFFFFFu, 4);
    return 0;
}

static int put_int(Buffer *b, long long v, int bytes, const char *column) {
    long long high = bytes == 8 ? INT64_MAX : (1LL << (8 * bytes - 1)) - 1;
    long long low = -high - 1;
    if (v < low || v > high) {
        PyErr_Format(PyExc_OverflowError, "%s %lld does not fit %d bytes", column, v, bytes);
        return -1;
    }
    if (grow(b, 4 + (size_t)bytes) < 0) return -1;
    put_be(b, (uint32_t)bytes, 4);
    put_be(b, (uint64_t)v, bytes);
    return 0;
}

enum { BYTES, BYTES_OR_NULL, TEXT, TEXT_OR_NULL, INT2, INT4, INT8 };

typedef struct {
    const char *name;
    int type;
    PyObject *interned;
} Column;

/* The span_copy statement's columns after received_at and agent_id, in its order. */
static Column COLUMNS[] = {
    {"trace_id", BYTES}, {"span_id", BYTES}, {"parent_span_id", BYTES_OR_NULL},
    {"name", TEXT}, {"kind", INT2}, {"start_ns", INT8}, {"end_ns", INT8},
    {"status_code", INT2}, {"status_message", TEXT_OR_NULL}, {"scope", TEXT_OR_NULL},
    {"body", BYTES}, {"resource_body", BYTES}, {"size", INT4},
};
#define NCOLUMNS ((int)(sizeof COLUMNS / sizeof COLUMNS[0]))

static int put_column(Buffer *b, PyObject *value, const Column *c) {
    if (value == Py_None && (c->type == BYTES_OR_NULL || c->type == TEXT_OR_NULL))
        return put_null(b);
    switch (c->type) {
    case BYTES:
    case BYTES_OR_NULL:
        if (!PyBytes_Check(value)) break;
        return put_raw(b, PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value));
    case TEXT:
    case TEXT_OR_NULL: {
        if (!PyUnicode_Check(value)) break;
        Py_ssize_t n;
        const char *p = PyUnicode_AsUTF8AndSize(value, &n);
        return p == NULL ? -1 : put_raw(b, p, n);
    }
    default: {
        if (!PyLong_Check(value)) break;
        long long v = PyLong_AsLongLong(value);
        if (v == -1 && PyErr_Occurred()) return -1;
        return put_int(b, v, c->type == INT2 ? 2 : c->type == INT4 ? 4 : 8, c->name);
    }
    }
    PyErr_Format(PyExc_TypeError, "span column %s is %.100s", c->name, Py_TYPE(value)->tp_name);
    return -1;
}

/* A span's field (a new reference): read from its slot at `offset` when the span is of
   `type` (Incoming), else looked up by `name` (unset, or another type). */
static PyObject *slot_or_attr(PyObject *span, PyTypeObject *type, Py_ssize_t offset,
                              PyObject *name) {
    if (Py_TYPE(span) == type) {
        PyObject *value = *(PyObject **)((char *)span + offset);
        if (value != NULL) return Py_NewRef(value);
    }
    return PyObject_GetAttr(span, name);
}

static PyObject *copy_rows(PyObject *module, PyObject *args) {
    PyObject *spans;
    long long received_at_us, agent_id;
    if (!PyArg_ParseTuple(args, "OLL", &spans, &received_at_us, &agent_id)) return NULL;
    PyObject *seq = PySequence_Fast(spans, "spans must be a sequence");
    if (seq == NULL) return NULL;
    Buffer b = {0};
    PyObject *result = NULL;
    static const char header[] = "PGCOPY\n\377\r\n\0\0\0\0\0\0\0\0\0";
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyTypeObject *type = NULL;
    Py_ssize_t offsets[NCOLUMNS];
    const char *names[NCOLUMNS];
    for (int c = 0; c < NCOLUMNS; c++) names[c] = COLUMNS[c].name;
    /* Incoming's slots are read straight from the object, not looked up 13 times a span */
    if (n && slot_offsets(Py_TYPE(PySequence_Fast_GET_ITEM(seq, 0)), names, NCOLUMNS,
                          offsets) == 0)
        type = Py_TYPE(PySequence_Fast_GET_ITEM(seq, 0));
    if (grow(&b, sizeof header - 1 + (size_t)n * 1024) < 0) goto done;
    memcpy(b.data, header, sizeof header - 1);
    b.len = sizeof header - 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *span = PySequence_Fast_GET_ITEM(seq, i);
        if (grow(&b, 2) < 0) goto done;
        put_be(&b, 2 + NCOLUMNS, 2);
        if (put_int(&b, received_at_us, 8, "received_at") < 0 ||
            put_int(&b, agent_id, 8, "agent_id") < 0)
            goto done;
        for (int c = 0; c < NCOLUMNS; c++) {
            PyObject *value = slot_or_attr(span, type, offsets[c], COLUMNS[c].interned);
            if (value == NULL) goto done;
            int put = put_column(&b, value, &COLUMNS[c]);
            Py_DECREF(value);
            if (put < 0) goto done;
        }
    }
    if (grow(&b, 2) < 0) goto done;
    put_be(&b, 0xFFFF, 2);
    result = PyBytes_FromStringAndSize(b.data, (Py_ssize_t)b.len);
done:
    PyMem_Free(b.data);
    Py_DECREF(seq);
    return result;
}

/* ------------------------------------------------------------------ spans by trace */

/* The fields traces() reads of a span, in this order. */
enum { T_TRACE_ID, T_SPAN_ID, T_PARENT, T_START, T_END, T_SIZE, NTRACE_FIELDS };
static const char *TRACE_FIELD_NAMES[NTRACE_FIELDS] = {
    "trace_id", "span_id", "parent_span_id", "start_ns", "end_ns", "size",
};
static PyObject *TRACE_FIELDS_INTERNED[NTRACE_FIELDS];

typedef struct {
    PyObject *trace_id, *spans, *root_span_id; /* references of its own */
    PyObject *root;                            /* held by `spans` */
    long long first, last, bytes, root_start;
} Trace;

typedef struct {
    uint8_t key[24]; /* the trace id, then the span id */
} SpanKey;

static int compare_keys(const void *a, const void *b) {
    return memcmp(((const SpanKey *)a)->key, ((const SpanKey *)b)->key, 24);
}

static int as_long_long(PyObject *value, int i, long long *out) {
    if (!PyLong_Check(value)) {
        PyErr_Format(PyExc_TypeError, "span %s is %.100s", TRACE_FIELD_NAMES[i],
                     Py_TYPE(value)->tp_name);
        return -1;
    }
    *out = PyLong_AsLongLong(value);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

static int check_id(PyObject *value, int i, Py_ssize_t size) {
    if (PyBytes_Check(value) && PyBytes_GET_SIZE(value) == size) return 0;
    PyErr_Format(PyExc_TypeError, "span %s is not %zd bytes", TRACE_FIELD_NAMES[i], size);
    return -1;
}

/* Counts the span (its fields in v) into its trace. */
static int add_span(Trace *t, PyObject *span, PyObject *const v[]) {
    long long start, end, size;
    if (as_long_long(v[T_START], T_START, &start) < 0 ||
        as_long_long(v[T_END], T_END, &end) < 0 || as_long_long(v[T_SIZE], T_SIZE, &size) < 0)
        return -1;
    if (v[T_PARENT] != Py_None && check_id(v[T_PARENT], T_PARENT, 8) < 0) return -1;
    int first_span = PyList_GET_SIZE(t->spans) == 0;
    if (PyList_Append(t->spans, span) < 0) return -1;
    if (first_span || start < t->first) t->first = start;
    if (first_span || end > t->last) t->last = end;
    t->bytes += size;
    /* the root: the earliest span without a parent, the least span id among equals */
    if (v[T_PARENT] == Py_None &&
        (t->root == NULL || start < t->root_start ||
         (start == t->root_start && memcmp(PyBytes_AS_STRING(v[T_SPAN_ID]),
                                           PyBytes_AS_STRING(t->root_span_id), 8) < 0))) {
        t->root = span;
        t->root_start = start;
        Py_XSETREF(t->root_span_id, Py_NewRef(v[T_SPAN_ID]));
    }
    return 0;
}

/* The trace the span (its fields in v) belongs to, made when it is the first of it;
   `index` maps trace ids to places in `found`. NULL on an error. */
static Trace *trace_of(PyObject *index, Trace found[], Py_ssize_t *count, PyObject *const v[]) {
    PyObject *place = PyDict_GetItemWithError(index, v[T_TRACE_ID]);
    if (place != NULL) return &found[PyLong_AsSsize_t(place)];
    if (PyErr_Occurred()) return NULL;
    Trace *t = &found[*count];
    PyObject *at = PyLong_FromSsize_t(*count);
    int set = at == NULL ? -1 : PyDict_SetItem(index, v[T_TRACE_ID], at);
    Py_XDECREF(at);
    if (set < 0 || (t->spans = PyList_New(0)) == NULL) return NULL;
    t->trace_id = Py_NewRef(v[T_TRACE_ID]);
    (*count)++;
    return t;
}

static int read_span_fields(PyObject *span, PyTypeObject *type, Py_ssize_t offsets[],
                            PyObject *v[]) {
    for (int i = 0; i < NTRACE_FIELDS; i++)
        if ((v[i] = slot_or_attr(span, type, offsets[i], TRACE_FIELDS_INTERNED[i])) == NULL)
            return -1;
    return check_id(v[T_TRACE_ID], T_TRACE_ID, 16) < 0 || check_id(v[T_SPAN_ID], T_SPAN_ID, 8) < 0
               ? -1
               : 0;
}

/* A `group_type` (a tuple subclass: a NamedTuple) holding `values`, as tuple.__new__. */
static PyObject *as_group(PyTypeObject *group_type, PyObject *values) {
    if (values == NULL) return NULL;
    PyObject *args = PyTuple_Pack(1, values);
    Py_DECREF(values);
    if (args == NULL) return NULL;
    PyObject *group = PyTuple_Type.tp_new(group_type, args, NULL);
    Py_DECREF(args);
    return group;
}

static PyObject *traces(PyObject *module, PyObject *args) {
    PyObject *spans;
    PyTypeObject *group_type;
    if (!PyArg_ParseTuple(args, "OO!", &spans, &PyType_Type, &group_type)) return NULL;
    if (!PyType_IsSubtype(group_type, &PyTuple_Type)) {
        PyErr_Format(PyExc_TypeError, "group_type must be a tuple subclass, not %.100s",
                     group_type->tp_name);
        return NULL;
    }
    PyObject *seq = PySequence_Fast(spans, "spans must be a sequence");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), count = 0;
    PyObject *index = PyDict_New(), *groups = NULL, *result = NULL;
    Trace *found = PyMem_Calloc(n ? (size_t)n : 1, sizeof(Trace));
    SpanKey *keys = PyMem_Malloc((n ? (size_t)n : 1) * sizeof(SpanKey));
    PyTypeObject *type = NULL;
    Py_ssize_t offsets[NTRACE_FIELDS];
    if (index == NULL || found == NULL || keys == NULL) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    /* Incoming's slots are read straight from the object, not looked up 6 times a span */
    if (n && slot_offsets(Py_TYPE(PySequence_Fast_GET_ITEM(seq, 0)), TRACE_FIELD_NAMES,
                          NTRACE_FIELDS, offsets) == 0)
        type = Py_TYPE(PySequence_Fast_GET_ITEM(seq, 0));
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *span = PySequence_Fast_GET_ITEM(seq, i), *v[NTRACE_FIELDS] = {NULL};
        Trace *t = NULL;
        int ok = read_span_fields(span, type, offsets, v) == 0 &&
                 (t = trace_of(index, found, &count, v)) != NULL && add_span(t, span, v) == 0;
        if (ok) {
            memcpy(keys[i].key, PyBytes_AS_STRING(v[T_TRACE_ID]), 16);
            memcpy(keys[i].key + 16, PyBytes_AS_STRING(v[T_SPAN_ID]), 8);
        }
        for (int f = 0; f < NTRACE_FIELDS; f++) Py_XDECREF(v[f]);
        if (!ok) goto done;
    }
    qsort(keys, (size_t)n, sizeof(SpanKey), compare_keys);
    int twice = 0;
    for (Py_ssize_t i = 1; i < n && !twice; i++)
        twice = memcmp(keys[i - 1].key, keys[i].key, 24) == 0;
    if ((groups = PyList_New(count)) == NULL) goto done;
    for (Py_ssize_t j = 0; j < count; j++) {
        Trace *t = &found[j];
        PyObject *group =
            as_group(group_type, Py_BuildValue("(OOLLLO)", t->trace_id, t->spans, t->first,
                                               t->last, t->bytes, t->root ? t->root : Py_None));
        if (group == NULL) goto done;
        PyList_SET_ITEM(groups, j, group);
    }
    result = Py_BuildValue("(OO)", groups, twice ? Py_True : Py_False);
done:
    for (Py_ssize_t j = 0; found != NULL && j < count; j++) {
        Py_XDECREF(found[j].trace_id);
        Py_XDECREF(found[j].spans);
        Py_XDECREF(found[j].root_span_id);
    }
    PyMem_Free(found);
    PyMem_Free(keys);
    Py_XDECREF(groups);
    Py_XDECREF(index);
    Py_DECREF(seq);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(body, cls, groups) -> (spans, bad_ids, bad_times, bad_codes) | None: the spans of "
     "a trace export protobuf has parsed, as `cls` (Incoming); `groups` gives each ScopeSpans' "
     "span count, resource bytes, scope name and resource attributes. None for a layout this "
     "pass does not follow, or other spans than protobuf found."},
    {"attributes", attributes, METH_VARARGS,
     "attributes(span_body, names) -> dict | None: the encoded AnyValue of each of `names` "
     "among the span's attributes (the last one of a name, as protobuf keeps it); None for a "
     "layout this pass does not follow."},
    {"copy_rows", copy_rows, METH_VARARGS,
     "copy_rows(spans, received_at_us, agent_id) -> bytes: the binary COPY data of the "
     "span_copy statement for these spans."},
    {"traces", traces, METH_VARARGS,
     "traces(spans, group_type) -> (groups, twice): the spans by trace, in the order each "
     "trace first comes, each a group_type of (trace_id, spans, first_ns, last_ns, size, "
     "root); root is the earliest span without a parent (by start, then span id), or None. "
     "twice: some span (trace id and span id) comes more than once."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native", "The OTLP collector's per-span work, compiled.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__native(void) {
    for (int c = 0; c < NCOLUMNS; c++) {
        COLUMNS[c].interned = PyUnicode_InternFromString(COLUMNS[c].name);
        if (COLUMNS[c].interned == NULL) return NULL;
    }
    for (int i = 0; i < NTRACE_FIELDS; i++) {
        TRACE_FIELDS_INTERNED[i] = PyUnicode_InternFromString(TRACE_FIELD_NAMES[i]);
        if (TRACE_FIELDS_INTERNED[i] == NULL) return NULL;
    }
    return PyModule_Create(&module);
}

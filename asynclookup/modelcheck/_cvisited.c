/* The model checker's visited set, compiled: asynclookup.modelcheck._cvisited.
 *
 * A Table stores fixed-width byte keys (a state's packed canonical encoding)
 * and numbers them in the order they were added, like the pure-Python
 * fallback in asynclookup/modelcheck/_visited.py, whose docstring is the
 * specification of both.  Keys live back to back in one buffer (width bytes
 * each); an open-addressing array of uint32 slots (index + 1, 0 empty) finds
 * them, probed linearly from a 64-bit hash of the key and kept at most 70%
 * full.  That is width + about 6 bytes a state instead of a Python bytes
 * object, a dict entry and an int (about 140 bytes).
 *
 * With fingerprints (compact=1) the table stores each key's 64-bit
 * fingerprint (fingerprint() below) instead of the key: 8 bytes a state, and
 * two keys with the same fingerprint count as one state (hash compaction).
 *
 * Written for this project; the hash is a plain multiply-xorshift mix.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MIX1 0x9E3779B97F4A7C15ULL
#define MIX2 0xBF58476D1CE4E5B9ULL
#define MIX3 0x94D049BB133111EBULL

static uint64_t mix64(uint64_t h) {
    h ^= h >> 30;
    h *= MIX2;
    h ^= h >> 27;
    h *= MIX3;
    h ^= h >> 31;
    return h;
}

/* The 64-bit fingerprint of a key: its 8-byte little-endian words (the last
 * one zero-padded) folded as h = mix64(h ^ word) * MIX1, from h = length.
 * _visited.fingerprint computes the same in Python. */
static uint64_t fingerprint_of(const unsigned char *key, Py_ssize_t width) {
    uint64_t h = (uint64_t)width;
    Py_ssize_t i = 0;
    for (; i < width; i += 8) {
        uint64_t word = 0;
        Py_ssize_t n = width - i < 8 ? width - i : 8;
        for (Py_ssize_t b = 0; b < n; b++) {
            word |= (uint64_t)key[i + b] << (8 * b);
        }
        h = mix64(h ^ word) * MIX1;
    }
    return mix64(h);
}

#define MAX_FIELDS 32

typedef struct {
    PyObject_HEAD
    Py_ssize_t nfields; /* fields of an ids tuple (0: no layout given) */
    unsigned char sizes[MAX_FIELDS]; /* bytes of each field, little-endian */
    Py_ssize_t width;   /* bytes of a key as given */
    Py_ssize_t stored;  /* bytes stored per key: width, or 8 with fingerprints */
    int compact;
    unsigned char *keys;
    Py_ssize_t count, capacity; /* keys stored, keys the buffer holds */
    uint32_t *slots;
    size_t mask;        /* slots - 1 (a power of two minus one) */
    PyObject *sigs, *orbits; /* the Space's tables, for reach() (set_canonical) */
    unsigned char last[8 * MAX_FIELDS]; /* the last key reach() added */
} Table;

static uint64_t stored_hash(const Table *t, const unsigned char *stored) {
    if (t->compact) {
        uint64_t fp;
        memcpy(&fp, stored, 8);
        return fp;
    }
    return fingerprint_of(stored, t->stored);
}

static int grow_slots(Table *t) {
    size_t size = (t->mask + 1) * 2;
    uint32_t *slots = PyMem_Calloc(size, sizeof(uint32_t));
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < t->count; i++) {
        size_t s = (size_t)stored_hash(t, t->keys + i * t->stored) & (size - 1);
        while (slots[s] != 0) {
            s = (s + 1) & (size - 1);
        }
        slots[s] = (uint32_t)(i + 1);
    }
    PyMem_Free(t->slots);
    t->slots = slots;
    t->mask = size - 1;
    return 0;
}

static int Table_init(Table *self, PyObject *args, PyObject *kwds) {
    static char *names[] = {"width", "compact", "layout", NULL};
    Py_ssize_t width;
    int compact = 0;
    const char *layout = NULL;
    Py_ssize_t nfields = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "n|py#", names, &width, &compact, &layout,
                                     &nfields)) {
        return -1;
    }
    if (width < 1) {
        PyErr_SetString(PyExc_ValueError, "width must be at least 1");
        return -1;
    }
    if (nfields > MAX_FIELDS) {
        PyErr_SetString(PyExc_ValueError, "too many fields in the layout");
        return -1;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t f = 0; f < nfields; f++) {
        unsigned char size = (unsigned char)layout[f];
        if (size < 1 || size > 8) {
            PyErr_SetString(PyExc_ValueError, "a field is 1 to 8 bytes");
            return -1;
        }
        total += size;
    }
    if (nfields && total != width) {
        PyErr_SetString(PyExc_ValueError, "the layout's sizes do not add up to width");
        return -1;
    }
    /* Only a valid layout changes the table (a failed re-init keeps the old one). */
    memcpy(self->sizes, layout, (size_t)nfields);
    self->nfields = nfields;
    PyMem_Free(self->keys);
    PyMem_Free(self->slots);
    self->keys = NULL;
    self->slots = NULL;
    self->width = width;
    self->compact = compact;
    self->stored = compact ? 8 : width;
    self->count = 0;
    self->capacity = 1024;
    self->keys = PyMem_Malloc((size_t)(self->capacity * self->stored));
    self->mask = 2047;
    self->slots = PyMem_Calloc(self->mask + 1, sizeof(uint32_t));
    if (self->keys == NULL || self->slots == NULL) {
        PyMem_Free(self->keys);
        PyMem_Free(self->slots);
        self->keys = NULL;
        self->slots = NULL;
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* 0 if the table's buffers are there, else -1 with an exception set (Table.__new__
 * without __init__, or an __init__ that ran out of memory). */
static int check_ready(const Table *t) {
    if (t->keys == NULL || t->slots == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the Table was not initialised");
        return -1;
    }
    return 0;
}

static void Table_dealloc(Table *self) {
    PyMem_Free(self->keys);
    PyMem_Free(self->slots);
    Py_XDECREF(self->sigs);
    Py_XDECREF(self->orbits);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The slot of key (as stored) and its hash; *found says whether it holds it. */
static size_t locate(const Table *t, const unsigned char *stored, int *found) {
    size_t s = (size_t)stored_hash(t, stored) & t->mask;
    for (;;) {
        uint32_t at = t->slots[s];
        if (at == 0) {
            *found = 0;
            return s;
        }
        if (memcmp(t->keys + (Py_ssize_t)(at - 1) * t->stored, stored, (size_t)t->stored) == 0) {
            *found = 1;
            return s;
        }
        s = (s + 1) & t->mask;
    }
}

/* The index of key (width bytes), or -1. */
static Py_ssize_t find_key(const Table *t, const unsigned char *key) {
    unsigned char buf[8];
    const unsigned char *stored = key;
    int found;
    if (t->compact) {
        uint64_t fp = fingerprint_of(key, t->width);
        memcpy(buf, &fp, 8);
        stored = buf;
    }
    size_t s = locate(t, stored, &found);
    return found ? (Py_ssize_t)t->slots[s] - 1 : -1;
}

/* The index of key (width bytes), added if new: its index if it was there,
 * else -1 - index; PY_SSIZE_T_MIN (an exception set) on an error. */
static Py_ssize_t add_key(Table *t, const unsigned char *key) {
    unsigned char buf[8];
    const unsigned char *stored = key;
    int found;
    if (t->compact) {
        uint64_t fp = fingerprint_of(key, t->width);
        memcpy(buf, &fp, 8);
        stored = buf;
    }
    size_t s = locate(t, stored, &found);
    if (found) {
        return (Py_ssize_t)t->slots[s] - 1;
    }
    if ((uint64_t)t->count >= (uint64_t)UINT32_MAX - 1) { /* not (Py_ssize_t): -2 on 32-bit */
        PyErr_SetString(PyExc_MemoryError, "too many states for one table");
        return PY_SSIZE_T_MIN;
    }
    if (t->count == t->capacity) {
        Py_ssize_t capacity = t->capacity + t->capacity / 2;
        unsigned char *keys = PyMem_Realloc(t->keys, (size_t)(capacity * t->stored));
        if (keys == NULL) {
            PyErr_NoMemory();
            return PY_SSIZE_T_MIN;
        }
        t->keys = keys;
        t->capacity = capacity;
    }
    Py_ssize_t index = t->count++;
    memcpy(t->keys + index * t->stored, stored, (size_t)t->stored);
    t->slots[s] = (uint32_t)(index + 1);
    if ((size_t)t->count * 10 > (t->mask + 1) * 7 && grow_slots(t) < 0) {
        return PY_SSIZE_T_MIN;
    }
    return -1 - index;
}

static const unsigned char *key_of_bytes(const Table *t, PyObject *key) {
    char *data;
    Py_ssize_t size;
    if (check_ready(t) < 0 || PyBytes_AsStringAndSize(key, &data, &size) < 0) {
        return NULL;
    }
    if (size != t->width) {
        PyErr_Format(PyExc_ValueError, "key of %zd bytes, want %zd", size, t->width);
        return NULL;
    }
    return (const unsigned char *)data;
}

static PyObject *Table_find(Table *self, PyObject *key) {
    const unsigned char *data = key_of_bytes(self, key);
    return data == NULL ? NULL : PyLong_FromSsize_t(find_key(self, data));
}

/* The index of key, added if new: its index if it was there, else -1 - index. */
static PyObject *Table_add(Table *self, PyObject *key) {
    const unsigned char *data = key_of_bytes(self, key);
    if (data == NULL) {
        return NULL;
    }
    Py_ssize_t index = add_key(self, data);
    return index == PY_SSIZE_T_MIN ? NULL : PyLong_FromSsize_t(index);
}

/* Packs the ints vals[0..nfields) into buf (width bytes) by the layout; an int
 * too big for its field raises OverflowError (the search then widens its keys). */
static int pack_values(const Table *t, PyObject *const *vals, unsigned char *buf) {
    unsigned char *out = buf;
    for (Py_ssize_t f = 0; f < t->nfields; f++) {
        unsigned long long v = PyLong_AsUnsignedLongLong(vals[f]);
        if (v == (unsigned long long)-1 && PyErr_Occurred()) {
            return -1;
        }
        unsigned size = t->sizes[f];
        if (size < 8 && (v >> (8 * size)) != 0) {
            PyErr_Format(PyExc_OverflowError, "field %zd: %llu does not fit %u bytes", f, v,
                         size);
            return -1;
        }
        for (unsigned b = 0; b < size; b++) {
            *out++ = (unsigned char)(v >> (8 * b));
        }
    }
    return 0;
}

static int pack_ids(const Table *t, PyObject *ids, unsigned char *buf) {
    if (check_ready(t) < 0) {
        return -1;
    }
    if (t->nfields == 0) {
        PyErr_SetString(PyExc_TypeError, "this table has no layout");
        return -1;
    }
    if (!PyTuple_Check(ids) || PyTuple_GET_SIZE(ids) != t->nfields) {
        PyErr_Format(PyExc_ValueError, "want a tuple of %zd ints", t->nfields);
        return -1;
    }
    return pack_values(t, &PyTuple_GET_ITEM(ids, 0), buf);
}

static PyObject *Table_find_ids(Table *self, PyObject *ids) {
    unsigned char key[8 * MAX_FIELDS];
    if (pack_ids(self, ids, key) < 0) {
        return NULL;
    }
    return PyLong_FromSsize_t(find_key(self, key));
}

/* pack(ids), then add: the index (or -1 - index if new), and the packed key. */
static PyObject *Table_add_ids(Table *self, PyObject *ids) {
    unsigned char key[8 * MAX_FIELDS];
    if (pack_ids(self, ids, key) < 0) {
        return NULL;
    }
    Py_ssize_t added = add_key(self, key);
    if (added == PY_SSIZE_T_MIN) {
        return NULL;
    }
    return Py_BuildValue("(ny#)", added, (const char *)key, self->width);
}

static PyObject *Table_key(Table *self, PyObject *arg) {
    Py_ssize_t i = PyLong_AsSsize_t(arg);
    if (i == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (i < 0 || i >= self->count) {
        PyErr_SetString(PyExc_IndexError, "no state of that index");
        return NULL;
    }
    return PyBytes_FromStringAndSize((const char *)self->keys + i * self->stored, self->stored);
}

static Py_ssize_t Table_len(Table *self) {
    return self->count;
}

static PyObject *Table_nbytes(Table *self, void *closure) {
    (void)closure;
    size_t n = (size_t)(self->capacity * self->stored) + (self->mask + 1) * sizeof(uint32_t);
    return PyLong_FromSize_t(n);
}

static PyObject *Table_compact(Table *self, void *closure) {
    (void)closure;
    return PyBool_FromLong(self->compact);
}

static PyObject *py_fingerprint(PyObject *module, PyObject *key) {
    (void)module;
    char *data;
    Py_ssize_t size;
    if (PyBytes_AsStringAndSize(key, &data, &size) < 0) {
        return NULL;
    }
    return PyLong_FromUnsignedLongLong(fingerprint_of((const unsigned char *)data, size));
}

static PyObject *Table_set_canonical(Table *self, PyObject *const *args, Py_ssize_t nargs);
static PyObject *Table_reach(Table *self, PyObject *const *args, Py_ssize_t nargs);
static PyObject *Table_last_key(Table *self, PyObject *unused);

static PyMethodDef Table_methods[] = {
    {"find", (PyCFunction)Table_find, METH_O, "The index of key, or -1."},
    {"add", (PyCFunction)Table_add, METH_O,
     "The index of key if it is there, else add it and return -1 - its index."},
    {"key", (PyCFunction)Table_key, METH_O, "The stored bytes of the key of that index."},
    {"find_ids", (PyCFunction)Table_find_ids, METH_O, "find() of the ids packed by the layout."},
    {"set_canonical", (PyCFunction)(void (*)(void))Table_set_canonical, METH_FASTCALL,
     "The Space's signature and orbit tables, for reach()."},
    {"reach", (PyCFunction)(void (*)(void))Table_reach, METH_FASTCALL,
     "The index of the state a step reaches (-1 - index if new), or None."},
    {"last_key", (PyCFunction)Table_last_key, METH_NOARGS, "The key reach() last added."},
    {"add_ids", (PyCFunction)Table_add_ids, METH_O,
     "add() of the ids packed by the layout: (its result, the packed key)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Table_getset[] = {
    {"nbytes", (getter)Table_nbytes, NULL, "Bytes allocated for keys and slots.", NULL},
    {"compact", (getter)Table_compact, NULL, "Whether fingerprints are stored.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods Table_as_sequence = {
    .sq_length = (lenfunc)Table_len,
};

static PyTypeObject TableType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "asynclookup.modelcheck._cvisited.Table",
    .tp_doc = "Fixed-width keys numbered in the order they were added.",
    .tp_basicsize = sizeof(Table),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Table_init,
    .tp_dealloc = (destructor)Table_dealloc,
    .tp_methods = Table_methods,
    .tp_getset = Table_getset,
    .tp_as_sequence = &Table_as_sequence,
};

/* The canonical ids of ids[0..n) into out (borrowed): the least, over the
 * permutations, of the renamed ids, as asynclookup.modelcheck._canon.Space.canonical
 * computes it (min(zip(*orbits))).  1 if every table it needs is filled, 0 if
 * not (the caller asks Python), -1 on an error. */
static int canonical_into(PyObject *sigs, PyObject *orbits, PyObject *const *ids, Py_ssize_t n,
                          PyObject **out) {
    if (!PyDict_Check(sigs) || !PyList_Check(orbits)) {
        PyErr_SetString(PyExc_TypeError, "sigs is a dict and orbits a list");
        return -1;
    }
    if (n < 3 || n > MAX_FIELDS) {
        PyErr_SetString(PyExc_ValueError, "ids of 3 to 32 fields");
        return -1;
    }
    PyObject *head = PyTuple_Pack(3, ids[0], ids[1], ids[2]);
    if (head == NULL) {
        return -1;
    }
    PyObject *sig = PyDict_GetItemWithError(sigs, head);
    Py_DECREF(head);
    if (sig == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    Py_ssize_t s = PyLong_AsSsize_t(sig);
    if (s == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (s < 0 || s >= PyList_GET_SIZE(orbits)) {
        PyErr_SetString(PyExc_IndexError, "no orbit tables for that signature");
        return -1;
    }
    PyObject *tables = PyList_GET_ITEM(orbits, s);
    if (!PyList_Check(tables) || PyList_GET_SIZE(tables) != n) {
        PyErr_SetString(PyExc_ValueError, "want one orbit table per field");
        return -1;
    }
    PyObject *orbit[MAX_FIELDS];
    Py_ssize_t perms = -1;
    for (Py_ssize_t f = 0; f < n; f++) {
        PyObject *table = PyList_GET_ITEM(tables, f);
        if (!PyDict_Check(table)) {
            PyErr_SetString(PyExc_TypeError, "an orbit table is a dict");
            return -1;
        }
        PyObject *o = PyDict_GetItemWithError(table, ids[f]);
        if (o == NULL) {
            return PyErr_Occurred() ? -1 : 0;
        }
        if (!PyTuple_Check(o) || (perms >= 0 && PyTuple_GET_SIZE(o) != perms)) {
            PyErr_SetString(PyExc_ValueError, "orbits are tuples of one length");
            return -1;
        }
        perms = PyTuple_GET_SIZE(o);
        orbit[f] = o;
    }
    if (perms < 1) {
        PyErr_SetString(PyExc_ValueError, "an orbit is not empty");
        return -1;
    }
    Py_ssize_t best = 0;
    for (Py_ssize_t p = 1; p < perms; p++) {
        for (Py_ssize_t f = 0; f < n; f++) {
            PyObject *a = PyTuple_GET_ITEM(orbit[f], p), *b = PyTuple_GET_ITEM(orbit[f], best);
            if (a == b) {
                continue;
            }
            long x = PyLong_AsLong(a), y = PyLong_AsLong(b);
            if ((x == -1 || y == -1) && PyErr_Occurred()) {
                return -1;
            }
            if (x != y) {
                if (x < y) {
                    best = p;
                }
                break;
            }
        }
    }
    for (Py_ssize_t f = 0; f < n; f++) {
        out[f] = PyTuple_GET_ITEM(orbit[f], best);
    }
    return 1;
}

/* canonical(sigs, orbits, ids): canonical_into as a tuple, or None. */
static PyObject *py_canonical(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3 || !PyTuple_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "canonical(sigs: dict, orbits: list, ids: tuple)");
        return NULL;
    }
    PyObject *ids = args[2];
    Py_ssize_t n = PyTuple_GET_SIZE(ids);
    PyObject *out[MAX_FIELDS];
    int done = canonical_into(args[0], args[1], &PyTuple_GET_ITEM(ids, 0), n, out);
    if (done <= 0) {
        if (done < 0) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    PyObject *result = PyTuple_New(n);
    if (result == NULL) {
        return NULL;
    }
    for (Py_ssize_t f = 0; f < n; f++) {
        Py_INCREF(out[f]);
        PyTuple_SET_ITEM(result, f, out[f]);
    }
    return result;
}

/* set_canonical(sigs, orbits): the Space's tables, for reach(). */
static PyObject *Table_set_canonical(Table *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyDict_Check(args[0]) || !PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "set_canonical(sigs: dict, orbits: list)");
        return NULL;
    }
    Py_XSETREF(self->sigs, Py_NewRef(args[0]));
    Py_XSETREF(self->orbits, Py_NewRef(args[1]));
    Py_RETURN_NONE;
}

/* reach(ids, new, picks): the state that a step from ids reaches, the step
 * having set the fields it changed to new: its target is
 * (ids + new)[picks[f]] for each field f.  Looks the target up as it is (a
 * visited key is canonical already), else canonicalises it and adds it.
 * Returns its index if it was there, -1 - index if it is new (last_key() is
 * its packed key), or None if a table canonical needs is not filled yet (the
 * caller canonicalises in Python and calls add_ids). */
static PyObject *Table_reach(Table *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyTuple_Check(args[0]) || !PyTuple_Check(args[1]) ||
        !PyTuple_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "reach(ids: tuple, new: tuple, picks: tuple)");
        return NULL;
    }
    if (check_ready(self) < 0) {
        return NULL;
    }
    Py_ssize_t n = self->nfields, k = PyTuple_GET_SIZE(args[1]);
    if (n == 0 || PyTuple_GET_SIZE(args[0]) != n || PyTuple_GET_SIZE(args[2]) != n) {
        PyErr_SetString(PyExc_ValueError, "ids and picks have one item per field");
        return NULL;
    }
    PyObject *target[MAX_FIELDS];
    for (Py_ssize_t f = 0; f < n; f++) {
        Py_ssize_t p = PyLong_AsSsize_t(PyTuple_GET_ITEM(args[2], f));
        if (p == -1 && PyErr_Occurred()) {
            return NULL;
        }
        if (p < 0 || p >= n + k) {
            PyErr_SetString(PyExc_IndexError, "a pick out of range");
            return NULL;
        }
        target[f] = p < n ? PyTuple_GET_ITEM(args[0], p) : PyTuple_GET_ITEM(args[1], p - n);
    }
    unsigned char key[8 * MAX_FIELDS];
    if (pack_values(self, target, key) < 0) {
        return NULL;
    }
    Py_ssize_t index = find_key(self, key);
    if (index >= 0) {
        return PyLong_FromSsize_t(index);
    }
    if (self->sigs == NULL) {
        Py_RETURN_NONE;
    }
    PyObject *canon[MAX_FIELDS];
    int done = canonical_into(self->sigs, self->orbits, target, n, canon);
    if (done <= 0) {
        if (done < 0) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    if (pack_values(self, canon, self->last) < 0) {
        return NULL;
    }
    index = add_key(self, self->last);
    return index == PY_SSIZE_T_MIN ? NULL : PyLong_FromSsize_t(index);
}

static PyObject *Table_last_key(Table *self, PyObject *unused) {
    (void)unused;
    if (self->nfields == 0) { /* last holds 8 * MAX_FIELDS bytes; width may be more */
        PyErr_SetString(PyExc_TypeError, "this table has no layout");
        return NULL;
    }
    return PyBytes_FromStringAndSize((const char *)self->last, self->width);
}

/* memo_find(patterns, ids, missing): the first result found for ids, looking
 * in each (getter, table) of patterns under getter(ids); a pattern that finds
 * it moves one place up.  missing if none has it. */
static PyObject *py_memo_find(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "memo_find(patterns: list, ids, missing)");
        return NULL;
    }
    PyObject *patterns = args[0];
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(patterns); k++) {
        PyObject *pattern = PyList_GET_ITEM(patterns, k);
        if (!PyTuple_Check(pattern) || PyTuple_GET_SIZE(pattern) < 2 ||
            !PyDict_Check(PyTuple_GET_ITEM(pattern, 1))) {
            PyErr_SetString(PyExc_TypeError, "a pattern is (getter, dict, ...)");
            return NULL;
        }
        /* The getter (and the key's __eq__) may run Python code that changes
         * the list: hold pattern, and swap only if it is still at k. */
        Py_INCREF(pattern);
        PyObject *key = PyObject_CallOneArg(PyTuple_GET_ITEM(pattern, 0), args[1]);
        if (key == NULL) {
            Py_DECREF(pattern);
            return NULL;
        }
        PyObject *found = PyDict_GetItemWithError(PyTuple_GET_ITEM(pattern, 1), key);
        Py_XINCREF(found);
        Py_DECREF(key);
        if (found != NULL) {
            if (k > 0 && k < PyList_GET_SIZE(patterns) &&
                PyList_GET_ITEM(patterns, k) == pattern) {
                /* swap with the one above: the most used come first */
                PyObject *above = PyList_GET_ITEM(patterns, k - 1);
                PyList_SET_ITEM(patterns, k - 1, pattern);
                PyList_SET_ITEM(patterns, k, above);
            }
            Py_DECREF(pattern);
            return found;
        }
        Py_DECREF(pattern);
        if (PyErr_Occurred()) {
            return NULL;
        }
    }
    Py_INCREF(args[2]);
    return args[2];
}

/* memo_each(pattern_lists, ids, missing): memo_find for each list of patterns,
 * as one list (missing where a list does not have ids). */
static PyObject *py_memo_each(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "memo_each(pattern_lists: list, ids, missing)");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(args[0]);
    PyObject *out = PyList_New(n);
    if (out == NULL) {
        return NULL;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        if (k >= PyList_GET_SIZE(args[0])) { /* a getter shortened it */
            PyErr_SetString(PyExc_RuntimeError, "memo_each: the list changed size");
            Py_DECREF(out);
            return NULL;
        }
        PyObject *patterns = Py_NewRef(PyList_GET_ITEM(args[0], k));
        PyObject *call[3] = {patterns, args[1], args[2]};
        PyObject *found = py_memo_find(module, call, 3);
        Py_DECREF(patterns);
        if (found == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, k, found);
    }
    return out;
}

static PyMethodDef module_methods[] = {
    {"memo_each", (PyCFunction)(void (*)(void))py_memo_each, METH_FASTCALL,
     "memo_find for each list of patterns."},
    {"fingerprint", (PyCFunction)py_fingerprint, METH_O, "The 64-bit fingerprint of a key."},
    {"canonical", (PyCFunction)(void (*)(void))py_canonical, METH_FASTCALL,
     "The canonical ids, if every orbit table it needs is filled; else None."},
    {"memo_find", (PyCFunction)(void (*)(void))py_memo_find, METH_FASTCALL,
     "The memoised result for ids, or missing."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_cvisited", "The model checker's visited set, compiled.", -1,
    module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__cvisited(void) {
    if (PyType_Ready(&TableType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) {
        return NULL;
    }
    Py_INCREF(&TableType);
    if (PyModule_AddObject(m, "Table", (PyObject *)&TableType) < 0) {
        Py_DECREF(&TableType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

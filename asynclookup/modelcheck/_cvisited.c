/* The model checker's compiled kernel: asynclookup.modelcheck._cvisited.
 *
 * Table is the visited set, the memo of the action families' outcomes and the
 * search graph of one breadth-first search; asynclookup/modelcheck/_visited.py
 * (PyTable, PyWalk) is its pure-Python twin, and its docstring the
 * specification of both.
 *
 * Visited set.  Keys (a state's packed canonical encoding) are numbered in
 * the order they were added and live back to back in one buffer; an
 * open-addressing array of uint32 slots (index + 1 and some hash bits, 0
 * empty) finds them, probed linearly from a 64-bit hash and kept at most 70%
 * full.  With a
 * layout (the bytes of each field id as asynclookup.modelcheck._canon packs
 * them) a key is stored as its field ids bit-packed, each field as wide as the
 * largest id stored in it so far ("dense": 8 bytes at 2x3 instead of 18); a
 * wider id re-packs the stored keys in place (widen), and the hash is taken of
 * the ids, not of the packing, so the slots stay valid.  With fingerprints
 * (compact=1) it stores the 64-bit fingerprint of the layout-packed key (hash
 * compaction: two keys with the same fingerprint count as one); without a
 * layout, the bytes given.
 *
 * Memo.  Each action family (a function of the state, computed in Python:
 * _bfs.py) has its outcomes stored once per distinct value of the fields it
 * read, as in asynclookup/modelcheck/_memo.py (the soundness argument is
 * there): a family has patterns (sets of fields read), an entry is keyed by
 * (family, pattern, the ids of those fields), and its outcomes are encoded
 * in an arena: action number, which fields changed, their new ids, and the
 * index of the broken step properties if any.  About 30 bytes an entry where
 * Python's dicts take about 230, so nothing is evicted.  A missing result is
 * computed by calling Python (set_search's compute) and stored.
 *
 * Search graph.  expand(i, ids, families) walks the stored outcomes of the
 * families of state i in order: a target is looked up as it is (a visited key
 * is canonical already), else canonicalised (the least renaming, from tables
 * Python fills and this file caches) and added.  A new state is admitted here
 * when its checks can be settled from Python's memos and direct predicate
 * calls (set_admission, admit_here); else the walk returns to Python (which
 * checks it, then calls resume()), as it does at a step that breaks a step
 * property.  Per state it keeps the action that first reached it, how many
 * states were first reached from it (parents are found by counting, see
 * path), and one successor for the progress check (settle): 8 bytes.
 *
 * The compiled code decides nothing about the protocol: it stores, compares
 * and hashes ids, picks the least of the renamings that Python computed, and
 * replays outcomes that Python computed.  Written for this project; the hash
 * is a plain multiply-xorshift mix.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MIX1 0x9E3779B97F4A7C15ULL
#define MIX2 0xBF58476D1CE4E5B9ULL
#define MIX3 0x94D049BB133111EBULL

#define MAX_FIELDS 32            /* fields of a layout */
#define MAX_KEY (8 * MAX_FIELDS) /* bytes of the widest key a layout gives */
#define MAX_BITS 56              /* bits of a field id in a dense key */
#define MAX_ACTIONS 65535        /* action numbers are stored in 16 bits */
#define MAX_FAMILIES 16
#define MAX_PATTERNS 64          /* read sets of one family */
#define BAD_BIT 0x80000000u      /* in an outcome's field mask: broken properties follow */

/* expand() and resume() return a new state's index (>= 0) or one of these. */
#define WALK_DONE -1
#define WALK_BAD -2

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
    for (Py_ssize_t i = 0; i < width; i += 8) {
        uint64_t word = 0;
        Py_ssize_t n = width - i < 8 ? width - i : 8;
        for (Py_ssize_t b = 0; b < n; b++) {
            word |= (uint64_t)key[i + b] << (8 * b);
        }
        h = mix64(h ^ word) * MIX1;
    }
    return mix64(h);
}

/* The hash of a dense key, from its field ids (so that re-packing keeps it). */
static uint64_t hash_values(const uint64_t *vals, Py_ssize_t n) {
    uint64_t h = (uint64_t)n;
    for (Py_ssize_t f = 0; f < n; f++) {
        h = (h ^ vals[f]) * MIX1;
        h ^= h >> 29;
    }
    return mix64(h);
}

/* Packs vals[0..n) into out (stored bytes), field f in bits[f] bits, least
 * significant first. */
static void dense_encode(const unsigned char *bits, Py_ssize_t n, const uint64_t *vals,
                         unsigned char *out, Py_ssize_t stored) {
    uint64_t acc = 0;
    unsigned have = 0; /* bits in acc, fewer than 8 between fields */
    unsigned char *p = out;
    for (Py_ssize_t f = 0; f < n; f++) {
        acc |= vals[f] << have;
        have += bits[f];
        while (have >= 8) {
            *p++ = (unsigned char)acc;
            acc >>= 8;
            have -= 8;
        }
    }
    if (have) {
        *p++ = (unsigned char)acc;
    }
    memset(p, 0, (size_t)(stored - (p - out)));
}

/* The inverse of dense_encode. */
static void dense_decode(const unsigned char *bits, Py_ssize_t n, const unsigned char *in,
                         uint64_t *vals) {
    uint64_t acc = 0;
    unsigned have = 0;
    const unsigned char *p = in;
    for (Py_ssize_t f = 0; f < n; f++) {
        while (have < bits[f]) {
            acc |= (uint64_t)*p++ << have;
            have += 8;
        }
        vals[f] = bits[f] ? acc & ((1ULL << bits[f]) - 1) : 0;
        acc >>= bits[f];
        have -= bits[f];
    }
}

static unsigned bit_length(uint64_t v) {
    unsigned n = 0;
    while (v) {
        n++;
        v >>= 1;
    }
    return n;
}

/* -- small building blocks: a growing byte buffer, a map of 128-bit keys ---------- */

typedef struct {
    unsigned char *data;
    size_t len, cap;
} Buffer;

/* Room for n more bytes: a pointer to them (len grows by n), or NULL (MemoryError). */
static unsigned char *buffer_extend(Buffer *b, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n) {
            cap += cap / 2;
        }
        unsigned char *data = PyMem_Realloc(b->data, cap);
        if (data == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        b->data = data;
        b->cap = cap;
    }
    unsigned char *at = b->data + b->len;
    b->len += n;
    return at;
}

typedef struct {
    uint64_t lo, hi;
    uint32_t value, used;
} MapSlot;

/* Open addressing from (lo, hi) to a uint32, at most half full (for the small
 * tables of the canonical form). */
typedef struct {
    MapSlot *slots;
    size_t mask, count;
} Map;

static size_t map_slot(const Map *m, uint64_t lo, uint64_t hi) {
    size_t s = (size_t)mix64(lo * MIX1 ^ hi) & m->mask;
    while (m->slots[s].used && (m->slots[s].lo != lo || m->slots[s].hi != hi)) {
        s = (s + 1) & m->mask;
    }
    return s;
}

static int map_get(const Map *m, uint64_t lo, uint64_t hi, uint32_t *value) {
    if (m->slots == NULL) {
        return 0;
    }
    const MapSlot *slot = &m->slots[map_slot(m, lo, hi)];
    if (!slot->used) {
        return 0;
    }
    *value = slot->value;
    return 1;
}

static int map_put(Map *m, uint64_t lo, uint64_t hi, uint32_t value) {
    if (m->slots == NULL || (m->count + 1) * 2 > m->mask + 1) {
        size_t size = m->slots == NULL ? 64 : (m->mask + 1) * 2;
        MapSlot *slots = PyMem_Calloc(size, sizeof(MapSlot));
        if (slots == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        Map grown = {slots, size - 1, 0};
        for (size_t s = 0; m->slots != NULL && s <= m->mask; s++) {
            if (m->slots[s].used) {
                grown.slots[map_slot(&grown, m->slots[s].lo, m->slots[s].hi)] = m->slots[s];
                grown.count++;
            }
        }
        PyMem_Free(m->slots);
        *m = grown;
    }
    MapSlot *slot = &m->slots[map_slot(m, lo, hi)];
    if (!slot->used) {
        m->count++;
    }
    *slot = (MapSlot){lo, hi, value, 1};
    return 0;
}

static void map_free(Map *m) {
    PyMem_Free(m->slots);
    *m = (Map){NULL, 0, 0};
}

/* -- the table ---------------------------------------------------------------------- */

typedef struct {
    int npat;
    unsigned char order[MAX_PATTERNS];  /* pattern numbers, the last found first */
    unsigned char nreads[MAX_PATTERNS]; /* fields each pattern read */
    unsigned char reads[MAX_PATTERNS][MAX_FIELDS];
} Family;

/* One outcome of a family, decoded from the arena. */
typedef struct {
    Py_ssize_t number;              /* the action */
    uint32_t mask;                  /* the fields it changed */
    int has_bad;                    /* it broke step properties */
    uint32_t bad;                   /* their names: index into Table.bad */
    uint64_t new_ids[MAX_FIELDS];   /* the changed fields' new ids, by field */
    size_t size;                    /* bytes it takes in the arena */
} Outcome;

typedef struct {
    PyObject_HEAD
    /* How keys are given and stored. */
    Py_ssize_t width;                /* bytes of a key as given */
    Py_ssize_t nfields;              /* fields of the layout (0: no layout) */
    unsigned char sizes[MAX_FIELDS]; /* bytes of each field as given, little-endian */
    int compact;                     /* store 64-bit fingerprints */
    int dense;                       /* store the field ids bit-packed by bits[] */
    unsigned char bits[MAX_FIELDS];  /* dense: bits of each field (its largest id's) */
    Py_ssize_t stored;               /* bytes stored per key */
    /* The keys in the order they were added, and the slots that find them. */
    unsigned char *keys;
    Py_ssize_t count, capacity; /* keys stored, keys the buffers hold */
    uint32_t *slots;            /* 0 empty, else index + 1 in the low index_bits, and
                                   the top bits of its hash above them (see tag_of) */
    size_t mask;                /* slots - 1 (a power of two minus one) */
    unsigned index_bits;        /* log2(slots): more than any index + 1 needs */
    /* Per state, for the search. */
    uint16_t *via;      /* the action number that first reached it */
    uint16_t *children; /* how many states were first reached from it */
    int32_t *next;      /* one successor for the progress check, -1 if none */
    /* The memo of the families' outcomes. */
    int nfam;
    Family fam[MAX_FAMILIES];
    Buffer entries;   /* [u32 outcomes offset][u8 family][u8 pattern][read ids] */
    uint32_t *mslots; /* entry offset + 1, 0 empty */
    size_t mmask, mcount;
    Buffer results;   /* [u16 count] then per outcome: [u16 number][u32 fields (| BAD_BIT)]
                         [u32 bad index, if BAD_BIT][new ids, layout sizes] */
    PyObject *bad;    /* list: the tuples of broken property names */
    /* What the walk needs from Python: the Space's tables (cached below), its
     * canonical(ids), compute(family, ids) -> (reads, outcomes), and which
     * action numbers are not edges of the progress check. */
    PyObject *sigs, *orbits, *canon, *compute, *no_edge;
    /* Admitting a new state here (set_admission): the Space's values by field
     * and id, the State type, the checks in order ((memo patterns, None) or
     * (None, predicate); the last one is quiescence), the memos' missing
     * value, the stopped field, and the flags bytearray (1 quiescent, 2
     * stopped) that admission appends to.  NULL: Python admits every state. */
    PyObject *values, *checks, *missing, *flags;
    PyTypeObject *state_type;
    Py_ssize_t stopped_field;
    Map sigmap;          /* (ids[0] | ids[1] << 32, ids[2]) -> signature */
    Map orbmap;          /* (id | field << 32, signature) -> offset of its orbit in pool */
    uint32_t *pool;      /* orbits: perms ids each */
    size_t pool_len, pool_cap;
    Py_ssize_t perms;    /* renamings of a state (the orbits' length), 0 until known */
    /* The expansion in progress. */
    int expanding;             /* whether one is (a new Table has none) */
    Py_ssize_t cur;            /* its state */
    unsigned families;         /* the families it walks (bits) */
    uint32_t res[MAX_FAMILIES]; /* their outcomes' offsets */
    int at_family, counted;    /* the cursor; counted: its outcome is counted */
    Py_ssize_t at_outcome;
    size_t at_pos;             /* the outcome's offset in results */
    Py_ssize_t low, high;      /* least and greatest successor so far */
    uint64_t cur_vals[MAX_FIELDS], last_vals[MAX_FIELDS];
    int has_last;
    unsigned long generation;  /* of expansions begun (Python may start one inside one) */
    unsigned long long transitions;
} Table;

/* -- the visited set ------------------------------------------------------------------ */

/* 0 if the table's buffers are there, else -1 with an exception set (Table.__new__
 * without __init__, or an __init__ that ran out of memory). */
static int check_ready(const Table *t) {
    if (t->keys == NULL || t->slots == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the Table was not initialised");
        return -1;
    }
    return 0;
}

static int check_layout(const Table *t) {
    if (check_ready(t) < 0) {
        return -1;
    }
    if (t->nfields == 0) {
        PyErr_SetString(PyExc_TypeError, "this table has no layout");
        return -1;
    }
    return 0;
}

static void free_buffers(Table *t) {
    PyMem_Free(t->keys);
    PyMem_Free(t->slots);
    PyMem_Free(t->via);
    PyMem_Free(t->children);
    PyMem_Free(t->next);
    PyMem_Free(t->entries.data);
    PyMem_Free(t->mslots);
    PyMem_Free(t->results.data);
    PyMem_Free(t->pool);
    map_free(&t->sigmap);
    map_free(&t->orbmap);
    t->keys = NULL;
    t->slots = NULL;
    t->via = NULL;
    t->children = NULL;
    t->next = NULL;
    t->entries = (Buffer){NULL, 0, 0};
    t->results = (Buffer){NULL, 0, 0};
    t->mslots = NULL;
    t->mmask = t->mcount = 0;
    t->pool = NULL;
    t->pool_len = t->pool_cap = 0;
}

/* The hash of the stored key of index i. */
static uint64_t stored_hash(const Table *t, Py_ssize_t i) {
    const unsigned char *stored = t->keys + i * t->stored;
    if (t->compact) {
        uint64_t fp;
        memcpy(&fp, stored, 8);
        return fp;
    }
    if (t->dense) {
        uint64_t vals[MAX_FIELDS];
        dense_decode(t->bits, t->nfields, stored, vals);
        return hash_values(vals, t->nfields);
    }
    return fingerprint_of(stored, t->stored);
}

/* A slot holds index + 1 in its low index_bits and, in the bits above (as
 * many as the table is small enough to leave), bits of the key's hash that do
 * not choose the slot: a probe compares them before it reads a key. */
static uint32_t tag_of(unsigned index_bits, uint64_t h) {
    return index_bits >= 32 ? 0 : (uint32_t)(h >> 32) & ~((UINT32_C(1) << index_bits) - 1);
}

static uint32_t slot_index(unsigned index_bits, uint32_t slot) {
    return index_bits >= 32 ? slot : slot & ((UINT32_C(1) << index_bits) - 1);
}

static int grow_slots(Table *t) {
    size_t size = (t->mask + 1) * 2;
    if (size > ((size_t)1 << 32)) {
        PyErr_SetString(PyExc_MemoryError, "too many states for one table");
        return -1;
    }
    uint32_t *slots = PyMem_Calloc(size, sizeof(uint32_t));
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    unsigned index_bits = t->index_bits + 1;
    for (Py_ssize_t i = 0; i < t->count; i++) {
        uint64_t h = stored_hash(t, i);
        size_t s = (size_t)h & (size - 1);
        while (slots[s] != 0) {
            s = (s + 1) & (size - 1);
        }
        slots[s] = tag_of(index_bits, h) | (uint32_t)(i + 1);
    }
    PyMem_Free(t->slots);
    t->slots = slots;
    t->mask = size - 1;
    t->index_bits = index_bits;
    return 0;
}

/* Room for one more key and its per-state entries, or -1 (MemoryError). */
static int make_room(Table *t) {
    if ((uint64_t)t->count >= (uint64_t)INT32_MAX) {
        PyErr_SetString(PyExc_MemoryError, "too many states for one table");
        return -1;
    }
    if (t->count < t->capacity) {
        return 0;
    }
    Py_ssize_t capacity = t->capacity + t->capacity / 2;
    void *p;
    if ((p = PyMem_Realloc(t->keys, (size_t)(capacity * t->stored))) == NULL) {
        goto fail;
    }
    t->keys = p;
    if ((p = PyMem_Realloc(t->via, (size_t)capacity * sizeof(uint16_t))) == NULL) {
        goto fail;
    }
    t->via = p;
    if ((p = PyMem_Realloc(t->children, (size_t)capacity * sizeof(uint16_t))) == NULL) {
        goto fail;
    }
    t->children = p;
    if ((p = PyMem_Realloc(t->next, (size_t)capacity * sizeof(int32_t))) == NULL) {
        goto fail;
    }
    t->next = p;
    t->capacity = capacity;
    return 0;
fail:
    PyErr_NoMemory();
    return -1;
}

/* Dense keys: makes each field at least as wide as vals needs, re-packing the
 * stored keys in place (from the last, since a key only moves up). */
static int widen(Table *t, const uint64_t *vals) {
    unsigned char bits[MAX_FIELDS];
    unsigned total = 0;
    for (Py_ssize_t f = 0; f < t->nfields; f++) {
        unsigned need = bit_length(vals[f]);
        bits[f] = (unsigned char)(need > t->bits[f] ? need : t->bits[f]);
        total += bits[f];
    }
    Py_ssize_t stored = total ? (Py_ssize_t)(total + 7) / 8 : 1;
    if (stored > t->stored) {
        unsigned char *keys = PyMem_Realloc(t->keys, (size_t)(t->capacity * stored));
        if (keys == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        t->keys = keys;
    }
    for (Py_ssize_t i = t->count - 1; i >= 0; i--) {
        uint64_t old[MAX_FIELDS];
        dense_decode(t->bits, t->nfields, t->keys + i * t->stored, old);
        dense_encode(bits, t->nfields, old, t->keys + i * stored, stored);
    }
    memcpy(t->bits, bits, (size_t)t->nfields);
    t->stored = stored;
    return 0;
}

/* The slot of a stored key with hash h; *found says whether it holds it. */
static size_t locate(const Table *t, uint64_t h, const unsigned char *stored, int *found) {
    size_t s = (size_t)h & t->mask;
    uint32_t tag = tag_of(t->index_bits, h);
    uint32_t tags = ~((UINT32_C(1) << (t->index_bits & 31)) - 1) * (t->index_bits < 32);
    for (;;) {
        uint32_t at = t->slots[s];
        if (at == 0) {
            *found = 0;
            return s;
        }
        if ((at & tags) == tag) {
            Py_ssize_t index = (Py_ssize_t)slot_index(t->index_bits, at) - 1;
            if (memcmp(t->keys + index * t->stored, stored, (size_t)t->stored) == 0) {
                *found = 1;
                return s;
            }
        }
        s = (s + 1) & t->mask;
    }
}

/* The index in slot s (which holds one). */
static Py_ssize_t index_in(const Table *t, size_t s) {
    return (Py_ssize_t)slot_index(t->index_bits, t->slots[s]) - 1;
}

/* Adds a stored key of hash h at slot s (which locate found empty, after
 * make_room): -1 - its index, or PY_SSIZE_T_MIN (an exception set). */
static Py_ssize_t insert_at(Table *t, size_t s, uint64_t h, const unsigned char *stored) {
    Py_ssize_t index = t->count;
    memcpy(t->keys + index * t->stored, stored, (size_t)t->stored);
    t->via[index] = 0;
    t->children[index] = 0;
    t->next[index] = -1;
    t->slots[s] = tag_of(t->index_bits, h) | (uint32_t)(index + 1);
    t->count++;
    if ((size_t)t->count * 10 > (t->mask + 1) * 7 && grow_slots(t) < 0) {
        return PY_SSIZE_T_MIN;
    }
    return -1 - index;
}

/* What a key given as bytes is stored as: itself, or its fingerprint (in buf);
 * *h is its hash. */
static const unsigned char *stored_form(const Table *t, const unsigned char *key,
                                        unsigned char *buf, uint64_t *h) {
    if (t->compact) {
        uint64_t fp = fingerprint_of(key, t->width);
        memcpy(buf, &fp, 8);
        *h = fp;
        return buf;
    }
    *h = fingerprint_of(key, t->width);
    return key;
}

/* -- field ids ---------------------------------------------------------------------- */

/* 0 if each id fits its layout field (and a dense key), else OverflowError (the
 * search then starts again with a wider layout). */
static int check_values(const Table *t, const uint64_t *vals) {
    for (Py_ssize_t f = 0; f < t->nfields; f++) {
        uint64_t v = vals[f];
        unsigned size = t->sizes[f];
        if ((size < 8 && (v >> (8 * size)) != 0) || (t->dense && (v >> MAX_BITS) != 0)) {
            PyErr_Format(PyExc_OverflowError, "field %zd: %llu does not fit %u bytes", f,
                         (unsigned long long)v, size);
            return -1;
        }
    }
    return 0;
}

/* The ints items[0..nfields) as uint64, checked by check_values. */
static int values_of(const Table *t, PyObject *const *items, uint64_t *vals) {
    for (Py_ssize_t f = 0; f < t->nfields; f++) {
        unsigned long long v = PyLong_AsUnsignedLongLong(items[f]);
        if (v == (unsigned long long)-1 && PyErr_Occurred()) {
            return -1;
        }
        vals[f] = v;
    }
    return check_values(t, vals);
}

/* The ids of a tuple of nfields ints, checked by check_values. */
static int ids_values(const Table *t, PyObject *ids, uint64_t *vals) {
    if (check_layout(t) < 0) {
        return -1;
    }
    if (!PyTuple_Check(ids) || PyTuple_GET_SIZE(ids) != t->nfields) {
        PyErr_Format(PyExc_ValueError, "want a tuple of %zd ints", t->nfields);
        return -1;
    }
    return values_of(t, &PyTuple_GET_ITEM(ids, 0), vals);
}

static PyObject *tuple_of_values(const uint64_t *vals, Py_ssize_t n) {
    PyObject *out = PyTuple_New(n);
    if (out == NULL) {
        return NULL;
    }
    for (Py_ssize_t f = 0; f < n; f++) {
        PyObject *v = PyLong_FromUnsignedLongLong(vals[f]);
        if (v == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, f, v);
    }
    return out;
}

/* Field id v in size bytes, little-endian. */
static unsigned char *put_id(unsigned char *out, uint64_t v, unsigned size) {
    for (unsigned b = 0; b < size; b++) {
        *out++ = (unsigned char)(v >> (8 * b));
    }
    return out;
}

static const unsigned char *get_id(const unsigned char *in, uint64_t *v, unsigned size) {
    uint64_t x = 0;
    for (unsigned b = 0; b < size; b++) {
        x |= (uint64_t)*in++ << (8 * b);
    }
    *v = x;
    return in;
}

static void layout_pack(const Table *t, const uint64_t *vals, unsigned char *out) {
    for (Py_ssize_t f = 0; f < t->nfields; f++) {
        out = put_id(out, vals[f], t->sizes[f]);
    }
}

static void layout_unpack(const Table *t, const unsigned char *in, uint64_t *vals) {
    for (Py_ssize_t f = 0; f < t->nfields; f++) {
        in = get_id(in, &vals[f], t->sizes[f]);
    }
}

/* Whether dense ids fit the current widths. */
static int fits(const Table *t, const uint64_t *vals) {
    for (Py_ssize_t f = 0; f < t->nfields; f++) {
        if ((vals[f] >> t->bits[f]) != 0) {
            return 0;
        }
    }
    return 1;
}

/* The stored form of a key of these ids, and its hash; NULL if no stored key can
 * be it (an id wider than its field: dense keys). */
static const unsigned char *stored_of(const Table *t, const uint64_t *vals, unsigned char *buf,
                                      uint64_t *h) {
    if (t->dense) {
        if (!fits(t, vals)) {
            return NULL;
        }
        dense_encode(t->bits, t->nfields, vals, buf, t->stored);
        *h = hash_values(vals, t->nfields);
        return buf;
    }
    unsigned char key[MAX_KEY];
    layout_pack(t, vals, key);
    if (t->compact) {
        return stored_form(t, key, buf, h);
    }
    memcpy(buf, key, (size_t)t->width);
    *h = fingerprint_of(buf, t->width);
    return buf;
}

/* The index of the key with these ids, or -1. */
static Py_ssize_t find_values(const Table *t, const uint64_t *vals) {
    unsigned char buf[MAX_KEY];
    uint64_t h;
    int found;
    const unsigned char *stored = stored_of(t, vals, buf, &h);
    if (stored == NULL) {
        return -1;
    }
    size_t s = locate(t, h, stored, &found);
    return found ? index_in(t, s) : -1;
}

/* The index of the key with these ids, added if new: its index if it was
 * there, else -1 - index; PY_SSIZE_T_MIN (an exception set) on an error. */
static Py_ssize_t add_values(Table *t, const uint64_t *vals) {
    unsigned char buf[MAX_KEY];
    uint64_t h;
    int found;
    const unsigned char *stored = stored_of(t, vals, buf, &h);
    if (stored == NULL) { /* dense: widen, then it fits */
        if (widen(t, vals) < 0) {
            return PY_SSIZE_T_MIN;
        }
        stored = stored_of(t, vals, buf, &h);
    }
    size_t s = locate(t, h, stored, &found);
    if (found) {
        return index_in(t, s);
    }
    if (make_room(t) < 0) {
        return PY_SSIZE_T_MIN;
    }
    return insert_at(t, s, h, stored);
}

/* The ids of the stored key of index i (a dense table). */
static void values_at(const Table *t, Py_ssize_t i, uint64_t *vals) {
    dense_decode(t->bits, t->nfields, t->keys + i * t->stored, vals);
}

/* -- the memo of the families' outcomes ------------------------------------------------ */

/* The key of family f's entry for pattern p and these ids: its length. */
static size_t memo_key(const Table *t, int f, int p, const uint64_t *vals, unsigned char *key) {
    const Family *fam = &t->fam[f];
    unsigned char *out = key;
    *out++ = (unsigned char)f;
    *out++ = (unsigned char)p;
    for (int r = 0; r < fam->nreads[p]; r++) {
        int field = fam->reads[p][r];
        out = put_id(out, vals[field], t->sizes[field]);
    }
    return (size_t)(out - key);
}

static size_t entry_key_len(const Table *t, const unsigned char *entry) {
    const Family *fam = &t->fam[entry[4]];
    size_t n = 2;
    for (int r = 0; r < fam->nreads[entry[5]]; r++) {
        n += t->sizes[fam->reads[entry[5]][r]];
    }
    return n;
}

/* The slot of an entry with this key; *found says whether it holds it. */
static size_t memo_locate(const Table *t, const unsigned char *key, size_t len, int *found) {
    size_t s = (size_t)fingerprint_of(key, (Py_ssize_t)len) & t->mmask;
    for (;;) {
        uint32_t at = t->mslots[s];
        if (at == 0) {
            *found = 0;
            return s;
        }
        const unsigned char *entry = t->entries.data + at - 1;
        /* family and pattern first: an entry of another pattern may be shorter */
        if (entry[4] == key[0] && entry[5] == key[1] && memcmp(entry + 4, key, len) == 0) {
            *found = 1;
            return s;
        }
        s = (s + 1) & t->mmask;
    }
}

static int memo_grow(Table *t) {
    size_t size = t->mslots == NULL ? 4096 : (t->mmask + 1) * 2;
    uint32_t *slots = PyMem_Calloc(size, sizeof(uint32_t));
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t at = 0; at < t->entries.len;) {
        const unsigned char *entry = t->entries.data + at;
        size_t len = entry_key_len(t, entry);
        size_t s = (size_t)fingerprint_of(entry + 4, (Py_ssize_t)len) & (size - 1);
        while (slots[s] != 0) {
            s = (s + 1) & (size - 1);
        }
        slots[s] = (uint32_t)(at + 1);
        at += 4 + len;
    }
    PyMem_Free(t->mslots);
    t->mslots = slots;
    t->mmask = size - 1;
    return 0;
}

/* The offset of family f's outcomes for these ids, or -1 if none is stored.  A
 * pattern that has them moves one place up (the most used come first). */
static long memo_find(Table *t, int f, const uint64_t *vals) {
    Family *fam = &t->fam[f];
    unsigned char key[2 + MAX_KEY];
    int found;
    if (t->mslots == NULL) {
        return -1;
    }
    for (int k = 0; k < fam->npat; k++) {
        size_t len = memo_key(t, f, fam->order[k], vals, key);
        size_t s = memo_locate(t, key, len, &found);
        if (found) {
            if (k > 0) {
                unsigned char above = fam->order[k - 1];
                fam->order[k - 1] = fam->order[k];
                fam->order[k] = above;
            }
            uint32_t offset;
            memcpy(&offset, t->entries.data + t->mslots[s] - 1, 4);
            return (long)offset;
        }
    }
    return -1;
}

/* Decodes the outcome at offset pos of the arena. */
static void decode_outcome(const Table *t, size_t pos, Outcome *o) {
    const unsigned char *p = t->results.data + pos, *start = p;
    uint16_t number;
    uint32_t mask;
    memcpy(&number, p, 2);
    memcpy(&mask, p + 2, 4);
    p += 6;
    o->number = number;
    o->has_bad = (mask & BAD_BIT) != 0;
    o->mask = mask & ~BAD_BIT;
    o->bad = 0;
    if (o->has_bad) {
        memcpy(&o->bad, p, 4);
        p += 4;
    }
    for (Py_ssize_t f = 0; f < t->nfields; f++) {
        if (o->mask >> f & 1) {
            p = get_id(p, &o->new_ids[f], t->sizes[f]);
        }
    }
    o->size = (size_t)(p - start);
}

/* Appends the outcomes (a tuple of (number, new ids, picks or None, broken
 * property names), as _bfs.py's families give them) to the arena: their
 * offset, or -1 (an exception set).  picks must say that the k-th changed
 * field, in field order, takes new[k] (asynclookup.modelcheck._canon.picks_of). */
static long encode_outcomes(Table *t, PyObject *outcomes) {
    if (!PyTuple_Check(outcomes) || PyTuple_GET_SIZE(outcomes) > UINT16_MAX) {
        PyErr_SetString(PyExc_TypeError, "outcomes are a tuple (of at most 65535)");
        return -1;
    }
    size_t start = t->results.len;
    if (start > UINT32_MAX - (1u << 20)) {
        PyErr_SetString(PyExc_MemoryError, "the memo is full");
        return -1;
    }
    uint16_t count = (uint16_t)PyTuple_GET_SIZE(outcomes);
    unsigned char *at = buffer_extend(&t->results, 2);
    if (at == NULL) {
        return -1;
    }
    memcpy(at, &count, 2);
    for (Py_ssize_t m = 0; m < count; m++) {
        PyObject *o = PyTuple_GET_ITEM(outcomes, m);
        if (!PyTuple_Check(o) || PyTuple_GET_SIZE(o) != 4 ||
            !PyTuple_Check(PyTuple_GET_ITEM(o, 1)) || !PyTuple_Check(PyTuple_GET_ITEM(o, 3))) {
            PyErr_SetString(PyExc_TypeError, "an outcome is (number, new: tuple, picks, bad: tuple)");
            goto fail;
        }
        PyObject *new = PyTuple_GET_ITEM(o, 1), *picks = PyTuple_GET_ITEM(o, 2);
        PyObject *bad = PyTuple_GET_ITEM(o, 3);
        Py_ssize_t number = PyLong_AsSsize_t(PyTuple_GET_ITEM(o, 0));
        if (number == -1 && PyErr_Occurred()) {
            goto fail;
        }
        if (number < 0 || number > MAX_ACTIONS) {
            PyErr_SetString(PyExc_ValueError, "an action number is 0 to 65535");
            goto fail;
        }
        uint32_t mask = 0;
        uint64_t vals[MAX_FIELDS];
        Py_ssize_t k = 0;
        if (picks != Py_None) {
            if (!PyTuple_Check(picks) || PyTuple_GET_SIZE(picks) != t->nfields) {
                PyErr_SetString(PyExc_ValueError, "picks have one item per field");
                goto fail;
            }
            for (Py_ssize_t f = 0; f < t->nfields; f++) {
                Py_ssize_t p = PyLong_AsSsize_t(PyTuple_GET_ITEM(picks, f));
                if (p == -1 && PyErr_Occurred()) {
                    goto fail;
                }
                if (p == f) {
                    continue;
                }
                if (p != t->nfields + k || k >= PyTuple_GET_SIZE(new)) {
                    PyErr_SetString(PyExc_ValueError, "picks are not in the order picks_of gives");
                    goto fail;
                }
                unsigned long long v = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(new, k));
                if (v == (unsigned long long)-1 && PyErr_Occurred()) {
                    goto fail;
                }
                vals[f] = v;
                mask |= 1u << f;
                k++;
            }
        }
        if (k != PyTuple_GET_SIZE(new)) {
            PyErr_SetString(PyExc_ValueError, "an outcome has new ids that no pick takes");
            goto fail;
        }
        for (Py_ssize_t f = 0; f < t->nfields; f++) { /* as check_values, for these fields */
            unsigned size = t->sizes[f];
            if ((mask >> f & 1) && size < 8 && (vals[f] >> (8 * size)) != 0) {
                PyErr_Format(PyExc_OverflowError, "field %zd: %llu does not fit %u bytes", f,
                             (unsigned long long)vals[f], size);
                goto fail;
            }
        }
        uint32_t bad_index = 0;
        if (PyTuple_GET_SIZE(bad) > 0) {
            bad_index = (uint32_t)PyList_GET_SIZE(t->bad);
            if (PyList_Append(t->bad, bad) < 0) {
                goto fail;
            }
            mask |= BAD_BIT;
        }
        size_t size = 6 + (mask & BAD_BIT ? 4 : 0);
        for (Py_ssize_t f = 0; f < t->nfields; f++) {
            size += (mask >> f & 1) ? t->sizes[f] : 0;
        }
        if ((at = buffer_extend(&t->results, size)) == NULL) {
            goto fail;
        }
        uint16_t number16 = (uint16_t)number;
        memcpy(at, &number16, 2);
        memcpy(at + 2, &mask, 4);
        at += 6;
        if (mask & BAD_BIT) {
            memcpy(at, &bad_index, 4);
            at += 4;
        }
        for (Py_ssize_t f = 0; f < t->nfields; f++) {
            if (mask >> f & 1) {
                at = put_id(at, vals[f], t->sizes[f]);
            }
        }
    }
    return (long)start;
fail:
    t->results.len = start;
    return -1;
}

/* The pattern of family f that read these fields (added if new), or -1. */
static int pattern_of(Table *t, int f, PyObject *reads) {
    Family *fam = &t->fam[f];
    unsigned char fields[MAX_FIELDS];
    if (!PyTuple_Check(reads) || PyTuple_GET_SIZE(reads) > t->nfields) {
        PyErr_SetString(PyExc_TypeError, "reads are a tuple of field numbers");
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(reads);
    for (Py_ssize_t r = 0; r < n; r++) {
        long field = PyLong_AsLong(PyTuple_GET_ITEM(reads, r));
        if (field == -1 && PyErr_Occurred()) {
            return -1;
        }
        if (field < 0 || field >= t->nfields) {
            PyErr_SetString(PyExc_ValueError, "a field number out of range");
            return -1;
        }
        fields[r] = (unsigned char)field;
    }
    for (int p = 0; p < fam->npat; p++) {
        if (fam->nreads[p] == n && memcmp(fam->reads[p], fields, (size_t)n) == 0) {
            return p;
        }
    }
    if (fam->npat == MAX_PATTERNS) {
        PyErr_SetString(PyExc_OverflowError, "too many read patterns for one family");
        return -1;
    }
    int p = fam->npat++;
    fam->nreads[p] = (unsigned char)n;
    memcpy(fam->reads[p], fields, (size_t)n);
    fam->order[p] = (unsigned char)p;
    return p;
}

/* Stores family f's outcomes for these ids, which read the fields reads: their
 * offset, or -1 (an exception set). */
static long memo_store(Table *t, int f, PyObject *reads, const uint64_t *vals,
                       PyObject *outcomes) {
    unsigned char key[2 + MAX_KEY];
    int found;
    int p = pattern_of(t, f, reads);
    if (p < 0) {
        return -1;
    }
    if ((t->mcount + 1) * 10 > (t->mmask + 1) * 7 && memo_grow(t) < 0) {
        return -1;
    }
    size_t len = memo_key(t, f, p, vals, key);
    size_t s = memo_locate(t, key, len, &found);
    if (found) { /* stored already (the same outcomes: the functions are pure) */
        uint32_t offset;
        memcpy(&offset, t->entries.data + t->mslots[s] - 1, 4);
        return (long)offset;
    }
    if (t->entries.len > UINT32_MAX - (1u << 20)) {
        PyErr_SetString(PyExc_MemoryError, "the memo is full");
        return -1;
    }
    long offset = encode_outcomes(t, outcomes);
    if (offset < 0) {
        return -1;
    }
    size_t at_entry = t->entries.len;
    unsigned char *entry = buffer_extend(&t->entries, 4 + len);
    if (entry == NULL) {
        return -1;
    }
    uint32_t offset32 = (uint32_t)offset;
    memcpy(entry, &offset32, 4);
    memcpy(entry + 4, key, len);
    t->mslots[s] = (uint32_t)(at_entry + 1);
    t->mcount++;
    return offset;
}

/* Family f's outcomes for the state of these ids: found, or computed by
 * Python (compute(f, ids) -> (reads, outcomes)) and stored.  -1 on an error. */
static long outcomes_for(Table *t, int f, const uint64_t *vals) {
    long offset = memo_find(t, f, vals);
    if (offset >= 0) {
        return offset;
    }
    if (t->compute == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "set_search() was not called");
        return -1;
    }
    PyObject *ids = tuple_of_values(vals, t->nfields);
    if (ids == NULL) {
        return -1;
    }
    PyObject *got = PyObject_CallFunction(t->compute, "iO", f, ids);
    Py_DECREF(ids);
    if (got == NULL) {
        return -1;
    }
    if (!PyTuple_Check(got) || PyTuple_GET_SIZE(got) != 2) {
        Py_DECREF(got);
        PyErr_SetString(PyExc_TypeError, "compute() returns (reads, outcomes)");
        return -1;
    }
    offset = memo_store(t, f, PyTuple_GET_ITEM(got, 0), vals, PyTuple_GET_ITEM(got, 1));
    Py_DECREF(got);
    return offset;
}

/* The outcome at pos as Python gives it: (number, new, picks or None, bad). */
static PyObject *outcome_object(const Table *t, size_t pos) {
    Outcome o;
    decode_outcome(t, pos, &o);
    Py_ssize_t k = 0;
    uint64_t changed[MAX_FIELDS];
    PyObject *picks = Py_None;
    for (Py_ssize_t f = 0; f < t->nfields; f++) {
        if (o.mask >> f & 1) {
            changed[k++] = o.new_ids[f];
        }
    }
    PyObject *new = tuple_of_values(changed, k);
    if (new == NULL) {
        return NULL;
    }
    if (o.mask) {
        uint64_t p[MAX_FIELDS];
        Py_ssize_t c = 0;
        for (Py_ssize_t f = 0; f < t->nfields; f++) {
            p[f] = o.mask >> f & 1 ? (uint64_t)(t->nfields + c++) : (uint64_t)f;
        }
        if ((picks = tuple_of_values(p, t->nfields)) == NULL) {
            Py_DECREF(new);
            return NULL;
        }
    } else {
        Py_INCREF(picks);
    }
    PyObject *bad = o.has_bad ? Py_NewRef(PyList_GET_ITEM(t->bad, o.bad)) : PyTuple_New(0);
    if (bad == NULL) {
        Py_DECREF(new);
        Py_DECREF(picks);
        return NULL;
    }
    return Py_BuildValue("(nNNN)", o.number, new, picks, bad);
}

static PyObject *outcomes_object(const Table *t, size_t offset) {
    uint16_t count;
    memcpy(&count, t->results.data + offset, 2);
    PyObject *out = PyTuple_New(count);
    if (out == NULL) {
        return NULL;
    }
    size_t pos = offset + 2;
    for (Py_ssize_t m = 0; m < count; m++) {
        Outcome o;
        decode_outcome(t, pos, &o);
        PyObject *item = outcome_object(t, pos);
        if (item == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, m, item);
        pos += o.size;
    }
    return out;
}

/* -- the canonical form's last step ---------------------------------------------------- */

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

/* The orbit of id v of field f under signature sig, cached from the Space's
 * tables: its offset in pool; 0 if the tables do not have it (or it does not
 * fit the cache), -1 on an error. */
static int orbit_of(Table *t, uint32_t sig, Py_ssize_t f, uint64_t v, uint32_t *offset) {
    if (map_get(&t->orbmap, v | (uint64_t)f << 32, sig, offset)) {
        return 1;
    }
    if ((Py_ssize_t)sig >= PyList_GET_SIZE(t->orbits)) {
        return 0;
    }
    PyObject *tables = PyList_GET_ITEM(t->orbits, sig);
    if (!PyList_Check(tables) || PyList_GET_SIZE(tables) != t->nfields ||
        !PyDict_Check(PyList_GET_ITEM(tables, f))) {
        PyErr_SetString(PyExc_TypeError, "orbits: per signature, one dict per field");
        return -1;
    }
    PyObject *key = PyLong_FromUnsignedLongLong(v);
    if (key == NULL) {
        return -1;
    }
    PyObject *orbit = PyDict_GetItemWithError(PyList_GET_ITEM(tables, f), key);
    Py_DECREF(key);
    if (orbit == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    Py_ssize_t perms = PyTuple_Check(orbit) ? PyTuple_GET_SIZE(orbit) : 0;
    if (perms < 1 || (t->perms && perms != t->perms)) {
        PyErr_SetString(PyExc_ValueError, "orbits are non-empty tuples of one length");
        return -1;
    }
    if (t->pool_len + (size_t)perms > t->pool_cap) {
        size_t cap = t->pool_cap ? t->pool_cap * 2 : 4096;
        while (cap < t->pool_len + (size_t)perms) {
            cap *= 2;
        }
        uint32_t *pool = PyMem_Realloc(t->pool, cap * sizeof(uint32_t));
        if (pool == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        t->pool = pool;
        t->pool_cap = cap;
    }
    for (Py_ssize_t p = 0; p < perms; p++) {
        unsigned long long id = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(orbit, p));
        if (id == (unsigned long long)-1 && PyErr_Occurred()) {
            return -1;
        }
        if (id > UINT32_MAX) {
            return 0;
        }
        t->pool[t->pool_len + (size_t)p] = (uint32_t)id;
    }
    if (t->pool_len > UINT32_MAX - (size_t)perms) {
        return 0;
    }
    *offset = (uint32_t)t->pool_len;
    t->perms = perms;
    t->pool_len += (size_t)perms;
    return map_put(&t->orbmap, v | (uint64_t)f << 32, sig, *offset) < 0 ? -1 : 1;
}

/* canonical_into from the tables as this file caches them, on ids as uint64:
 * 1 done, 0 if a table does not have what it needs (the caller asks Python),
 * -1 on an error. */
static int canonical_cached(Table *t, const uint64_t *vals, uint64_t *out) {
    uint32_t sig, offset[MAX_FIELDS];
    if (t->sigs == NULL) {
        return 0;
    }
    for (Py_ssize_t f = 0; f < t->nfields; f++) {
        if (vals[f] > UINT32_MAX) {
            return 0;
        }
    }
    if (!map_get(&t->sigmap, vals[0] | vals[1] << 32, vals[2], &sig)) {
        PyObject *head = Py_BuildValue("(KKK)", (unsigned long long)vals[0],
                                       (unsigned long long)vals[1], (unsigned long long)vals[2]);
        if (head == NULL) {
            return -1;
        }
        PyObject *found = PyDict_GetItemWithError(t->sigs, head);
        Py_DECREF(head);
        if (found == NULL) {
            return PyErr_Occurred() ? -1 : 0;
        }
        long s = PyLong_AsLong(found);
        if (s == -1 && PyErr_Occurred()) {
            return -1;
        }
        if (s < 0 || s > INT32_MAX) {
            PyErr_SetString(PyExc_IndexError, "no orbit tables for that signature");
            return -1;
        }
        sig = (uint32_t)s;
        if (map_put(&t->sigmap, vals[0] | vals[1] << 32, vals[2], sig) < 0) {
            return -1;
        }
    }
    for (Py_ssize_t f = 0; f < t->nfields; f++) {
        int done = orbit_of(t, sig, f, vals[f], &offset[f]);
        if (done <= 0) {
            return done;
        }
    }
    Py_ssize_t best = 0;
    for (Py_ssize_t p = 1; p < t->perms; p++) {
        for (Py_ssize_t f = 0; f < t->nfields; f++) {
            uint32_t a = t->pool[offset[f] + p], b = t->pool[offset[f] + best];
            if (a != b) {
                if (a < b) {
                    best = p;
                }
                break;
            }
        }
    }
    for (Py_ssize_t f = 0; f < t->nfields; f++) {
        out[f] = t->pool[offset[f] + best];
    }
    return 1;
}

/* The canonical ids of vals: cached, else by the Python canonical form (which
 * fills the tables). */
static int canonical_of(Table *t, const uint64_t *vals, uint64_t *out) {
    int done = canonical_cached(t, vals, out);
    if (done != 0) {
        return done < 0 ? -1 : 0;
    }
    PyObject *raw = tuple_of_values(vals, t->nfields);
    if (raw == NULL) {
        return -1;
    }
    PyObject *canon = PyObject_CallOneArg(t->canon, raw);
    Py_DECREF(raw);
    if (canon == NULL) {
        return -1;
    }
    int ok = PyTuple_Check(canon) && PyTuple_GET_SIZE(canon) == t->nfields;
    if (!ok) {
        PyErr_SetString(PyExc_TypeError, "canonical() returns a tuple of the ids' length");
    }
    ok = ok && values_of(t, &PyTuple_GET_ITEM(canon, 0), out) == 0;
    Py_DECREF(canon);
    return ok ? 0 : -1;
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
        PyTuple_SET_ITEM(result, f, Py_NewRef(out[f]));
    }
    return result;
}

/* -- expanding a state -------------------------------------------------------------------- */

static PyObject *memo_find_in(PyObject *patterns, PyObject *ids, PyObject *missing);

/* The State of ids vals, built from the Space's values (as Space.state_of does). */
static PyObject *state_of_values(const Table *t, const uint64_t *vals) {
    PyObject *state = t->state_type->tp_alloc(t->state_type, t->nfields);
    if (state == NULL) {
        return NULL;
    }
    for (Py_ssize_t f = 0; f < t->nfields; f++) {
        PyObject *field = PyList_GET_ITEM(t->values, f);
        if (!PyList_Check(field) || vals[f] >= (uint64_t)PyList_GET_SIZE(field)) {
            Py_DECREF(state);
            PyErr_SetString(PyExc_IndexError, "an id with no value interned");
            return NULL;
        }
        PyTuple_SET_ITEM(state, f, Py_NewRef(PyList_GET_ITEM(field, (Py_ssize_t)vals[f])));
    }
    return state;
}

/* Admits the state just added (last_vals) if its checks can be settled here:
 * every memoised check stored, every invariant true.  1 if admitted (its flags
 * appended), 0 if Python must admit it, -1 on an error. */
static int admit_here(Table *t) {
    if (t->checks == NULL) {
        return 0;
    }
    PyObject *ids = tuple_of_values(t->last_vals, t->nfields);
    PyObject *state = ids == NULL ? NULL : state_of_values(t, t->last_vals);
    int done = state == NULL ? -1 : 1, quiet = 0;
    Py_ssize_t n = state == NULL ? 0 : PyList_GET_SIZE(t->checks);
    for (Py_ssize_t k = 0; k < n && done == 1; k++) {
        PyObject *check = PyList_GET_ITEM(t->checks, k);
        PyObject *patterns = PyTuple_GET_ITEM(check, 0);
        PyObject *held = patterns != Py_None ? memo_find_in(patterns, ids, t->missing)
                                             : PyObject_CallOneArg(PyTuple_GET_ITEM(check, 1), state);
        if (held == NULL) {
            done = -1;
        } else if (held == t->missing) {
            done = 0;
        } else {
            int truth = PyObject_IsTrue(held);
            if (truth < 0) {
                done = -1;
            } else if (k == n - 1) {
                quiet = truth;
            } else if (!truth) {
                done = 0; /* broken: Python reports it */
            }
        }
        Py_XDECREF(held);
    }
    if (done == 1) {
        int stopped = PyObject_IsTrue(PyTuple_GET_ITEM(state, t->stopped_field));
        Py_ssize_t size = PyByteArray_GET_SIZE(t->flags);
        if (stopped < 0 || PyByteArray_Resize(t->flags, size + 1) < 0) {
            done = -1;
        } else {
            PyByteArray_AS_STRING(t->flags)[size] = (char)(quiet | stopped << 1);
        }
    }
    Py_XDECREF(ids);
    Py_XDECREF(state);
    return done;
}

/* Whether a step of action number is an edge of the progress check. */
static int is_edge(const Table *t, Py_ssize_t number) {
    return number >= PyBytes_GET_SIZE(t->no_edge) || !PyBytes_AS_STRING(t->no_edge)[number];
}

/* The state a step reaches (target ids vals): its index if visited, -1 - index
 * if added now (last_vals are its canonical ids; with add=0 it must be
 * visited), PY_SSIZE_T_MIN on an error.  A target is looked up as it is first
 * (a visited key is canonical already).  The Python canonical form may run
 * any code: the caller checks that its expansion is still the table's. */
static Py_ssize_t reach(Table *t, const uint64_t *vals, int add) {
    uint64_t canon[MAX_FIELDS];
    if (check_values(t, vals) < 0) {
        return PY_SSIZE_T_MIN;
    }
    Py_ssize_t index = find_values(t, vals);
    if (index >= 0) {
        return index;
    }
    if (canonical_of(t, vals, canon) < 0) {
        return PY_SSIZE_T_MIN;
    }
    if (!add) {
        index = find_values(t, canon);
        if (index < 0) {
            PyErr_SetString(PyExc_RuntimeError, "a successor of a visited state is not visited");
            return PY_SSIZE_T_MIN;
        }
        return index;
    }
    index = add_values(t, canon);
    if (index < 0 && index != PY_SSIZE_T_MIN) {
        memcpy(t->last_vals, canon, sizeof canon);
        t->has_last = 1;
    }
    return index;
}

static void end_expansion(Table *t) {
    t->expanding = 0;
    t->cur = -1;
}

/* Starts expanding state i (ids) over the families in mask: their outcomes are
 * found or computed first, in family order, so that Python computes them in the
 * order the search always has.  0, or -1 with an exception set. */
static int begin(Table *t, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "(index: int, ids: tuple, families: int)");
        return -1;
    }
    if (check_layout(t) < 0) {
        return -1;
    }
    if (!t->dense || t->no_edge == NULL || t->nfam == 0) {
        PyErr_SetString(PyExc_RuntimeError,
                        "expand() needs a dense table (a layout, no fingerprints) and set_search()");
        return -1;
    }
    Py_ssize_t i = PyLong_AsSsize_t(args[0]);
    if (i == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (i < 0 || i >= t->count) {
        PyErr_SetString(PyExc_IndexError, "no state of that index");
        return -1;
    }
    unsigned long families = PyLong_AsUnsignedLong(args[2]);
    if (families == (unsigned long)-1 && PyErr_Occurred()) {
        return -1;
    }
    if (families >> t->nfam) {
        PyErr_SetString(PyExc_ValueError, "families: one bit per family set_search() named");
        return -1;
    }
    uint64_t vals[MAX_FIELDS];
    if (ids_values(t, args[1], vals) < 0) {
        return -1;
    }
    end_expansion(t);
    unsigned long generation = ++t->generation;
    uint32_t res[MAX_FAMILIES];
    for (int f = 0; f < t->nfam; f++) {
        if (families >> f & 1) {
            long offset = outcomes_for(t, f, vals);
            if (offset < 0) {
                return -1;
            }
            if (t->generation != generation) {
                PyErr_SetString(PyExc_RuntimeError, "the table was used by compute()");
                return -1;
            }
            res[f] = (uint32_t)offset;
        }
    }
    memcpy(t->res, res, sizeof res);
    memcpy(t->cur_vals, vals, sizeof vals);
    t->expanding = 1;
    t->cur = i;
    t->families = (unsigned)families;
    t->at_family = 0;
    t->at_outcome = 0;
    t->counted = 0;
    t->low = PY_SSIZE_T_MAX;
    t->high = -1;
    return 0;
}

/* The target of outcome o from the state being expanded. */
static void apply_outcome(const Table *t, const Outcome *o, uint64_t *target) {
    for (Py_ssize_t f = 0; f < t->nfields; f++) {
        target[f] = o->mask >> f & 1 ? o->new_ids[f] : t->cur_vals[f];
    }
}

/* Walks the outcomes of the expansion in progress from the cursor: returns at
 * a new state (its index), at an outcome that breaks a step property
 * (WALK_BAD, the cursor on it), or at the end (WALK_DONE, with the state's
 * successor for the progress check chosen: its least successor if that is
 * below it, else its greatest). */
static PyObject *walk(Table *t) {
    Py_ssize_t i = t->cur;
    unsigned long generation = t->generation;
    for (; t->at_family < t->nfam; t->at_family++, t->at_outcome = 0) {
        int f = t->at_family;
        if (!(t->families >> f & 1)) {
            continue;
        }
        uint16_t count;
        memcpy(&count, t->results.data + t->res[f], 2);
        if (t->at_outcome == 0) {
            t->at_pos = t->res[f] + 2;
        }
        while (t->at_outcome < count) {
            Outcome o;
            uint64_t target[MAX_FIELDS];
            decode_outcome(t, t->at_pos, &o);
            if (!t->counted) {
                t->transitions++;
                t->counted = 1;
            }
            if (o.has_bad) {
                return PyLong_FromLong(WALK_BAD);
            }
            Py_ssize_t j = i;
            if (o.mask) {
                apply_outcome(t, &o, target);
                j = reach(t, target, 1);
                if (j == PY_SSIZE_T_MIN) {
                    return NULL;
                }
                if (t->generation != generation || !t->expanding) {
                    PyErr_SetString(PyExc_RuntimeError, "the table was used by canonical()");
                    return NULL;
                }
            }
            t->at_outcome++;
            t->at_pos += o.size;
            t->counted = 0;
            int added = j < 0;
            if (added) {
                j = -1 - j;
                if (t->children[i] == UINT16_MAX) {
                    PyErr_SetString(PyExc_OverflowError, "too many new states from one state");
                    return NULL;
                }
                t->via[j] = (uint16_t)o.number;
                t->children[i]++;
            }
            if (j != i && is_edge(t, o.number)) {
                t->low = j < t->low ? j : t->low;
                t->high = j > t->high ? j : t->high;
            }
            if (added) {
                int admitted = admit_here(t);
                if (admitted < 0) {
                    return NULL;
                }
                if (t->generation != generation || !t->expanding) {
                    PyErr_SetString(PyExc_RuntimeError, "the table was used by a check");
                    return NULL;
                }
                if (!admitted) {
                    return PyLong_FromSsize_t(j);
                }
            }
        }
    }
    t->next[i] = (int32_t)(t->low < i ? t->low : t->high);
    end_expansion(t);
    return PyLong_FromLong(WALK_DONE);
}

/* -- the Python type ---------------------------------------------------------------------- */

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
    PyObject *bad = PyList_New(0);
    if (bad == NULL) {
        return -1;
    }
    /* Only a valid layout changes the table (a failed re-init keeps the old one). */
    free_buffers(self);
    end_expansion(self);
    Py_XSETREF(self->bad, bad);
    memcpy(self->sizes, layout, (size_t)nfields);
    memset(self->bits, 0, sizeof self->bits);
    memset(self->fam, 0, sizeof self->fam);
    self->nfam = 0;
    self->perms = 0;
    self->has_last = 0;
    self->nfields = nfields;
    self->width = width;
    self->compact = compact;
    self->dense = nfields > 0 && !compact;
    self->stored = compact ? 8 : self->dense ? 1 : width;
    self->count = 0;
    self->capacity = 1024;
    self->mask = 2047;
    self->index_bits = 11;
    self->transitions = 0;
    self->keys = PyMem_Malloc((size_t)(self->capacity * self->stored));
    self->slots = PyMem_Calloc(self->mask + 1, sizeof(uint32_t));
    self->via = PyMem_Malloc((size_t)self->capacity * sizeof(uint16_t));
    self->children = PyMem_Malloc((size_t)self->capacity * sizeof(uint16_t));
    self->next = PyMem_Malloc((size_t)self->capacity * sizeof(int32_t));
    if (self->keys == NULL || self->slots == NULL || self->via == NULL ||
        self->children == NULL || self->next == NULL) {
        free_buffers(self);
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void Table_dealloc(Table *self) {
    free_buffers(self);
    Py_XDECREF(self->values);
    Py_XDECREF(self->checks);
    Py_XDECREF(self->missing);
    Py_XDECREF(self->flags);
    Py_XDECREF(self->state_type);
    Py_XDECREF(self->bad);
    Py_XDECREF(self->sigs);
    Py_XDECREF(self->orbits);
    Py_XDECREF(self->canon);
    Py_XDECREF(self->compute);
    Py_XDECREF(self->no_edge);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A bytes key as given: its ids (a table with a layout: *stored NULL), else its
 * stored form (*stored, hash *h). */
static int given_key(const Table *t, PyObject *key, uint64_t *vals, unsigned char *buf,
                     const unsigned char **stored, uint64_t *h) {
    char *data;
    Py_ssize_t size;
    if (check_ready(t) < 0 || PyBytes_AsStringAndSize(key, &data, &size) < 0) {
        return -1;
    }
    if (size != t->width) {
        PyErr_Format(PyExc_ValueError, "key of %zd bytes, want %zd", size, t->width);
        return -1;
    }
    *stored = NULL;
    if (t->nfields) {
        layout_unpack(t, (const unsigned char *)data, vals);
        return check_values(t, vals);
    }
    *stored = stored_form(t, (const unsigned char *)data, buf, h);
    return 0;
}

static PyObject *Table_find(Table *self, PyObject *key) {
    uint64_t vals[MAX_FIELDS], h = 0;
    unsigned char buf[8];
    const unsigned char *stored;
    int found;
    if (given_key(self, key, vals, buf, &stored, &h) < 0) {
        return NULL;
    }
    if (stored == NULL) {
        return PyLong_FromSsize_t(find_values(self, vals));
    }
    size_t s = locate(self, h, stored, &found);
    return PyLong_FromSsize_t(found ? index_in(self, s) : -1);
}

/* The index of key, added if new: its index if it was there, else -1 - index. */
static PyObject *Table_add(Table *self, PyObject *key) {
    uint64_t vals[MAX_FIELDS], h = 0;
    unsigned char buf[8];
    const unsigned char *stored;
    int found;
    if (given_key(self, key, vals, buf, &stored, &h) < 0) {
        return NULL;
    }
    Py_ssize_t index;
    if (stored == NULL) {
        index = add_values(self, vals);
    } else {
        size_t s = locate(self, h, stored, &found);
        if (found) {
            index = index_in(self, s);
        } else {
            index = make_room(self) < 0 ? PY_SSIZE_T_MIN : insert_at(self, s, h, stored);
        }
    }
    return index == PY_SSIZE_T_MIN ? NULL : PyLong_FromSsize_t(index);
}

static PyObject *Table_find_ids(Table *self, PyObject *ids) {
    uint64_t vals[MAX_FIELDS];
    if (ids_values(self, ids, vals) < 0) {
        return NULL;
    }
    return PyLong_FromSsize_t(find_values(self, vals));
}

/* add() of the ids: the index (or -1 - index if new), and the key packed by the layout. */
static PyObject *Table_add_ids(Table *self, PyObject *ids) {
    uint64_t vals[MAX_FIELDS];
    unsigned char key[MAX_KEY];
    if (ids_values(self, ids, vals) < 0) {
        return NULL;
    }
    Py_ssize_t added = add_values(self, vals);
    if (added == PY_SSIZE_T_MIN) {
        return NULL;
    }
    layout_pack(self, vals, key);
    return Py_BuildValue("(ny#)", added, (const char *)key, self->width);
}

static Py_ssize_t index_arg(const Table *t, PyObject *arg) {
    if (check_ready(t) < 0) {
        return -1;
    }
    Py_ssize_t i = PyLong_AsSsize_t(arg);
    if (i == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (i < 0 || i >= t->count) {
        PyErr_SetString(PyExc_IndexError, "no state of that index");
        return -1;
    }
    return i;
}

/* The key of index i: packed by the layout, or as stored (fingerprint, raw bytes). */
static PyObject *Table_key(Table *self, PyObject *arg) {
    Py_ssize_t i = index_arg(self, arg);
    if (i < 0) {
        return NULL;
    }
    if (self->dense) {
        uint64_t vals[MAX_FIELDS];
        unsigned char key[MAX_KEY];
        values_at(self, i, vals);
        layout_pack(self, vals, key);
        return PyBytes_FromStringAndSize((const char *)key, self->width);
    }
    return PyBytes_FromStringAndSize((const char *)self->keys + i * self->stored, self->stored);
}

/* The ids of index i, as a tuple (a table with a layout and without fingerprints). */
static PyObject *Table_ids(Table *self, PyObject *arg) {
    Py_ssize_t i = index_arg(self, arg);
    if (i < 0) {
        return NULL;
    }
    if (!self->dense) {
        PyErr_SetString(PyExc_TypeError,
                        "only a table with a layout and no fingerprints gives ids back");
        return NULL;
    }
    uint64_t vals[MAX_FIELDS];
    values_at(self, i, vals);
    return tuple_of_values(vals, self->nfields);
}

static Py_ssize_t Table_len(Table *self) {
    return self->count;
}

/* set_canonical(sigs, orbits): the Space's tables (stale-collapsed signatures). */
static PyObject *Table_set_canonical(Table *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyDict_Check(args[0]) || !PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "set_canonical(sigs: dict, orbits: list)");
        return NULL;
    }
    Py_XSETREF(self->sigs, Py_NewRef(args[0]));
    Py_XSETREF(self->orbits, Py_NewRef(args[1]));
    map_free(&self->sigmap);
    map_free(&self->orbmap);
    self->pool_len = 0;
    self->perms = 0;
    Py_RETURN_NONE;
}

/* set_search(families, compute, canonical, no_edge): the number of action
 * families, compute(family, ids) -> (fields read, outcomes) for an outcome not
 * stored, the Python canonical form (ids -> ids) for a target the tables
 * cannot do, and no_edge[number] != 0 for the actions whose steps are not edges
 * of the progress check (shutdown). */
static PyObject *Table_set_search(Table *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !PyLong_Check(args[0]) || !PyCallable_Check(args[1]) ||
        !PyCallable_Check(args[2]) || !PyBytes_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "set_search(families: int, compute: callable, "
                                         "canonical: callable, no_edge: bytes)");
        return NULL;
    }
    long families = PyLong_AsLong(args[0]);
    if (families < 1 || families > MAX_FAMILIES || self->nfields >= 32) {
        PyErr_SetString(PyExc_ValueError, "1 to 16 families, of states of at most 31 fields");
        return NULL;
    }
    if (PyBytes_GET_SIZE(args[3]) > MAX_ACTIONS) {
        PyErr_SetString(PyExc_ValueError, "at most 65535 actions");
        return NULL;
    }
    if (self->nfam && self->nfam != families) {
        PyErr_SetString(PyExc_ValueError, "the families of a table are set once");
        return NULL;
    }
    self->nfam = (int)families;
    Py_XSETREF(self->compute, Py_NewRef(args[1]));
    Py_XSETREF(self->canon, Py_NewRef(args[2]));
    Py_XSETREF(self->no_edge, Py_NewRef(args[3]));
    Py_RETURN_NONE;
}

/* outcomes(family, ids): the family's outcomes for the state of these ids
 * (found, or computed and stored), as Python gives them. */
static PyObject *Table_outcomes(Table *self, PyObject *const *args, Py_ssize_t nargs) {
    uint64_t vals[MAX_FIELDS];
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "outcomes(family: int, ids: tuple)");
        return NULL;
    }
    long f = PyLong_AsLong(args[0]);
    if (f == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (f < 0 || f >= self->nfam) {
        PyErr_SetString(PyExc_ValueError, "no such family (see set_search)");
        return NULL;
    }
    if (ids_values(self, args[1], vals) < 0) {
        return NULL;
    }
    long offset = outcomes_for(self, (int)f, vals);
    return offset < 0 ? NULL : outcomes_object(self, (size_t)offset);
}

/* set_admission(values, State, stopped_field, checks, missing, flags): admit
 * new states here from now on (see admit_here); the checks are a list of
 * (patterns, None) (a memo's list of (getter, dict, ...), looked up as
 * memo_find does) or (None, predicate), in order, the last one quiescence.
 * set_admission(None) turns it off. */
static PyObject *Table_set_admission(Table *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs == 1 && args[0] == Py_None) {
        Py_CLEAR(self->checks);
        Py_RETURN_NONE;
    }
    if (nargs != 6 || !PyList_Check(args[0]) || PyList_GET_SIZE(args[0]) != self->nfields ||
        !PyType_Check(args[1]) || !PyType_IsSubtype((PyTypeObject *)args[1], &PyTuple_Type) ||
        !PyList_Check(args[3]) || PyList_GET_SIZE(args[3]) < 1 || !PyByteArray_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError,
                        "set_admission(values: list per field, State: a tuple type, "
                        "stopped_field: int, checks: non-empty list, missing, flags: bytearray)");
        return NULL;
    }
    Py_ssize_t stopped = PyLong_AsSsize_t(args[2]);
    if (stopped == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (stopped < 0 || stopped >= self->nfields) {
        PyErr_SetString(PyExc_ValueError, "stopped_field: a field number");
        return NULL;
    }
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(args[3]); k++) {
        PyObject *check = PyList_GET_ITEM(args[3], k);
        if (!PyTuple_Check(check) || PyTuple_GET_SIZE(check) != 2 ||
            (PyTuple_GET_ITEM(check, 0) == Py_None
                 ? !PyCallable_Check(PyTuple_GET_ITEM(check, 1))
                 : !PyList_Check(PyTuple_GET_ITEM(check, 0)))) {
            PyErr_SetString(PyExc_TypeError, "a check is (patterns: list, None) or "
                                             "(None, predicate)");
            return NULL;
        }
    }
    Py_XSETREF(self->values, Py_NewRef(args[0]));
    Py_XSETREF(self->state_type, (PyTypeObject *)Py_NewRef(args[1]));
    self->stopped_field = stopped;
    Py_XSETREF(self->checks, PyList_GetSlice(args[3], 0, PyList_GET_SIZE(args[3])));
    Py_XSETREF(self->missing, Py_NewRef(args[4]));
    Py_XSETREF(self->flags, Py_NewRef(args[5]));
    if (self->checks == NULL) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* outcomes_key(family, ids): where the family's outcomes for the state of these ids
 * are stored (found, or computed and stored): equal keys, equal outcomes. */
static PyObject *Table_outcomes_key(Table *self, PyObject *const *args, Py_ssize_t nargs) {
    uint64_t vals[MAX_FIELDS];
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "outcomes_key(family: int, ids: tuple)");
        return NULL;
    }
    long f = PyLong_AsLong(args[0]);
    if (f == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (f < 0 || f >= self->nfam) {
        PyErr_SetString(PyExc_ValueError, "no such family (see set_search)");
        return NULL;
    }
    if (ids_values(self, args[1], vals) < 0) {
        return NULL;
    }
    long offset = outcomes_for(self, (int)f, vals);
    return offset < 0 ? NULL : PyLong_FromLong(offset);
}

/* expand(i, ids, families): starts expanding state i (field ids ids) with the
 * outcomes of the families whose bits are set, in family order, and walks
 * them: see walk(). */
static PyObject *Table_expand(Table *self, PyObject *const *args, Py_ssize_t nargs) {
    if (begin(self, args, nargs) < 0) {
        return NULL;
    }
    return walk(self);
}

/* resume(): walks on after a new state or a bad outcome (which it returns again). */
static PyObject *Table_resume(Table *self, PyObject *unused) {
    (void)unused;
    if (!self->expanding) {
        PyErr_SetString(PyExc_RuntimeError, "no expansion in progress");
        return NULL;
    }
    return walk(self);
}

/* outcome(): the outcome at the cursor (the one that broke a step property). */
static PyObject *Table_outcome(Table *self, PyObject *unused) {
    (void)unused;
    if (!self->expanding) {
        PyErr_SetString(PyExc_RuntimeError, "no outcome at the cursor");
        return NULL;
    }
    return outcome_object(self, self->at_pos);
}

static PyObject *Table_last_ids(Table *self, PyObject *unused) {
    (void)unused;
    if (!self->has_last) {
        PyErr_SetString(PyExc_LookupError, "expand() has added no state yet");
        return NULL;
    }
    return tuple_of_values(self->last_vals, self->nfields);
}

/* last_key(): the key (packed by the layout) of the last state expand() added. */
static PyObject *Table_last_key(Table *self, PyObject *unused) {
    (void)unused;
    unsigned char key[MAX_KEY];
    if (check_layout(self) < 0) {
        return NULL;
    }
    if (!self->has_last) {
        PyErr_SetString(PyExc_LookupError, "expand() has added no state yet");
        return NULL;
    }
    layout_pack(self, self->last_vals, key);
    return PyBytes_FromStringAndSize((const char *)key, self->width);
}

/* successors(i, ids, families): the distinct states that expand(i, ids,
 * families) steps to, but i itself and the steps of no_edge actions: what the
 * progress check's successor was chosen from.  Every target must be visited (a
 * search at its fixpoint). */
static PyObject *Table_successors(Table *self, PyObject *const *args, Py_ssize_t nargs) {
    if (begin(self, args, nargs) < 0) {
        return NULL;
    }
    Py_ssize_t i = self->cur;
    unsigned long generation = self->generation;
    PyObject *found = PyList_New(0);
    if (found == NULL) {
        end_expansion(self);
        return NULL;
    }
    for (int f = 0; f < self->nfam; f++) {
        if (!(self->families >> f & 1)) {
            continue;
        }
        uint16_t count;
        memcpy(&count, self->results.data + self->res[f], 2);
        size_t pos = self->res[f] + 2;
        for (Py_ssize_t m = 0; m < count; m++) {
            Outcome o;
            uint64_t target[MAX_FIELDS];
            decode_outcome(self, pos, &o);
            pos += o.size;
            if (o.has_bad || !o.mask || !is_edge(self, o.number)) {
                continue;
            }
            apply_outcome(self, &o, target);
            Py_ssize_t j = reach(self, target, 0);
            if (j == PY_SSIZE_T_MIN || self->generation != generation) {
                if (j != PY_SSIZE_T_MIN) {
                    PyErr_SetString(PyExc_RuntimeError, "the table was used by canonical()");
                }
                Py_DECREF(found);
                end_expansion(self);
                return NULL;
            }
            if (j == i) {
                continue;
            }
            PyObject *index = PyLong_FromSsize_t(j);
            int known = index == NULL ? -1 : PySequence_Contains(found, index);
            if (known < 0 || (!known && PyList_Append(found, index) < 0)) {
                Py_XDECREF(index);
                Py_DECREF(found);
                end_expansion(self);
                return NULL;
            }
            Py_DECREF(index);
        }
    }
    end_expansion(self);
    return found;
}

/* path(j): [(state, action number)] from the first state's child to j, following
 * parents.  States are added in the order the search expands their parents,
 * so state 0's children come first, then state 1's, and so on: a parent is
 * found by counting children. */
static PyObject *Table_path(Table *self, PyObject *arg) {
    Py_ssize_t j = index_arg(self, arg);
    if (j < 0) {
        return NULL;
    }
    PyObject *path = PyList_New(0);
    if (path == NULL) {
        return NULL;
    }
    while (j > 0) {
        Py_ssize_t parent = 0, first = 1; /* first: the parent's first child */
        while (parent < j && j >= first + self->children[parent]) {
            first += self->children[parent];
            parent++;
        }
        if (parent == j) { /* keys added by add(), not by expand() */
            Py_DECREF(path);
            PyErr_SetString(PyExc_RuntimeError, "no parent recorded for that state");
            return NULL;
        }
        PyObject *step = Py_BuildValue("(nn)", j, (Py_ssize_t)self->via[j]);
        if (step == NULL || PyList_Append(path, step) < 0) {
            Py_XDECREF(step);
            Py_DECREF(path);
            return NULL;
        }
        Py_DECREF(step);
        j = parent;
    }
    if (PyList_Reverse(path) < 0) {
        Py_DECREF(path);
        return NULL;
    }
    return path;
}

enum { UNKNOWN = 0, GOOD = 1, ON_CHAIN = 2, BAD = 3 };

/* settle(good): good (a bytearray, one byte a state) is 1 for the quiescent
 * states; marks 1 every state whose chain of chosen successors (next) reaches
 * one, 0 the others, and returns the others' indices, in order.  A state marked
 * 1 reaches a quiescent state; whether the others do, the caller decides from
 * their full successor lists. */
static PyObject *Table_settle(Table *self, PyObject *arg) {
    if (check_ready(self) < 0) {
        return NULL;
    }
    if (!PyByteArray_Check(arg) || PyByteArray_GET_SIZE(arg) != self->count) {
        PyErr_SetString(PyExc_TypeError, "settle(good): a bytearray of one byte per state");
        return NULL;
    }
    unsigned char *mark = (unsigned char *)PyByteArray_AS_STRING(arg);
    Py_ssize_t n = self->count;
    for (Py_ssize_t s = 0; s < n; s++) {
        if (mark[s] > GOOD) {
            PyErr_SetString(PyExc_ValueError, "good is 0 or 1 per state");
            return NULL;
        }
    }
    for (Py_ssize_t s = 0; s < n; s++) {
        Py_ssize_t j = s;
        while (j >= 0 && mark[j] == UNKNOWN) { /* follow the chain to a known state */
            mark[j] = ON_CHAIN;
            j = self->next[j];
        }
        unsigned char end = j >= 0 && mark[j] == GOOD ? GOOD : BAD; /* ON_CHAIN: a cycle */
        for (j = s; j >= 0 && mark[j] == ON_CHAIN; j = self->next[j]) {
            mark[j] = end;
        }
    }
    PyObject *others = PyList_New(0);
    if (others == NULL) {
        return NULL;
    }
    for (Py_ssize_t s = 0; s < n; s++) {
        if (mark[s] == GOOD) {
            continue;
        }
        mark[s] = 0;
        PyObject *index = PyLong_FromSsize_t(s);
        if (index == NULL || PyList_Append(others, index) < 0) {
            Py_XDECREF(index);
            Py_DECREF(others);
            return NULL;
        }
        Py_DECREF(index);
    }
    return others;
}

static PyObject *Table_nbytes(Table *self, void *closure) {
    (void)closure;
    size_t n = (size_t)(self->capacity * self->stored) + (self->mask + 1) * sizeof(uint32_t);
    return PyLong_FromSize_t(n);
}

static PyObject *Table_graph_nbytes(Table *self, void *closure) {
    (void)closure;
    size_t per = 2 * sizeof(uint16_t) + sizeof(int32_t);
    return PyLong_FromSize_t((size_t)self->capacity * per);
}

static PyObject *Table_memo_nbytes(Table *self, void *closure) {
    (void)closure;
    size_t slots = self->mslots == NULL ? 0 : (self->mmask + 1) * sizeof(uint32_t);
    return PyLong_FromSize_t(self->entries.cap + self->results.cap + slots);
}

static PyObject *Table_memo_entries(Table *self, void *closure) {
    (void)closure;
    return PyLong_FromSize_t(self->mcount);
}

static PyObject *Table_stored_bytes(Table *self, void *closure) {
    (void)closure;
    return PyLong_FromSsize_t(self->stored);
}

static PyObject *Table_compact(Table *self, void *closure) {
    (void)closure;
    return PyBool_FromLong(self->compact);
}

static PyObject *Table_transitions(Table *self, void *closure) {
    (void)closure;
    return PyLong_FromUnsignedLongLong(self->transitions);
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

static PyMethodDef Table_methods[] = {
    {"find", (PyCFunction)Table_find, METH_O, "The index of key, or -1."},
    {"add", (PyCFunction)Table_add, METH_O,
     "The index of key if it is there, else add it and return -1 - its index."},
    {"key", (PyCFunction)Table_key, METH_O, "The key of that index."},
    {"ids", (PyCFunction)Table_ids, METH_O, "The field ids of the key of that index."},
    {"find_ids", (PyCFunction)Table_find_ids, METH_O, "find() of the ids packed by the layout."},
    {"add_ids", (PyCFunction)Table_add_ids, METH_O,
     "add() of the ids packed by the layout: (its result, the packed key)."},
    {"set_canonical", (PyCFunction)(void (*)(void))Table_set_canonical, METH_FASTCALL,
     "The Space's signature and orbit tables, for expand()."},
    {"set_search", (PyCFunction)(void (*)(void))Table_set_search, METH_FASTCALL,
     "The families, how to compute their outcomes, the canonical form, the non-edges."},
    {"outcomes", (PyCFunction)(void (*)(void))Table_outcomes, METH_FASTCALL,
     "A family's outcomes for a state (found or computed)."},
    {"set_admission", (PyCFunction)(void (*)(void))Table_set_admission, METH_FASTCALL,
     "Admit new states here: their invariants and quiescence, from memos or calls."},
    {"outcomes_key", (PyCFunction)(void (*)(void))Table_outcomes_key, METH_FASTCALL,
     "Where a family's outcomes for a state are stored (found or computed)."},
    {"expand", (PyCFunction)(void (*)(void))Table_expand, METH_FASTCALL,
     "Walk a state's outcomes: a new state's index, -1 at the end, -2 at a bad step."},
    {"resume", (PyCFunction)Table_resume, METH_NOARGS, "Walk on: as expand()."},
    {"outcome", (PyCFunction)Table_outcome, METH_NOARGS, "The outcome at the cursor."},
    {"last_ids", (PyCFunction)Table_last_ids, METH_NOARGS,
     "The canonical ids of the last state expand() added."},
    {"last_key", (PyCFunction)Table_last_key, METH_NOARGS,
     "The key of the last state expand() added."},
    {"successors", (PyCFunction)(void (*)(void))Table_successors, METH_FASTCALL,
     "The distinct visited states a state steps to (edges of the progress check)."},
    {"path", (PyCFunction)Table_path, METH_O, "[(state, action)] from the start to a state."},
    {"settle", (PyCFunction)Table_settle, METH_O,
     "Mark the states whose chosen successors reach a good one; the others' indices."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Table_getset[] = {
    {"nbytes", (getter)Table_nbytes, NULL, "Bytes allocated for keys and slots.", NULL},
    {"graph_nbytes", (getter)Table_graph_nbytes, NULL,
     "Bytes allocated per state for the search (action, children, successor).", NULL},
    {"memo_nbytes", (getter)Table_memo_nbytes, NULL, "Bytes allocated for the memo.", NULL},
    {"memo_entries", (getter)Table_memo_entries, NULL, "Outcomes stored in the memo.", NULL},
    {"stored_bytes", (getter)Table_stored_bytes, NULL, "Bytes stored per key now.", NULL},
    {"compact", (getter)Table_compact, NULL, "Whether fingerprints are stored.", NULL},
    {"transitions", (getter)Table_transitions, NULL, "Outcomes expand() has walked.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods Table_as_sequence = {
    .sq_length = (lenfunc)Table_len,
};

static PyTypeObject TableType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "asynclookup.modelcheck._cvisited.Table",
    .tp_doc = "The visited set, the memo of outcomes and the search graph of one search.",
    .tp_basicsize = sizeof(Table),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Table_init,
    .tp_dealloc = (destructor)Table_dealloc,
    .tp_methods = Table_methods,
    .tp_getset = Table_getset,
    .tp_as_sequence = &Table_as_sequence,
};

/* -- memo lookups for Python's memos ------------------------------------------------------ */

/* memo_find(patterns, ids, missing): the first result found for ids, looking
 * in each (getter, table) of patterns under getter(ids); a pattern that finds
 * it moves one place up.  missing if none has it. */
static PyObject *memo_find_in(PyObject *patterns, PyObject *ids, PyObject *missing) {
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
        PyObject *key = PyObject_CallOneArg(PyTuple_GET_ITEM(pattern, 0), ids);
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
    return Py_NewRef(missing);
}

static PyObject *py_memo_find(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "memo_find(patterns: list, ids, missing)");
        return NULL;
    }
    return memo_find_in(args[0], args[1], args[2]);
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
    PyModuleDef_HEAD_INIT, "_cvisited", "The model checker's compiled kernel.", -1,
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

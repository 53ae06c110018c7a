/* qtrace.graph._native: the recording hot path in C.
 *
 * Eager NumPy-style code records one graph node per operation, so what a node costs to
 * create is what every `x * y` costs. This module implements, for the common cases, the
 * same algorithms as the Python definitions it accelerates, on the same Python objects:
 *
 *   make_node   qtrace.graph.node.make_node (one- and two-input nodes; everything else,
 *               and merges of two distinct leaf lists, call back into the Python code)
 *
 * The Python module stays the reference: `bind` hands this module the classes, tables and
 * fallback functions it works with (node.py's intern tables are the very dicts used here,
 * so clearing them from Python is seen here), and QTRACE_NATIVE=0 runs without it. The
 * test suite runs the same programs both ways (tests/unit/test_native_recorder.py).
 *
 * Objects are written through the member slots of the Python classes (their __slots__):
 * `bind` reads each slot's offset from its member descriptor, so the classes keep being
 * defined once, in Python.
 */
/* What the Python side expects of this module (qtrace.graph.native.ABI): bump it whenever
   a function's arguments change, so that a stale build is refused, not misused. */
#define QTRACE_NATIVE_ABI 14

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <math.h>
#ifndef _WIN32
#include <pthread.h>
#endif

/* -- what bind() hands over ------------------------------------------------------------ */
static PyTypeObject *node_type;      /* qtrace.graph.node.Node (not Leaf) */
static PyTypeObject *leaf_type;      /* qtrace.graph.node.Leaf: an input, its own leaf list */
static PyObject *structs;            /* node._structs: parts -> Struct */
static PyObject *struct_fn;          /* node._struct(parts): intern a new struct */
static PyObject *merge2_fn;          /* node._merge2(la, lb, inputs) -> (leaves, pa, pb) */
static PyObject *merged;             /* node._merged: (id(la), id(lb)) -> (la, lb, leaves, pa, pb) */
static PyObject *leafsets;           /* node._leafsets: merged leaf tuple -> itself (interned) */
static Py_ssize_t merge_cap;         /* node._MERGE_CAP: both tables are emptied beyond it */
static PyObject *fallback_fn;        /* the Python make_node (other input counts) */
static PyObject *iota;               /* node._IOTA: tuple(range(n)) for small n */
static Py_ssize_t recent_cap, count_cap;

static PyObject *str_const, *str_leaves, *zero_t, *one_t, *zero_long, *one_long;

enum { S_PRIM, S_PARAMS, S_SHAPE, S_DTYPE, S_WEAK, S_DEVICE, S_INPUTS, S_STRUCT, S_LEAVES,
       S_COUNT, S_BUFFER, S_SIG, N_SLOTS };
static const char *slot_names[N_SLOTS] = {
    "prim", "params", "shape", "dtype", "weak", "device", "inputs", "struct", "leaves",
    "count", "buffer", "sig"};
static Py_ssize_t node_off[N_SLOTS];

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

/* Offset of the __slots__ member `name` of `type` (its member descriptor's). */
static int slot_offset(PyTypeObject *type, const char *name, Py_ssize_t *out)
{
    PyObject *descr = PyDict_GetItemString(type->tp_dict, name);
    if (descr == NULL || !PyObject_TypeCheck(descr, &PyMemberDescr_Type)) {
        PyErr_Format(PyExc_TypeError, "_native.bind: %s.%s is not a __slots__ member",
                     type->tp_name, name);
        return -1;
    }
    PyMemberDef *m = ((PyMemberDescrObject *)descr)->d_member;
    if (m->type != T_OBJECT_EX) {
        PyErr_Format(PyExc_TypeError, "_native.bind: %s.%s is not an object slot",
                     type->tp_name, name);
        return -1;
    }
    *out = m->offset;
    return 0;
}

/* Replace a slot's value (new reference stolen). */
static inline void set_slot(PyObject *obj, Py_ssize_t off, PyObject *value)
{
    PyObject *old = SLOT(obj, off);
    SLOT(obj, off) = value;
    Py_XDECREF(old);
}

static void clear_bound(void)
{
    Py_CLEAR(node_type);
    Py_CLEAR(leaf_type);
    Py_CLEAR(structs);
    Py_CLEAR(struct_fn);
    Py_CLEAR(merge2_fn);
    Py_CLEAR(merged);
    Py_CLEAR(leafsets);
    Py_CLEAR(fallback_fn);
    Py_CLEAR(iota);
}

static void forget_tables(void);

static PyObject *bind(PyObject *self, PyObject *args)
{
    PyObject *ntype, *ltype, *st, *sfn, *m2, *mg, *ls, *fb, *io;
    Py_ssize_t rcap, ccap, mcap;
    if (!PyArg_ParseTuple(args, "O!O!O!OOO!O!OO!nnn:bind", &PyType_Type, &ntype, &PyType_Type, &ltype,
                          &PyDict_Type, &st, &sfn, &m2, &PyDict_Type, &mg, &PyDict_Type, &ls,
                          &fb, &PyTuple_Type, &io, &rcap, &ccap, &mcap))
        return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)ltype, (PyTypeObject *)ntype)) {
        PyErr_SetString(PyExc_TypeError, "_native.bind: Leaf must be a subclass of Node");
        return NULL;
    }
    Py_ssize_t offs[N_SLOTS];
    for (int i = 0; i < N_SLOTS; i++)
        if (slot_offset((PyTypeObject *)ntype, slot_names[i], &offs[i]) < 0)
            return NULL;
    clear_bound();
    forget_tables();
    memcpy(node_off, offs, sizeof offs);
    Py_INCREF(ntype); node_type = (PyTypeObject *)ntype;
    Py_INCREF(ltype); leaf_type = (PyTypeObject *)ltype;
    Py_INCREF(st); structs = st;
    Py_INCREF(sfn); struct_fn = sfn;
    Py_INCREF(m2); merge2_fn = m2;
    Py_INCREF(mg); merged = mg;
    Py_INCREF(ls); leafsets = ls;
    merge_cap = mcap;
    Py_INCREF(fb); fallback_fn = fb;
    Py_INCREF(io); iota = io;
    recent_cap = rcap;
    count_cap = ccap;
    Py_RETURN_NONE;
}

/* -- make_node ------------------------------------------------------------------------- */

static inline PyObject *acyclic(PyObject *obj);

/* A node's leaf tuple (new reference): the slot of a Node, the property of a Leaf
   (`(self,)`, built here as Leaf.leaves builds it). */
static PyObject *leaves_of(PyObject *n)
{
    if (Py_TYPE(n) == node_type) {
        PyObject *l = SLOT(n, node_off[S_LEAVES]);
        if (l != NULL) {
            Py_INCREF(l);
            return l;
        }
    } else if (Py_TYPE(n) == leaf_type) {
        return acyclic(PyTuple_Pack(1, n));   /* (held by other nodes only: see acyclic_nodes) */
    }
    PyObject *l = PyObject_GetAttr(n, str_leaves);
    if (l != NULL && !PyTuple_Check(l)) {
        Py_DECREF(l);
        PyErr_SetString(PyExc_TypeError, "make_node: an input's leaves are not a tuple");
        return NULL;
    }
    return l;
}

/* tuple(range(n)) (new reference), shared for small n. */
static PyObject *iota_of(Py_ssize_t n)
{
    if (n < PyTuple_GET_SIZE(iota)) {
        PyObject *t = PyTuple_GET_ITEM(iota, n);
        Py_INCREF(t);
        return t;
    }
    PyObject *t = PyTuple_New(n);
    if (t == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyLong_FromSsize_t(i);
        if (v == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

/* The 1-tuple (i,) (new reference), shared for small i: a node's leaf positions are part
   of its struct key, looked up by identity first (struct_by_identity), so the same
   position must be the same object on every pass of a loop. */
#define N_SINGLES 256
static PyObject *singles[N_SINGLES];

static PyObject *single_of(Py_ssize_t i)
{
    if (i < 0 || i >= N_SINGLES)
        return Py_BuildValue("(n)", i);
    if (singles[i] == NULL && (singles[i] = Py_BuildValue("(n)", i)) == NULL)
        return NULL;
    Py_INCREF(singles[i]);
    return singles[i];
}

static int input_count(PyObject *n, Py_ssize_t *out)
{
    PyObject *c = SLOT(n, node_off[S_COUNT]);
    if (c == NULL) {
        PyErr_SetString(PyExc_AttributeError, "make_node: an input has no count");
        return -1;
    }
    *out = PyLong_AsSsize_t(c);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* Struct of `parts` (new reference): the interned one, or node._struct's new one. */
static PyObject *struct_of(PyObject *parts)
{
    PyObject *s = PyDict_GetItemWithError(structs, parts);
    if (s != NULL) {
        Py_INCREF(s);
        return s;
    }
    if (PyErr_Occurred())
        return NULL;
    return PyObject_CallOneArg(struct_fn, parts);
}

/* The merges of two leaf lists seen last, by identity of the lists: records of node._merged
   ((la, lb, leaves, positions of la's, of lb's), which hold both lists, so their
   identities are not reused while listed). Emptied with the sharing table. */
#define MCACHE_SIZE 256
static PyObject *mcache[MCACHE_SIZE];
static unsigned short mused[MCACHE_SIZE];   /* the indices filled since it was emptied */
static int n_mused;

/* The identity a leaf list is remembered by: its one leaf, or the list (a leaf's list of
   itself is a new tuple at every access). */
static inline PyObject *list_identity(PyObject *l)
{
    return PyTuple_GET_SIZE(l) == 1 ? PyTuple_GET_ITEM(l, 0) : l;
}

static inline size_t mcache_index(PyObject *la, PyObject *lb)
{
    uintptr_t h = ((uintptr_t)list_identity(la) >> 4) * 31u + ((uintptr_t)list_identity(lb) >> 4);
    return (size_t)(h ^ (h >> 9)) & (MCACHE_SIZE - 1);
}

static void mcache_remember(PyObject *rec)
{
    size_t i = mcache_index(PyTuple_GET_ITEM(rec, 0), PyTuple_GET_ITEM(rec, 1));
    if (mcache[i] == NULL)
        mused[n_mused++] = (unsigned short)i;
    Py_INCREF(rec);
    Py_XSETREF(mcache[i], rec);
}

/* -- two tables of identities, in front of node.py's dicts ------------------------------
 *
 * The struct cache maps the parts of a node (prim, params, shape, dtype, weak, device, and
 * each input's struct and leaf positions) to their interned Struct without building the
 * parts tuple and hashing it: eager code makes the same few structures again and again,
 * from the same objects. Integers and tuples of them (shapes, slice bounds, positions)
 * compare by value, everything else by identity (equal identities are equal parts; a
 * miss just asks node._structs, so a hit can only give what the dict would). Entries hold
 * their key objects, so an identity is never reused while an entry names it. Emptied with
 * node._structs (forget_structs).
 *
 * The sharing table is node._recent for one- and two-input nodes (node.make_node's
 * common-subexpression sharing): (struct, input a, input b) by identity -> weak reference
 * to the live node made from them. While that node lives it holds all three, so their
 * identities are not reused; a dead entry is replaced. Emptied at every evaluation
 * (forget_recent), or when it holds node._RECENT_CAP entries, as the dict is. Nodes with
 * other input counts are shared through node._recent by the Python code.
 */
#define SCACHE_SIZE 16384            /* entries (sets of WAYS: set_of) */
#define SCACHE_KEYS 10
typedef struct {
    Py_uhash_t hash;
    PyObject *st;   /* (next to the hash: a miss is told on the entry's first cache line) */
    int n;
    PyObject *key[SCACHE_KEYS];
} SEntry;
static SEntry scache[SCACHE_SIZE];

typedef struct {
    void *st, *a, *b;               /* identities (not references: the node holds them) */
    PyObject *ref;                  /* weak reference to the node; NULL: an empty entry */
} REntry;
static REntry *rtab;
static size_t rsize;                /* a power of two, or 0 before the first node */
static Py_ssize_t rused;
static size_t *rlist;               /* the indices of the rused filled entries (an evaluation
                                       empties the table: only those are cleared) */

/* The object `ref` (a weak reference) refers to (new reference), NULL when it died. */
static PyObject *weak_target(PyObject *ref)
{
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *o = NULL;
    if (PyWeakref_GetRef(ref, &o) < 0) {
        PyErr_Clear();
        return NULL;
    }
    return o;
#else
    PyObject *o = PyWeakref_GetObject(ref);   /* borrowed */
    if (o == NULL || o == Py_None) {
        PyErr_Clear();
        return NULL;
    }
    Py_INCREF(o);
    return o;
#endif
}

static inline Py_uhash_t mix(Py_uhash_t h, Py_uhash_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h;
}

/* The caches below are set-associative: a key's WAYS candidate entries are an aligned
   group (a set), most recently used first. A hit moves its entry to the front (promote),
   a new key goes to the front and the others move back, the last one goes (make_room).
   A loop's pass looks up a few hundred keys again and again; with two ways, three keys
   of one pass meeting in a set (a few percent of runs for the struct table, most runs
   for the small tuple tables) evicted each other on every pass. */
#define WAYS 4

/* The first entry of the set where a key of hash `hash` is listed, in a table of `size`
   entries (a power of two, a multiple of WAYS: WHOLE_SETS). The hash is mixed first, in
   64 bits: `mix` of keys that differ by one in their last part differ by one. */
static inline size_t set_of(Py_uhash_t hash, size_t size)
{
    uint64_t h = (uint64_t)hash;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return (size_t)h & (size - 1) & ~(size_t)(WAYS - 1);
}

#define ENTRY_MAX 512   /* bytes of the largest entry (checked where each is defined) */

/* Compile-time checks in C99 (an array of negative size does not compile): an entry fits
   promote's buffer; a table's size is a power of two made of whole sets. */
#define ENTRY_FITS(T) typedef char T##_fits_promote[sizeof(T) <= ENTRY_MAX ? 1 : -1]
#define WHOLE_SETS(N) typedef char N##_whole_sets[((N) & ((N) - 1)) == 0 && (N) % WAYS == 0 ? 1 : -1]

/* Entry `w` of the set at `first` (entries of `bytes` bytes) moves to the front, those
   before it one back. No references change hands. */
static inline void promote(void *first, int w, size_t bytes)
{
    char tmp[ENTRY_MAX], *base = first;
    memcpy(tmp, base + (size_t)w * bytes, bytes);
    memmove(base + bytes, base, (size_t)w * bytes);
    memcpy(base, tmp, bytes);
}

/* Room at the front of the set at `first`: its last entry is copied to `gone` (the
   caller releases its references last, when the table is consistent again), the others
   move back one; the front keeps a stale copy the caller overwrites. */
static inline void make_room(void *first, size_t bytes, void *gone)
{
    char *base = first;
    memcpy(gone, base + (WAYS - 1) * bytes, bytes);
    memmove(base + bytes, base, (WAYS - 1) * bytes);
}
ENTRY_FITS(SEntry);
WHOLE_SETS(SCACHE_SIZE);

/* Lookups of the tables keyed by identity that found their entry, and that did not
   (table_stats: what a test of their sets reads; relaxed counts, no lock). */
enum { T_STRUCT_ID, T_STRUCT_VALUE, T_KEY, T_INT_TUPLE, T_TUPLE, T_SCALAR, N_TABLES };
static const char *const table_names[N_TABLES] = {
    "struct_identity", "struct_value", "key", "int_tuple", "tuple", "scalar"};
static size_t table_hits[N_TABLES], table_misses[N_TABLES];

static inline void table_count(int table, int hit)
{
    if (hit)
        table_hits[table]++;
    else
        table_misses[table]++;
}

/* Hash of `x` agreeing with same_value: exact ints and tuples by value, the rest by
   identity. 0: not cacheable (an int beyond 64 bits, or tuples nested too deep). */
/* The value of exact int `x` if it fits a long long (1), else 0. */
static inline int int_value(PyObject *x, long long *v)
{
#if PY_VERSION_HEX >= 0x030C0000
    if (PyUnstable_Long_IsCompact((PyLongObject *)x)) {
        *v = (long long)PyUnstable_Long_CompactValue((PyLongObject *)x);
        return 1;
    }
#else
    Py_ssize_t size = Py_SIZE(x);   /* (one digit: the common case, read directly) */
    if (size >= -1 && size <= 1) {
        *v = size * (long long)((PyLongObject *)x)->ob_digit[0];
        return 1;
    }
#endif
    int overflow;
    *v = PyLong_AsLongLongAndOverflow(x, &overflow);
    if (overflow || (*v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

static int value_hash(PyObject *x, Py_uhash_t *h, int depth)
{
    if (PyLong_CheckExact(x)) {
        long long v;
        if (!int_value(x, &v))
            return 0;
        *h = mix(*h, (Py_uhash_t)v);
        return 1;
    }
    if (PyTuple_CheckExact(x)) {
        if (depth >= 3)
            return 0;
        Py_ssize_t n = PyTuple_GET_SIZE(x);
        *h = mix(*h, (Py_uhash_t)n ^ 0x5bd1e995u);
        for (Py_ssize_t i = 0; i < n; i++)
            if (!value_hash(PyTuple_GET_ITEM(x, i), h, depth + 1))
                return 0;
        return 1;
    }
    *h = mix(*h, (Py_uhash_t)(uintptr_t)x);
    return 1;
}

static int same_value(PyObject *x, PyObject *y)
{
    if (x == y)
        return 1;
    if (PyLong_CheckExact(x) && PyLong_CheckExact(y)) {
        long long vx, vy;
        return int_value(x, &vx) && int_value(y, &vy) && vx == vy;
    }
    if (PyTuple_CheckExact(x) && PyTuple_CheckExact(y)) {
        Py_ssize_t n = PyTuple_GET_SIZE(x);
        if (PyTuple_GET_SIZE(y) != n)
            return 0;
        for (Py_ssize_t i = 0; i < n; i++)
            if (!same_value(PyTuple_GET_ITEM(x, i), PyTuple_GET_ITEM(y, i)))
                return 0;
        return 1;
    }
    return 0;
}

/* The Struct listed in the set at `table[i0]` for the parts `key[:n]` (hash h), compared
   by value (same_value) or by identity (new reference: the entry, now at the front), or
   NULL (no error set); counted as table `counter`. */
static inline PyObject *sentry_find(SEntry *table, size_t i0, PyObject **key, int n,
                                    Py_uhash_t h, int by_value, int counter)
{
    for (int w = 0; w < WAYS; w++) {
        SEntry *e = &table[i0 + (size_t)w];
        if (e->st == NULL || e->hash != h || e->n != n)
            continue;
        int k = 0;
        while (k < n && (by_value ? same_value(e->key[k], key[k]) : e->key[k] == key[k]))
            k++;
        if (k == n) {
            if (w)
                promote(&table[i0], w, sizeof(SEntry));
            table_count(counter, 1);
            Py_INCREF(table[i0].st);
            return table[i0].st;
        }
    }
    table_count(counter, 0);
    return NULL;
}

/* The cached Struct of the parts `key[:n]` (new reference), or NULL (no error set) on a
   miss; *hash is set for struct_remember (0 with *ok == 0: not cacheable). */
static PyObject *struct_cached(PyObject **key, int n, Py_uhash_t *hash, int *ok)
{
    Py_uhash_t h = (Py_uhash_t)n;
    for (int i = 0; i < n; i++)
        if (!value_hash(key[i], &h, 0)) {
            *ok = 0;
            return NULL;
        }
    *ok = 1;
    *hash = h;
    return sentry_find(scache, set_of(h, SCACHE_SIZE), key, n, h, 1, T_STRUCT_VALUE);
}

static void sentry_clear(SEntry *e)
{
    for (int k = 0; k < e->n; k++)
        Py_CLEAR(e->key[k]);
    e->n = 0;
    Py_CLEAR(e->st);
}

/* Entry `e` holds the parts `key[:n]` (hash h) and their struct (references taken). */
static void sentry_fill(SEntry *e, PyObject **key, int n, Py_uhash_t h, PyObject *st)
{
    memset(e, 0, sizeof *e);
    e->hash = h;
    e->n = n;
    for (int k = 0; k < n; k++) {
        Py_INCREF(key[k]);
        e->key[k] = key[k];
    }
    Py_INCREF(st);
    e->st = st;
}

/* List `key[:n]` -> st at the front of its set in `table` (the front moves back, the
   back one goes: released last, when the table is consistent, as releasing may run
   Python code). */
static void sentry_insert(SEntry *table, size_t i0, PyObject **key, int n, Py_uhash_t h,
                          PyObject *st)
{
    SEntry gone;
    make_room(&table[i0], sizeof(SEntry), &gone);
    sentry_fill(&table[i0], key, n, h, st);
    sentry_clear(&gone);
}

static void struct_remember(PyObject **key, int n, Py_uhash_t h, PyObject *st)
{
    sentry_insert(scache, set_of(h, SCACHE_SIZE), key, n, h, st);
}

/* In front of the struct cache, a table by identity alone: the parts of a node made in a
   loop are mostly the very same objects each pass (shapes and slice bounds come from the
   shared tuples, leaf positions from node._IOTA, input structs are interned), and
   comparing identities needs no walk of tuples and ints. Equal identities are equal
   values, so a hit gives what the struct cache would. Entries hold their parts. Sets of
   WAYS, as the struct cache: a loop's pass between two evaluations makes ~1,500 keys, and
   direct-mapped, the ~9% of them sharing an entry with another missed on every pass. */
#define IDCACHE_SIZE 16384
static SEntry idcache[IDCACHE_SIZE];
WHOLE_SETS(IDCACHE_SIZE);

static inline Py_uhash_t identity_hash(PyObject **key, int n)
{
    Py_uhash_t h = (Py_uhash_t)n;
    for (int i = 0; i < n; i++)
        h = mix(h, (Py_uhash_t)(uintptr_t)key[i]);
    return h;
}

static PyObject *struct_by_identity(PyObject **key, int n, Py_uhash_t h)
{
    return sentry_find(idcache, set_of(h, IDCACHE_SIZE), key, n, h, 0, T_STRUCT_ID);
}

static void struct_remember_identity(PyObject **key, int n, Py_uhash_t h, PyObject *st)
{
    sentry_insert(idcache, set_of(h, IDCACHE_SIZE), key, n, h, st);
}

static void forget_struct_cache(void)
{
    for (size_t i = 0; i < SCACHE_SIZE; i++)
        sentry_clear(&scache[i]);
    for (size_t i = 0; i < IDCACHE_SIZE; i++)
        sentry_clear(&idcache[i]);
}

static size_t recent_home(void *st, void *a, void *b)
{
    Py_uhash_t h = mix(mix(mix(0, (Py_uhash_t)(uintptr_t)st), (Py_uhash_t)(uintptr_t)a),
                       (Py_uhash_t)(uintptr_t)b);
    return (size_t)(h ^ (h >> 17)) & (rsize - 1);
}

static void forget_recent_table(void)
{
    for (int k = 0; k < n_mused; k++)
        Py_CLEAR(mcache[mused[k]]);
    n_mused = 0;
    for (Py_ssize_t k = 0; k < rused; k++) {
        REntry *e = &rtab[rlist[k]];
        Py_CLEAR(e->ref);   /* (a weak reference without a callback: no Python code) */
        e->st = e->a = e->b = NULL;
    }
    rused = 0;
    if (rsize > 8192) {          /* a long graph grew it: start small again */
        PyMem_Free(rtab);
        PyMem_Free(rlist);
        rtab = NULL;
        rlist = NULL;
        rsize = 0;
    }
}

/* The entry of (st, a, b): the one holding that key, else the empty one where it goes. */
static REntry *recent_slot(void *st, void *a, void *b)
{
    size_t i = recent_home(st, a, b);
    for (;;) {
        REntry *e = &rtab[i];
        if (e->ref == NULL || (e->st == st && e->a == a && e->b == b))
            return e;
        i = (i + 1) & (rsize - 1);
    }
}

/* Room for one more key (the table at most half full), or -1 with MemoryError. */
static int recent_reserve(void)
{
    if (rused >= recent_cap)
        forget_recent_table();
    if (rsize != 0 && (size_t)(rused + 1) * 2 <= rsize)
        return 0;
    size_t size = rsize ? 2 * rsize : 1024;
    Py_ssize_t old_used = rused;
    REntry *old = rtab, *tab = PyMem_Calloc(size, sizeof *tab);
    size_t *old_list = rlist, *list = PyMem_Malloc(size / 2 * sizeof *list);
    if (tab == NULL || list == NULL) {
        PyMem_Free(tab);
        PyMem_Free(list);
        PyErr_NoMemory();
        return -1;
    }
    rtab = tab;
    rlist = list;
    rsize = size;
    rused = 0;
    for (Py_ssize_t k = 0; k < old_used; k++) {
        REntry *e = &old[old_list[k]];
        PyObject *live = weak_target(e->ref);
        if (live == NULL) {   /* dead: not moved */
            Py_DECREF(e->ref);
            continue;
        }
        Py_DECREF(live);
        REntry *slot = recent_slot(e->st, e->a, e->b);
        *slot = *e;
        rlist[rused++] = (size_t)(slot - rtab);
    }
    PyMem_Free(old);
    PyMem_Free(old_list);
    return 0;
}

static void forget_tables(void)
{
    forget_recent_table();
    forget_struct_cache();
}

static PyObject *forget_recent_py(PyObject *self, PyObject *unused)
{
    forget_recent_table();
    Py_RETURN_NONE;
}

static PyObject *forget_structs_py(PyObject *self, PyObject *unused)
{
    forget_struct_cache();
    Py_RETURN_NONE;
}

static PyObject *table_stats(PyObject *self, PyObject *unused)
{
    PyObject *d = PyDict_New();
    for (int t = 0; d != NULL && t < N_TABLES; t++) {
        PyObject *v = Py_BuildValue("(nn)", (Py_ssize_t)table_hits[t], (Py_ssize_t)table_misses[t]);
        if (v == NULL || PyDict_SetItemString(d, table_names[t], v) < 0)
            Py_CLEAR(d);
        Py_XDECREF(v);
    }
    return d;
}

/* `obj` (new reference, may be NULL) no longer tracked by the cyclic garbage collector:
   for tuples of numbers, strings and other untracked tuples, and for weak references
   without a callback — objects that cannot be part of a reference cycle. Recording makes
   several per operation, and each tracked one brings the next collection closer (one
   every ~700), which then traverses every young object: with these untracked, a stencil
   loop's collections fell from one per ~50 operations to far fewer. */
/* Whether `a` (any object) is the str `b`: identity, else a comparison, which two
   interned strings need not make (equal interned strings are one object). */
static inline int same_str(PyObject *a, PyObject *b)
{
    if (a == b)
        return 1;
    if (a == NULL || !PyUnicode_Check(a))
        return 0;
    if (PyUnicode_CHECK_INTERNED(a) && PyUnicode_CHECK_INTERNED(b))
        return 0;
    return PyUnicode_Compare(a, b) == 0;
}

static inline PyObject *acyclic(PyObject *obj)
{
    if (obj != NULL && PyObject_GC_IsTracked(obj))
        PyObject_GC_UnTrack(obj);
    return obj;
}

/* Whether `x` cannot be part of a reference cycle that the collector would need to see:
   untracked already, or an input leaf (Leaf: plain params, a struct and a buffer array,
   nothing that refers back to a node or a tuple of nodes). */
static inline int unseen_node(PyObject *x)
{
    return !PyObject_GC_IsTracked(x) || Py_TYPE(x) == leaf_type;
}

/* `tup` (a tuple of nodes: a leaf list, a node's inputs) untracked when each of its items
   is unseen_node: the collector never untracks a tuple of GC-capable objects by itself,
   so each one would age into the oldest generation, and their number set off its full
   collections (which traverse every tracked object: ~8-10 ms each in a 41x41 cavity
   run, once every few thousand pressure sweeps). Returns `tup`. */
static PyObject *acyclic_nodes(PyObject *tup)
{
    if (tup == NULL || !PyTuple_CheckExact(tup) || !PyObject_GC_IsTracked(tup))
        return tup;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tup); i++)
        if (!unseen_node(PyTuple_GET_ITEM(tup, i)))
            return tup;
    return acyclic(tup);
}

/* Whether `params` are plain data: a tuple of numbers, strings, None and tuples of those.

   A node with plain params cannot be part of a reference cycle (its inputs are older nodes,
   its struct and leaves hold no node that holds it back, its buffer is an array), so the
   cyclic garbage collector need not see it: eager code keeps thousands of pending nodes
   alive, and traversing them on every collection was a sixth of the recording time. A
   node whose params hold anything else (subgraphs, callables) stays tracked. */
static int plain_atom(PyObject *x)
{
    return x == Py_None || PyLong_CheckExact(x) || PyFloat_CheckExact(x) || PyUnicode_CheckExact(x)
        || PyBool_Check(x);
}

static int plain_params(PyObject *params)
{
    if (!PyTuple_CheckExact(params))
        return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(params); i++) {
        PyObject *p = PyTuple_GET_ITEM(params, i);
        if (plain_atom(p))
            continue;
        if (!PyTuple_CheckExact(p))
            return 0;
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(p); j++)
            if (!plain_atom(PyTuple_GET_ITEM(p, j)))
                return 0;
    }
    return 1;
}

static PyObject *int_tuple(const Py_ssize_t *v, Py_ssize_t n);
static PyObject *shared_positions(const Py_ssize_t *v, Py_ssize_t n);

/* node._merge for two leaf lists met for the first time (short ones: identity scans, no
   dict): la's leaves, then lb's not among them; interned in node._leafsets and remembered
   in node._merged under `key`, as the Python code does. 0: left to it (no error set). */
static int merge2_new(PyObject *la, PyObject *lb, PyObject *key, PyObject **leaves,
                      PyObject **pa, PyObject **pb)
{
    Py_ssize_t na = PyTuple_GET_SIZE(la), nb = PyTuple_GET_SIZE(lb);
    if (leafsets == NULL || na * nb > 4096)
        return 0;
    PyObject *acc = PyList_New(0), *pos = NULL, *all = NULL, *tup = NULL, *rec = NULL;
    Py_ssize_t *where = PyMem_Malloc((nb + 1) * sizeof *where);
    if (acc == NULL || where == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < na; i++)
        if (PyList_Append(acc, PyTuple_GET_ITEM(la, i)) < 0)
            goto fail;
    for (Py_ssize_t j = 0; j < nb; j++) {
        PyObject *leaf = PyTuple_GET_ITEM(lb, j);
        Py_ssize_t i = 0, n = PyList_GET_SIZE(acc);
        while (i < n && PyList_GET_ITEM(acc, i) != leaf)
            i++;
        if (i == n && PyList_Append(acc, leaf) < 0)
            goto fail;
        where[j] = i;
    }
    /* (shared by value: the tables here are emptied at every evaluation, and fresh
       position tuples would make every node over this merge a new struct key) */
    pos = nb == 1 ? single_of(where[0]) : shared_positions(where, nb);
    if (pos == NULL)
        goto fail;
    tup = acyclic_nodes(PyList_AsTuple(acc));
    all = iota_of(na);
    if (tup == NULL || all == NULL)
        goto fail;
    if (PyDict_GET_SIZE(leafsets) >= merge_cap)
        PyDict_Clear(leafsets);
    PyObject *interned = PyDict_SetDefault(leafsets, tup, tup);   /* borrowed */
    if (interned == NULL)
        goto fail;
    Py_INCREF(interned);
    Py_SETREF(tup, interned);
    if (PyDict_GET_SIZE(merged) >= merge_cap)
        PyDict_Clear(merged);
    rec = acyclic(PyTuple_Pack(5, la, lb, tup, all, pos));   /* (leaf lists and ints) */
    if (rec == NULL || PyDict_SetItem(merged, key, rec) < 0)
        goto fail;
    mcache_remember(rec);
    Py_DECREF(rec);
    Py_DECREF(acc);
    PyMem_Free(where);
    *leaves = tup;
    *pa = all;
    *pb = pos;
    return 1;
fail:
    Py_XDECREF(acc); Py_XDECREF(pos); Py_XDECREF(all); Py_XDECREF(tup); Py_XDECREF(rec);
    PyMem_Free(where);
    PyErr_Clear();
    return 0;
}

/* node._merge2's quick answers: one operand over a single leaf the other reads, or two
   leaf lists merged before (node._merged). 0: not known here (the Python code merges). */
static int merge2_known(PyObject *la, PyObject *lb, PyObject **leaves, PyObject **pa, PyObject **pb)
{
    Py_ssize_t na = PyTuple_GET_SIZE(la), nb = PyTuple_GET_SIZE(lb);
    for (int side = 0; side < 2; side++) {
        PyObject *one = side ? la : lb, *many = side ? lb : la;
        if ((side ? na : nb) != 1)
            continue;
        PyObject *leaf = PyTuple_GET_ITEM(one, 0);
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(many); i++) {
            if (PyTuple_GET_ITEM(many, i) != leaf)
                continue;
            /* (Python's `in` and index() compare with ==, which for nodes is identity) */
            PyObject *pos = single_of(i), *all = iota_of(PyTuple_GET_SIZE(many));
            if (pos == NULL || all == NULL) {
                Py_XDECREF(pos);
                Py_XDECREF(all);
                PyErr_Clear();
                return 0;
            }
            Py_INCREF(many);
            *leaves = many;
            *pa = side ? pos : all;
            *pb = side ? all : pos;
            return 1;
        }
    }
    if (merged == NULL)
        return 0;
    PyObject *known = mcache[mcache_index(la, lb)];
    if (known != NULL && list_identity(PyTuple_GET_ITEM(known, 0)) == list_identity(la)
        && list_identity(PyTuple_GET_ITEM(known, 1)) == list_identity(lb)) {
        *leaves = PyTuple_GET_ITEM(known, 2);
        *pa = PyTuple_GET_ITEM(known, 3);
        *pb = PyTuple_GET_ITEM(known, 4);
        Py_INCREF(*leaves);
        Py_INCREF(*pa);
        Py_INCREF(*pb);
        return 1;
    }
    PyObject *ia = PyLong_FromVoidPtr(la), *ib = PyLong_FromVoidPtr(lb);
    PyObject *key = (ia && ib) ? PyTuple_Pack(2, ia, ib) : NULL;
    Py_XDECREF(ia);
    Py_XDECREF(ib);
    PyObject *hit = key ? PyDict_GetItemWithError(merged, key) : NULL;
    if (hit != NULL && PyTuple_Check(hit) && PyTuple_GET_SIZE(hit) == 5
        && PyTuple_GET_ITEM(hit, 0) == la && PyTuple_GET_ITEM(hit, 1) == lb) {
        Py_DECREF(key);
        mcache_remember(hit);
        *leaves = PyTuple_GET_ITEM(hit, 2);
        *pa = PyTuple_GET_ITEM(hit, 3);
        *pb = PyTuple_GET_ITEM(hit, 4);
        Py_INCREF(*leaves);
        Py_INCREF(*pa);
        Py_INCREF(*pb);
        return 1;
    }
    PyErr_Clear();
    int done = key != NULL && merge2_new(la, lb, key, leaves, pa, pb);
    Py_XDECREF(key);
    return done;
}

static PyObject *count_object(Py_ssize_t n);

static PyObject *make_node(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 6 || nargs > 7) {
        PyErr_SetString(PyExc_TypeError,
                        "make_node(prim, params, shape, dtype, inputs, device, weak=False)");
        return NULL;
    }
    if (node_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "qtrace.graph._native: bind() was not called");
        return NULL;
    }
    PyObject *prim = args[0], *params = args[1], *shape = args[2], *dtype = args[3];
    PyObject *inputs = args[4], *device = args[5], *weak = nargs > 6 ? args[6] : Py_False;
    Py_ssize_t n_in = PyTuple_Check(inputs) ? PyTuple_GET_SIZE(inputs) : -1;
    if (n_in != 1 && n_in != 2)
        return PyObject_Vectorcall(fallback_fn, args, nargs, NULL);
    for (Py_ssize_t i = 0; i < n_in; i++)
        if (!PyObject_TypeCheck(PyTuple_GET_ITEM(inputs, i), node_type))
            return PyObject_Vectorcall(fallback_fn, args, nargs, NULL);

    PyObject *ptoken, *leaves = NULL, *parts = NULL, *st = NULL, *node = NULL;
    PyObject *key[SCACHE_KEYS];
    int nkey, plain = plain_params(params);
    PyObject *pa = NULL, *pb = NULL, *la = NULL, *lb = NULL;
    int is_const = same_str(prim, str_const);
    if (is_const) {
        ptoken = PyObject_Repr(params);
        if (ptoken == NULL)
            return NULL;
    } else {
        Py_INCREF(params);
        ptoken = params;
    }
    PyObject *a = PyTuple_GET_ITEM(inputs, 0), *b = NULL;
    Py_ssize_t count, cb;
    if (input_count(a, &count) < 0)
        goto fail;
    la = leaves_of(a);
    if (la == NULL)
        goto fail;
    Py_ssize_t na = PyTuple_GET_SIZE(la);
    if (n_in == 2) {
        b = PyTuple_GET_ITEM(inputs, 1);
        if (input_count(b, &cb) < 0)
            goto fail;
        if (cb > count)
            count = cb;
        lb = leaves_of(b);
        if (lb == NULL)
            goto fail;
        Py_ssize_t nb = PyTuple_GET_SIZE(lb);
        if (la == lb || nb == 0) {
            Py_INCREF(la); leaves = la;
            pa = iota_of(na);
            pb = iota_of(nb);
        } else if (na == 0) {
            Py_INCREF(lb); leaves = lb;
            Py_INCREF(PyTuple_GET_ITEM(iota, 0)); pa = PyTuple_GET_ITEM(iota, 0);
            pb = iota_of(nb);
        } else if (na == 1 && nb == 1) {
            PyObject *x = PyTuple_GET_ITEM(la, 0), *y = PyTuple_GET_ITEM(lb, 0);
            Py_INCREF(zero_t); pa = zero_t;
            if (x == y) {
                Py_INCREF(la); leaves = la;
                Py_INCREF(zero_t); pb = zero_t;
            } else {
                leaves = acyclic_nodes(PyTuple_Pack(2, x, y));
                Py_INCREF(one_t); pb = one_t;
            }
        } else if (merge2_known(la, lb, &leaves, &pa, &pb)) {
            /* found */
        } else {
            PyObject *r = PyObject_CallFunctionObjArgs(merge2_fn, la, lb, inputs, NULL);
            if (r == NULL)
                goto fail;
            if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 3) {
                Py_DECREF(r);
                PyErr_SetString(PyExc_TypeError, "make_node: _merge2 must return 3 values");
                goto fail;
            }
            leaves = acyclic_nodes(PyTuple_GET_ITEM(r, 0)); Py_INCREF(leaves);
            pa = PyTuple_GET_ITEM(r, 1); Py_INCREF(pa);
            pb = PyTuple_GET_ITEM(r, 2); Py_INCREF(pb);
            Py_DECREF(r);
        }
        if (leaves == NULL || pa == NULL || pb == NULL)
            goto fail;
        key[6] = SLOT(a, node_off[S_STRUCT]);
        key[7] = pa;
        key[8] = SLOT(b, node_off[S_STRUCT]);
        key[9] = pb;
        nkey = 10;
    } else {
        Py_INCREF(la); leaves = la;
        pa = iota_of(na);
        if (pa == NULL)
            goto fail;
        key[6] = SLOT(a, node_off[S_STRUCT]);
        key[7] = pa;
        nkey = 8;
    }
    {
        Py_uhash_t hash = 0;
        int cacheable = 0;
        key[0] = prim; key[1] = ptoken; key[2] = shape; key[3] = dtype; key[4] = weak;
        key[5] = device;
        Py_uhash_t idh = 0;
        int by_identity = !is_const && plain;   /* (a cache entry holds its parts) */
        if (by_identity) {
            idh = identity_hash(key, nkey);
            st = struct_by_identity(key, nkey, idh);
            if (st != NULL)
                by_identity = 0;   /* (found there: nothing to remember) */
            else
                st = struct_cached(key, nkey, &hash, &cacheable);
        }
        if (st == NULL) {
            parts = PyTuple_New(nkey);
            if (parts == NULL)
                goto fail;
            for (int k = 0; k < nkey; k++) {
                Py_INCREF(key[k]);
                PyTuple_SET_ITEM(parts, k, key[k]);
            }
            st = struct_of(parts);
            if (st == NULL)
                goto fail;
            if (plain || is_const) {
                /* Unseen by the collector too, with its parts: a struct holds plain data
                   and the structs of its inputs (made before it), its key (a string) and
                   its result record (a leaf's struct): no cycle. Pending values make new
                   structs at every step (deeper chains), which the intern table keeps: as
                   tracked objects they aged into the oldest generation and set off its
                   full collections (a 41x41 cavity sweep: ~10 ms each, ~8% of the
                   recording time), traversing every interned struct each time. */
                acyclic(st);
                acyclic(parts);   /* (its parts, when it is new) */
            }
            if (cacheable)
                struct_remember(key, nkey, hash, st);
        }
        if (by_identity)
            struct_remember_identity(key, nkey, idh, st);
    }
    if (rsize != 0) {
        REntry *entry = recent_slot(st, a, b);
        if (entry->ref != NULL) {
            PyObject *live = weak_target(entry->ref);
            if (live != NULL) {
                node = live;
                goto done;
            }
        }
    }
    node = node_type->tp_alloc(node_type, 0);
    if (node == NULL)
        goto fail;
    if (plain) {
        PyObject_GC_UnTrack(node);   /* see plain_params */
        /* Its input tuple too, when it holds only untracked nodes and leaves (see
           acyclic_nodes; a 41x41 cavity step: a full collection every 30 steps, ~7 ms
           each, before input tuples were untracked). */
        acyclic_nodes(inputs);   /* (an exact tuple: a subclass may have a dict) */
    }
    count += n_in;
    if (count > count_cap)
        count = count_cap;
    PyObject *cnt = count_object(count);   /* (shared: most counts of a long graph pass 256) */
    if (cnt == NULL)
        goto fail;
    Py_INCREF(prim); set_slot(node, node_off[S_PRIM], prim);
    Py_INCREF(params); set_slot(node, node_off[S_PARAMS], params);
    Py_INCREF(shape); set_slot(node, node_off[S_SHAPE], shape);
    Py_INCREF(dtype); set_slot(node, node_off[S_DTYPE], dtype);
    Py_INCREF(weak); set_slot(node, node_off[S_WEAK], weak);
    Py_INCREF(device); set_slot(node, node_off[S_DEVICE], device);
    Py_INCREF(inputs); set_slot(node, node_off[S_INPUTS], inputs);
    Py_INCREF(st); set_slot(node, node_off[S_STRUCT], st);
    Py_INCREF(leaves); set_slot(node, node_off[S_LEAVES], leaves);
    set_slot(node, node_off[S_COUNT], cnt);
    Py_INCREF(Py_None); set_slot(node, node_off[S_BUFFER], Py_None);
    Py_INCREF(Py_None); set_slot(node, node_off[S_SIG], Py_None);
    {
        /* (the entry is found again: an allocation may have run a collection, and with it
           Python code recording nodes) */
        PyObject *w = acyclic(PyWeakref_NewRef(node, NULL));
        if (w == NULL)
            goto fail;
        if (recent_reserve() < 0) {
            Py_DECREF(w);
            goto fail;
        }
        REntry *entry = recent_slot(st, a, b);
        if (entry->ref == NULL)
            rlist[rused++] = (size_t)(entry - rtab);
        entry->st = st;
        entry->a = a;
        entry->b = b;
        Py_XSETREF(entry->ref, w);
    }
done:
    Py_DECREF(ptoken);
    Py_XDECREF(leaves); Py_XDECREF(parts); Py_XDECREF(st);
    Py_XDECREF(pa); Py_XDECREF(pb); Py_XDECREF(la); Py_XDECREF(lb);
    return node;
fail:
    Py_XDECREF(node);
    node = NULL;
    goto done;
}


/* -- tensors: noting pending values, binary operators ------------------------------------
 *
 * note        qtrace.tracer.pending.note (the cut itself stays in Python: _consider_cut)
 * binary_fast a Tensor operator (`x * y`, `2.0 * x`): qtrace.tracer.elementwise.apply2's
 *             fast path for two tensors of one shape, or a tensor and a Python number,
 *             whose loop dtypes need no cast (anything else: the Python operator)
 */
static PyTypeObject *tensor_type, *tstate_type;
static PyObject *local_obj;          /* context._local (threading.local) */
static PyObject *state_fn;           /* context.state(): this thread's ThreadState */
static PyObject *config_obj;         /* qtrace.config.config */
static PyObject *consider_cut_fn;    /* pending._consider_cut(state, owner) */
static PyObject *recipes;            /* elementwise._recipes */
static PyObject *apply2_fn;          /* elementwise.apply2(name, x, y) */
static PyObject *scalar_node_fn;     /* convert.scalar_node(value, dtype, device) */
static PyObject *scalars;            /* convert._scalars: recent eager scalars' 0-d inputs */
static PyObject *consts;             /* convert._consts: recent constants */
static Py_ssize_t t_node, t_view, s_special, s_pending, s_epoch, s_count, s_gate;
static PyTypeObject *storage_type;   /* views.Storage (bind_views) */
static PyTypeObject *ndarray_type;
static PyObject *np_empty_fn, *aligned_empty_fn;
static Py_ssize_t data_offset = -1;  /* PyArrayObject's data pointer (cpu._DATA_OFFSET) */
static PyObject *view_recipes;        /* views._view_recipes (bind_views) */
static PyObject *getitem_fn;          /* operator.getitem (bind_views) */
static Py_ssize_t leaf_views_off = -1, leaf_views_cap;   /* Leaf._views, views.LEAF_VIEWS_CAP */
static Py_ssize_t g_noted;          /* Storage.noted: the epoch of the list it is listed in */
static Py_ssize_t g_node;           /* Storage.node (bind_views) */
static PyObject *str_s, *str_max_pending, *empty_tuple, *str_name, *str_qtrace;

/* thread_state's memo: the last thread that asked, and its ThreadState */
static PyThreadState *last_tstate;
static uint64_t last_tstate_id;
static PyObject *last_state;

static void forget_recipes(void);
static void forget_scalar_operands(void);

static PyObject *bind_tensors(PyObject *self, PyObject *args)
{
    PyObject *tt, *st, *loc, *sfn, *cfg, *ccut, *rec, *a2, *snode, *sc, *cs;
    if (!PyArg_ParseTuple(args, "O!O!OOOOO!OOO!O!:bind_tensors", &PyType_Type, &tt, &PyType_Type,
                          &st, &loc, &sfn, &cfg, &ccut, &PyDict_Type, &rec, &a2, &snode,
                          &PyDict_Type, &sc, &PyDict_Type, &cs))
        return NULL;
    if (slot_offset((PyTypeObject *)tt, "_node", &t_node) < 0
        || slot_offset((PyTypeObject *)tt, "_view", &t_view) < 0
        || slot_offset((PyTypeObject *)st, "special", &s_special) < 0
        || slot_offset((PyTypeObject *)st, "pending", &s_pending) < 0
        || slot_offset((PyTypeObject *)st, "epoch", &s_epoch) < 0
        || slot_offset((PyTypeObject *)st, "count", &s_count) < 0
        || slot_offset((PyTypeObject *)st, "gate", &s_gate) < 0)
        return NULL;
    Py_CLEAR(last_state);   /* (thread_state's memo is of the old local) */
    last_tstate = NULL;
    PyObject **dst[] = {(PyObject **)&tensor_type, (PyObject **)&tstate_type, &local_obj,
                        &state_fn, &config_obj, &consider_cut_fn, &recipes, &apply2_fn,
                        &scalar_node_fn, &scalars, &consts};
    PyObject *src[] = {tt, st, loc, sfn, cfg, ccut, rec, a2, snode, sc, cs};
    for (size_t i = 0; i < sizeof src / sizeof src[0]; i++) {
        Py_INCREF(src[i]);
        Py_XSETREF(*dst[i], src[i]);
    }
    forget_recipes();   /* (what it remembers is of the old recipe table) */
    forget_scalar_operands();   /* (and of the old dicts) */
    Py_RETURN_NONE;
}

/* This thread's ThreadState (new reference): context.state(), remembered for the thread
   that asked last (by its thread state and that state's unique id: a thread state freed
   and reallocated at the same address has another id). */

static PyObject *thread_state(void)
{
    PyThreadState *ts = PyThreadState_Get();
    if (ts == last_tstate && last_state != NULL && PyThreadState_GetID(ts) == last_tstate_id) {
        Py_INCREF(last_state);
        return last_state;
    }
    PyObject *s = PyObject_GetAttr(local_obj, str_s);
    if (s == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return NULL;
        PyErr_Clear();
        s = PyObject_CallNoArgs(state_fn);
    }
    if (s != NULL && Py_TYPE(s) != tstate_type) {
        Py_DECREF(s);
        PyErr_SetString(PyExc_TypeError, "qtrace: the thread state is not a ThreadState");
        return NULL;
    }
    if (s != NULL) {
        Py_INCREF(s);
        Py_XSETREF(last_state, s);
        last_tstate = ts;
        last_tstate_id = PyThreadState_GetID(ts);
    }
    return s;
}

/* Whether this thread records plainly, outside any trace or derivative (context.special()
   is 0): 1, 0, or -1 with an error set. */
static int quiet(void)
{
    PyObject *s = thread_state();
    if (s == NULL)
        return -1;
    PyObject *special = SLOT(s, s_special);
    int q = special != NULL && PyLong_CheckExact(special)
            && PyObject_RichCompareBool(special, zero_long, Py_EQ) == 1;
    Py_DECREF(s);
    return q;
}

/* Whether the operation being recorded may be at the anchor's statement: `code` and
   `lasti` (ThreadState.gate[2:]) are the innermost user frame of the anchor's site. An
   operation recorded directly from user code (the compiled operators, indexing) is seen
   in the calling frame: another statement is answered here, without the Python policy
   walking the stack (a cavity step writes one array 250 times, once at its anchor). A
   frame of qtrace's own Python code, or an older Python: 1 (the policy decides). */
static int at_anchor_statement(PyObject *code, PyObject *lasti)
{
#if PY_VERSION_HEX >= 0x030B0000
    PyFrameObject *f = PyEval_GetFrame();   /* borrowed */
    if (f == NULL)
        return 1;
    PyCodeObject *fc = PyFrame_GetCode(f);
    Py_DECREF(fc);   /* (the frame holds it) */
    if ((PyObject *)fc == code) {
        long want = PyLong_AsLong(lasti);
        if (want == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return 1;
        }
        return PyFrame_GetLasti(f) == want;
    }
    PyObject *globals = PyFrame_GetGlobals(f);
    PyObject *name = globals == NULL ? NULL : PyDict_GetItemWithError(globals, str_name);
    int ours = name != NULL && PyUnicode_Check(name)
               && PyUnicode_Tailmatch(name, str_qtrace, 0, PY_SSIZE_T_MAX, -1) == 1;
    Py_XDECREF(globals);
    PyErr_Clear();
    return ours;
#else
    return 1;
#endif
}

/* pending._at_gate: whether the cut policy must look at `owner`'s new value, the
   `count`-th operation past `limit` — always while it learns (no gate), once anchored only
   for an operation of the anchor's primitive and shape (ThreadState.gate), or four times
   past the limit. 0 with an error set on failure. */
static int at_gate(PyObject *s, PyObject *owner, Py_ssize_t count, Py_ssize_t four_limits)
{
    PyObject *gate = SLOT(s, s_gate);
    if (gate == NULL || !PyTuple_Check(gate) || PyTuple_GET_SIZE(gate) < 2 || count >= four_limits)
        return 1;
    PyObject *node = (storage_type != NULL && Py_TYPE(owner) == storage_type)
                     ? SLOT(owner, g_node) : SLOT(owner, t_node);
    if (node == NULL)
        return 1;
    PyObject *prim = SLOT(node, node_off[S_PRIM]), *shape = SLOT(node, node_off[S_SHAPE]);
    if (prim == NULL || shape == NULL)
        return 1;
    int eq = PyObject_RichCompareBool(prim, PyTuple_GET_ITEM(gate, 0), Py_EQ);
    if (eq > 0)
        eq = PyObject_RichCompareBool(shape, PyTuple_GET_ITEM(gate, 1), Py_EQ);
    if (eq < 0)
        PyErr_Clear();   /* (the policy's Python code meets the error again) */
    if (eq > 0 && PyTuple_GET_SIZE(gate) == 4) {
        Py_INCREF(gate);   /* (held: getting the frame may allocate, and so run code) */
        int at = at_anchor_statement(PyTuple_GET_ITEM(gate, 2), PyTuple_GET_ITEM(gate, 3));
        Py_DECREF(gate);
        return at;
    }
    return eq != 0;
}

/* config.max_pending_nodes as a C integer (set_pending_limit: config calls it whenever the
   setting is assigned), or -1 where it is not an int and is read on each note. */
static Py_ssize_t pending_limit = -1;

static PyObject *set_pending_limit(PyObject *self, PyObject *value)
{
    Py_ssize_t v = PyLong_CheckExact(value) ? PyLong_AsSsize_t(value) : -1;
    if (v == -1 && PyErr_Occurred())
        PyErr_Clear();   /* (too large: read each time, and found too large there) */
    pending_limit = v < 0 ? -1 : v;
    Py_RETURN_NONE;
}

/* The int `n` (new reference): pending counts up to COUNT_OBJECTS are shared objects, so
   noting a value allocates no int (Python shares only those up to 256). */
#define COUNT_OBJECTS 8192
static PyObject *count_objects[COUNT_OBJECTS];

static PyObject *count_object(Py_ssize_t n)
{
    if (n < 0 || n >= COUNT_OBJECTS)
        return PyLong_FromSsize_t(n);
    if (count_objects[n] == NULL && (count_objects[n] = PyLong_FromSsize_t(n)) == NULL)
        return NULL;
    Py_INCREF(count_objects[n]);
    return count_objects[n];
}

static int note_owner(PyObject *owner)
{
    PyObject *s = thread_state();
    if (s == NULL)
        return -1;
    PyObject *special = SLOT(s, s_special), *pending = SLOT(s, s_pending);
    PyObject *count = SLOT(s, s_count);
    if (special == NULL || pending == NULL || count == NULL || !PyList_Check(pending)) {
        Py_DECREF(s);
        PyErr_SetString(PyExc_TypeError, "qtrace: an incomplete ThreadState");
        return -1;
    }
    int busy = PyObject_IsTrue(special);
    if (busy != 0) {
        Py_DECREF(s);
        return busy < 0 ? -1 : 0;
    }
    /* a storage is listed once per pending list (written again and again: counted only),
       marked by the list's epoch token (ThreadState.epoch) */
    int listed = storage_type != NULL && Py_TYPE(owner) == storage_type;
    PyObject *epoch = SLOT(s, s_epoch);
    if (listed && (epoch == NULL || SLOT(owner, g_noted) != epoch)) {
        Py_XINCREF(epoch);
        set_slot(owner, g_noted, epoch);
        listed = 0;
    }
    if (!listed) {
        PyObject *w = acyclic(PyWeakref_NewRef(owner, NULL));
        if (w == NULL || PyList_Append(pending, w) < 0) {
            Py_XDECREF(w);
            Py_DECREF(s);
            return -1;
        }
        Py_DECREF(w);
    }
    Py_ssize_t n = PyLong_AsSsize_t(count);
    PyObject *next = (n == -1 && PyErr_Occurred()) ? NULL : count_object(n + 1);
    if (next == NULL) {
        Py_DECREF(s);
        return -1;
    }
    Py_INCREF(next);   /* held: the getattr below may run Python code that resets s.count */
    set_slot(s, s_count, next);
    Py_ssize_t lim = pending_limit, four_limits;
    int over;
    if (lim >= 0) {
        over = n + 1 >= lim;
        four_limits = lim <= PY_SSIZE_T_MAX / 4 ? 4 * lim : PY_SSIZE_T_MAX;
    } else {   /* (config.max_pending_nodes is not an int: compared as Python compares it) */
        PyObject *limit = PyObject_GetAttr(config_obj, str_max_pending);
        over = limit == NULL ? -1 : PyObject_RichCompareBool(next, limit, Py_GE);
        double d = over > 0 ? PyFloat_AsDouble(limit) : 0.0;
        if (d == -1.0 && PyErr_Occurred() && PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Clear();   /* (at or below the count: a huge negative limit) */
            d = -HUGE_VAL;
        }
        Py_XDECREF(limit);
        if (over < 0 || (d == -1.0 && PyErr_Occurred())) {
            Py_DECREF(next);
            Py_DECREF(s);
            return -1;
        }
        /* Python's `count >= 4 * limit` for an integer count */
        double four = ceil(4.0 * d);
        four_limits = four != four || four >= (double)PY_SSIZE_T_MAX ? PY_SSIZE_T_MAX
                      : four <= (double)PY_SSIZE_T_MIN ? PY_SSIZE_T_MIN : (Py_ssize_t)four;
    }
    Py_DECREF(next);
    if (over && !at_gate(s, owner, n + 1, four_limits))
        over = PyErr_Occurred() ? -1 : 0;
    if (over > 0) {
        PyObject *r = PyObject_CallFunctionObjArgs(consider_cut_fn, s, owner, NULL);
        over = r == NULL ? -1 : 0;
        Py_XDECREF(r);
    }
    Py_DECREF(s);
    return over;
}

static PyObject *note(PyObject *self, PyObject *owner)
{
    if (tensor_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "qtrace.graph._native: bind_tensors() was not called");
        return NULL;
    }
    if (note_owner(owner) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* A new Tensor holding `node` (stolen), noted as pending. */
static PyObject *new_tensor(PyObject *node)
{
    PyObject *t = tensor_type->tp_alloc(tensor_type, 0);
    if (t == NULL) {
        Py_DECREF(node);
        return NULL;
    }
    /* A tensor holds a node and its view (a storage, which holds its tensors weakly):
       it cannot be part of a reference cycle, so the cyclic collector need not see it. */
    PyObject_GC_UnTrack(t);
    set_slot(t, t_node, node);
    Py_INCREF(Py_None);
    set_slot(t, t_view, Py_None);
    PyObject *inputs = SLOT(node, node_off[S_INPUTS]);   /* (as Tensor.__init__: a leaf is
                                                            not pending work) */
    if (inputs != NULL && PyTuple_Check(inputs) && PyTuple_GET_SIZE(inputs) == 0)
        return t;
    if (note_owner(t) < 0) {
        Py_DECREF(t);
        return NULL;
    }
    return t;
}

/* scalar_operand's memo in front of convert's dicts: the node they gave for a number of
   one type and value (its bits), in one dtype (as_const: the loop dtype) and on one device
   (both by identity). A loop's step multiplies by the same few coefficients every pass;
   building, hashing and comparing the dict's key tuple was a sixth of recording `x * 2.5`.
   Four-way sets like the tables above; entries hold their dtype, device and node. A node
   stays right for its key after the dicts drop it (a 0-d input nobody writes, or a
   constant): the memo only keeps it alive until the entry goes. */
#define SOCACHE_SIZE 256
typedef struct {
    PyTypeObject *type;   /* (a static type: float or int) */
    uint64_t bits;
    PyObject *dtype, *device, *node;
} SOEntry;
static SOEntry socache[SOCACHE_SIZE];
ENTRY_FITS(SOEntry);
WHOLE_SETS(SOCACHE_SIZE);

static void soentry_release(SOEntry *e)
{
    Py_XDECREF(e->dtype); Py_XDECREF(e->device); Py_XDECREF(e->node);
}

static void forget_scalar_operands(void)   /* (the dicts are bound anew) */
{
    for (int i = 0; i < SOCACHE_SIZE; i++) {
        SOEntry gone = socache[i];
        memset(&socache[i], 0, sizeof socache[i]);
        soentry_release(&gone);
    }
}

static inline size_t scalar_set(PyTypeObject *tv, uint64_t bits, PyObject *dtype, PyObject *device)
{
    Py_uhash_t h = mix(mix(mix((Py_uhash_t)bits, (Py_uhash_t)(uintptr_t)tv),
                           (Py_uhash_t)(uintptr_t)dtype), (Py_uhash_t)(uintptr_t)device);
    return set_of(h, SOCACHE_SIZE);
}

/* The memo's node (new reference) or NULL (none, no error set). */
static PyObject *memo_scalar(PyTypeObject *tv, uint64_t bits, PyObject *dtype, PyObject *device)
{
    size_t i0 = scalar_set(tv, bits, dtype, device);
    for (int w = 0; w < WAYS; w++) {
        SOEntry *e = &socache[i0 + (size_t)w];
        if (e->node != NULL && e->bits == bits && e->type == tv && e->dtype == dtype
            && e->device == device) {
            if (w)
                promote(&socache[i0], w, sizeof(SOEntry));
            table_count(T_SCALAR, 1);
            Py_INCREF(socache[i0].node);
            return socache[i0].node;
        }
    }
    table_count(T_SCALAR, 0);
    return NULL;
}

static void remember_scalar(PyTypeObject *tv, uint64_t bits, PyObject *dtype, PyObject *device,
                            PyObject *node)
{
    size_t i0 = scalar_set(tv, bits, dtype, device);
    SOEntry gone;
    make_room(&socache[i0], sizeof(SOEntry), &gone);
    Py_INCREF(dtype); Py_INCREF(device); Py_INCREF(node);
    socache[i0] = (SOEntry){tv, bits, dtype, device, node};
    soentry_release(&gone);   /* (last: the table is whole again) */
}

/* convert.scalar_node (new reference): a float operand of eager code found in the table of
   recent scalars (a 0-d input per value, dtype and device); everything else — integers,
   small or non-finite floats, recording under qt.jit or qt.grad, a value not seen yet —
   is Python's. */
static PyObject *scalar_operand(PyObject *value, PyObject *dtype, PyObject *device)
{
    PyTypeObject *tv = Py_TYPE(value);
    int as_const = -1;   /* 1: a graph constant (convert._consts), 0: a 0-d input, -1: Python's */
    uint64_t bits = 0;
    if (tv == &PyFloat_Type) {
        double v = PyFloat_AS_DOUBLE(value);
        if (v == v && v != 0)   /* (NaN and zeros are keyed by repr) */
            as_const = fabs(v) <= 4 && v == floor(v);
        memcpy(&bits, &v, sizeof bits);
    } else if (tv == &PyLong_Type) {
        long long v = 0;
        if (int_value(value, &v) && v != 0)
            as_const = v >= -4 && v <= 4;
        bits = (uint64_t)v;
    }
    if (as_const >= 0 && scalars != NULL && consts != NULL) {
        int q = quiet();
        if (q < 0)
            return NULL;
        if (q) {
            PyObject *node = memo_scalar(tv, bits, dtype, device);
            if (node != NULL)
                return node;
            PyObject *key = as_const
                ? PyTuple_Pack(5, (PyObject *)tv, value, dtype, device, Py_False)
                : PyTuple_Pack(4, (PyObject *)tv, value, dtype, device);
            if (key == NULL)
                return NULL;
            node = PyDict_GetItemWithError(as_const ? consts : scalars, key);
            Py_DECREF(key);
            if (node != NULL) {
                Py_INCREF(node);
                remember_scalar(tv, bits, dtype, device, node);
                return node;
            }
            if (PyErr_Occurred())
                return NULL;
        }
    }
    return PyObject_CallFunctionObjArgs(scalar_node_fn, value, dtype, device, NULL);
}

static int is_py_scalar(PyTypeObject *tp)
{
    return tp == &PyFloat_Type || tp == &PyLong_Type || tp == &PyBool_Type || tp == &PyComplex_Type;
}

/* elementwise._recipes[(name, dtype or scalar type, weak, ...)] for an op (borrowed;
   NULL: none, or an error), through a table by the identity of the key's parts in front
   of the dict: a recipe, once learnt, never changes (elementwise._recipe), and building
   the key tuple and hashing its dtypes was a fifth of recording an operation. Entries
   hold their parts (their identities stay theirs) and the recipe. */
#define RCACHE_SIZE 256
typedef struct {
    int n;
    PyObject *parts[5];
    PyObject *recipe;
} RCEntry;
static RCEntry rcache[RCACHE_SIZE];

/* Empty the table (bind_tensors: a new recipe dict). */
static void forget_recipes(void)
{
    for (int k = 0; k < RCACHE_SIZE; k++) {
        RCEntry gone = rcache[k];
        memset(&rcache[k], 0, sizeof rcache[k]);
        for (int i = 0; i < 5; i++)
            Py_XDECREF(gone.parts[i]);
        Py_XDECREF(gone.recipe);
    }
}

static PyObject *recipe_of(PyObject *const *parts, int n)
{
    Py_uhash_t h = (Py_uhash_t)n;
    for (int i = 0; i < n; i++)
        h = mix(h, (Py_uhash_t)(uintptr_t)parts[i]);
    RCEntry *e = &rcache[(h ^ (h >> 13)) & (RCACHE_SIZE - 1)];
    int i = 0;
    while (i < n && e->parts[i] == parts[i])
        i++;
    if (i == n && e->n == n && e->recipe != NULL)
        return e->recipe;
    PyObject *key = PyTuple_New(n);
    if (key == NULL)
        return NULL;
    for (i = 0; i < n; i++) {
        Py_INCREF(parts[i]);
        PyTuple_SET_ITEM(key, i, parts[i]);
    }
    PyObject *recipe = PyDict_GetItemWithError(recipes, key);   /* borrowed */
    Py_DECREF(key);
    if (recipe == NULL || recipe == Py_None)
        return recipe;   /* (not remembered: unknown yet, or not eligible, which is rare) */
    RCEntry gone = *e;
    e->n = n;
    for (i = 0; i < 5; i++) {
        Py_XINCREF(i < n ? parts[i] : NULL);
        e->parts[i] = i < n ? parts[i] : NULL;
    }
    Py_INCREF(recipe);
    e->recipe = recipe;
    for (i = 0; i < 5; i++)   /* (last: types, dtypes, strings and tuples run no code) */
        Py_XDECREF(gone.parts[i]);
    Py_XDECREF(gone.recipe);
    return recipe;
}

static PyObject *binary_recipe(PyObject *name, PyObject *x, PyObject *y, PyObject *nx,
                               PyObject *ny, PyObject *recipe);

/* x `name` y on the fast path, or NULL with no error set when it does not apply. */
static PyObject *binary_fast(PyObject *name, PyObject *x, PyObject *y)
{
    PyTypeObject *tx = Py_TYPE(x), *ty = Py_TYPE(y);
    PyObject *nx = NULL, *ny = NULL;
    if (tx == tensor_type)
        nx = SLOT(x, t_node);
    else if (!is_py_scalar(tx))
        return NULL;
    if (ty == tensor_type)
        ny = SLOT(y, t_node);
    else if (!is_py_scalar(ty))
        return NULL;
    if ((nx == NULL && ny == NULL) || (tx == tensor_type && nx == NULL) || (ty == tensor_type && ny == NULL))
        return NULL;
    PyObject *parts[5] = {name, nx ? SLOT(nx, node_off[S_DTYPE]) : (PyObject *)tx,
                          nx ? SLOT(nx, node_off[S_WEAK]) : Py_None,
                          ny ? SLOT(ny, node_off[S_DTYPE]) : (PyObject *)ty,
                          ny ? SLOT(ny, node_off[S_WEAK]) : Py_None};
    PyObject *recipe = recipe_of(parts, 5);   /* borrowed */
    if (recipe == NULL || !PyTuple_Check(recipe) || PyTuple_GET_SIZE(recipe) != 3)
        return NULL;   /* unknown (apply2 will learn it), not eligible, or an error */
    Py_INCREF(recipe);   /* (held: a scalar_node call below runs Python code) */
    PyObject *r = binary_recipe(name, x, y, nx, ny, recipe);
    Py_DECREF(recipe);
    return r;
}

/* binary_fast once its recipe is found (borrowed, held by the caller). */
static PyObject *binary_recipe(PyObject *name, PyObject *x, PyObject *y, PyObject *nx,
                               PyObject *ny, PyObject *recipe)
{
    PyObject *loop = PyTuple_GET_ITEM(recipe, 0), *weak = PyTuple_GET_ITEM(recipe, 1);
    PyObject *checks = PyTuple_GET_ITEM(recipe, 2);
    if (!PyTuple_Check(loop) || PyTuple_GET_SIZE(loop) != 3 || !PyTuple_Check(checks)
        || PyTuple_GET_SIZE(checks) != 2)
        return NULL;
    PyObject *dev, *shape, *tensor_node = nx ? nx : ny;
    if (nx != NULL && ny != NULL) {
        dev = SLOT(nx, node_off[S_DEVICE]);
        shape = SLOT(nx, node_off[S_SHAPE]);
        if (SLOT(ny, node_off[S_DEVICE]) != dev)
            return NULL;
        PyObject *sy = SLOT(ny, node_off[S_SHAPE]);
        if (sy != shape) {
            int eq = PyObject_RichCompareBool(sy, shape, Py_EQ);
            if (eq <= 0) {
                if (eq < 0) PyErr_Clear();
                return NULL;   /* broadcasting: apply2 */
            }
        }
        if (same_str(SLOT(nx, node_off[S_PRIM]), str_const)
            && same_str(SLOT(ny, node_off[S_PRIM]), str_const))
            return NULL;
    } else {
        if (PyTuple_GET_ITEM(checks, nx ? 1 : 0) != Py_False)
            return NULL;   /* an integer scalar's range check: apply2 */
        if (same_str(SLOT(tensor_node, node_off[S_PRIM]), str_const))
            return NULL;
        dev = SLOT(tensor_node, node_off[S_DEVICE]);
        shape = SLOT(tensor_node, node_off[S_SHAPE]);
    }
    /* operands already in their loop dtypes (a cast is apply2's business) */
    if ((nx && SLOT(nx, node_off[S_DTYPE]) != PyTuple_GET_ITEM(loop, 0))
        || (ny && SLOT(ny, node_off[S_DTYPE]) != PyTuple_GET_ITEM(loop, 1)))
        return NULL;
    /* held strongly from here: a scalar_node call runs Python code, which may rebind the
       tensors' nodes (the caller holds the recipe) */
    Py_INCREF(tensor_node);
    PyObject *a = nx, *b = ny;
    if (a == NULL)
        a = scalar_operand(x, PyTuple_GET_ITEM(loop, 0), dev);
    else
        Py_INCREF(a);
    if (b == NULL && a != NULL)
        b = scalar_operand(y, PyTuple_GET_ITEM(loop, 1), dev);
    else
        Py_XINCREF(b);
    PyObject *inputs = (a != NULL && b != NULL) ? PyTuple_Pack(2, a, b) : NULL;
    Py_XDECREF(a);
    Py_XDECREF(b);
    PyObject *node = NULL;
    if (inputs != NULL) {
        PyObject *margs[7] = {name, empty_tuple, shape, PyTuple_GET_ITEM(loop, 2), inputs, dev, weak};
        node = make_node(NULL, margs, 7);
        Py_DECREF(inputs);
    }
    Py_DECREF(tensor_node);
    if (node == NULL)
        return NULL;
    return new_tensor(node);
}

/* -- the views lock ---------------------------------------------------------------------
 *
 * views._views_lock guards every storage's list of views. Python 3.11's own locks read
 * the monotonic clock on every acquisition, even one that cannot wait (a deadline is
 * computed for the semaphore); a slice takes the lock once, a slice assignment twice, and
 * that was a tenth of their time. This reentrant lock tries a mutex first and waits for it
 * with the GIL released; the compiled paths take it directly, Python code through
 * `with` (qtrace.tracer.methods installs it as views._views_lock).
 */
typedef struct {
    PyObject_HEAD
#ifndef _WIN32
    pthread_mutex_t mutex;
#else
    PyThread_type_lock mutex;
#endif
    unsigned long owner;    /* the holding thread while count > 0 */
    unsigned long count;
} ViewsLock;

static int vlock_acquire(ViewsLock *l)
{
    unsigned long me = PyThread_get_thread_ident();
    if (l->count > 0 && l->owner == me) {   /* (only this thread sets owner to itself) */
        l->count++;
        return 0;
    }
#ifndef _WIN32
    if (pthread_mutex_trylock(&l->mutex) != 0) {
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = pthread_mutex_lock(&l->mutex);
        Py_END_ALLOW_THREADS
        if (rc != 0) {
            PyErr_SetString(PyExc_RuntimeError, "qtrace: the views lock could not be taken");
            return -1;
        }
    }
#else
    if (!PyThread_acquire_lock(l->mutex, NOWAIT_LOCK)) {
        Py_BEGIN_ALLOW_THREADS
        PyThread_acquire_lock(l->mutex, WAIT_LOCK);
        Py_END_ALLOW_THREADS
    }
#endif
    l->owner = me;
    l->count = 1;
    return 0;
}

static int vlock_release(ViewsLock *l)
{
    if (l->count == 0 || l->owner != PyThread_get_thread_ident()) {
        PyErr_SetString(PyExc_RuntimeError, "cannot release un-acquired lock");
        return -1;
    }
    if (--l->count == 0) {
        l->owner = 0;
#ifndef _WIN32
        pthread_mutex_unlock(&l->mutex);
#else
        PyThread_release_lock(l->mutex);
#endif
    }
    return 0;
}

static PyObject *vlock_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kw != NULL && PyDict_GET_SIZE(kw) != 0)) {
        PyErr_SetString(PyExc_TypeError, "ViewsLock() takes no arguments");
        return NULL;
    }
    ViewsLock *l = (ViewsLock *)type->tp_alloc(type, 0);
    if (l == NULL)
        return NULL;
#ifndef _WIN32
    if (pthread_mutex_init(&l->mutex, NULL) != 0) {
#else
    if ((l->mutex = PyThread_allocate_lock()) == NULL) {
#endif
        Py_DECREF(l);
        PyErr_SetString(PyExc_RuntimeError, "qtrace: no lock could be made");
        return NULL;
    }
    return (PyObject *)l;
}

static void vlock_dealloc(ViewsLock *l)
{
#ifndef _WIN32
    pthread_mutex_destroy(&l->mutex);
#else
    if (l->mutex != NULL)
        PyThread_free_lock(l->mutex);
#endif
    Py_TYPE(l)->tp_free((PyObject *)l);
}

static PyObject *vlock_acquire_py(PyObject *self, PyObject *unused)
{
    if (vlock_acquire((ViewsLock *)self) < 0)
        return NULL;
    Py_RETURN_TRUE;
}

static PyObject *vlock_release_py(PyObject *self, PyObject *unused)
{
    if (vlock_release((ViewsLock *)self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *vlock_exit_py(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return vlock_release_py(self, NULL);
}

static PyMethodDef vlock_methods[] = {
    {"acquire", vlock_acquire_py, METH_NOARGS, "Take the lock (reentrant), waiting as needed."},
    {"release", vlock_release_py, METH_NOARGS, "Give the lock back (once per acquire)."},
    {"__enter__", vlock_acquire_py, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))vlock_exit_py, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ViewsLockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "qtrace.graph._native.ViewsLock",
    .tp_doc = "ViewsLock(): a reentrant lock (acquire, release, `with`) that the compiled "
              "recorder takes without calling Python: the lock of every storage's views.",
    .tp_basicsize = sizeof(ViewsLock),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = vlock_new,
    .tp_dealloc = (destructor)vlock_dealloc,
    .tp_methods = vlock_methods,
};

/* -- basic indexing: x[1:-1, 2:], x[:, -1] ---------------------------------------------
 *
 * qtrace.tracer.indexing.getitem for a key of one slice or integer per axis (at least one
 * slice), with qtrace.tracer.views.view_chain, slice_node and reshape_node: a view of the
 * tensor, registered with its storage. Storages are created, evaluated bases' leaf views
 * looked up, and long view lists pruned by the Python code (storage_fn, leaf_view_fn,
 * Storage.add).
 */
static PyTypeObject *storage_type;
static PyObject *storage_fn;         /* views._storage(t): (storage, steps), made if missing */
static PyObject *leaf_view_fn;       /* views._leaf_view(base node, steps) */
static PyObject *reshape_node_fn;    /* views.reshape_node (constants: a broadcast) */
static PyObject *view_chain_fn;      /* views.view_chain (Python) */
static PyObject *views_acquire;      /* views._views_lock.acquire (bound) */
static PyObject *views_release;      /* views._views_lock.release (bound) */
static ViewsLock *views_lock;        /* views._views_lock where it is a ViewsLock */
static Py_ssize_t g_node, g_views, g_prune_at, g_noted;
static PyObject *str_slice, *str_reshape, *str_slice_update, *str_input, *str_add, *str_transpose;
static PyObject *str_acquire, *str_release;

#define MAX_DIMS 64

static PyObject *bind_views(PyObject *self, PyObject *args)
{
    PyObject *stt, *sfn, *lv, *rn, *lock, *vc, *vr;
    Py_ssize_t cap;
    if (!PyArg_ParseTuple(args, "O!OOOOOO!n:bind_views", &PyType_Type, &stt, &sfn, &lv, &rn, &lock,
                          &vc, &PyDict_Type, &vr, &cap))
        return NULL;
    if (leaf_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "qtrace.graph._native: bind() was not called");
        return NULL;
    }
    if (slot_offset(leaf_type, "_views", &leaf_views_off) < 0
        || slot_offset((PyTypeObject *)stt, "node", &g_node) < 0
        || slot_offset((PyTypeObject *)stt, "views", &g_views) < 0
        || slot_offset((PyTypeObject *)stt, "prune_at", &g_prune_at) < 0
        || slot_offset((PyTypeObject *)stt, "noted", &g_noted) < 0)
        return NULL;
    PyObject *acq = PyObject_GetAttr(lock, str_acquire), *rel = PyObject_GetAttr(lock, str_release);
    if (acq == NULL || rel == NULL) {
        Py_XDECREF(acq);
        Py_XDECREF(rel);
        return NULL;
    }
    Py_XSETREF(views_acquire, acq);
    Py_XSETREF(views_release, rel);
    ViewsLock *vl = Py_TYPE(lock) == &ViewsLockType ? (ViewsLock *)lock : NULL;
    Py_XINCREF(vl);
    Py_XSETREF(views_lock, vl);
    leaf_views_cap = cap;
    if (getitem_fn == NULL) {
        PyObject *opmod = PyImport_ImportModule("operator");
        getitem_fn = opmod == NULL ? NULL : PyObject_GetAttrString(opmod, "getitem");
        Py_XDECREF(opmod);
        if (getitem_fn == NULL)
            return NULL;
    }
    PyObject **dst[] = {(PyObject **)&storage_type, &storage_fn, &leaf_view_fn, &reshape_node_fn,
                        &view_chain_fn, &view_recipes};
    PyObject *src[] = {stt, sfn, lv, rn, vc, vr};
    for (size_t i = 0; i < sizeof src / sizeof src[0]; i++) {
        Py_INCREF(src[i]);
        Py_XSETREF(*dst[i], src[i]);
    }
    Py_RETURN_NONE;
}

/* Take and give back the views lock: 0, or -1 with an error set. */
static int views_take(void)
{
    if (views_lock != NULL)
        return vlock_acquire(views_lock);
    PyObject *r = PyObject_CallNoArgs(views_acquire);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

static int views_give(void)
{
    if (views_lock != NULL)
        return vlock_release(views_lock);
    PyObject *r = PyObject_CallNoArgs(views_release);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* Give the views lock back, keeping an error set before (0, or -1 with an error set). */
static int views_give_keeping(int rc)
{
    PyObject *et = NULL, *ev = NULL, *tb = NULL;
    if (rc < 0)
        PyErr_Fetch(&et, &ev, &tb);
    int given = views_give();
    if (rc < 0) {
        PyErr_Restore(et, ev, tb);
        return -1;
    }
    return given;
}

static inline int prim_is(PyObject *node, PyObject *name)
{
    return same_str(SLOT(node, node_off[S_PRIM]), name);
}

/* -- shared tuples ----------------------------------------------------------------------
 *
 * Every slice and slice assignment describes itself in small tuples (starts, steps,
 * counts, the view step, the chain of steps) that are the same from one pass of a loop to
 * the next. Tuples are immutable, so equal ones may be one object: two set-associative
 * tables hand out the tuple made last time instead of allocating (and later freeing) a new
 * one. Entries hold their tuples (and, for a concatenation, both operands), so identities
 * in a key are never reused while listed. Only tuples of ints, strings and such shared
 * tuples go here: nothing a cycle could pass through, nothing whose lifetime matters.
 */
#define ITCACHE_SIZE 2048
#define ITCACHE_DIMS 4
typedef struct {
    Py_ssize_t n, v[ITCACHE_DIMS];
    PyObject *t;
} ITEntry;
static ITEntry itcache[ITCACHE_SIZE];
ENTRY_FITS(ITEntry);
WHOLE_SETS(ITCACHE_SIZE);

#define TCACHE_SIZE 4096
typedef struct {
    PyObject *a, *b;      /* a concatenation's operands (NULL: a tuple of items) */
    PyObject *t;
} TEntry;
static TEntry tcache[TCACHE_SIZE];
ENTRY_FITS(TEntry);
WHOLE_SETS(TCACHE_SIZE);

static PyObject *new_int_tuple(const Py_ssize_t *v, Py_ssize_t n)
{
    PyObject *t = PyTuple_New(n);
    if (t == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyLong_FromSsize_t(v[i]);
        if (x == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, x);
    }
    return acyclic(t);
}

/* A tuple of Python ints from `n` values (new reference; shared, see above). */
static PyObject *int_tuple(const Py_ssize_t *v, Py_ssize_t n)
{
    if (n > ITCACHE_DIMS)
        return new_int_tuple(v, n);
    Py_uhash_t h = (Py_uhash_t)n;
    for (Py_ssize_t i = 0; i < n; i++)
        h = mix(h, (Py_uhash_t)v[i]);
    size_t i0 = set_of(h, ITCACHE_SIZE);
    for (int w = 0; w < WAYS; w++) {
        ITEntry *e = &itcache[i0 + (size_t)w];
        if (e->t == NULL || e->n != n)
            continue;
        Py_ssize_t i = 0;
        while (i < n && e->v[i] == v[i])
            i++;
        if (i == n) {
            if (w)
                promote(&itcache[i0], w, sizeof(ITEntry));
            table_count(T_INT_TUPLE, 1);
            Py_INCREF(itcache[i0].t);
            return itcache[i0].t;
        }
    }
    table_count(T_INT_TUPLE, 0);
    PyObject *t = new_int_tuple(v, n);
    if (t == NULL)
        return NULL;
    ITEntry gone, *e = &itcache[i0];
    make_room(e, sizeof(ITEntry), &gone);
    e->n = n;
    memcpy(e->v, v, sizeof(Py_ssize_t) * n);
    Py_INCREF(t);
    e->t = t;
    Py_XDECREF(gone.t);   /* (last: a tuple of ints runs no code when it dies) */
    return t;
}

/* Leaf positions longer than int_tuple shares (a merge over many leaves: the Jacobi
   sweep's `... - c * b[1:-1, 1:-1]` meets a list of ~10), interned by value: like the
   short ones they are part of a struct key looked up by identity, and a fresh tuple per
   merge missed that table on every pass of a loop. Ints only; emptied when full. */
#define POSITIONS_CAP 4096
static PyObject *positions_tab;

static PyObject *shared_positions(const Py_ssize_t *v, Py_ssize_t n)
{
    PyObject *t = int_tuple(v, n);
    if (t == NULL || n <= ITCACHE_DIMS)
        return t;
    if (positions_tab == NULL && (positions_tab = PyDict_New()) == NULL) {
        PyErr_Clear();
        return t;   /* (unshared: still correct) */
    }
    if (PyDict_GET_SIZE(positions_tab) >= POSITIONS_CAP)
        PyDict_Clear(positions_tab);
    PyObject *interned = PyDict_SetDefault(positions_tab, t, t);   /* borrowed */
    if (interned == NULL) {
        PyErr_Clear();
        return t;
    }
    Py_INCREF(interned);
    Py_DECREF(t);
    return interned;
}

/* The set (see set_of) where the tuple of `items` (or the concatenation a + b) may be
   listed. */
static inline size_t tcache_index(PyObject *const *items, Py_ssize_t n, PyObject *a, PyObject *b)
{
    Py_uhash_t h = (Py_uhash_t)n ^ (a != NULL ? 0x2545f491u : 0);
    for (Py_ssize_t i = 0; i < n; i++)
        h = mix(h, (Py_uhash_t)(uintptr_t)items[i]);
    if (a != NULL)
        h = mix(mix(h, (Py_uhash_t)(uintptr_t)a), (Py_uhash_t)(uintptr_t)b);
    return set_of(h, TCACHE_SIZE);
}

/* List `t` (with a concatenation's operands) at the front of set i0; the front moves
   back, the back one's references go. */
static void tcache_store(size_t i0, PyObject *t, PyObject *a, PyObject *b)
{
    TEntry gone, *e = &tcache[i0];
    make_room(e, sizeof(TEntry), &gone);
    Py_INCREF(t);
    Py_XINCREF(a);
    Py_XINCREF(b);
    e->t = t;
    e->a = a;
    e->b = b;
    Py_XDECREF(gone.t);
    Py_XDECREF(gone.a);
    Py_XDECREF(gone.b);
}

/* The tuple of the `n` objects `items` (new reference; shared by the identity of the
   items: ints, strings and shared tuples only). */
static PyObject *shared_tuple(PyObject *const *items, Py_ssize_t n)
{
    size_t i0 = tcache_index(items, n, NULL, NULL);
    for (int w = 0; w < WAYS; w++) {
        PyObject *t = tcache[i0 + (size_t)w].t;
        if (t == NULL || tcache[i0 + (size_t)w].a != NULL || PyTuple_GET_SIZE(t) != n)
            continue;
        Py_ssize_t i = 0;
        while (i < n && PyTuple_GET_ITEM(t, i) == items[i])
            i++;
        if (i == n) {
            if (w)
                promote(&tcache[i0], w, sizeof(TEntry));
            table_count(T_TUPLE, 1);
            Py_INCREF(t);
            return t;
        }
    }
    table_count(T_TUPLE, 0);
    PyObject *t = PyTuple_New(n);
    if (t == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_INCREF(items[i]);
        PyTuple_SET_ITEM(t, i, items[i]);
    }
    acyclic(t);
    tcache_store(i0, t, NULL, NULL);
    return t;
}

/* a + b for two tuples (new reference; shared by the identity of a and b, which must be
   shared tuples or hold only what shared_tuple takes). */
static PyObject *shared_concat(PyObject *a, PyObject *b)
{
    size_t i0 = tcache_index(NULL, 0, a, b);
    for (int w = 0; w < WAYS; w++) {
        TEntry *e = &tcache[i0 + (size_t)w];
        if (e->t != NULL && e->a == a && e->b == b) {
            if (w)
                promote(&tcache[i0], w, sizeof(TEntry));
            table_count(T_TUPLE, 1);
            Py_INCREF(tcache[i0].t);
            return tcache[i0].t;
        }
    }
    table_count(T_TUPLE, 0);
    PyObject *t = acyclic(PySequence_Concat(a, b));
    if (t != NULL)
        tcache_store(i0, t, a, b);
    return t;
}

/* Read a tuple of `n` integers; 0 when it is not one (no error left set). */
static int read_ints(PyObject *t, Py_ssize_t *out, Py_ssize_t n)
{
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != n)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyTuple_GET_ITEM(t, i);
        if (!PyLong_Check(x))
            return 0;
        out[i] = PyLong_AsSsize_t(x);
        if (out[i] == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
    }
    return 1;
}

/* Whether the region (starts, steps) of shape `a` is the whole of an array of shape `b`
   (all starts 0, all steps 1, equal shapes): 1, 0, or -1 with an error set. The test of
   views.slice_node and views.update_node. */
static int whole(const Py_ssize_t *starts, const Py_ssize_t *steps, Py_ssize_t nd, PyObject *a,
                 PyObject *b)
{
    for (Py_ssize_t k = 0; k < nd; k++)
        if (starts[k] != 0 || steps[k] != 1)
            return 0;
    return PyObject_RichCompareBool(a, b, Py_EQ);
}

/* The node of view primitive `prim` of `n` (one input, its dtype, device and weak flag)
   with `params` and `shape` (new reference; NULL on error, or when an argument is: the
   caller's allocations failed). */
static PyObject *view_of(PyObject *prim, PyObject *n, PyObject *params, PyObject *shape)
{
    if (params == NULL || shape == NULL)
        return NULL;
    PyObject *inputs = PyTuple_Pack(1, n), *node = NULL;
    if (inputs != NULL) {
        PyObject *margs[7] = {prim, params, shape, SLOT(n, node_off[S_DTYPE]), inputs,
                              SLOT(n, node_off[S_DEVICE]), SLOT(n, node_off[S_WEAK])};
        node = make_node(NULL, margs, 7);
        Py_DECREF(inputs);
    }
    return node;
}

/* views.slice_node: the node of the strided sub-view (starts, steps, shape) of `n` (new
   reference); NULL with no error set where this code does not follow (the caller falls
   back to Python). */
static PyObject *slice_node(PyObject *n, Py_ssize_t *starts, Py_ssize_t *steps,
                            PyObject *shape, const Py_ssize_t *dims, Py_ssize_t nd)
{
    int all = whole(starts, steps, nd, shape, SLOT(n, node_off[S_SHAPE]));
    if (all < 0)
        return NULL;
    if (all) {
        Py_INCREF(n);
        return n;
    }
    Py_ssize_t s0[MAX_DIMS], st0[MAX_DIMS];
    if (prim_is(n, str_slice)) {
        PyObject *params = SLOT(n, node_off[S_PARAMS]);
        if (!PyTuple_Check(params) || PyTuple_GET_SIZE(params) != 2
            || !read_ints(PyTuple_GET_ITEM(params, 0), s0, nd)
            || !read_ints(PyTuple_GET_ITEM(params, 1), st0, nd))
            return NULL;
        for (Py_ssize_t k = 0; k < nd; k++) {
            starts[k] = s0[k] + starts[k] * st0[k];
            steps[k] = steps[k] * st0[k];
        }
        n = PyTuple_GET_ITEM(SLOT(n, node_off[S_INPUTS]), 0);
    }
    int empty = 0, unit = 0;
    for (Py_ssize_t k = 0; k < nd; k++) {
        empty |= dims[k] == 0;
        unit |= dims[k] == 1;
    }
    while (!empty && prim_is(n, str_slice_update)) {
        /* reading through a region write (see views.slice_node) */
        PyObject *params = SLOT(n, node_off[S_PARAMS]);
        PyObject *region = PyTuple_GET_ITEM(SLOT(n, node_off[S_INPUTS]), 1);
        Py_ssize_t rs[MAX_DIMS], rt[MAX_DIMS], rd[MAX_DIMS];
        if (!PyTuple_Check(params) || PyTuple_GET_SIZE(params) != 2
            || !read_ints(PyTuple_GET_ITEM(params, 0), rs, nd)
            || !read_ints(PyTuple_GET_ITEM(params, 1), rt, nd)
            || !read_ints(SLOT(region, node_off[S_SHAPE]), rd, nd))
            return NULL;
        int disjoint = 0;
        if (unit)
            for (Py_ssize_t k = 0; k < nd; k++)
                if (dims[k] == 1 && rd[k] == 1 && starts[k] != rs[k])
                    disjoint = 1;
        if (disjoint) {
            n = PyTuple_GET_ITEM(SLOT(n, node_off[S_INPUTS]), 0);
            continue;
        }
        Py_ssize_t is[MAX_DIMS], it[MAX_DIMS];
        int within = 1;
        for (Py_ssize_t k = 0; k < nd && within; k++) {
            Py_ssize_t a = starts[k], s = steps[k], c = dims[k], b = rs[k], t = rt[k], m = rd[k];
            if (t == 0) { within = 0; break; }
            /* Python's % and // (floor): (a - b) % t, s % t */
            Py_ssize_t d = a - b, r = d % t;
            if (r != 0 && ((r < 0) != (t < 0))) r += t;
            Py_ssize_t rs2 = s % t;
            if (rs2 != 0 && ((rs2 < 0) != (t < 0))) rs2 += t;
            if (r || (c > 1 && rs2)) { within = 0; break; }
            Py_ssize_t kk = (d - r) / t, ks = c > 1 ? (s - rs2) / t : 1;
            Py_ssize_t last = kk + (c - 1) * ks;
            if (!(0 <= kk && kk < m && 0 <= last && last < m)) { within = 0; break; }
            is[k] = kk;
            it[k] = ks;
        }
        if (within)
            return slice_node(region, is, it, shape, dims, nd);
        break;
    }
    PyObject *ts = int_tuple(starts, nd), *tt = int_tuple(steps, nd), *params = NULL;
    if (ts != NULL && tt != NULL)
        params = shared_tuple((PyObject *[]){ts, tt}, 2);
    PyObject *node = view_of(str_slice, n, params, shape);
    Py_XDECREF(ts); Py_XDECREF(tt); Py_XDECREF(params);
    return node;
}

/* views.reshape_node (new reference). */
static PyObject *reshape_node(PyObject *n, PyObject *shape)
{
    int eq = PyObject_RichCompareBool(shape, SLOT(n, node_off[S_SHAPE]), Py_EQ);
    if (eq < 0)
        return NULL;
    if (eq) {
        Py_INCREF(n);
        return n;
    }
    if (prim_is(n, str_const))
        return PyObject_CallFunctionObjArgs(reshape_node_fn, n, shape, NULL);
    if (prim_is(n, str_reshape)) {
        n = PyTuple_GET_ITEM(SLOT(n, node_off[S_INPUTS]), 0);
        eq = PyObject_RichCompareBool(shape, SLOT(n, node_off[S_SHAPE]), Py_EQ);
        if (eq < 0)
            return NULL;
        if (eq) {
            Py_INCREF(n);
            return n;
        }
    }
    PyObject *params = shared_tuple(&shape, 1);
    PyObject *node = view_of(str_reshape, n, params, shape);
    Py_XDECREF(params);
    return node;
}

/* views.transpose_node (new reference): `n` with its axes permuted by `perm` (a tuple of
   ints), composed with a transpose it already is; NULL with no error set where `perm` is
   not what this code reads (the caller falls back to Python). */
static PyObject *transpose_node(PyObject *n, PyObject *perm)
{
    Py_ssize_t nd = PyTuple_Check(perm) ? PyTuple_GET_SIZE(perm) : -1, p[MAX_DIMS], d[MAX_DIMS];
    PyObject *shape = SLOT(n, node_off[S_SHAPE]);
    if (nd < 0 || nd > MAX_DIMS || PyTuple_GET_SIZE(shape) != nd || !read_ints(perm, p, nd))
        return NULL;
    if (prim_is(n, str_transpose)) {
        PyObject *params = SLOT(n, node_off[S_PARAMS]);
        Py_ssize_t inner[MAX_DIMS];
        if (!PyTuple_Check(params) || PyTuple_GET_SIZE(params) != 1
            || !read_ints(PyTuple_GET_ITEM(params, 0), inner, nd))
            return NULL;
        for (Py_ssize_t k = 0; k < nd; k++) {
            if (p[k] < 0 || p[k] >= nd)
                return NULL;
            p[k] = inner[p[k]];
        }
        n = PyTuple_GET_ITEM(SLOT(n, node_off[S_INPUTS]), 0);
        shape = SLOT(n, node_off[S_SHAPE]);
    }
    int identity = 1;
    for (Py_ssize_t k = 0; k < nd; k++) {
        if (p[k] < 0 || p[k] >= nd)
            return NULL;
        identity &= p[k] == k;
    }
    if (identity) {
        Py_INCREF(n);
        return n;
    }
    if (!read_ints(shape, d, nd))
        return NULL;
    Py_ssize_t out[MAX_DIMS];
    for (Py_ssize_t k = 0; k < nd; k++)
        out[k] = d[p[k]];
    PyObject *tp = int_tuple(p, nd), *ts = int_tuple(out, nd), *params = NULL;
    if (tp != NULL)
        params = shared_tuple(&tp, 1);
    PyObject *node = view_of(str_transpose, n, params, ts);
    Py_XDECREF(tp); Py_XDECREF(ts); Py_XDECREF(params);
    return node;
}

/* Storage.add: register view `t` (under the views lock; pruning is Python's). */
static int storage_add(PyObject *st, PyObject *t)
{
    PyObject *w = acyclic(PyWeakref_NewRef(t, NULL));
    if (w == NULL)
        return -1;
    if (views_take() < 0) {
        Py_DECREF(w);
        return -1;
    }
    PyObject *views = SLOT(st, g_views), *prune_at = SLOT(st, g_prune_at);
    Py_ssize_t limit = prune_at ? PyLong_AsSsize_t(prune_at) : -1;
    int rc = 0, prune = 0;
    if (views == NULL || !PyList_Check(views) || limit < 0) {
        PyErr_Clear();
        prune = 1;
    } else if (PyList_GET_SIZE(views) + 1 >= limit) {
        prune = 1;
    } else {
        rc = PyList_Append(views, w);
    }
    Py_DECREF(w);
    if (views_give_keeping(rc) < 0)
        return -1;
    if (prune) {   /* the list is due to be pruned: Storage.add does both */
        PyObject *r = PyObject_CallMethodOneArg(st, str_add, t);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
    }
    return rc;
}

static inline int plain_bound(PyObject *b)
{
    return b == Py_None || PyLong_CheckExact(b);
}

/* The items of an indexing key (*key itself where it is not a tuple) and their number. */
static inline PyObject *const *key_items(PyObject *const *key, Py_ssize_t *n)
{
    if (PyTuple_Check(*key)) {
        *n = PyTuple_GET_SIZE(*key);
        return &PyTuple_GET_ITEM(*key, 0);
    }
    *n = 1;
    return key;
}

static PyObject *full_slice;   /* slice(None, None, None): an axis a key leaves whole */

/* The items of key `key` for an array of `nd` axes into buf (borrowed; *nitems of them,
   at most MAX_DIMS), by NumPy's rules for basic keys: the key's own items (None: a new
   axis of length 1, consuming none), an Ellipsis standing for as many whole axes as the
   other items leave, and whole trailing axes after a short key (`p[1:-1]`, `p[3]`,
   `p[..., 0]` and `p[:, None]` of a 2-d p are `p[1:-1, :]`, `p[3, :]`, `p[:, 0]` and
   `p[:, None, :]`). 0: more items than axes, a second Ellipsis, or too many items (the
   Python code decides). */
static int key_axes(PyObject *key, Py_ssize_t nd, PyObject **buf, Py_ssize_t *nitems)
{
    Py_ssize_t nk, ellipsis = -1, fresh = 0;
    PyObject *const *items = key_items(&key, &nk);
    if (nd == 0 || nd > MAX_DIMS || full_slice == NULL)
        return 0;
    for (Py_ssize_t i = 0; i < nk; i++) {
        if (items[i] == Py_Ellipsis) {
            if (ellipsis >= 0)
                return 0;
            ellipsis = i;
        } else if (items[i] == Py_None) {
            fresh++;
        }
    }
    Py_ssize_t given = nk - (ellipsis >= 0) - fresh, k = 0;
    if (given > nd || nd + fresh > MAX_DIMS)
        return 0;
    for (Py_ssize_t i = 0; i < nk; i++) {
        if (i != ellipsis) {
            buf[k++] = items[i];
            continue;
        }
        for (Py_ssize_t f = 0; f < nd - given; f++)
            buf[k++] = full_slice;
    }
    while (k < nd + fresh)
        buf[k++] = full_slice;
    *nitems = k;
    return 1;
}

/* indexing.basic_key's common case: one slice or in-range integer per axis of `shape`
   (after key_axes).
   Fills starts/steps/counts (per axis) and out (the result shape: integers dropped);
   `sliced`: some axis has a slice; `moved`: not the whole array. 0: another key. */
static int parse_basic(PyObject *shape, PyObject *key, Py_ssize_t *starts, Py_ssize_t *steps,
                       Py_ssize_t *counts, Py_ssize_t *out, Py_ssize_t *nout_p, int *sliced_p,
                       int *moved_p)
{
    Py_ssize_t nd = PyTuple_GET_SIZE(shape), nitems;
    PyObject *items[MAX_DIMS];
    if (!key_axes(key, nd, items, &nitems))
        return 0;
    Py_ssize_t nout = 0, k = 0;
    int moved = 0, sliced = 0;
    for (Py_ssize_t i = 0; i < nitems; i++, k++) {
        PyObject *item = items[i];
        if (item == Py_None) {   /* a new axis: in the result's shape only (a reshape) */
            out[nout++] = 1;
            k--;
            continue;
        }
        Py_ssize_t size = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, k));
        if (size == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
        if (PySlice_Check(item)) {
            /* bounds that are None or ints only: no user __index__ runs here (the caller
               holds borrowed references to the tensor's node and shape) */
            PySliceObject *sl = (PySliceObject *)item;
            if (!plain_bound(sl->start) || !plain_bound(sl->stop) || !plain_bound(sl->step))
                return 0;
            Py_ssize_t start, stop, step;
            if (PySlice_Unpack(item, &start, &stop, &step) < 0) {
                PyErr_Clear();   /* a zero step: Python says so */
                return 0;
            }
            Py_ssize_t count = PySlice_AdjustIndices(size, &start, &stop, step);
            starts[k] = count ? start : 0;
            steps[k] = step;
            counts[k] = count;
            out[nout++] = count;
            sliced = 1;
        } else if (PyLong_CheckExact(item)) {
            Py_ssize_t i = PyLong_AsSsize_t(item);
            if ((i == -1 && PyErr_Occurred()) || i < -size || i >= size) {
                PyErr_Clear();
                return 0;
            }
            starts[k] = i < 0 ? i + size : i;
            steps[k] = 1;
            counts[k] = 1;
        } else {
            return 0;
        }
        if (starts[k] != 0 || steps[k] != 1 || counts[k] != size)
            moved = 1;
    }
    *nout_p = nout;
    *sliced_p = sliced;
    *moved_p = moved;
    return 1;
}

/* parse_basic's answers remembered by the identity of what a key is made of: the shape
   tuple, and per axis the slice's start, stop and step objects or the integer (a loop's
   `p[1:-1, 2:]` builds new slices and a new tuple every pass, from the same small ints and
   None). Entries hold those objects, so equal identities are equal values; they also hold
   the integer tuples made from the answer. Sets of WAYS (set_of); up to KC_DIMS axes. */
#define KCACHE_SIZE 1024
#define KC_DIMS 4
typedef struct {
    PyObject *shape, *parts[3 * KC_DIMS];   /* held; an integer: the int, NULL, NULL; None:
                                               None, NULL, NULL (per key item) */
    Py_ssize_t nd, nitems, starts[KC_DIMS], steps[KC_DIMS], counts[KC_DIMS], out[KC_DIMS], nout;
    int sliced, moved;
    PyObject *tcounts, *tstarts, *tsteps, *tout;   /* held: int_tuple of the answer */
} KEntry;
static KEntry kcache[KCACHE_SIZE];
ENTRY_FITS(KEntry);
WHOLE_SETS(KCACHE_SIZE);

static void kentry_clear(KEntry *e)
{
    Py_CLEAR(e->shape);
    for (int i = 0; i < 3 * KC_DIMS; i++)
        Py_CLEAR(e->parts[i]);
    Py_CLEAR(e->tcounts); Py_CLEAR(e->tstarts); Py_CLEAR(e->tsteps); Py_CLEAR(e->tout);
    e->nd = 0;
}

/* The parts of `key`'s items for `nd` axes (key_axes: *nitems of them) into
   parts[3 * *nitems] (borrowed), or 0: not a key of plain slices, exact ints and Nones. */
static int key_parts(PyObject *key, Py_ssize_t nd, PyObject **parts, Py_ssize_t *nitems)
{
    PyObject *items[MAX_DIMS];
    if (nd > KC_DIMS || !key_axes(key, nd, items, nitems) || *nitems > KC_DIMS)
        return 0;
    for (Py_ssize_t k = 0; k < *nitems; k++) {
        PyObject *item = items[k];
        if (item == Py_None) {
            parts[3 * k] = Py_None;
            parts[3 * k + 1] = parts[3 * k + 2] = NULL;
        } else if (PySlice_Check(item)) {
            PySliceObject *sl = (PySliceObject *)item;
            parts[3 * k] = sl->start;
            parts[3 * k + 1] = sl->stop;
            parts[3 * k + 2] = sl->step;
        } else if (PyLong_CheckExact(item)) {
            parts[3 * k] = item;
            parts[3 * k + 1] = parts[3 * k + 2] = NULL;
        } else {
            return 0;
        }
    }
    return 1;
}

/* parse_basic of (shape, key) with its integer tuples, remembered (borrowed entry), or
   NULL with no error set: not such a key (the caller's parse_basic decides), or an error
   making a tuple (the caller meets it again). */
static KEntry *parse_cached(PyObject *shape, PyObject *key)
{
    Py_ssize_t nd = PyTuple_GET_SIZE(shape), nitems;
    PyObject *parts[3 * KC_DIMS];
    if (!key_parts(key, nd, parts, &nitems))
        return NULL;
    Py_uhash_t h = mix((Py_uhash_t)nitems, (Py_uhash_t)(uintptr_t)shape);
    for (Py_ssize_t i = 0; i < 3 * nitems; i++)
        h = mix(h, (Py_uhash_t)(uintptr_t)parts[i]);
    size_t i0 = set_of(h, KCACHE_SIZE);
    for (int w = 0; w < WAYS; w++) {
        KEntry *e = &kcache[i0 + (size_t)w];
        if (e->nd != nd || e->nitems != nitems || e->shape != shape)
            continue;
        Py_ssize_t i = 0;
        while (i < 3 * nitems && e->parts[i] == parts[i])
            i++;
        if (i == 3 * nitems) {
            if (w)
                promote(&kcache[i0], w, sizeof(KEntry));
            table_count(T_KEY, 1);
            return &kcache[i0];
        }
    }
    table_count(T_KEY, 0);
    KEntry now = {0};
    if (!parse_basic(shape, key, now.starts, now.steps, now.counts, now.out, &now.nout,
                     &now.sliced, &now.moved))
        return NULL;
    now.tcounts = int_tuple(now.counts, nd);
    now.tstarts = int_tuple(now.starts, nd);
    now.tsteps = int_tuple(now.steps, nd);
    now.tout = int_tuple(now.out, now.nout);
    if (now.tcounts == NULL || now.tstarts == NULL || now.tsteps == NULL || now.tout == NULL) {
        kentry_clear(&now);
        PyErr_Clear();
        return NULL;
    }
    now.nd = nd;
    now.nitems = nitems;
    Py_INCREF(shape);
    now.shape = shape;
    for (Py_ssize_t i = 0; i < 3 * nitems; i++) {
        Py_XINCREF(parts[i]);
        now.parts[i] = parts[i];
    }
    KEntry gone;
    make_room(&kcache[i0], sizeof(KEntry), &gone);
    kcache[i0] = now;
    kentry_clear(&gone);   /* (last: ints and tuples of ints run no code when they die) */
    return &kcache[i0];
}

/* x[key] for a key of one slice or integer per axis, at least one slice: NULL with no
   error set when the key is anything else (indexing.getitem then takes it). */
/* views._leaf_view(base, steps) (new reference: a Leaf, or None), with the leaves it
   made remembered here by identity of the base and value of the steps, so that reading
   the same view of an evaluated array again costs no Python: `b[1:-1, 1:-1]` of a
   coefficient array in every step. Entries refer to the base and the leaf weakly (the
   Python table keeps the leaf while the base lives; a dead one is a miss); a hit also
   needs what the Python function checks: a buffer, and no trace or derivative going on. */
#define LCACHE_SIZE 1024
typedef struct {
    PyObject *base_ref, *steps, *leaf_ref;
    Py_uhash_t hash;
} LEntry;
static LEntry lcache[LCACHE_SIZE];

static void lentry_clear(LEntry *e)
{
    Py_CLEAR(e->base_ref);
    Py_CLEAR(e->steps);
    Py_CLEAR(e->leaf_ref);
}

static PyObject *leaf_from(PyObject *from, const int *copied, size_t n, PyObject *buf,
                           const char *what);

/* views._leaf_view where its answer needs no Python: base a Leaf holding a NumPy array, no
   trace or derivative going on, and the view either in base._views already or of a layout
   whose recipe views._view_recipes knows (each evaluation makes new bases, so a step's
   first view of each missed the table above and ran the Python function: ~14 per step
   of a cavity flow, 3-4 us each). The recipe's NumPy steps are applied (an item lookup
   directly), the result checked as _new_leaf_view checks it, and the leaf listed in
   base._views. NULL with no error set: the Python function decides (a new layout, a
   full table, anything unusual). */
static PyObject *leaf_view_known(PyObject *base, PyObject *steps)
{
    if (Py_TYPE(base) != leaf_type || leaf_views_off < 0 || view_recipes == NULL
        || ndarray_type == NULL || data_offset < 0)
        return NULL;
    PyObject *buffer = SLOT(base, node_off[S_BUFFER]), *st = SLOT(base, node_off[S_STRUCT]);
    if (buffer == NULL || Py_TYPE(buffer) != ndarray_type || st == NULL)
        return NULL;
    int q = quiet();
    if (q <= 0)
        return NULL;   /* (an error, or a trace: Python's) */
    buffer = SLOT(base, node_off[S_BUFFER]);   /* (re-read: quiet() may run Python code) */
    if (buffer == NULL || Py_TYPE(buffer) != ndarray_type)
        return NULL;
    Py_INCREF(buffer);   /* (held: what follows may run Python code) */
    PyObject *known = SLOT(base, leaf_views_off);
    if (known != NULL && known != Py_None) {
        PyObject *hit = PyDict_CheckExact(known) ? PyDict_GetItemWithError(known, steps) : NULL;
        if (hit != NULL && hit != Py_None) {
            Py_INCREF(hit);
            Py_DECREF(buffer);
            return hit;
        }
        if (!PyDict_CheckExact(known) || PyErr_Occurred()
            || PyDict_GET_SIZE(known) >= leaf_views_cap) {
            Py_DECREF(buffer);
            return NULL;   /* (an error, raised as Python's lookup raises it; a full table:
                              Python's, which empties it) */
        }
    }
    PyObject *key = PyTuple_Pack(2, SLOT(base, node_off[S_STRUCT]), steps);
    if (key == NULL) {
        Py_DECREF(buffer);
        return NULL;
    }
    PyObject *how = PyDict_GetItemWithError(view_recipes, key);   /* borrowed */
    Py_DECREF(key);
    if (how == NULL || !PyTuple_CheckExact(how) || PyTuple_GET_SIZE(how) != 3
        || !PyTuple_CheckExact(PyTuple_GET_ITEM(how, 0))
        || Py_TYPE(PyTuple_GET_ITEM(how, 1)) != leaf_type) {
        PyErr_Clear();
        Py_DECREF(buffer);
        return NULL;   /* a new layout: Python makes its recipe */
    }
    Py_INCREF(how);   /* (held: a step may run Python code, which may empty the table) */
    PyObject *ops = PyTuple_GET_ITEM(how, 0), *template = PyTuple_GET_ITEM(how, 1);
    PyObject *arr = buffer, *leaf = NULL;   /* (arr takes the reference held above) */
    for (Py_ssize_t i = 0; arr != NULL && i < PyTuple_GET_SIZE(ops); i++) {
        PyObject *op = PyTuple_GET_ITEM(ops, i);
        PyObject *next = NULL;
        if (!PyTuple_CheckExact(op) || PyTuple_GET_SIZE(op) != 2)
            PyErr_SetString(PyExc_TypeError, "qtrace: a view recipe's step is not (function, argument)");
        else if (PyTuple_GET_ITEM(op, 0) == getitem_fn)
            next = PyObject_GetItem(arr, PyTuple_GET_ITEM(op, 1));
        else
            next = PyObject_CallFunctionObjArgs(PyTuple_GET_ITEM(op, 0), arr, PyTuple_GET_ITEM(op, 1), NULL);
        Py_SETREF(arr, next);
    }
    if (arr == NULL)
        goto done;   /* (an error: raised as the Python function raises it) */
    /* _new_leaf_view's checks: a view, not a copy (NumPy gives a scalar for an element);
       aligned: the recipe's strides are multiples of the item size, so the data pointer
       alone decides, for NumPy's aligned flag too where the alignment is the item size */
    PyObject *dtype = SLOT(template, node_off[S_DTYPE]);
    PyObject *isz = dtype == NULL ? NULL : PyObject_GetAttrString(dtype, "itemsize");
    Py_ssize_t item = isz == NULL ? -1 : PyLong_AsSsize_t(isz);
    Py_XDECREF(isz);
    if (item <= 0) {
        PyErr_Clear();
        goto done;   /* (Python's) */
    }
    if (Py_TYPE(arr) != ndarray_type
        || (uintptr_t)*(char **)((char *)arr + data_offset) % (uintptr_t)item != 0) {
        leaf = Py_NewRef(Py_None);
        goto done;   /* (as the Python function answers: no leaf; not listed, as there) */
    }
    static const int copied[] = {S_PRIM, S_PARAMS, S_SHAPE, S_DTYPE, S_WEAK, S_DEVICE, S_STRUCT, S_SIG};
    leaf = leaf_from(template, copied, sizeof copied / sizeof copied[0], arr, "a view recipe's leaf");
    if (leaf == NULL)
        goto done;
    known = SLOT(base, leaf_views_off);   /* (re-read: Python code may have run) */
    if (known == NULL || known == Py_None) {
        known = PyDict_New();
        if (known == NULL) {
            Py_CLEAR(leaf);
            goto done;
        }
        set_slot(base, leaf_views_off, known);   /* (steals the new dict) */
    }
    if (!PyDict_CheckExact(known) || PyDict_SetItem(known, steps, leaf) < 0) {
        Py_CLEAR(leaf);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "qtrace: a leaf's table of views is not a dict");
    }
done:
    Py_XDECREF(arr);
    Py_DECREF(how);
    return leaf;
}

static PyObject *leaf_view(PyObject *base, PyObject *steps)
{
    Py_uhash_t h = mix(0, (Py_uhash_t)(uintptr_t)base);
    int cacheable = value_hash(steps, &h, 0);
    LEntry *e = &lcache[(h ^ (h >> 13)) & (LCACHE_SIZE - 1)];
    PyObject *buffer = SLOT(base, node_off[S_BUFFER]);
    if (cacheable && e->leaf_ref != NULL && e->hash == h && buffer != NULL && buffer != Py_None) {
        PyObject *b = weak_target(e->base_ref), *leaf = NULL;
        if (b == base && same_value(e->steps, steps))
            leaf = weak_target(e->leaf_ref);
        Py_XDECREF(b);
        if (leaf != NULL) {
            int q = quiet();
            if (q > 0)
                return leaf;
            Py_DECREF(leaf);
            if (q < 0)
                return NULL;
        }
    }
    PyObject *leaf = leaf_view_known(base, steps);
    if (leaf == NULL && !PyErr_Occurred())
        leaf = PyObject_CallFunctionObjArgs(leaf_view_fn, base, steps, NULL);
    if (leaf == NULL || leaf == Py_None || !cacheable)
        return leaf;
    PyObject *br = PyWeakref_NewRef(base, NULL), *lr = PyWeakref_NewRef(leaf, NULL);
    if (br == NULL || lr == NULL) {   /* (not remembered: still the right answer) */
        Py_XDECREF(br);
        Py_XDECREF(lr);
        PyErr_Clear();
        return leaf;
    }
    lentry_clear(e);
    e->base_ref = acyclic(br);
    e->leaf_ref = acyclic(lr);
    Py_INCREF(steps);
    e->steps = steps;
    e->hash = h;
    return leaf;
}

/* views._storage for a tensor with no storage yet (the first slice of a value): a storage
   of its own, listing it (Storage.__init__), as its view with no steps. New reference to
   the view tuple (storage, ()). */
static PyObject *own_storage(PyObject *t)
{
    /* (everything is allocated first: an allocation may run code, which may give t a
       storage or a new value; from reading them to storing, nothing runs) */
    PyObject *st = storage_type->tp_alloc(storage_type, 0);
    PyObject *w = st == NULL ? NULL : acyclic(PyWeakref_NewRef(t, NULL));
    PyObject *views = w == NULL ? NULL : PyList_New(1);
    PyObject *prune = views == NULL ? NULL : PyLong_FromLong(16);
    PyObject *view = prune == NULL ? NULL : PyTuple_Pack(2, st, empty_tuple);
    PyObject *node = SLOT(t, t_node), *had = SLOT(t, t_view);
    if (view == NULL || node == NULL || (had != NULL && had != Py_None)) {
        Py_XDECREF(st); Py_XDECREF(w); Py_XDECREF(views); Py_XDECREF(prune); Py_XDECREF(view);
        if (view == NULL)
            return NULL;
        if (had != NULL && had != Py_None) {   /* given one meanwhile */
            Py_INCREF(had);
            return had;
        }
        return PyObject_CallOneArg(storage_fn, t);
    }
    PyList_SET_ITEM(views, 0, w);   /* (steals w) */
    Py_INCREF(node);
    set_slot(st, g_node, node);
    set_slot(st, g_views, views);
    set_slot(st, g_prune_at, prune);
    Py_INCREF(Py_None);
    set_slot(st, g_noted, Py_None);
    Py_DECREF(st);   /* (the view holds it) */
    Py_INCREF(view);
    set_slot(t, t_view, view);
    return view;
}

static PyObject *derive(PyObject *base, PyObject *steps);

/* How new_view makes a view's node from its base tensor's node: the slice of a basic key
   (then a reshape to `tout` when that is not NULL), or views.derive of `chain`. */
typedef struct {
    const Py_ssize_t *starts, *steps, *counts;
    Py_ssize_t nd;
    PyObject *tcounts, *tout;   /* (borrowed) */
    PyObject *chain;            /* not NULL: derive this chain instead (borrowed) */
} ViewHow;

/* The node of view `how` of `node` (new reference), or NULL: an error, or (none set) a
   layout the Python code takes. */
static PyObject *view_node(PyObject *node, const ViewHow *how)
{
    if (how->chain != NULL)
        return derive(node, how->chain);
    Py_ssize_t starts[MAX_DIMS], steps[MAX_DIMS];
    memcpy(starts, how->starts, sizeof(Py_ssize_t) * how->nd);
    memcpy(steps, how->steps, sizeof(Py_ssize_t) * how->nd);
    PyObject *vnode = slice_node(node, starts, steps, how->tcounts, how->counts, how->nd);
    if (vnode == NULL || how->tout == NULL)
        return vnode;
    PyObject *r = reshape_node(vnode, how->tout);
    Py_DECREF(vnode);
    return r;
}

/* views.view_chain: a new tensor viewing tensor `t` through the view steps `chain` (a
   tuple), its node made as `how` says, registered with t's storage (new reference); NULL
   with an error, or with none where the Python code takes it. */
static PyObject *new_view(PyObject *t, PyObject *chain, const ViewHow *how)
{
    PyObject *view = NULL, *vnode = NULL, *res = NULL, *all_steps = NULL, *view_tuple = NULL;
    int locked = 0, note_storage = 0;
    view = SLOT(t, t_view);   /* (storage, steps), made by views._storage if missing */
    if (view != NULL && view != Py_None)
        Py_INCREF(view);
    else
        view = own_storage(t);
    if (view == NULL)
        goto done;
    if (!PyTuple_Check(view) || PyTuple_GET_SIZE(view) != 2
        || Py_TYPE(PyTuple_GET_ITEM(view, 0)) != storage_type) {
        PyErr_SetString(PyExc_TypeError, "qtrace: a tensor's view is not (Storage, steps)");
        goto done;
    }
    PyObject *st = PyTuple_GET_ITEM(view, 0);
    /* from reading t's value to listing the view, under the views lock: a write by another
       thread in between would re-derive the storage's views without this one, which would
       keep the old value (and write it back through a later write of its own) */
    if (views_take() < 0)
        goto done;
    locked = 1;
    PyObject *node = SLOT(t, t_node);   /* (re-read: _storage ran Python code) */
    Py_INCREF(node);
    vnode = view_node(node, how);
    Py_DECREF(node);
    if (vnode == NULL)
        goto done;   /* an error, or (none set) a layout for Python */
    all_steps = shared_concat(PyTuple_GET_ITEM(view, 1), chain);
    if (all_steps == NULL)
        goto done;
    PyObject *base = SLOT(st, g_node);
    if (base != NULL && prim_is(base, str_input)) {
        /* a view of evaluated memory: no pending work to note */
        Py_INCREF(base);   /* (held: leaf_view may run Python code) */
        PyObject *leaf = leaf_view(base, all_steps);
        Py_DECREF(base);
        if (leaf == NULL)
            goto done;
        res = tensor_type->tp_alloc(tensor_type, 0);
        if (res == NULL) {
            Py_DECREF(leaf);
            goto done;
        }
        PyObject_GC_UnTrack(res);   /* (as in new_tensor) */
        if (leaf == Py_None) {
            Py_DECREF(leaf);
            Py_INCREF(vnode);
            leaf = vnode;
        }
        set_slot(res, t_node, leaf);
        Py_INCREF(Py_None);
        set_slot(res, t_view, Py_None);
    } else {
        /* a view of a pending base: its storage is the pending work (what an evaluation
           computes for the view too), listed once (views.view_chain) */
        res = tensor_type->tp_alloc(tensor_type, 0);
        if (res == NULL)
            goto done;
        PyObject_GC_UnTrack(res);   /* (as in new_tensor) */
        Py_INCREF(vnode);
        set_slot(res, t_node, vnode);
        Py_INCREF(Py_None);
        set_slot(res, t_view, Py_None);
        note_storage = 1;   /* (after the lock: a note may evaluate) */
    }
    view_tuple = acyclic(PyTuple_Pack(2, st, all_steps));   /* the storage holds views weakly */
    if (view_tuple == NULL) {
        Py_CLEAR(res);
        goto done;
    }
    Py_INCREF(view_tuple);
    set_slot(res, t_view, view_tuple);   /* before it is listed: set_base reads it */
    if (storage_add(st, res) < 0)
        Py_CLEAR(res);
    locked = 0;
    if (views_give_keeping(res == NULL ? -1 : 0) < 0 || (note_storage && note_owner(st) < 0))
        Py_CLEAR(res);
done:
    if (locked && views_give_keeping(PyErr_Occurred() ? -1 : 0) < 0)
        Py_CLEAR(res);
    Py_XDECREF(view); Py_XDECREF(vnode); Py_XDECREF(all_steps); Py_XDECREF(view_tuple);
    return res;
}

/* Whether a basic key's result shape `out` (nout axes) is not its region `counts` (nd
   axes): integers dropped axes, or None added some (the view then ends with a reshape). */
static int reshaped(const Py_ssize_t *counts, Py_ssize_t nd, const Py_ssize_t *out, Py_ssize_t nout)
{
    if (nout != nd)
        return 1;
    for (Py_ssize_t k = 0; k < nd; k++)
        if (out[k] != counts[k])
            return 1;
    return 0;
}

static PyObject *getitem_fast(PyObject *t, PyObject *key)
{
    if (Py_TYPE(t) != tensor_type || storage_type == NULL)
        return NULL;
    PyObject *node = SLOT(t, t_node);
    if (node == NULL)
        return NULL;
    PyObject *shape = SLOT(node, node_off[S_SHAPE]);
    Py_ssize_t nd = PyTuple_GET_SIZE(shape);
    Py_ssize_t starts[MAX_DIMS], steps[MAX_DIMS], counts[MAX_DIMS], out[MAX_DIMS];
    Py_ssize_t nout;
    int sliced, moved;
    PyObject *tcounts, *tstarts, *tsteps, *tout;
    Py_INCREF(shape);   /* (held: parse_cached allocates, which may run code rebinding t's node) */
    KEntry *ke = parse_cached(shape, key);
    if (ke != NULL) {
        Py_DECREF(shape);   /* (the entry holds it) */
        sliced = ke->sliced;
        moved = ke->moved;
        memcpy(starts, ke->starts, sizeof(Py_ssize_t) * nd);
        memcpy(steps, ke->steps, sizeof(Py_ssize_t) * nd);
        memcpy(counts, ke->counts, sizeof(Py_ssize_t) * nd);
        nout = ke->nout;
        memcpy(out, ke->out, sizeof(Py_ssize_t) * nout);
        Py_INCREF(ke->tcounts); tcounts = ke->tcounts;
        Py_INCREF(ke->tstarts); tstarts = ke->tstarts;
        Py_INCREF(ke->tsteps); tsteps = ke->tsteps;
        Py_INCREF(ke->tout); tout = ke->tout;
    } else {
        int basic = parse_basic(shape, key, starts, steps, counts, out, &nout, &sliced, &moved);
        Py_DECREF(shape);
        if (!basic)
            return NULL;   /* another key: Python's */
        tcounts = int_tuple(counts, nd);
        tstarts = int_tuple(starts, nd);
        tsteps = int_tuple(steps, nd);
        tout = int_tuple(out, nout);
    }
    PyObject *chain = NULL, *res = NULL;
    if (!sliced)   /* integers only: an element (a copy in NumPy), Python's */
        goto done;
    if (tcounts == NULL || tstarts == NULL || tsteps == NULL || tout == NULL)
        goto done;
    int reshape = reshaped(counts, nd, out, nout);
    {
        /* views.view_chain's steps (indexing._basic_steps): the slice, unless the key takes
           the whole array, then a reshape where the result's axes are not the region's */
        PyObject *parts[2] = {NULL, NULL};
        int n = 0;
        if (moved && (parts[n] = shared_tuple((PyObject *[]){str_slice, tstarts, tsteps, tcounts}, 4)))
            n++;
        if (n == moved && reshape && (parts[n] = shared_tuple((PyObject *[]){str_reshape, tout}, 2)))
            n++;
        if (n == moved + reshape)
            chain = shared_tuple(parts, n);
        for (int i = 0; i < n; i++)
            Py_DECREF(parts[i]);
        if (chain == NULL)
            goto done;
    }
    if (moved) {
        ViewHow how = {starts, steps, counts, nd, tcounts, reshape ? tout : NULL, NULL};
        res = new_view(t, chain, &how);
    } else {
        ViewHow how = {NULL, NULL, NULL, 0, NULL, NULL, chain};
        res = new_view(t, chain, &how);
    }
done:
    Py_XDECREF(tcounts); Py_XDECREF(tstarts); Py_XDECREF(tsteps); Py_XDECREF(tout);
    Py_XDECREF(chain);
    return res;
}

/* views.view_chain(t, chain) in C (what views.view_chain is bound to): the Python
   definition where this code does not follow. */
static PyObject *view_chain_py(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2)
        return PyErr_Format(PyExc_TypeError, "view_chain(t, chain) takes 2 arguments");
    PyObject *t = args[0], *chain = args[1];
    if (Py_TYPE(t) == tensor_type && storage_type != NULL && PyTuple_CheckExact(chain)
        && SLOT(t, t_node) != NULL) {
        ViewHow how = {NULL, NULL, NULL, 0, NULL, NULL, chain};
        PyObject *res = new_view(t, chain, &how);
        if (res != NULL || PyErr_Occurred())
            return res;
    }
    if (view_chain_fn == NULL)
        return PyErr_Format(PyExc_RuntimeError, "qtrace.graph._native: bind_views was not called");
    return PyObject_Vectorcall(view_chain_fn, args, 2, NULL);
}


/* -- slice assignment: x[1:-1, 1:-1] = v, x[:, -1] = x[:, -2] -----------------------------
 *
 * qtrace.tracer.indexing.setitem for the keys getitem_fast takes (integer-only keys too),
 * with views.update_node, assign, set_base and derive: the write becomes a slice_update of
 * the base and every live view of the storage derives its value again. Values other than
 * a tensor of the region's shape, dtype and device are converted by the Python code
 * (indexing.assigned_values, which also raises NumPy's errors); view steps other than
 * slices and reshapes are applied by views.apply_step / views.undo_step.
 */

/* The value nodes of Python numbers assigned (`p[-1, :] = 0`): what
   indexing.assigned_values answered for the same number object, destination dtype, device
   and region shape (a broadcast constant; that function keeps the same table by value).
   By identity: a loop assigns the same literal, from its code's constants, every pass.
   Entries hold their key objects, so identities are not reused while listed. */
#define ANCACHE_SIZE 256
typedef struct {
    PyObject *value, *dtype, *device, *shape, *node;
} ANEntry;
static ANEntry ancache[ANCACHE_SIZE];

static inline ANEntry *assigned_entry(PyObject *value, PyObject *dtype, PyObject *device,
                                      PyObject *shape)
{
    Py_uhash_t h = mix(mix(mix(mix(0, (Py_uhash_t)(uintptr_t)value), (Py_uhash_t)(uintptr_t)dtype),
                           (Py_uhash_t)(uintptr_t)device), (Py_uhash_t)(uintptr_t)shape);
    return &ancache[(h ^ (h >> 9)) & (ANCACHE_SIZE - 1)];
}

static PyObject *assigned_number(PyObject *value, PyObject *dtype, PyObject *device, PyObject *shape)
{
    ANEntry *e = assigned_entry(value, dtype, device, shape);
    if (e->node == NULL || e->value != value || e->dtype != dtype || e->device != device
        || e->shape != shape)
        return NULL;
    Py_INCREF(e->node);
    return e->node;
}

/* Entry `e` holds `now` (references taken by the caller); what it held is released last
   (releasing may run code). */
static void anentry_set(ANEntry *e, ANEntry now)
{
    ANEntry gone = *e;
    *e = now;
    Py_XDECREF(gone.value); Py_XDECREF(gone.dtype); Py_XDECREF(gone.device);
    Py_XDECREF(gone.shape); Py_XDECREF(gone.node);
}

static void forget_assigned_numbers(void)   /* (their function is bound anew) */
{
    for (int i = 0; i < ANCACHE_SIZE; i++)
        anentry_set(&ancache[i], (ANEntry){NULL, NULL, NULL, NULL, NULL});
}

static void remember_assigned_number(PyObject *value, PyObject *dtype, PyObject *device,
                                     PyObject *shape, PyObject *node)
{
    ANEntry *e = assigned_entry(value, dtype, device, shape);
    PyObject *keep[5] = {value, dtype, device, shape, node};
    for (int k = 0; k < 5; k++)
        Py_XINCREF(keep[k]);
    anentry_set(e, (ANEntry){value, dtype, device, shape, node});
}

static PyObject *assigned_values_fn, *apply_step_fn, *undo_step_fn;
static PyObject *assign_fn;          /* views.assign (Python) */
static PyObject *apply1_fn;          /* elementwise.apply1 (Python) */
static PyObject *str_broadcast, *str_setitem_op;

static PyObject *bind_assign(PyObject *self, PyObject *args)
{
    PyObject *av, *ap, *un, *as, *a1;
    if (!PyArg_ParseTuple(args, "OOOOO:bind_assign", &av, &ap, &un, &as, &a1))
        return NULL;
    Py_INCREF(as); Py_XSETREF(assign_fn, as);
    Py_INCREF(a1); Py_XSETREF(apply1_fn, a1);
    Py_INCREF(av); Py_XSETREF(assigned_values_fn, av);
    Py_INCREF(ap); Py_XSETREF(apply_step_fn, ap);
    Py_INCREF(un); Py_XSETREF(undo_step_fn, un);
    forget_assigned_numbers();
    Py_RETURN_NONE;
}

static int is_step(PyObject *step, PyObject *kind, Py_ssize_t size)
{
    return PyTuple_Check(step) && PyTuple_GET_SIZE(step) == size
        && PyTuple_GET_ITEM(step, 0) == kind;
}

/* views.update_node (new reference): `parent` with the region (starts, steps) replaced. */
static PyObject *update_node(PyObject *parent, PyObject *new, PyObject *tstarts, PyObject *tsteps)
{
    PyObject *nshape = SLOT(new, node_off[S_SHAPE]), *pshape = SLOT(parent, node_off[S_SHAPE]);
    Py_ssize_t nd = PyTuple_GET_SIZE(nshape), v[MAX_DIMS], w[MAX_DIMS];
    if (nd > MAX_DIMS || !read_ints(tstarts, v, nd) || !read_ints(tsteps, w, nd))
        return NULL;
    int all = whole(v, w, nd, nshape, pshape);
    if (all < 0)
        return NULL;
    if (all) {
        Py_INCREF(new);
        return new;
    }
    for (Py_ssize_t k = 0; k < nd; k++) {
        PyObject *d = PyTuple_GET_ITEM(nshape, k);
        int zero = PyObject_RichCompareBool(d, zero_long, Py_EQ);   /* as Python's `0 in shape` */
        if (zero < 0) {
            PyErr_Clear();
            return NULL;
        }
        if (zero) {   /* an empty region: no write */
            Py_INCREF(parent);
            return parent;
        }
    }
    PyObject *params = shared_tuple((PyObject *[]){tstarts, tsteps}, 2);
    if (params == NULL)
        return NULL;
    if (prim_is(parent, str_slice_update)) {   /* the same region written again */
        PyObject *pp = SLOT(parent, node_off[S_PARAMS]);
        PyObject *region = PyTuple_GET_ITEM(SLOT(parent, node_off[S_INPUTS]), 1);
        int same = PyObject_RichCompareBool(pp, params, Py_EQ);
        if (same > 0)
            same = PyObject_RichCompareBool(SLOT(region, node_off[S_SHAPE]), nshape, Py_EQ);
        if (same < 0) {
            Py_DECREF(params);
            return NULL;
        }
        if (same)
            parent = PyTuple_GET_ITEM(SLOT(parent, node_off[S_INPUTS]), 0);
    }
    PyObject *inputs = PyTuple_Pack(2, parent, new), *node = NULL;
    if (inputs != NULL) {
        PyObject *margs[7] = {str_slice_update, params, SLOT(parent, node_off[S_SHAPE]),
                              SLOT(parent, node_off[S_DTYPE]), inputs,
                              SLOT(parent, node_off[S_DEVICE]), SLOT(parent, node_off[S_WEAK])};
        node = make_node(NULL, margs, 7);
        Py_DECREF(inputs);
    }
    Py_DECREF(params);
    return node;
}

/* views.apply_step (new reference). */
static PyObject *apply_step(PyObject *n, PyObject *step)
{
    if (is_step(step, str_slice, 4)) {
        PyObject *shape = PyTuple_GET_ITEM(step, 3);
        Py_ssize_t nd = PyTuple_Check(shape) ? PyTuple_GET_SIZE(shape) : -1;
        Py_ssize_t a[MAX_DIMS], b[MAX_DIMS], c[MAX_DIMS];
        if (nd >= 0 && nd <= MAX_DIMS && read_ints(PyTuple_GET_ITEM(step, 1), a, nd)
            && read_ints(PyTuple_GET_ITEM(step, 2), b, nd) && read_ints(shape, c, nd)) {
            PyObject *r = slice_node(n, a, b, shape, c, nd);
            if (r != NULL || PyErr_Occurred())
                return r;
        }
    } else if (is_step(step, str_reshape, 2)) {
        return reshape_node(n, PyTuple_GET_ITEM(step, 1));
    } else if (is_step(step, str_transpose, 2)) {
        PyObject *r = transpose_node(n, PyTuple_GET_ITEM(step, 1));
        if (r != NULL || PyErr_Occurred())
            return r;
    }
    return PyObject_CallFunctionObjArgs(apply_step_fn, n, step, NULL);
}

/* views.undo_step (new reference): `parent` after its view `step` was overwritten. */
static PyObject *undo_step(PyObject *parent, PyObject *step, PyObject *new)
{
    if (is_step(step, str_slice, 4)) {
        PyObject *r = update_node(parent, new, PyTuple_GET_ITEM(step, 1), PyTuple_GET_ITEM(step, 2));
        if (r != NULL || PyErr_Occurred())
            return r;
    } else if (is_step(step, str_reshape, 2)) {
        return reshape_node(new, SLOT(parent, node_off[S_SHAPE]));
    }
    return PyObject_CallFunctionObjArgs(undo_step_fn, parent, step, new, NULL);
}

/* views.derive (new reference). */
static PyObject *derive(PyObject *base, PyObject *steps)
{
    Py_INCREF(base);
    PyObject *n = base;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(steps) && n != NULL; i++) {
        PyObject *next = apply_step(n, PyTuple_GET_ITEM(steps, i));
        Py_DECREF(n);
        n = next;
    }
    return n;
}

/* views.written_region: the strided region (starts, steps, counts: nd values each) outside
   which `new` equals `old`; 0 where there is none known (or nd is beyond MAX_DIMS). */
static int written_region(PyObject *old, PyObject *new, Py_ssize_t *region, Py_ssize_t *nd)
{
    if (old == NULL || Py_TYPE(new) != node_type || !prim_is(new, str_slice_update))
        return 0;
    PyObject *inputs = SLOT(new, node_off[S_INPUTS]), *params = SLOT(new, node_off[S_PARAMS]);
    if (!PyTuple_Check(inputs) || PyTuple_GET_SIZE(inputs) != 2 || !PyTuple_Check(params)
        || PyTuple_GET_SIZE(params) != 2)
        return 0;
    PyObject *parent = PyTuple_GET_ITEM(inputs, 0);
    if (parent != old) {   /* (or the same region of old's parent written again: same start,
                              steps and shape — a smaller one undoes the rest of old's) */
        if (Py_TYPE(old) != node_type || !prim_is(old, str_slice_update))
            return 0;
        PyObject *oi = SLOT(old, node_off[S_INPUTS]), *op = SLOT(old, node_off[S_PARAMS]);
        if (!PyTuple_Check(oi) || PyTuple_GET_SIZE(oi) != 2 || PyTuple_GET_ITEM(oi, 0) != parent)
            return 0;
        int eq = PyObject_RichCompareBool(op, params, Py_EQ);
        if (eq > 0)
            eq = PyObject_RichCompareBool(SLOT(PyTuple_GET_ITEM(oi, 1), node_off[S_SHAPE]),
                                          SLOT(PyTuple_GET_ITEM(inputs, 1), node_off[S_SHAPE]),
                                          Py_EQ);
        if (eq <= 0) {
            PyErr_Clear();
            return 0;
        }
    }
    PyObject *shape = SLOT(PyTuple_GET_ITEM(inputs, 1), node_off[S_SHAPE]);
    Py_ssize_t n = PyTuple_Check(shape) ? PyTuple_GET_SIZE(shape) : -1;
    if (n < 0 || n > MAX_DIMS || !read_ints(PyTuple_GET_ITEM(params, 0), region, n)
        || !read_ints(PyTuple_GET_ITEM(params, 1), region + MAX_DIMS, n)
        || !read_ints(shape, region + 2 * MAX_DIMS, n))
        return 0;
    *nd = n;
    return 1;
}

/* views.outside: whether the view `steps` lies outside the region (written_region's). */
static int outside(PyObject *steps, const Py_ssize_t *region, Py_ssize_t nd)
{
    if (!PyTuple_Check(steps) || PyTuple_GET_SIZE(steps) == 0)
        return 0;
    PyObject *step = PyTuple_GET_ITEM(steps, 0);
    Py_ssize_t v[3 * MAX_DIMS];
    if (!PyTuple_Check(step) || PyTuple_GET_SIZE(step) != 4
        || !same_str(PyTuple_GET_ITEM(step, 0), str_slice)
        || !read_ints(PyTuple_GET_ITEM(step, 1), v, nd)
        || !read_ints(PyTuple_GET_ITEM(step, 2), v + MAX_DIMS, nd)
        || !read_ints(PyTuple_GET_ITEM(step, 3), v + 2 * MAX_DIMS, nd))
        return 0;
    for (Py_ssize_t k = 0; k < nd; k++) {
        Py_ssize_t c = v[2 * MAX_DIMS + k], m = region[2 * MAX_DIMS + k];
        if (c == 0 || m == 0)
            return 1;
        Py_ssize_t a = v[k], b = a + (c - 1) * v[MAX_DIMS + k];
        Py_ssize_t r0 = region[k], r1 = r0 + (m - 1) * region[MAX_DIMS + k];
        Py_ssize_t lo = a < b ? a : b, hi = a < b ? b : a;
        Py_ssize_t rlo = r0 < r1 ? r0 : r1, rhi = r0 < r1 ? r1 : r0;
        if (hi < rlo || rhi < lo)
            return 1;
    }
    return 0;
}

/* views.set_base: storage `st` holds `base` (stolen); every live view derives again, but
   those outside the region the write changed (their elements did not change). */
static int set_base(PyObject *st, PyObject *base)
{
    if (views_take() < 0) {   /* (st.node too is set under the lock) */
        Py_DECREF(base);        /* (the reference this function takes) */
        return -1;
    }
    Py_ssize_t region[3 * MAX_DIMS], nd = 0;
    int regional = written_region(SLOT(st, g_node), base, region, &nd);
    Py_INCREF(base);   /* held to the end: derive may run Python code (rebinding st.node) */
    set_slot(st, g_node, base);
    int rc = 0;
    /* the live views are listed anew only where some died (the list otherwise stays) */
    PyObject *views = SLOT(st, g_views), *live = NULL;
    if (views == NULL || !PyList_Check(views)) {
        PyErr_SetString(PyExc_TypeError, "qtrace: a storage without its list of views");
        rc = -1;
    }
    Py_XINCREF(views);
    for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(views); i++) {
        PyObject *ref = PyList_GET_ITEM(views, i);
        PyObject *t = PyWeakref_Check(ref) ? weak_target(ref) : NULL;   /* (new reference) */
        if (t == NULL) {
            if (live == NULL) {
                live = PyList_GetSlice(views, 0, i);
                if (live == NULL)
                    rc = -1;
            }
            continue;
        }
        Py_INCREF(ref);
        PyObject *v = SLOT(t, t_view);
        Py_XINCREF(v);
        int view = v != NULL && PyTuple_Check(v) && PyTuple_GET_SIZE(v) == 2
                   && PyTuple_Check(PyTuple_GET_ITEM(v, 1));
        if (view && regional && outside(PyTuple_GET_ITEM(v, 1), region, nd)) {
            if (live != NULL)   /* (its node stays: its elements are not written) */
                rc = PyList_Append(live, ref);
            Py_DECREF(v);
            Py_DECREF(t);
            Py_DECREF(ref);
            continue;
        }
        PyObject *d = view ? derive(base, PyTuple_GET_ITEM(v, 1)) : NULL;
        if (d == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "qtrace: a view without its steps");
            rc = -1;
        } else {
            set_slot(t, t_node, d);
            if (live != NULL)
                rc = PyList_Append(live, ref);
        }
        Py_XDECREF(v);
        Py_DECREF(t);
        Py_DECREF(ref);
    }
    Py_DECREF(base);
    Py_XDECREF(views);
    if (rc == 0 && live != NULL) {
        PyObject *prune = PyLong_FromSsize_t(2 * PyList_GET_SIZE(live) + 16);
        if (prune == NULL) {
            rc = -1;
        } else {
            Py_INCREF(live);
            set_slot(st, g_views, live);
            set_slot(st, g_prune_at, prune);
        }
    }
    Py_XDECREF(live);
    return views_give_keeping(rc);
}

/* views._write: `new` (borrowed) becomes the value of `t` and of all that shares its
   memory. The caller holds the views lock (from reading the value the write was computed
   from, to here: a write computed from a value that another thread replaced meanwhile
   would undo that thread's write). Returns the owner to note (new reference: t, or its
   storage), NULL on error. */
static PyObject *write_value(PyObject *t, PyObject *new)
{
    PyObject *v = SLOT(t, t_view);
    if (v == NULL || v == Py_None) {
        Py_INCREF(new);
        set_slot(t, t_node, new);
        Py_INCREF(t);
        return t;
    }
    PyObject *st = PyTuple_GET_ITEM(v, 0), *steps = PyTuple_GET_ITEM(v, 1), *owner = NULL;
    Py_INCREF(v);   /* held: derive runs Python code, which may rebind t._view */
    Py_ssize_t n = PyTuple_GET_SIZE(steps);
    PyObject **parents = PyMem_Calloc(n > 0 ? n : 1, sizeof(PyObject *));
    if (parents == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    if (n > 0) {
        parents[0] = SLOT(st, g_node);
        Py_INCREF(parents[0]);
    }
    for (Py_ssize_t i = 0; i + 1 < n; i++)
        if ((parents[i + 1] = apply_step(parents[i], PyTuple_GET_ITEM(steps, i))) == NULL)
            goto out;
    Py_INCREF(new);
    PyObject *cur = new;
    for (Py_ssize_t i = n - 1; i >= 0 && cur != NULL; i--) {
        PyObject *up = undo_step(parents[i], PyTuple_GET_ITEM(steps, i), cur);
        Py_DECREF(cur);
        cur = up;
    }
    if (cur == NULL)
        goto out;
    int rc = set_base(st, cur);   /* (takes the reference to cur) */
    if (rc == 0) {
        Py_INCREF(st);
        owner = st;
    }
out:
    if (parents != NULL) {
        for (Py_ssize_t i = 0; i < n; i++)
            Py_XDECREF(parents[i]);
        PyMem_Free(parents);
    }
    Py_DECREF(v);
    return owner;
}

/* The owner's new value is pending work: noted (outside the lock: a note may evaluate). */
static int note_written(PyObject *owner)
{
    if (owner == NULL)
        return -1;
    int rc = note_owner(owner);
    Py_DECREF(owner);
    return rc;
}

/* views.assign: `new` (borrowed) becomes the value of `t` and of all that shares its memory. */
static int assign(PyObject *t, PyObject *new)
{
    if (views_take() < 0)
        return -1;
    PyObject *owner = write_value(t, new);
    if (views_give_keeping(owner == NULL ? -1 : 0) < 0) {
        Py_XDECREF(owner);
        return -1;
    }
    return note_written(owner);
}

/* setitem_fast with x's value `node` held (Python code runs below: converting the value,
   and any allocation may collect garbage; another thread may replace x's value meanwhile). */
static int setitem_at(PyObject *x, PyObject *node, PyObject *key, PyObject *value)
{
    PyObject *v = SLOT(x, t_view);
    if (v == NULL)
        return 0;
    if (v != Py_None) {   /* read-only views (broadcasts) raise in Python */
        if (!PyTuple_Check(v) || PyTuple_GET_SIZE(v) != 2 || !PyTuple_Check(PyTuple_GET_ITEM(v, 1))
            || Py_TYPE(PyTuple_GET_ITEM(v, 0)) != storage_type)
            return 0;
        PyObject *steps = PyTuple_GET_ITEM(v, 1);
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(steps); i++) {
            PyObject *step = PyTuple_GET_ITEM(steps, i);
            if (!PyTuple_Check(step) || PyTuple_GET_SIZE(step) < 1
                || !PyUnicode_Check(PyTuple_GET_ITEM(step, 0))
                || same_str(PyTuple_GET_ITEM(step, 0), str_broadcast))
                return 0;
        }
    }
    PyObject *shape = SLOT(node, node_off[S_SHAPE]);
    Py_ssize_t nd = PyTuple_GET_SIZE(shape);
    PyObject *tcounts, *tstarts, *tsteps, *tout;
    Py_INCREF(shape);   /* (held: parse_cached allocates, which may run code) */
    KEntry *ke = parse_cached(shape, key);
    if (ke != NULL) {
        Py_DECREF(shape);   /* (the entry holds it) */
        Py_INCREF(ke->tcounts); tcounts = ke->tcounts;
        Py_INCREF(ke->tstarts); tstarts = ke->tstarts;
        Py_INCREF(ke->tsteps); tsteps = ke->tsteps;
        Py_INCREF(ke->tout); tout = ke->tout;
    } else {
        Py_ssize_t starts[MAX_DIMS], steps[MAX_DIMS], counts[MAX_DIMS], out[MAX_DIMS], nout;
        int sliced, moved;
        int basic = parse_basic(shape, key, starts, steps, counts, out, &nout, &sliced, &moved);
        Py_DECREF(shape);
        if (!basic)
            return 0;
        tcounts = int_tuple(counts, nd);
        tstarts = int_tuple(starts, nd);
        tsteps = int_tuple(steps, nd);
        tout = int_tuple(out, nout);
    }
    int rc = -1;
    PyObject *src = NULL, *region = NULL, *new = NULL;
    if (tcounts == NULL || tstarts == NULL || tsteps == NULL || tout == NULL)
        goto done;
    PyObject *vn = Py_TYPE(value) == tensor_type ? SLOT(value, t_node) : NULL;
    if (vn != NULL && SLOT(vn, node_off[S_DTYPE]) == SLOT(node, node_off[S_DTYPE])
        && SLOT(vn, node_off[S_WEAK]) == Py_False
        && SLOT(vn, node_off[S_DEVICE]) == SLOT(node, node_off[S_DEVICE])) {
        int eq = PyObject_RichCompareBool(SLOT(vn, node_off[S_SHAPE]), tout, Py_EQ);
        if (eq < 0)
            goto done;
        if (eq) {
            Py_INCREF(vn);
            src = vn;
        }
    }
    int number = src == NULL && (PyFloat_CheckExact(value) || PyLong_CheckExact(value)
                                 || PyBool_Check(value));
    if (number)
        src = assigned_number(value, SLOT(node, node_off[S_DTYPE]), SLOT(node, node_off[S_DEVICE]),
                              tout);
    if (src == NULL) {
        src = PyObject_CallFunctionObjArgs(assigned_values_fn, x, value, tout, str_setitem_op, NULL);
        if (src == NULL)
            goto done;
        if (number)
            remember_assigned_number(value, SLOT(node, node_off[S_DTYPE]),
                                     SLOT(node, node_off[S_DEVICE]), tout, src);
    }
    region = reshape_node(src, tcounts);
    if (region == NULL || views_take() < 0)
        goto done;
    /* the region is written into the value x has under the lock (re-read: Python code may
       have run, and another thread may have written meanwhile) */
    PyObject *owner = NULL, *parent = SLOT(x, t_node);
    Py_INCREF(parent);   /* (held: an allocation below may run code that replaces it) */
    new = update_node(parent, region, tstarts, tsteps);
    Py_DECREF(parent);
    if (new == NULL && !PyErr_Occurred())
        PyErr_SetString(PyExc_TypeError, "qtrace: a slice assignment's region is malformed");
    if (new != NULL)
        owner = write_value(x, new);
    if (views_give_keeping(owner == NULL ? -1 : 0) < 0) {
        Py_XDECREF(owner);
        goto done;
    }
    rc = note_written(owner) < 0 ? -1 : 1;
done:
    Py_XDECREF(tcounts); Py_XDECREF(tstarts); Py_XDECREF(tsteps); Py_XDECREF(tout);
    Py_XDECREF(src); Py_XDECREF(region); Py_XDECREF(new);
    return rc;
}

/* x[key] = value: 1 done, 0 not taken (nothing changed: indexing.setitem takes it), -1 error. */
static int setitem_fast(PyObject *x, PyObject *key, PyObject *value)
{
    if (Py_TYPE(x) != tensor_type || storage_type == NULL || assigned_values_fn == NULL)
        return 0;
    PyObject *node = SLOT(x, t_node);
    if (node == NULL)
        return 0;
    Py_INCREF(node);
    int rc = setitem_at(x, node, key, value);
    Py_DECREF(node);
    return rc;
}

/* -- Tensor methods in C ----------------------------------------------------------------
 *
 * Method(kind, fallback, name=None, reflected=False): a callable that binds like a method
 * (so `x * y` and `x[k]` reach it through the class without a bound-method object), tries
 * the fast path of its kind and otherwise calls `fallback` with the same arguments.
 */
enum { K_BINARY, K_GETITEM, K_SETITEM, K_COPY };

/* elementwise.apply1's fast path: a unary op on a tensor already in its loop dtype. */

static PyObject *unary_fast(PyObject *name, PyObject *x)
{
    if (Py_TYPE(x) != tensor_type)
        return NULL;
    PyObject *nx = SLOT(x, t_node);
    if (nx == NULL || prim_is(nx, str_const))
        return NULL;
    PyObject *parts[3] = {name, SLOT(nx, node_off[S_DTYPE]), SLOT(nx, node_off[S_WEAK])};
    PyObject *recipe = recipe_of(parts, 3);   /* borrowed */
    if (recipe == NULL || !PyTuple_Check(recipe) || PyTuple_GET_SIZE(recipe) < 2)
        return NULL;
    PyObject *loop = PyTuple_GET_ITEM(recipe, 0), *weak = PyTuple_GET_ITEM(recipe, 1);
    if (!PyTuple_Check(loop) || PyTuple_GET_SIZE(loop) != 2
        || PyTuple_GET_ITEM(loop, 0) != SLOT(nx, node_off[S_DTYPE]))
        return NULL;
    PyObject *inputs = PyTuple_Pack(1, nx);
    if (inputs == NULL)
        return NULL;
    PyObject *margs[7] = {name, empty_tuple, SLOT(nx, node_off[S_SHAPE]), PyTuple_GET_ITEM(loop, 1),
                          inputs, SLOT(nx, node_off[S_DEVICE]), weak};
    PyObject *node = make_node(NULL, margs, 7);
    Py_DECREF(inputs);
    return node == NULL ? NULL : new_tensor(node);
}

static PyObject *apply1(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs == 2 && tensor_type != NULL && PyUnicode_Check(args[0])) {
        PyObject *r = unary_fast(args[0], args[1]);
        if (r != NULL || PyErr_Occurred())
            return r;
    }
    return PyObject_Vectorcall(apply1_fn, args, nargs, NULL);
}

static PyObject *apply2(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs == 3 && tensor_type != NULL && PyUnicode_Check(args[0])) {
        PyObject *r = binary_fast(args[0], args[1], args[2]);
        if (r != NULL || PyErr_Occurred())
            return r;
    }
    return PyObject_Vectorcall(apply2_fn, args, nargs, NULL);
}

/* views.assign: the C definition for a tensor whose view steps are all writable; anything
   else (broadcast views, which raise) is the Python one's. */

static PyObject *assign_entry(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs == 2 && tensor_type != NULL && storage_type != NULL && Py_TYPE(args[0]) == tensor_type
        && PyObject_TypeCheck(args[1], node_type)) {
        PyObject *v = SLOT(args[0], t_view);
        int ok = v == Py_None;
        if (v != NULL && v != Py_None && PyTuple_Check(v) && PyTuple_GET_SIZE(v) == 2
            && Py_TYPE(PyTuple_GET_ITEM(v, 0)) == storage_type && PyTuple_Check(PyTuple_GET_ITEM(v, 1))) {
            PyObject *steps = PyTuple_GET_ITEM(v, 1);
            ok = 1;
            for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(steps) && ok; i++) {
                PyObject *step = PyTuple_GET_ITEM(steps, i);
                ok = PyTuple_Check(step) && PyTuple_GET_SIZE(step) >= 1
                     && PyUnicode_Check(PyTuple_GET_ITEM(step, 0))
                     && !same_str(PyTuple_GET_ITEM(step, 0), str_broadcast);
            }
        }
        if (ok) {
            if (assign(args[0], args[1]) < 0)
                return NULL;
            Py_RETURN_NONE;
        }
    }
    return PyObject_Vectorcall(assign_fn, args, nargs, NULL);
}

typedef struct {
    PyObject_HEAD
    int kind;
    PyObject *name;       /* binary: the primitive, e.g. "multiply" */
    int reflected;        /* binary: __rmul__ and friends, the operands swap */
    PyObject *fallback;   /* the Python definition */
    vectorcallfunc vectorcall;
} Method;

static PyObject *method_call(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kw)
{
    Method *self = (Method *)op;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    int plain = (kw == NULL || PyTuple_GET_SIZE(kw) == 0) && tensor_type != NULL;
    if (plain && nargs == 2 && (self->kind == K_BINARY || self->kind == K_GETITEM)) {
        PyObject *r;
        if (self->kind == K_BINARY)
            r = binary_fast(self->name, args[self->reflected], args[1 - self->reflected]);
        else
            r = getitem_fast(args[0], args[1]);
        if (r != NULL || PyErr_Occurred())
            return r;
    } else if (plain && nargs == 1 && self->kind == K_COPY && Py_TYPE(args[0]) == tensor_type) {
        /* ndarray.copy: a new owner of the same (immutable) node, no view of anything */
        PyObject *node = SLOT(args[0], t_node);
        if (node != NULL) {
            Py_INCREF(node);
            return new_tensor(node);
        }
    } else if (plain && nargs == 3 && self->kind == K_SETITEM) {
        int r = setitem_fast(args[0], args[1], args[2]);
        if (r < 0)
            return NULL;
        if (r > 0)
            Py_RETURN_NONE;
    }
    return PyObject_Vectorcall(self->fallback, args, nargsf, kw);
}

static PyObject *method_get(PyObject *op, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None) {
        Py_INCREF(op);
        return op;
    }
    return PyMethod_New(op, obj);
}

static PyObject *method_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    const char *kind;
    PyObject *fallback, *name = Py_None;
    int reflected = 0;
    static char *kwlist[] = {"kind", "fallback", "name", "reflected", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sO|Op:Method", kwlist, &kind, &fallback, &name,
                                     &reflected))
        return NULL;
    int k;
    if (strcmp(kind, "binary") == 0)
        k = K_BINARY;
    else if (strcmp(kind, "getitem") == 0)
        k = K_GETITEM;
    else if (strcmp(kind, "setitem") == 0)
        k = K_SETITEM;
    else if (strcmp(kind, "copy") == 0)
        k = K_COPY;
    else {
        PyErr_Format(PyExc_ValueError, "Method: unknown kind %s", kind);
        return NULL;
    }
    if (k == K_BINARY && !PyUnicode_Check(name)) {
        PyErr_SetString(PyExc_TypeError, "Method: a binary operator needs its primitive's name");
        return NULL;
    }
    Method *self = (Method *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->kind = k;
    Py_INCREF(name);
    self->name = name;
    self->reflected = reflected;
    Py_INCREF(fallback);
    self->fallback = fallback;
    self->vectorcall = method_call;
    return (PyObject *)self;
}

static void method_dealloc(Method *self)
{
    Py_XDECREF(self->name);
    Py_XDECREF(self->fallback);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *method_repr(Method *self)
{
    return PyUnicode_FromFormat("<qtrace method %R (fast path in C), else %R>", self->name,
                                self->fallback);
}

static PyMemberDef method_members[] = {
    {"name", T_OBJECT_EX, offsetof(Method, name), READONLY, "the primitive (binary)"},
    {"reflected", T_INT, offsetof(Method, reflected), READONLY, "operands swapped (binary)"},
    {"fallback", T_OBJECT_EX, offsetof(Method, fallback), READONLY, "the Python definition"},
    {NULL},
};

static PyTypeObject MethodType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "qtrace.graph._native.Method",
    .tp_doc = "Method(kind, fallback, name=None, reflected=False): a qt.Tensor method with a "
              "fast path in C ('binary': an operator recording primitive `name`; 'getitem': "
              "basic indexing; 'setitem': basic slice assignment), else `fallback`; binds like a method.",
    .tp_basicsize = sizeof(Method),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_vectorcall_offset = offsetof(Method, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_descr_get = method_get,
    .tp_new = method_new,
    .tp_dealloc = (destructor)method_dealloc,
    .tp_repr = (reprfunc)method_repr,
    .tp_members = method_members,
};

/* -- operators straight from the type's slots ---------------------------------------------
 *
 * `x + y` on a class defined in Python goes through the generic slot, which looks up
 * `__add__` (or `__radd__`) by name and calls it: a tenth of recording an operation.
 * direct_slots(Tensor) puts functions of its own in the number and mapping slots whose
 * dunders are this module's Methods (the binary operators, `[]`, `[] =`); each tries the
 * Method's fast path, and otherwise does what the generic slot does: the left operand's
 * `__op__` when it is a Tensor, else the right one's `__rop__` (the Python fallbacks of
 * those Methods; a subclass of Tensor has the generic slot, which Python tries first for
 * a right operand of a subclass), and `[]`/`[] =` call their Methods' fallbacks. Setting one
 * of those dunders on the class again gives the slot back to Python (type attribute
 * assignment re-derives it).
 */
enum { N_DIRECT = 11 };
static const struct {
    const char *dunder;     /* __<dunder>__ and __r<dunder>__ */
    size_t offset;          /* of the slot in PyNumberMethods */
} direct_ops[N_DIRECT] = {
    {"add", offsetof(PyNumberMethods, nb_add)},
    {"sub", offsetof(PyNumberMethods, nb_subtract)},
    {"mul", offsetof(PyNumberMethods, nb_multiply)},
    {"truediv", offsetof(PyNumberMethods, nb_true_divide)},
    {"floordiv", offsetof(PyNumberMethods, nb_floor_divide)},
    {"mod", offsetof(PyNumberMethods, nb_remainder)},
    {"and", offsetof(PyNumberMethods, nb_and)},
    {"or", offsetof(PyNumberMethods, nb_or)},
    {"xor", offsetof(PyNumberMethods, nb_xor)},
    {"lshift", offsetof(PyNumberMethods, nb_lshift)},
    {"rshift", offsetof(PyNumberMethods, nb_rshift)},
};
static Method *direct_op[N_DIRECT], *direct_rop[N_DIRECT];   /* __op__, __rop__ (held) */
static Method *direct_get, *direct_set;                       /* __getitem__, __setitem__ */
static objobjargproc direct_generic_setitem;                  /* (for del t[key]) */

static PyObject *direct_binary(int i, PyObject *a, PyObject *b)
{
    /* (held: Python code below may install other Methods, dropping these) */
    Method *op = direct_op[i], *rop = direct_rop[i];
    Py_INCREF(op);
    Py_INCREF(rop);
    PyObject *r = binary_fast(op->name, a, b);
    if (r == NULL && !PyErr_Occurred()) {
        /* (a Tensor on the left: its __op__ answers, NotImplemented included, as the
           generic slot's; Python then tries a right operand of another type itself) */
        if (Py_TYPE(a) == tensor_type)
            r = PyObject_CallFunctionObjArgs(op->fallback, a, b, NULL);
        else if (Py_TYPE(b) == tensor_type)
            r = PyObject_CallFunctionObjArgs(rop->fallback, b, a, NULL);
        else
            r = Py_NewRef(Py_NotImplemented);
    }
    Py_DECREF(op);
    Py_DECREF(rop);
    return r;
}

#define DIRECT_FN(i) static PyObject *direct_##i(PyObject *a, PyObject *b) { return direct_binary(i, a, b); }
DIRECT_FN(0) DIRECT_FN(1) DIRECT_FN(2) DIRECT_FN(3) DIRECT_FN(4) DIRECT_FN(5)
DIRECT_FN(6) DIRECT_FN(7) DIRECT_FN(8) DIRECT_FN(9) DIRECT_FN(10)
#undef DIRECT_FN
static const binaryfunc direct_fns[N_DIRECT] = {direct_0, direct_1, direct_2, direct_3, direct_4,
                                                 direct_5, direct_6, direct_7, direct_8, direct_9,
                                                 direct_10};

static PyObject *direct_getitem(PyObject *t, PyObject *key)
{
    PyObject *r = getitem_fast(t, key);
    if (r != NULL || PyErr_Occurred())
        return r;
    Method *m = direct_get;
    Py_INCREF(m);
    r = PyObject_CallFunctionObjArgs(m->fallback, t, key, NULL);
    Py_DECREF(m);
    return r;
}

static int direct_setitem(PyObject *t, PyObject *key, PyObject *value)
{
    if (value == NULL)   /* del t[key]: Python's */
        return direct_generic_setitem(t, key, value);
    int r = setitem_fast(t, key, value);
    if (r != 0)
        return r < 0 ? -1 : 0;
    Method *m = direct_set;
    Py_INCREF(m);
    PyObject *res = PyObject_CallFunctionObjArgs(m->fallback, t, key, value, NULL);
    Py_DECREF(m);
    Py_XDECREF(res);
    return res == NULL ? -1 : 0;
}

/* The Method of kind `kind` that `type` has as `name` in its own dict (borrowed), or NULL. */
static Method *own_method(PyTypeObject *type, const char *name, int kind)
{
    PyObject *m = PyDict_GetItemString(type->tp_dict, name);
    if (m == NULL || Py_TYPE(m) != &MethodType || ((Method *)m)->kind != kind)
        return NULL;
    return (Method *)m;
}

static PyObject *direct_slots(PyObject *self, PyObject *arg)
{
    if (!PyType_Check(arg) || (PyTypeObject *)arg != tensor_type
        || !(tensor_type->tp_flags & Py_TPFLAGS_HEAPTYPE)) {
        PyErr_SetString(PyExc_TypeError, "direct_slots(Tensor): the class bind_tensors was given");
        return NULL;
    }
    PyTypeObject *type = tensor_type;
    int done = 0;
    for (int i = 0; i < N_DIRECT; i++) {
        char name[32], rname[32];
        snprintf(name, sizeof name, "__%s__", direct_ops[i].dunder);
        snprintf(rname, sizeof rname, "__r%s__", direct_ops[i].dunder);
        Method *m = own_method(type, name, K_BINARY), *r = own_method(type, rname, K_BINARY);
        binaryfunc *slot = (binaryfunc *)((char *)type->tp_as_number + direct_ops[i].offset);
        if (m == NULL || r == NULL || m->reflected || !r->reflected || *slot == NULL
            || PyObject_RichCompareBool(m->name, r->name, Py_EQ) != 1) {
            PyErr_Clear();
            continue;   /* (not both this module's: Python's slot stays) */
        }
        Py_INCREF(m);
        Py_XSETREF(direct_op[i], m);
        Py_INCREF(r);
        Py_XSETREF(direct_rop[i], r);
        *slot = direct_fns[i];
        done++;
    }
    PyMappingMethods *mp = type->tp_as_mapping;
    Method *get = own_method(type, "__getitem__", K_GETITEM);
    if (get != NULL && mp->mp_subscript != NULL) {
        Py_INCREF(get);
        Py_XSETREF(direct_get, get);
        mp->mp_subscript = direct_getitem;
        done++;
    }
    Method *set = own_method(type, "__setitem__", K_SETITEM);
    if (set != NULL && mp->mp_ass_subscript != NULL) {
        if (mp->mp_ass_subscript != direct_setitem)
            direct_generic_setitem = mp->mp_ass_subscript;
        Py_INCREF(set);
        Py_XSETREF(direct_set, set);
        mp->mp_ass_subscript = direct_setitem;
        done++;
    }
    return PyLong_FromLong(done);
}

/* How many of Tensor's operator slots are this module's now (a probe for tests). */
static PyObject *direct_slot_count(PyObject *self, PyObject *arg)
{
    if (!PyType_Check(arg) || !(((PyTypeObject *)arg)->tp_flags & Py_TPFLAGS_HEAPTYPE))
        return PyLong_FromLong(0);
    PyTypeObject *type = (PyTypeObject *)arg;
    long n = 0;
    for (int i = 0; i < N_DIRECT; i++)
        n += *(binaryfunc *)((char *)type->tp_as_number + direct_ops[i].offset) == direct_fns[i];
    n += type->tp_as_mapping->mp_subscript == direct_getitem;
    n += type->tp_as_mapping->mp_ass_subscript == direct_setitem;
    return PyLong_FromLong(n);
}

/* -- jitted calls: a compiled plan of one kernel, replayed without Python -----------------
 *
 * qtrace.tracer.jit.Jitted.__call__ for its commonest shape: positional tensor arguments
 * whose values are evaluated C-contiguous host arrays, a plan of one small kernel without
 * checks (runtime.Plan._fast_path), results that are the kernel's fresh outputs returned as
 * a tuple or alone. The Python side describes each such entry once (jit._native_spec):
 *
 *   (kernel address, extent, sources, allocations, outputs, templates, mode)
 *
 * sources: per kernel argument, an int k >= 0 (call argument k's buffer), -1-j (the j-th
 * allocation) or an array (a constant captured by the trace); allocations: (shape, dtype,
 * small) made with numpy.empty (small) or cpu.aligned_empty; outputs: the allocation of
 * each result; templates: the leaf each result copies its signature from (graph.node.
 * leaf_like); mode 0: a tuple, 1: the one result. Anything else, or an argument that is not
 * such a tensor, answers NotImplemented: the Python path runs (and raises what it raises).
 */
typedef void (*kernel_fn)(int64_t, int64_t, void *, void *, void *);
static int64_t *ctr_hits, *ctr_launches, *ctr_tasks;   /* stats' counters for compiled code */
#define MAX_KERNEL_ARGS 256

static PyObject *bind_jit(PyObject *self, PyObject *args)
{
    PyObject *nd, *em, *ae;
    Py_ssize_t off;
    unsigned long long h, l, t;
    if (!PyArg_ParseTuple(args, "O!OOnKKK:bind_jit", &PyType_Type, &nd, &em, &ae, &off, &h, &l, &t))
        return NULL;
    Py_INCREF(nd);
    Py_XSETREF(ndarray_type, (PyTypeObject *)nd);
    Py_INCREF(em);
    Py_XSETREF(np_empty_fn, em);
    Py_INCREF(ae);
    Py_XSETREF(aligned_empty_fn, ae);
    data_offset = off;
    ctr_hits = (int64_t *)(uintptr_t)h;
    ctr_launches = (int64_t *)(uintptr_t)l;
    ctr_tasks = (int64_t *)(uintptr_t)t;
    Py_RETURN_NONE;
}

/* The data pointer of host array `a` if it is a C-contiguous buffer as a leaf describes it
   (exact ndarray, the leaf's element strides C order for its shape), else NULL. */
static void *leaf_data(PyObject *leaf)
{
    PyObject *buf = SLOT(leaf, node_off[S_BUFFER]), *params = SLOT(leaf, node_off[S_PARAMS]);
    PyObject *shape = SLOT(leaf, node_off[S_SHAPE]);
    if (buf == NULL || Py_TYPE(buf) != ndarray_type || params == NULL || !PyTuple_Check(params)
        || PyTuple_GET_SIZE(params) != 1 || shape == NULL || !PyTuple_Check(shape))
        return NULL;
    PyObject *strides = PyTuple_GET_ITEM(params, 0);
    Py_ssize_t nd = PyTuple_GET_SIZE(shape);
    if (!PyTuple_Check(strides) || PyTuple_GET_SIZE(strides) != nd)
        return NULL;
    long long acc = 1;
    for (Py_ssize_t i = nd - 1; i >= 0; i--) {
        long long st, d;
        PyObject *si = PyTuple_GET_ITEM(strides, i), *di = PyTuple_GET_ITEM(shape, i);
        if (!PyLong_CheckExact(si) || !PyLong_CheckExact(di) || !int_value(si, &st)
            || !int_value(di, &d) || st != acc)
            return NULL;
        acc *= d > 1 ? d : 1;
    }
    return *(void **)((char *)buf + data_offset);
}

/* A new input leaf holding `buf`, slots `copied[:n]` taken from `from`, no inputs, count
   0 (new reference); NULL with TypeError naming `what` where `from` lacks one. */
static PyObject *leaf_from(PyObject *from, const int *copied, size_t n, PyObject *buf,
                           const char *what)
{
    PyObject *leaf = leaf_type->tp_alloc(leaf_type, 0);
    if (leaf == NULL)
        return NULL;
    PyObject_GC_UnTrack(leaf);   /* (plain params, an array: no cycle; see plain_params) */
    for (size_t c = 0; c < n; c++) {
        PyObject *v = SLOT(from, node_off[copied[c]]);
        if (v == NULL) {
            Py_DECREF(leaf);
            PyErr_Format(PyExc_TypeError, "qtrace: %s is incomplete", what);
            return NULL;
        }
        Py_INCREF(v);
        set_slot(leaf, node_off[copied[c]], v);
    }
    Py_INCREF(empty_tuple); set_slot(leaf, node_off[S_INPUTS], empty_tuple);
    Py_INCREF(zero_long); set_slot(leaf, node_off[S_COUNT], zero_long);
    Py_INCREF(buf); set_slot(leaf, node_off[S_BUFFER], buf);
    return leaf;
}

/* A jitted call's results: a new tensor per buffer `bufs[j]`, its leaf's signature that of
   `templates[j]` (graph.node.leaf_like); a tuple of them (mode 0), or the one (mode 1). */
static PyObject *wrap_results(PyObject *const *bufs, Py_ssize_t n_out, PyObject *templates,
                              PyObject *mode)
{
    static const int copied[] = {S_PRIM, S_PARAMS, S_SHAPE, S_DTYPE, S_WEAK, S_DEVICE,
                                 S_STRUCT, S_SIG};
    if (!PyTuple_Check(templates) || PyTuple_GET_SIZE(templates) != n_out) {
        PyErr_SetString(PyExc_TypeError, "qtrace: a malformed jit call spec");
        return NULL;
    }
    PyObject *result = PyTuple_New(n_out);
    if (result == NULL)
        return NULL;
    for (Py_ssize_t j = 0; j < n_out; j++) {
        PyObject *leaf = leaf_from(PyTuple_GET_ITEM(templates, j), copied,
                                   sizeof copied / sizeof copied[0], bufs[j],
                                   "a jit result template"), *t = NULL;
        if (leaf == NULL) {
            Py_DECREF(result);
            return NULL;
        }
        t = tensor_type->tp_alloc(tensor_type, 0);
        if (t == NULL) {
            Py_DECREF(leaf);
            Py_DECREF(result);
            return NULL;
        }
        PyObject_GC_UnTrack(t);
        set_slot(t, t_node, leaf);
        Py_INCREF(Py_None);
        set_slot(t, t_view, Py_None);
        PyTuple_SET_ITEM(result, j, t);
    }
    if (PyLong_AsLong(mode) == 1 && n_out == 1) {   /* mode 1: the one result */
        PyObject *one = PyTuple_GET_ITEM(result, 0);
        Py_INCREF(one);
        Py_SETREF(result, one);
    }
    return result;
}

static PyObject *graph_call(PyObject *spec, PyObject *call);

static PyObject *jit_call(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyDict_Check(args[0]) || !PyTuple_Check(args[1]))
        return PyErr_Format(PyExc_TypeError, "jit_call(specs, args)");
    PyObject *specs = args[0], *call = args[1];
    Py_ssize_t n = PyTuple_GET_SIZE(call);
    if (ndarray_type == NULL || data_offset < 0 || tensor_type == NULL || leaf_type == NULL || n == 0)
        Py_RETURN_NOTIMPLEMENTED;
    int q = quiet();   /* (tracing or differentiating: the call is recorded, in Python) */
    if (q <= 0)
        return q < 0 ? NULL : Py_NewRef(Py_NotImplemented);
    PyObject *descs = PyTuple_New(n);
    if (descs == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PyTuple_GET_ITEM(call, i), *node, *sig;
        if (Py_TYPE(t) != tensor_type || (node = SLOT(t, t_node)) == NULL
            || (sig = SLOT(node, node_off[S_SIG])) == NULL || sig == Py_None) {
            Py_DECREF(descs);
            Py_RETURN_NOTIMPLEMENTED;
        }
        Py_INCREF(sig);
        PyTuple_SET_ITEM(descs, i, sig);
    }
    PyObject *spec = PyDict_GetItemWithError(specs, descs);   /* borrowed */
    Py_DECREF(descs);
    if (spec == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NOTIMPLEMENTED;
    }
    if (PyTuple_Check(spec) && PyTuple_GET_SIZE(spec) == 8) {   /* a CUDA graph's replay (below) */
        Py_INCREF(spec);   /* (held: the replay may wait with the GIL released, and another
                              thread clear the table) */
        PyObject *r = graph_call(spec, call);
        Py_DECREF(spec);
        return r;
    }
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 7)
        return PyErr_Format(PyExc_TypeError, "qtrace: a malformed jit call spec");
    Py_INCREF(spec);   /* (held: allocating runs Python code, which may change the table) */
    PyObject *allocated[MAX_KERNEL_ARGS], *result = NULL;
    void *ptrs[MAX_KERNEL_ARGS];
    Py_ssize_t n_alloc = 0;
    PyObject *sources = PyTuple_GET_ITEM(spec, 2), *allocs = PyTuple_GET_ITEM(spec, 3);
    PyObject *outs = PyTuple_GET_ITEM(spec, 4), *templates = PyTuple_GET_ITEM(spec, 5);
    Py_ssize_t n_src = PyTuple_GET_SIZE(sources);
    if (n_src > MAX_KERNEL_ARGS || PyTuple_GET_SIZE(allocs) > MAX_KERNEL_ARGS
        || PyTuple_GET_SIZE(outs) > MAX_KERNEL_ARGS)
        goto not_mine;
    /* the arguments first (nothing allocated if one is not a ready host array) */
    for (Py_ssize_t i = 0; i < n_src; i++) {
        PyObject *src = PyTuple_GET_ITEM(sources, i);
        if (PyLong_CheckExact(src)) {
            Py_ssize_t k = PyLong_AsSsize_t(src);
            if (k < 0)
                continue;   /* an allocation: below */
            if (k >= n)
                goto not_mine;
            PyObject *node = SLOT(PyTuple_GET_ITEM(call, k), t_node);
            if (Py_TYPE(node) != leaf_type || (ptrs[i] = leaf_data(node)) == NULL)
                goto not_mine;
        } else if (Py_TYPE(src) == ndarray_type) {
            ptrs[i] = *(void **)((char *)src + data_offset);
        } else {
            goto not_mine;
        }
    }
    for (; n_alloc < PyTuple_GET_SIZE(allocs); n_alloc++) {
        PyObject *a = PyTuple_GET_ITEM(allocs, n_alloc);
        PyObject *fn = PyTuple_GET_ITEM(a, 2) == Py_True ? np_empty_fn : aligned_empty_fn;
        PyObject *arr = PyObject_CallFunctionObjArgs(fn, PyTuple_GET_ITEM(a, 0), PyTuple_GET_ITEM(a, 1), NULL);
        if (arr == NULL)
            goto fail;
        allocated[n_alloc] = arr;
        if (Py_TYPE(arr) != ndarray_type) {
            n_alloc++;
            goto not_mine;
        }
    }
    for (Py_ssize_t i = 0; i < n_src; i++) {
        PyObject *src = PyTuple_GET_ITEM(sources, i);
        if (PyLong_CheckExact(src)) {
            Py_ssize_t k = PyLong_AsSsize_t(src);
            if (k < 0) {
                if (-1 - k >= n_alloc)
                    goto not_mine;
                ptrs[i] = *(void **)((char *)allocated[-1 - k] + data_offset);
            }
        }
    }
    {
        kernel_fn fn = (kernel_fn)PyLong_AsVoidPtr(PyTuple_GET_ITEM(spec, 0));
        int64_t extent = PyLong_AsLongLong(PyTuple_GET_ITEM(spec, 1));
        if (fn == NULL || PyErr_Occurred())
            goto fail;
        Py_BEGIN_ALLOW_THREADS
        fn(0, extent, ptrs, NULL, NULL);
        Py_END_ALLOW_THREADS
    }
    __atomic_fetch_add(ctr_hits, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(ctr_launches, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(ctr_tasks, 1, __ATOMIC_RELAXED);
    {
        PyObject *bufs[MAX_KERNEL_ARGS];
        Py_ssize_t n_out = PyTuple_GET_SIZE(outs);   /* (at most MAX_KERNEL_ARGS: above) */
        for (Py_ssize_t j = 0; j < n_out; j++) {
            Py_ssize_t a = PyLong_AsSsize_t(PyTuple_GET_ITEM(outs, j));
            if (a < 0 || a >= n_alloc) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_TypeError, "qtrace: a malformed jit call spec");
                goto fail;
            }
            bufs[j] = allocated[a];
        }
        result = wrap_results(bufs, n_out, templates, PyTuple_GET_ITEM(spec, 6));
        if (result == NULL)
            goto fail;
    }
    goto done;
not_mine:
    result = Py_NotImplemented;
    Py_INCREF(result);
    goto done;
fail:
    Py_CLEAR(result);
done:
    for (Py_ssize_t j = 0; j < n_alloc; j++)
        Py_DECREF(allocated[j]);
    Py_DECREF(spec);
    return result;
}

/* -- a jitted call replaying a CUDA graph (qtrace.devices.cuda_graphs) ------------------
 *
 * GraphRunner's common case without Python: every plan leaf is an argument tensor holding
 * a C-contiguous CuPy array (or a constant the trace captured), the current CUDA context
 * is the one the instances were captured in, qtrace's only noted stream is CuPy's current
 * stream, and the first instance whose input addresses are the call's is free (the
 * reference counts of its results and their memory are those it alone accounts for; no
 * record of that memory volatile). Then: one cuGraphLaunch and one cuEventRecord on that
 * stream through the driver (libcuda, whose handles the runtime's are), a new version of
 * each result's memory (buffers.advance), the counters the Python path bumps, and the
 * results wrapped as jit wraps them. Anything else answers NotImplemented before anything
 * happened, and the Python path decides (capture, staging, waits, errors).
 *
 * Spec (jit._graph_spec, 8 items): the runner's published instances (a list it rewrites
 * under its lock), that lock (a ViewsLock), sources (per plan leaf: the argument index, or
 * -1 for a captured constant, whose address never changes), templates, mode (0: a tuple,
 * 1: the one result), explicit (0: only while config.cuda_graphs), the string "cuda_graph"
 * (a tag: the CPU's specs have 7 items), its device index. A published instance (GraphRunner._publish, 10 items): input
 * addresses, graph exec handle, event handle, watched arrays, their expected reference
 * counts, their buffers records, results, the kernels a replay launches (each a task),
 * CUDA context, and the graph and event objects (held: their handles stay valid while the entry lives).
 */
#ifndef _WIN32
#include <dlfcn.h>
typedef int (*cu_launch_fn)(void *, void *);
typedef int (*cu_ctx_fn)(void **);
typedef int (*cu_name_fn)(int, const char **);
static cu_launch_fn cu_graph_launch, cu_event_record;
static cu_ctx_fn cu_ctx_current;
static cu_name_fn cu_error_name;
#endif
static PyTypeObject *cupy_array_type, *state_type;
static PyObject *streams_dict, *stream_ptr_fn;
static ViewsLock *buffers_lock;
static Py_ssize_t st_version, st_borrowed, st_exports;
static int64_t *ctr_replays;
static PyObject *str_data, *str_ptr, *str_c_contiguous, *str_cuda_graphs;

static PyObject *bind_graphs(PyObject *self, PyObject *args)
{
    const char *lib;
    PyObject *arr, *st, *streams, *ptr_fn, *lock;
    unsigned long long replays;
    if (!PyArg_ParseTuple(args, "sO!O!O!OO!K:bind_graphs", &lib, &PyType_Type, &arr, &PyType_Type,
                          &st, &PyDict_Type, &streams, &ptr_fn, &ViewsLockType, &lock, &replays))
        return NULL;
#ifdef _WIN32
    Py_RETURN_FALSE;
#else
    if (cu_graph_launch == NULL) {
        void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        if (h == NULL)
            Py_RETURN_FALSE;
        cu_launch_fn launch = (cu_launch_fn)dlsym(h, "cuGraphLaunch");
        cu_launch_fn record = (cu_launch_fn)dlsym(h, "cuEventRecord");
        cu_ctx_fn ctx = (cu_ctx_fn)dlsym(h, "cuCtxGetCurrent");
        cu_name_fn name = (cu_name_fn)dlsym(h, "cuGetErrorName");
        if (launch == NULL || record == NULL || ctx == NULL || name == NULL)
            Py_RETURN_FALSE;   /* (the handle stays open: a driver is never unloaded) */
        cu_event_record = record;
        cu_ctx_current = ctx;
        cu_error_name = name;
        cu_graph_launch = launch;
    }
    if (slot_offset((PyTypeObject *)st, "version", &st_version) < 0
        || slot_offset((PyTypeObject *)st, "borrowed", &st_borrowed) < 0
        || slot_offset((PyTypeObject *)st, "exports", &st_exports) < 0)
        return NULL;
    Py_INCREF(arr); Py_XSETREF(cupy_array_type, (PyTypeObject *)arr);
    Py_INCREF(st); Py_XSETREF(state_type, (PyTypeObject *)st);
    Py_INCREF(streams); Py_XSETREF(streams_dict, streams);
    Py_INCREF(ptr_fn); Py_XSETREF(stream_ptr_fn, ptr_fn);
    Py_INCREF(lock); Py_XSETREF(buffers_lock, (ViewsLock *)lock);
    ctr_replays = (int64_t *)(uintptr_t)replays;
    Py_RETURN_TRUE;
#endif
}

/* The calling thread's current CUDA context as an integer (0: none, or not bound). */
static PyObject *graph_context(PyObject *self, PyObject *unused)
{
    void *ctx = NULL;
#ifndef _WIN32
    if (cu_ctx_current != NULL && cu_ctx_current(&ctx) != 0)
        ctx = NULL;
#endif
    return PyLong_FromVoidPtr(ctx);
}

/* 1 (taken), 0 (held, by another thread or by this one: a replay from code that runs while
   the Python path changes the ring, a finalizer say, must not see it half changed): l
   without waiting, and not reentrantly. */
static int vlock_try(ViewsLock *l)
{
    unsigned long me = PyThread_get_thread_ident();
    if (l->count > 0)
        return 0;
#ifndef _WIN32
    if (pthread_mutex_trylock(&l->mutex) != 0)
        return 0;
#else
    if (!PyThread_acquire_lock(l->mutex, NOWAIT_LOCK))
        return 0;
#endif
    l->owner = me;
    l->count = 1;
    return 1;
}

/* The device address of CuPy array `buf` if it is C-contiguous (1), else 0; -1 with an
   error. */
static int device_address(PyObject *buf, void **out)
{
    PyObject *c = PyObject_GetAttr(buf, str_c_contiguous);
    if (c == NULL)
        return -1;
    int contiguous = c == Py_True;
    Py_DECREF(c);
    if (!contiguous)
        return 0;
    PyObject *mem = PyObject_GetAttr(buf, str_data);
    if (mem == NULL)
        return -1;
    PyObject *ptr = PyObject_GetAttr(mem, str_ptr);
    Py_DECREF(mem);
    if (ptr == NULL)
        return -1;
    *out = PyLong_AsVoidPtr(ptr);
    Py_DECREF(ptr);
    return PyErr_Occurred() ? -1 : 1;
}

/* Whether published instance `e` may be replayed now (its results free, nothing volatile). */
static int instance_free(PyObject *e, void *ctx)
{
    PyObject *watched = PyTuple_GET_ITEM(e, 3), *expect = PyTuple_GET_ITEM(e, 4);
    PyObject *records = PyTuple_GET_ITEM(e, 5);
    if (PyLong_AsVoidPtr(PyTuple_GET_ITEM(e, 8)) != ctx)
        return 0;
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(watched); j++)
        if (Py_REFCNT(PyTuple_GET_ITEM(watched, j)) != PyLong_AsSsize_t(PyTuple_GET_ITEM(expect, j)))
            return 0;
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(records); j++) {
        PyObject *r = PyTuple_GET_ITEM(records, j), *exports;
        if (Py_TYPE(r) != state_type || SLOT(r, st_borrowed) != Py_False
            || (exports = SLOT(r, st_exports)) == NULL || !PyLong_CheckExact(exports)
            || PyLong_AsLong(exports) != 0)
            return 0;
    }
    return !PyErr_Occurred();
}

static PyObject *cuda_failed(const char *what, int rc)
{
    const char *name = NULL;
#ifndef _WIN32
    if (cu_error_name == NULL || cu_error_name(rc, &name) != 0)
        name = NULL;
#endif
    return PyErr_Format(PyExc_RuntimeError, "qtrace: %s failed replaying a jitted step's CUDA graph: "
                        "%s (CUDA error %d)", what, name ? name : "unknown", rc);
}

/* -- a kernel launch through the driver (qtrace.kernels.llvm_nvptx.CudaKernel.launch) ----
 *
 * cuLaunchKernel with the kernel's 8-byte parameters taken from Python integers: what
 * CuPy's driver.launchKernel does, without the ctypes argument block that feeds it (a few
 * microseconds of every eager GPU launch). The parameters are copied by the driver when
 * the launch is queued (or captured), so they live on this function's stack. */
#define LAUNCH_MAX_PARAMS 256
#ifndef _WIN32
typedef int (*cu_kernel_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, void *, void **, void **);
static cu_kernel_fn cu_launch_kernel;
#endif

static PyObject *bind_launch(PyObject *self, PyObject *args)
{
    const char *lib;
    if (!PyArg_ParseTuple(args, "s:bind_launch", &lib))
        return NULL;
#ifdef _WIN32
    Py_RETURN_FALSE;
#else
    if (cu_launch_kernel == NULL) {
        void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        if (h == NULL)
            Py_RETURN_FALSE;
        cu_kernel_fn launch = (cu_kernel_fn)dlsym(h, "cuLaunchKernel");
        cu_name_fn name = (cu_name_fn)dlsym(h, "cuGetErrorName");
        if (launch == NULL || name == NULL)
            Py_RETURN_FALSE;   /* (the handle stays open: a driver is never unloaded) */
        if (cu_error_name == NULL)
            cu_error_name = name;
        cu_launch_kernel = launch;
    }
    Py_RETURN_TRUE;
#endif
}

/* cuda_launch(function, grid, block, stream, *params): one launch of `grid` blocks of
   `block` threads on `stream` (handles as integers). */
static PyObject *cuda_launch(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
#ifdef _WIN32
    PyErr_SetString(PyExc_RuntimeError, "qtrace: cuda_launch is not bound");
    return NULL;
#else
    uint64_t values[LAUNCH_MAX_PARAMS];
    void *params[LAUNCH_MAX_PARAMS];
    if (cu_launch_kernel == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "qtrace: cuda_launch is not bound (bind_launch)");
        return NULL;
    }
    if (nargs < 4 || nargs - 4 > LAUNCH_MAX_PARAMS) {
        PyErr_Format(PyExc_TypeError, "cuda_launch: 4 handles and at most %d parameters, not %zd "
                     "arguments", LAUNCH_MAX_PARAMS, nargs);
        return NULL;
    }
    void *function = PyLong_AsVoidPtr(args[0]);
    if (function == NULL && PyErr_Occurred())
        return NULL;
    unsigned long grid = PyLong_AsUnsignedLong(args[1]);
    if (grid == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    unsigned long block = PyLong_AsUnsignedLong(args[2]);
    if (block == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    if (grid > UINT_MAX || block > UINT_MAX) {
        PyErr_Format(PyExc_OverflowError, "cuda_launch: grid %lu or block %lu exceeds an unsigned int",
                     grid, block);
        return NULL;
    }
    void *stream = PyLong_AsVoidPtr(args[3]);
    if (stream == NULL && PyErr_Occurred())
        return NULL;
    for (Py_ssize_t i = 4; i < nargs; i++) {
        values[i - 4] = (uint64_t)PyLong_AsUnsignedLongLongMask(args[i]);
        if (values[i - 4] == (uint64_t)-1 && PyErr_Occurred())
            return NULL;
        params[i - 4] = &values[i - 4];
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS   /* (it blocks while the launch queue is full) */
    rc = cu_launch_kernel(function, (unsigned)grid, 1, 1, (unsigned)block, 1, 1, 0, stream, params, NULL);
    Py_END_ALLOW_THREADS
    if (rc != 0) {
        const char *name = NULL;
        if (cu_error_name == NULL || cu_error_name(rc, &name) != 0)
            name = NULL;
        return PyErr_Format(PyExc_RuntimeError, "qtrace: cuLaunchKernel of kernel function %p "
                            "(%lu blocks of %lu threads) failed: %s (CUDA error %d)", function, grid,
                            block, name ? name : "unknown", rc);
    }
    Py_RETURN_NONE;
#endif
}

/* A new version of each record's memory (buffers.advance), under buffers' lock. */
static int advance_records(PyObject *records)
{
    if (vlock_acquire(buffers_lock) < 0)
        return -1;
    int rc = 0;
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(records) && rc == 0; j++) {
        PyObject *r = PyTuple_GET_ITEM(records, j), *v = SLOT(r, st_version);
        PyObject *next = v != NULL ? PyNumber_Add(v, one_long) : NULL;
        if (next == NULL)
            rc = -1;
        else
            set_slot(r, st_version, next);
    }
    if (vlock_release(buffers_lock) < 0)
        rc = -1;
    return rc;
}

static PyObject *graph_call(PyObject *spec, PyObject *call)
{
#ifdef _WIN32
    Py_RETURN_NOTIMPLEMENTED;
#else
    PyObject *fast = PyTuple_GET_ITEM(spec, 0), *lock = PyTuple_GET_ITEM(spec, 1);
    PyObject *sources = PyTuple_GET_ITEM(spec, 2), *templates = PyTuple_GET_ITEM(spec, 3);
    Py_ssize_t n = PyTuple_GET_SIZE(call), n_src;
    if (cu_graph_launch == NULL || cupy_array_type == NULL || !PyList_Check(fast)
        || Py_TYPE(lock) != &ViewsLockType || !PyTuple_Check(sources) || !PyTuple_Check(templates)
        || (n_src = PyTuple_GET_SIZE(sources)) > MAX_KERNEL_ARGS)
        Py_RETURN_NOTIMPLEMENTED;
    if (PyTuple_GET_ITEM(spec, 5) != Py_True) {   /* graphs on while config.cuda_graphs */
        PyObject *on = PyObject_GetAttr(config_obj, str_cuda_graphs);
        int yes = on == NULL ? -1 : PyObject_IsTrue(on);
        Py_XDECREF(on);
        if (yes <= 0)
            return yes < 0 ? NULL : Py_NewRef(Py_NotImplemented);
    }
    void *ptrs[MAX_KERNEL_ARGS];
    for (Py_ssize_t i = 0; i < n_src; i++) {
        Py_ssize_t k = PyLong_AsSsize_t(PyTuple_GET_ITEM(sources, i));
        if (k < 0) {
            if (PyErr_Occurred())
                return NULL;
            continue;   /* a captured constant */
        }
        PyObject *t, *node, *buf;
        if (k >= n || Py_TYPE(t = PyTuple_GET_ITEM(call, k)) != tensor_type
            || (node = SLOT(t, t_node)) == NULL || Py_TYPE(node) != leaf_type || !prim_is(node, str_input)
            || (buf = SLOT(node, node_off[S_BUFFER])) == NULL || Py_TYPE(buf) != cupy_array_type)
            Py_RETURN_NOTIMPLEMENTED;
        Py_INCREF(buf);   /* (held: its attributes are read through Python's protocol) */
        int rc = device_address(buf, &ptrs[i]);
        Py_DECREF(buf);
        if (rc <= 0)
            return rc < 0 ? NULL : Py_NewRef(Py_NotImplemented);
    }
    void *ctx = NULL, *stream;
    if (cu_ctx_current(&ctx) != 0 || ctx == NULL)
        Py_RETURN_NOTIMPLEMENTED;
    {
        PyObject *s = PyObject_CallNoArgs(stream_ptr_fn);   /* (its address, or the stream) */
        if (s != NULL && !PyLong_Check(s))
            Py_SETREF(s, PyObject_GetAttr(s, str_ptr));
        if (s == NULL)
            return NULL;
        stream = PyLong_AsVoidPtr(s);
        Py_DECREF(s);
        if (PyErr_Occurred())
            return NULL;
    }
    /* qtrace's only noted stream is this one (cuda.order_reads and note_stream: nothing to
       wait for, nothing to note) */
    if (PyDict_GET_SIZE(streams_dict) != 1)
        Py_RETURN_NOTIMPLEMENTED;
    {
        PyObject *ptr = PyLong_FromVoidPtr(stream), *key = NULL;
        if (ptr != NULL)
            key = PyTuple_Pack(2, PyTuple_GET_ITEM(spec, 7), ptr);
        Py_XDECREF(ptr);
        if (key == NULL)
            return NULL;
        int noted = PyDict_Contains(streams_dict, key);
        Py_DECREF(key);
        if (noted <= 0)
            return noted < 0 ? NULL : Py_NewRef(Py_NotImplemented);
    }
    if (!vlock_try((ViewsLock *)lock))
        Py_RETURN_NOTIMPLEMENTED;   /* (another thread is choosing, capturing or launching) */
    PyObject *e = NULL, *result = NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(fast) && e == NULL; i++) {
        PyObject *cand = PyList_GET_ITEM(fast, i), *inputs;
        if (!PyTuple_Check(cand) || PyTuple_GET_SIZE(cand) != 10
            || !PyTuple_Check(inputs = PyTuple_GET_ITEM(cand, 0)) || PyTuple_GET_SIZE(inputs) != n_src)
            continue;
        Py_ssize_t i_src = 0;
        for (; i_src < n_src; i_src++) {
            if (PyLong_AsSsize_t(PyTuple_GET_ITEM(sources, i_src)) >= 0
                && PyLong_AsVoidPtr(PyTuple_GET_ITEM(inputs, i_src)) != ptrs[i_src])
                break;
        }
        if (i_src == n_src)
            e = cand;   /* the first with these inputs, as GraphRunner._choose takes */
    }
    if (e == NULL || !instance_free(e, ctx)) {
        vlock_release((ViewsLock *)lock);
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NOTIMPLEMENTED;
    }
    Py_INCREF(e);   /* (held: the buffers lock below may wait with the GIL released) */
    int rc = cu_graph_launch(PyLong_AsVoidPtr(PyTuple_GET_ITEM(e, 1)), stream);
    if (rc != 0) {
        cuda_failed("cuGraphLaunch", rc);
        goto unlock;
    }
    rc = cu_event_record(PyLong_AsVoidPtr(PyTuple_GET_ITEM(e, 2)), stream);
    if (rc != 0) {
        cuda_failed("cuEventRecord", rc);
        goto unlock;
    }
    if (advance_records(PyTuple_GET_ITEM(e, 5)) < 0)
        goto unlock;
    __atomic_fetch_add(ctr_hits, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(ctr_replays, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(ctr_launches, PyLong_AsLongLong(PyTuple_GET_ITEM(e, 7)), __ATOMIC_RELAXED);
    __atomic_fetch_add(ctr_tasks, PyLong_AsLongLong(PyTuple_GET_ITEM(e, 7)), __ATOMIC_RELAXED);
    {
        PyObject *results = PyTuple_GET_ITEM(e, 6);
        if (!PyTuple_Check(results) || PyTuple_GET_SIZE(results) > MAX_KERNEL_ARGS) {
            PyErr_SetString(PyExc_TypeError, "qtrace: a malformed CUDA graph instance");
            goto unlock;
        }
        result = wrap_results(((PyTupleObject *)results)->ob_item, PyTuple_GET_SIZE(results), templates,
                              PyTuple_GET_ITEM(spec, 4));
    }
unlock:
    if (vlock_release((ViewsLock *)lock) < 0)
        Py_CLEAR(result);
    Py_DECREF(e);
    return result;
#endif
}

/* -- an eager evaluation (qtrace.tracer.pending.flush) ----------------------------------
 *
 * pending.flush's common case: every owner listed (and requested) is a tensor or a storage
 * whose value is a node with evaluated leaves, the graph's plan is already in the
 * runtime's table by structure (devices.runtime._by_struct, bound by bind_plans), and a
 * plan of one launch (Plan.native: one kernel, or one sequence of small kernels, without
 * checks) reads host arrays: then it runs here, else through Plan.run. Anything else
 * answers NotImplemented before anything changed, and the Python function runs. The
 * order of the nodes (requested first, then as listed) is the Python function's, so both
 * find the same plans.
 *
 * Plan.native: (kind, entry address, a, b, slots, allocations, outputs, slot count) —
 * kind 0: kernel(0, a = extent, pointers, NULL, NULL); kind 1: the sequence runner
 * (a = its table's address, b = its task count, pointers, NULL); slots: the slot of each
 * pointer; allocations: (slot, shape, dtype, small) made with numpy.empty (small) or
 * cpu.aligned_empty; outputs: the slot of each output. */
static PyObject *by_struct;          /* devices.runtime._by_struct */
static PyObject *codegen_options_fn; /* config.codegen_options (bound) */
static PyObject *graph_struct_fn;    /* graph.node.graph_struct */
static PyObject *result_leaf_fn;     /* graph.node.result_leaf */
static PyObject *array_view_fn;      /* tracer.views.array_view */
static PyObject *flush_py_fn;        /* tracer.pending._flush (the Python evaluation) */
static PyObject *recent_py;          /* graph.node._recent (sharing of other input counts) */
static PyObject *str_native, *str_run;
static Py_ssize_t struct_result = -1; /* Struct._result: (params, struct) of its result leaves */
static int64_t *ctr_evaluations;
#define MAX_FLUSH_NODES 64
#define MAX_FLUSH_OWNERS 256
typedef void (*sequence_fn)(void *, int64_t, void *, void *);

static PyObject *bind_flush(PyObject *self, PyObject *args)
{
    PyObject *gs, *rl, *av, *fp, *stt, *rc;
    if (!PyArg_ParseTuple(args, "OOOOO!O!:bind_flush", &gs, &rl, &av, &fp, &PyType_Type, &stt,
                          &PyDict_Type, &rc))
        return NULL;
    if (slot_offset((PyTypeObject *)stt, "_result", &struct_result) < 0)
        return NULL;
    PyObject **dst[] = {&graph_struct_fn, &result_leaf_fn, &array_view_fn, &flush_py_fn, &recent_py};
    PyObject *src[] = {gs, rl, av, fp, rc};
    for (size_t i = 0; i < sizeof src / sizeof src[0]; i++) {
        Py_INCREF(src[i]);
        Py_XSETREF(*dst[i], src[i]);
    }
    Py_RETURN_NONE;
}

static PyObject *bind_plans(PyObject *self, PyObject *args)
{
    PyObject *bs, *co;
    unsigned long long ev;
    if (!PyArg_ParseTuple(args, "O!OK:bind_plans", &PyDict_Type, &bs, &co, &ev))
        return NULL;
    Py_INCREF(bs);
    Py_XSETREF(by_struct, bs);
    Py_INCREF(co);
    Py_XSETREF(codegen_options_fn, co);
    ctr_evaluations = (int64_t *)(uintptr_t)ev;
    Py_RETURN_NONE;
}

/* The input leaf holding `buf`, the computed value of `node` (graph.node.result_leaf; its
   Python definition makes the struct's result signature the first time). */
static PyObject *result_leaf(PyObject *node, PyObject *buf)
{
    PyObject *st = SLOT(node, node_off[S_STRUCT]);
    PyObject *res = st != NULL ? SLOT(st, struct_result) : NULL;
    if (res == NULL || !PyTuple_Check(res) || PyTuple_GET_SIZE(res) != 2)
        return PyObject_CallFunctionObjArgs(result_leaf_fn, node, buf, NULL);
    static const int copied[] = {S_SHAPE, S_DTYPE, S_WEAK, S_DEVICE};
    PyObject *leaf = leaf_from(node, copied, sizeof copied / sizeof copied[0], buf, "a node");
    if (leaf == NULL)
        return NULL;
    Py_INCREF(str_input); set_slot(leaf, node_off[S_PRIM], str_input);
    Py_INCREF(PyTuple_GET_ITEM(res, 0)); set_slot(leaf, node_off[S_PARAMS], PyTuple_GET_ITEM(res, 0));
    Py_INCREF(PyTuple_GET_ITEM(res, 1)); set_slot(leaf, node_off[S_STRUCT], PyTuple_GET_ITEM(res, 1));
    Py_INCREF(Py_None); set_slot(leaf, node_off[S_SIG], Py_None);
    return leaf;
}

static int is_int_tuple(PyObject *t, Py_ssize_t n)
{
    if (!PyTuple_Check(t) || (n >= 0 && PyTuple_GET_SIZE(t) != n))
        return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(t); i++)
        if (!PyLong_CheckExact(PyTuple_GET_ITEM(t, i)))
            return 0;
    return 1;
}

/* Run Plan.native `rec` on the host arrays `leaves` (their buffers): the output buffers
   (a new list), or NULL with an exception. */
static PyObject *run_native(PyObject *rec, PyObject *leaves)
{
    PyObject *slots = PyTuple_GET_ITEM(rec, 4), *allocs = PyTuple_GET_ITEM(rec, 5);
    PyObject *outs = PyTuple_GET_ITEM(rec, 6);
    Py_ssize_t n_slots = PyLong_AsSsize_t(PyTuple_GET_ITEM(rec, 7));
    Py_ssize_t n_leaves = PyTuple_GET_SIZE(leaves), n_ptr = PyTuple_GET_SIZE(slots);
    if (n_slots < n_leaves || !PyTuple_Check(allocs) || !is_int_tuple(slots, -1)
        || !is_int_tuple(outs, -1)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "qtrace: a malformed native plan record");
        return NULL;
    }
    PyObject *small_bufs[MAX_KERNEL_ARGS], **bufs = small_bufs, *result = NULL;
    void *small_ptrs[MAX_KERNEL_ARGS], **ptrs = small_ptrs;
    if (n_slots > MAX_KERNEL_ARGS)
        bufs = PyMem_Malloc(n_slots * sizeof *bufs);
    if (n_ptr > MAX_KERNEL_ARGS)
        ptrs = PyMem_Malloc(n_ptr * sizeof *ptrs);
    if (bufs == NULL || ptrs == NULL) {
        if (bufs != small_bufs)
            PyMem_Free(bufs);
        if (ptrs != small_ptrs)
            PyMem_Free(ptrs);
        return PyErr_NoMemory();
    }
    memset(bufs, 0, n_slots * sizeof *bufs);
    for (Py_ssize_t i = 0; i < n_leaves; i++) {
        bufs[i] = SLOT(PyTuple_GET_ITEM(leaves, i), node_off[S_BUFFER]);
        Py_INCREF(bufs[i]);
    }
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(allocs); k++) {
        PyObject *a = PyTuple_GET_ITEM(allocs, k);
        Py_ssize_t s = PyLong_AsSsize_t(PyTuple_GET_ITEM(a, 0));
        if (s < n_leaves || s >= n_slots || bufs[s] != NULL) {
            PyErr_SetString(PyExc_TypeError, "qtrace: a malformed native plan record");
            goto done;
        }
        PyObject *fn = PyTuple_GET_ITEM(a, 3) == Py_True ? np_empty_fn : aligned_empty_fn;
        bufs[s] = PyObject_CallFunctionObjArgs(fn, PyTuple_GET_ITEM(a, 1), PyTuple_GET_ITEM(a, 2), NULL);
        if (bufs[s] == NULL)
            goto done;
    }
    for (Py_ssize_t i = 0; i < n_ptr; i++) {
        Py_ssize_t s = PyLong_AsSsize_t(PyTuple_GET_ITEM(slots, i));
        if (s < 0 || s >= n_slots || bufs[s] == NULL || Py_TYPE(bufs[s]) != ndarray_type) {
            PyErr_SetString(PyExc_TypeError, "qtrace: a native plan's buffer is not a host array");
            goto done;
        }
        ptrs[i] = *(void **)((char *)bufs[s] + data_offset);
    }
    {
        long kind = PyLong_AsLong(PyTuple_GET_ITEM(rec, 0));
        void *entry = PyLong_AsVoidPtr(PyTuple_GET_ITEM(rec, 1));
        int64_t a = PyLong_AsLongLong(PyTuple_GET_ITEM(rec, 2));
        int64_t b = PyLong_AsLongLong(PyTuple_GET_ITEM(rec, 3));
        if (entry == NULL || PyErr_Occurred())
            goto done;
        Py_BEGIN_ALLOW_THREADS
        if (kind == 0)
            ((kernel_fn)entry)(0, a, ptrs, NULL, NULL);
        else
            ((sequence_fn)entry)((void *)(uintptr_t)a, b, ptrs, NULL);
        Py_END_ALLOW_THREADS
        __atomic_fetch_add(ctr_launches, 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(ctr_tasks, kind == 0 ? 1 : b, __ATOMIC_RELAXED);
    }
    result = PyList_New(PyTuple_GET_SIZE(outs));
    for (Py_ssize_t j = 0; result != NULL && j < PyTuple_GET_SIZE(outs); j++) {
        Py_ssize_t s = PyLong_AsSsize_t(PyTuple_GET_ITEM(outs, j));
        if (s < 0 || s >= n_slots || bufs[s] == NULL) {
            Py_CLEAR(result);
            PyErr_SetString(PyExc_TypeError, "qtrace: a malformed native plan record");
            break;
        }
        Py_INCREF(bufs[s]);
        PyList_SET_ITEM(result, j, bufs[s]);
    }
done:
    for (Py_ssize_t i = 0; i < n_slots; i++)
        Py_XDECREF(bufs[i]);
    if (bufs != small_bufs)
        PyMem_Free(bufs);
    if (ptrs != small_ptrs)
        PyMem_Free(ptrs);
    return result;
}

/* The node whose value owner `*o` (a new reference: replaced by the storage whose value
   is computed) holds, borrowed; NULL: nothing to compute; -1 through *bail: not a case
   for this path. */
static PyObject *flush_owner(PyObject **o, int *bail)
{
    PyObject *node;
    if (Py_TYPE(*o) == tensor_type) {
        PyObject *v = SLOT(*o, t_view);
        if (v != NULL && v != Py_None) {
            PyObject *st;
            if (!PyTuple_Check(v) || PyTuple_GET_SIZE(v) != 2
                || Py_TYPE(st = PyTuple_GET_ITEM(v, 0)) != storage_type
                || (node = SLOT(st, g_node)) == NULL) {
                *bail = 1;
                return NULL;
            }
            if (!prim_is(node, str_input)) {   /* a view of a pending base: the base */
                Py_INCREF(st);
                Py_SETREF(*o, st);
                return node;
            }
            /* a view of evaluated memory (pending._add): nothing to compute where NumPy
               views it (the base's node, an input, says so), else the tensor's own node */
            PyObject *arr = PyObject_CallOneArg(array_view_fn, *o);
            if (arr == NULL) {
                PyErr_Clear();
                *bail = 1;   /* (the Python function raises what it raises) */
                return NULL;
            }
            int viewed = arr != Py_None;
            Py_DECREF(arr);
            if (viewed)
                return node;
        }
        node = SLOT(*o, t_node);
    } else if (Py_TYPE(*o) == storage_type) {
        node = SLOT(*o, g_node);
    } else {
        node = NULL;
    }
    if (node == NULL)
        *bail = 1;
    return node;
}

/* graph.node.graph_struct of several outputs: the structure key (each output's struct and
   the positions of its leaves in the merged list, first seen first) and the merged leaf
   list, both new references; both NULL (no error) where there are more than
   MAX_MERGED leaves (the Python definition then), -1 on an error. */
#define MAX_MERGED 256
static int merge_leaves(PyObject **outs, int n, PyObject **skey, PyObject **leaves)
{
    PyObject *seen[MAX_MERGED];
    Py_ssize_t n_seen = 0;
    *skey = *leaves = NULL;
    PyObject *key = PyTuple_New(2 * n);
    if (key == NULL)
        return -1;
    for (int k = 0; k < n; k++) {
        PyObject *ls = SLOT(outs[k], node_off[S_LEAVES]);
        Py_ssize_t m = PyTuple_GET_SIZE(ls);
        PyObject *pos = PyTuple_New(m);
        if (pos == NULL) {
            Py_DECREF(key);
            return -1;
        }
        PyObject *st = SLOT(outs[k], node_off[S_STRUCT]);
        Py_INCREF(st);
        PyTuple_SET_ITEM(key, 2 * k, st);
        PyTuple_SET_ITEM(key, 2 * k + 1, pos);
        for (Py_ssize_t i = 0; i < m; i++) {
            PyObject *leaf = PyTuple_GET_ITEM(ls, i);
            Py_ssize_t j = 0;
            while (j < n_seen && seen[j] != leaf)
                j++;
            if (j == n_seen) {
                if (n_seen == MAX_MERGED) {
                    Py_DECREF(key);
                    return 0;
                }
                seen[n_seen++] = leaf;
            }
            PyObject *v = PyLong_FromSsize_t(j);
            if (v == NULL) {
                Py_DECREF(key);
                return -1;
            }
            PyTuple_SET_ITEM(pos, i, v);
        }
    }
    PyObject *merged_leaves = PyTuple_New(n_seen);
    if (merged_leaves == NULL) {
        Py_DECREF(key);
        return -1;
    }
    for (Py_ssize_t j = 0; j < n_seen; j++) {
        Py_INCREF(seen[j]);
        PyTuple_SET_ITEM(merged_leaves, j, seen[j]);
    }
    *skey = key;
    *leaves = merged_leaves;
    return 0;
}

static PyObject *flush(PyObject *self, PyObject *requested)
{
    if (!PyTuple_Check(requested))
        return PyErr_Format(PyExc_TypeError, "flush(requested): a tuple of tensors");
    if (by_struct == NULL || flush_py_fn == NULL || recent_py == NULL || leafsets == NULL
        || merged == NULL || tensor_type == NULL || storage_type == NULL
        || ndarray_type == NULL || data_offset < 0 || struct_result < 0)
        Py_RETURN_NOTIMPLEMENTED;
    PyObject *s = thread_state();
    if (s == NULL)
        return NULL;
    PyObject *pending = SLOT(s, s_pending);
    if (pending == NULL || !PyList_Check(pending)) {
        Py_DECREF(s);
        Py_RETURN_NOTIMPLEMENTED;
    }
    Py_INCREF(pending);
    PyObject *own[MAX_FLUSH_OWNERS], *nodes[MAX_FLUSH_NODES];
    int of[MAX_FLUSH_OWNERS];
    int n_own = 0, n_nodes = 0, bail = 0, native_ok = 1;
    PyObject *result = NULL, *nodes_t = NULL, *skey = NULL, *leaves = NULL, *plan = NULL;
    PyObject *rec = NULL, *bufs = NULL;
    Py_ssize_t n_req = PyTuple_GET_SIZE(requested);
    for (Py_ssize_t i = 0; !bail && i < n_req + PyList_GET_SIZE(pending); i++) {
        int required = i < n_req;
        PyObject *o;
        if (required) {
            o = PyTuple_GET_ITEM(requested, i);
            Py_INCREF(o);
        } else {
            PyObject *ref = PyList_GET_ITEM(pending, i - n_req);
            if (!PyWeakref_Check(ref)) {
                bail = 1;
                break;
            }
            if ((o = weak_target(ref)) == NULL)
                continue;
        }
        PyObject *node = flush_owner(&o, &bail);
        if (bail) {
            Py_DECREF(o);
            break;
        }
        if (prim_is(node, str_input) || (!required && prim_is(node, str_const))) {
            Py_DECREF(o);
            continue;
        }
        PyObject *ls = Py_TYPE(node) == node_type ? SLOT(node, node_off[S_LEAVES]) : NULL;
        int ready = ls != NULL && PyTuple_Check(ls);
        for (Py_ssize_t k = 0; ready && k < PyTuple_GET_SIZE(ls); k++) {
            PyObject *b = SLOT(PyTuple_GET_ITEM(ls, k), node_off[S_BUFFER]);
            if (b == NULL || b == Py_None)
                ready = 0;   /* a value of a function being traced */
            else if (Py_TYPE(b) != ndarray_type)
                native_ok = 0;
        }
        if (!ready) {
            Py_DECREF(o);
            if (required || ls == NULL || !PyTuple_Check(ls)) {
                bail = 1;   /* (the Python function raises what it raises) */
                break;
            }
            continue;
        }
        int k = 0;
        while (k < n_nodes && nodes[k] != node)
            k++;
        int dup = 0;
        for (int j = 0; j < n_own && !dup; j++)
            dup = own[j] == o;
        if ((k == n_nodes && n_nodes == MAX_FLUSH_NODES) || (!dup && n_own == MAX_FLUSH_OWNERS)) {
            Py_DECREF(o);
            bail = 1;
            break;
        }
        if (k == n_nodes) {
            Py_INCREF(node);
            nodes[n_nodes++] = node;
        }
        if (dup) {
            Py_DECREF(o);
        } else {
            own[n_own] = o;
            of[n_own++] = k;
        }
    }
    if (bail)
        goto not_mine;
    if (n_nodes) {
        /* the plan, by the graph's structure (graph.node.graph_struct) */
        nodes_t = PyTuple_New(n_nodes);
        if (nodes_t == NULL)
            goto fail;
        for (int k = 0; k < n_nodes; k++) {
            Py_INCREF(nodes[k]);
            PyTuple_SET_ITEM(nodes_t, k, nodes[k]);
        }
        if (n_nodes == 1) {
            leaves = SLOT(nodes[0], node_off[S_LEAVES]);
            Py_INCREF(leaves);
            PyObject *n_leaves = PyLong_FromSsize_t(PyTuple_GET_SIZE(leaves));
            skey = n_leaves == NULL ? NULL : PyTuple_Pack(2, SLOT(nodes[0], node_off[S_STRUCT]), n_leaves);
            Py_XDECREF(n_leaves);
        } else if (merge_leaves(nodes, n_nodes, &skey, &leaves) < 0) {
            goto fail;
        } else if (skey == NULL) {   /* many leaves: the Python definition */
            PyObject *r = PyObject_CallOneArg(graph_struct_fn, nodes_t);
            if (r != NULL && PyTuple_Check(r) && PyTuple_GET_SIZE(r) == 2
                && PyTuple_Check(PyTuple_GET_ITEM(r, 1))) {
                skey = PyTuple_GET_ITEM(r, 0);
                leaves = PyTuple_GET_ITEM(r, 1);
                Py_INCREF(skey);
                Py_INCREF(leaves);
            } else if (r != NULL) {
                PyErr_SetString(PyExc_TypeError, "qtrace: graph_struct gave no (key, leaves)");
            }
            Py_XDECREF(r);
        }
        if (skey == NULL)
            goto fail;
        PyObject *opts = PyObject_CallNoArgs(codegen_options_fn);
        PyObject *ck = opts == NULL ? NULL : PyTuple_Pack(2, skey, opts);
        Py_XDECREF(opts);
        if (ck == NULL)
            goto fail;
        plan = PyDict_GetItemWithError(by_struct, ck);
        Py_DECREF(ck);
        if (plan == NULL) {
            if (PyErr_Occurred())
                goto fail;
            goto not_mine;   /* compiled (or found by content) by the Python function */
        }
        Py_INCREF(plan);
        rec = PyObject_GetAttr(plan, str_native);
        if (rec == NULL)
            goto fail;
        if (rec != Py_None && (!PyTuple_Check(rec) || PyTuple_GET_SIZE(rec) != 8)) {
            PyErr_SetString(PyExc_TypeError, "qtrace: a malformed native plan record");
            goto fail;
        }
    }
    /* from here on this is the evaluation: the pending list is taken */
    {
        PyObject *fresh = PyList_New(0);
        PyObject *epoch = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type);
        if (fresh == NULL || epoch == NULL) {
            Py_XDECREF(fresh);
            Py_XDECREF(epoch);
            goto fail;
        }
        set_slot(s, s_pending, fresh);
        set_slot(s, s_epoch, epoch);
        Py_INCREF(zero_long);
        set_slot(s, s_count, zero_long);
        /* graph.node.forget_recent: sharing starts afresh (the tables hold leaf lists, so
           their buffers, until emptied) */
        PyObject *tables[] = {recent_py, leafsets, merged};
        for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++)
            if (PyDict_Check(tables[i]) && PyDict_GET_SIZE(tables[i]))
                PyDict_Clear(tables[i]);
        forget_recent_table();
    }
    if (n_nodes) {
        __atomic_fetch_add(ctr_evaluations, 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(ctr_hits, 1, __ATOMIC_RELAXED);
        if (rec != Py_None && native_ok) {
            bufs = run_native(rec, leaves);
        } else {
            PyObject *given = PyList_New(PyTuple_GET_SIZE(leaves));
            for (Py_ssize_t i = 0; given != NULL && i < PyTuple_GET_SIZE(leaves); i++) {
                PyObject *b = SLOT(PyTuple_GET_ITEM(leaves, i), node_off[S_BUFFER]);
                Py_INCREF(b);
                PyList_SET_ITEM(given, i, b);
            }
            if (given != NULL)
                bufs = PyObject_CallMethodObjArgs(plan, str_run, given, nodes_t, NULL);
            Py_XDECREF(given);
        }
        if (bufs == NULL)
            goto fail;
        if (!PyList_Check(bufs) || PyList_GET_SIZE(bufs) != n_nodes) {
            PyErr_SetString(PyExc_TypeError, "qtrace: a plan gave the wrong number of buffers");
            goto fail;
        }
        for (int k = 0; k < n_nodes; k++) {
            PyObject *leaf = result_leaf(nodes[k], PyList_GET_ITEM(bufs, k));
            if (leaf == NULL)
                goto fail;
            for (int j = 0; j < n_own; j++) {
                if (of[j] != k)
                    continue;
                PyObject *o = own[j];
                if (Py_TYPE(o) == storage_type) {
                    /* checked and replaced under one hold of the views lock: a write by
                       another thread in between would be undone */
                    if (views_take() < 0) {
                        Py_DECREF(leaf);
                        goto fail;
                    }
                    int rc = 0;
                    if (SLOT(o, g_node) == nodes[k]) {   /* (else written again meanwhile) */
                        Py_INCREF(leaf);   /* (set_base takes a reference) */
                        rc = set_base(o, leaf);
                    }
                    if (views_give_keeping(rc) < 0) {
                        Py_DECREF(leaf);
                        goto fail;
                    }
                } else if (SLOT(o, t_node) == nodes[k]) {
                    Py_INCREF(leaf);
                    set_slot(o, t_node, leaf);
                }
            }
            Py_DECREF(leaf);
        }
    }
    result = PyList_New(n_req);
    for (Py_ssize_t i = 0; result != NULL && i < n_req; i++) {
        PyObject *t = PyTuple_GET_ITEM(requested, i), *n = SLOT(t, t_node), *arr;
        PyObject *b = n != NULL ? SLOT(n, node_off[S_BUFFER]) : NULL;
        if (n != NULL && prim_is(n, str_input) && b != NULL && b != Py_None) {
            Py_INCREF(b);
            arr = b;
        } else if ((arr = PyObject_CallOneArg(array_view_fn, t)) == Py_None) {
            Py_DECREF(arr);   /* written to by another thread meanwhile */
            Py_SETREF(result, PyObject_CallOneArg(flush_py_fn, requested));
            break;
        }
        if (arr == NULL) {
            Py_CLEAR(result);
            break;
        }
        PyList_SET_ITEM(result, i, arr);
    }
    goto done;
not_mine:
    result = Py_NotImplemented;
    Py_INCREF(result);
    goto done;
fail:
    Py_CLEAR(result);
done:
    for (int j = 0; j < n_own; j++)
        Py_DECREF(own[j]);
    for (int k = 0; k < n_nodes; k++)
        Py_DECREF(nodes[k]);
    Py_XDECREF(nodes_t); Py_XDECREF(skey); Py_XDECREF(leaves); Py_XDECREF(plan);
    Py_XDECREF(rec); Py_XDECREF(bufs);
    Py_DECREF(pending);
    Py_DECREF(s);
    return result;
}

static PyMethodDef methods[] = {
    {"bind", bind, METH_VARARGS,
     "bind(Node, Leaf, structs, struct_fn, merge2, merged, leafsets, make_node_py, iota,\n"
     "     recent_cap, count_cap, merge_cap)\n"
     "Hand over node.py's classes, tables and fallbacks."},
    {"forget_recent", forget_recent_py, METH_NOARGS,
     "forget_recent()\nEmpty the sharing table (node.forget_recent)."},
    {"forget_structs", forget_structs_py, METH_NOARGS,
     "forget_structs()\nEmpty the struct cache (node._structs was emptied)."},
    {"table_stats", table_stats, METH_NOARGS,
     "table_stats() -> {table: (hits, misses)}\nLookups of the tables keyed by identity "
     "(struct_identity, struct_value, key, int_tuple, tuple, scalar) since the module loaded."},
    {"make_node", (PyCFunction)(void (*)(void))make_node, METH_FASTCALL,
     "make_node(prim, params, shape, dtype, inputs, device, weak=False)\n"
     "qtrace.graph.node.make_node, in C."},
    {"direct_slot_count", direct_slot_count, METH_O,
     "direct_slot_count(Tensor) -> int\nHow many of Tensor's operator slots are direct_slots' now."},
    {"direct_slots", direct_slots, METH_O,
     "direct_slots(Tensor) -> int\nPut the Methods' fast paths in Tensor's operator slots (how many)."},
    {"bind_tensors", bind_tensors, METH_VARARGS,
     "bind_tensors(Tensor, ThreadState, local, state, config, consider_cut, recipes, apply2,\n"
     "             scalar_node, scalars, consts)\nHand over the tracer's classes, tables and fallbacks."},
    {"bind_views", bind_views, METH_VARARGS,
     "bind_views(Storage, storage, leaf_view, reshape_node, lock, view_chain)\n"
     "Hand over the view machinery's class, functions and lock."},
    {"view_chain", (PyCFunction)(void (*)(void))view_chain_py, METH_FASTCALL,
     "view_chain(t, chain)\nqtrace.tracer.views.view_chain, in C."},
    {"bind_assign", bind_assign, METH_VARARGS,
     "bind_assign(assigned_values, apply_step, undo_step, assign, apply1)\n"
     "Hand over slice assignment's and the unary ops' Python definitions."},
    {"apply1", (PyCFunction)(void (*)(void))apply1, METH_FASTCALL,
     "apply1(name, x)\nqtrace.tracer.elementwise.apply1, with its fast path in C."},
    {"apply2", (PyCFunction)(void (*)(void))apply2, METH_FASTCALL,
     "apply2(name, x, y)\nqtrace.tracer.elementwise.apply2, with its fast path in C."},
    {"assign", (PyCFunction)(void (*)(void))assign_entry, METH_FASTCALL,
     "assign(t, new)\nqtrace.tracer.views.assign, in C."},
    {"set_pending_limit", set_pending_limit, METH_O,
     "set_pending_limit(n)\nconfig.max_pending_nodes changed to n (config calls it)."},
    {"note", note, METH_O, "note(owner)\nqtrace.tracer.pending.note, in C."},
    {"bind_jit", bind_jit, METH_VARARGS,
     "bind_jit(ndarray, numpy.empty, cpu.aligned_empty, data_offset, hits, launches, tasks)\n"
     "Hand over what jitted calls allocate with, and the addresses of stats counters."},
    {"jit_call", (PyCFunction)(void (*)(void))jit_call, METH_FASTCALL,
     "jit_call(specs, args)\nA jitted call of one kernel (qtrace.tracer.jit), or NotImplemented."},
    {"bind_graphs", bind_graphs, METH_VARARGS,
     "bind_graphs(libcuda, cupy.ndarray, buffers._State, cuda._streams, current_stream,\n"
     "            buffers._lock, replays) -> bool\n"
     "Hand over what a jitted call replaying a CUDA graph needs (False: no driver found)."},
    {"bind_launch", bind_launch, METH_VARARGS,
     "bind_launch(libcuda) -> bool\nFind cuLaunchKernel for cuda_launch (False: no driver found)."},
    {"cuda_launch", (PyCFunction)(void (*)(void))cuda_launch, METH_FASTCALL,
     "cuda_launch(function, grid, block, stream, *params)\nOne kernel launch through the driver."},
    {"graph_context", graph_context, METH_NOARGS,
     "graph_context() -> int\nThe calling thread's current CUDA context (0: none)."},
    {"bind_flush", bind_flush, METH_VARARGS,
     "bind_flush(graph_struct, result_leaf, array_view, flush_py, Struct, recent)\n"
     "Hand over what an eager evaluation follows and falls back to."},
    {"bind_plans", bind_plans, METH_VARARGS,
     "bind_plans(by_struct, codegen_options, evaluations)\n"
     "Hand over the runtime's plans by structure and the evaluations counter's address."},
    {"flush", flush, METH_O,
     "flush(requested)\nAn eager evaluation (qtrace.tracer.pending.flush), or NotImplemented."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "qtrace.graph._native",
    "The recording hot path of qtrace in C (see qtrace.graph.node).", -1, methods,
};

PyMODINIT_FUNC PyInit__native(void)
{
    str_const = PyUnicode_InternFromString("const");
    str_leaves = PyUnicode_InternFromString("leaves");
    zero_t = single_of(0);   /* (the shared (0,) and (1,)) */
    one_t = single_of(1);
    zero_long = PyLong_FromLong(0);
    one_long = PyLong_FromLong(1);
    str_data = PyUnicode_InternFromString("data");
    str_ptr = PyUnicode_InternFromString("ptr");
    str_c_contiguous = PyUnicode_InternFromString("_c_contiguous");
    str_cuda_graphs = PyUnicode_InternFromString("cuda_graphs");
    if (one_long == NULL || str_data == NULL || str_ptr == NULL || str_c_contiguous == NULL
        || str_cuda_graphs == NULL)
        return NULL;
    str_s = PyUnicode_InternFromString("s");
    str_max_pending = PyUnicode_InternFromString("max_pending_nodes");
    empty_tuple = PyTuple_New(0);
    str_slice = PyUnicode_InternFromString("slice");
    str_reshape = PyUnicode_InternFromString("reshape");
    str_transpose = PyUnicode_InternFromString("transpose");
    str_slice_update = PyUnicode_InternFromString("slice_update");
    str_input = PyUnicode_InternFromString("input");
    str_add = PyUnicode_InternFromString("add");
    str_acquire = PyUnicode_InternFromString("acquire");
    str_release = PyUnicode_InternFromString("release");
    str_broadcast = PyUnicode_InternFromString("broadcast");
    str_setitem_op = PyUnicode_InternFromString("qt.Tensor.__setitem__");
    str_native = PyUnicode_InternFromString("native");
    str_run = PyUnicode_InternFromString("run");
    str_name = PyUnicode_InternFromString("__name__");
    str_qtrace = PyUnicode_InternFromString("qtrace");
    full_slice = PySlice_New(NULL, NULL, NULL);
    if (str_name == NULL || str_qtrace == NULL || full_slice == NULL)
        return NULL;
    if (str_const == NULL || str_leaves == NULL || zero_t == NULL || one_t == NULL || zero_long == NULL
        || str_s == NULL || str_max_pending == NULL || empty_tuple == NULL || str_slice == NULL
        || str_reshape == NULL || str_transpose == NULL || str_slice_update == NULL || str_input == NULL || str_add == NULL
        || str_acquire == NULL || str_release == NULL || str_broadcast == NULL
        || str_setitem_op == NULL || str_native == NULL || str_run == NULL)
        return NULL;
    if (PyType_Ready(&MethodType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "ABI", QTRACE_NATIVE_ABI) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    if (PyType_Ready(&ViewsLockType) < 0 || PyModule_AddType(m, &ViewsLockType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&MethodType);
    if (PyModule_AddObject(m, "Method", (PyObject *)&MethodType) < 0) {
        Py_DECREF(&MethodType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

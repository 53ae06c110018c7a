/* qtrace.devices._workers: the CPU's worker threads, which spin before they sleep.
 *
 * A parallel launch splits a kernel's range into one part per thread; the calling thread
 * runs part 0 and the workers the others. With workers that sleep on a queue between
 * launches (qtrace.devices.cpu.WorkerPool, the pure-Python pool kept as the fallback),
 * every launch pays the operating system's wake-up of each worker and, through Python, a
 * hand-over of the GIL: ~50 us per launch measured on a 2-core virtual machine, more than
 * a 100k-element kernel's whole run. Here a worker waits for the next launch by spinning
 * on a generation counter for `spin_ns` (300 us by default; OpenMP runtimes and OpenBLAS do
 * the same), then sleeps on a condition variable; a launch that finds workers spinning
 * costs a few hundred nanoseconds. Kernels run without the GIL. A part may also be a
 * Python callable(start, end) (a block of a matrix product: NumPy releases the GIL inside);
 * a worker then takes the GIL around the call.
 *
 * Ctrl-C: the calling thread runs its part in pieces of about 20 ms (the first piece,
 * 16384 elements, measures the speed), checking Python's signals between pieces (taking
 * the GIL for that moment), and then every ~20 ms while it waits for the workers. On an
 * interrupt it sets the kernels' abort flag (whose address `configure` receives:
 * qtrace.kernels.interrupt), waits for the workers to stop at their next chunk, clears
 * the flag and raises.
 *
 * One launch at a time (a mutex, taken without holding the GIL); a forked child starts
 * its own threads at its first launch.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define RELAX() _mm_pause()
#elif defined(__aarch64__)
#define RELAX() __asm__ __volatile__("yield")
#else
#define RELAX() ((void)0)
#endif

typedef void (*kernel_t)(int64_t, int64_t, void *, void *, void *);

#define MAX_PARTS 4096
#define FIRST_PIECE 16384
#define SLICE_NS 20000000LL   /* the calling thread's pieces: about 20 ms each */

static struct {
    kernel_t fn;               /* the kernel, or NULL for a Python callable */
    PyObject *callable;
    int64_t bounds[MAX_PARTS + 1];
    int parts;
    void *args, *status;
    char *scratch;
    int64_t stride;
} job;

static pthread_t *threads;
static int n_workers;                 /* running worker threads */
static pid_t owner;                   /* the process that started them */
static atomic_uint_fast64_t generation;
static atomic_int remaining;          /* workers yet to finish the current generation */
static atomic_int quitting;
static uint_fast64_t first_generation;   /* the generation when the workers were started */
static pthread_mutex_t sleep_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sleep_cv = PTHREAD_COND_INITIALIZER;
static int sleepers;                  /* guarded by sleep_mu */
static pthread_mutex_t run_mu = PTHREAD_MUTEX_INITIALIZER;
static int64_t spin_ns = 300000;
static volatile int32_t *abort_flag;
static PyObject *worker_error;        /* the first exception a callable raised on a worker */
static atomic_uint_fast64_t stat_launches, stat_sleeps;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static char *scratch_of(int part)
{
    return job.scratch ? job.scratch + (int64_t)part * job.stride : NULL;
}

/* A callable's part on a worker thread: the GIL is taken around the call. */
static void call_on_worker(int64_t start, int64_t end)
{
    PyGILState_STATE st = PyGILState_Ensure();
    PyObject *r = PyObject_CallFunction(job.callable, "LL", (long long)start, (long long)end);
    if (r == NULL) {
        if (worker_error == NULL) {
            PyObject *type, *value, *tb;
            PyErr_Fetch(&type, &value, &tb);
            PyErr_NormalizeException(&type, &value, &tb);
            if (tb != NULL)
                PyException_SetTraceback(value, tb);
            Py_XDECREF(type);
            Py_XDECREF(tb);
            worker_error = value;
        } else {
            PyErr_Clear();
        }
    }
    Py_XDECREF(r);
    PyGILState_Release(st);
}

static void *worker_main(void *arg)
{
    int part = (int)(intptr_t)arg;
    uint_fast64_t seen = first_generation;   /* (not a fresh read: a launch may come first) */
    for (;;) {
        uint_fast64_t g;
        int64_t t0 = now_ns();
        unsigned spins = 0;
        while ((g = atomic_load_explicit(&generation, memory_order_acquire)) == seen) {
            if (atomic_load_explicit(&quitting, memory_order_relaxed))
                return NULL;
            if ((++spins & 63) == 0 && now_ns() - t0 > spin_ns) {
                pthread_mutex_lock(&sleep_mu);
                sleepers++;
                atomic_fetch_add_explicit(&stat_sleeps, 1, memory_order_relaxed);
                while (atomic_load(&generation) == seen && !atomic_load(&quitting))
                    pthread_cond_wait(&sleep_cv, &sleep_mu);
                sleepers--;
                pthread_mutex_unlock(&sleep_mu);
                t0 = now_ns();
            } else {
                RELAX();
            }
        }
        seen = g;
        if (atomic_load(&quitting))
            return NULL;
        if (part < job.parts) {
            if (job.fn)
                job.fn(job.bounds[part], job.bounds[part + 1], job.args, job.status, scratch_of(part));
            else
                call_on_worker(job.bounds[part], job.bounds[part + 1]);
        }
        atomic_fetch_sub_explicit(&remaining, 1, memory_order_acq_rel);
    }
}

static void stop_workers(void)
{
    if (n_workers == 0)
        return;
    atomic_store(&quitting, 1);
    pthread_mutex_lock(&sleep_mu);
    pthread_cond_broadcast(&sleep_cv);
    pthread_mutex_unlock(&sleep_mu);
    for (int i = 0; i < n_workers; i++)
        pthread_join(threads[i], NULL);
    free(threads);
    threads = NULL;
    n_workers = 0;
    atomic_store(&quitting, 0);
}

/* Start `n` workers (parts 1..n); 0 on success. */
static int start_workers(int n)
{
    threads = calloc(n > 0 ? (size_t)n : 1, sizeof(pthread_t));
    if (threads == NULL)
        return -1;
    first_generation = atomic_load(&generation);   /* (run_mu is held: no launch meanwhile) */
    for (int i = 0; i < n; i++) {
        if (pthread_create(&threads[i], NULL, worker_main, (void *)(intptr_t)(i + 1)) != 0) {
            n_workers = i;
            stop_workers();
            return -1;
        }
        n_workers = i + 1;
    }
    owner = getpid();
    return 0;
}

static int wanted_workers;

static PyObject *py_configure(PyObject *self, PyObject *args)
{
    int n;
    long long spin_us;
    unsigned long long flag;
    if (!PyArg_ParseTuple(args, "iLK", &n, &spin_us, &flag))
        return NULL;
    if (n < 0 || n >= MAX_PARTS) {
        PyErr_Format(PyExc_ValueError, "qtrace: %d worker threads (at most %d)", n, MAX_PARTS - 1);
        return NULL;
    }
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&run_mu);
    spin_ns = spin_us * 1000;
    abort_flag = (volatile int32_t *)(uintptr_t)flag;
    wanted_workers = n;
    if (owner != getpid()) {   /* (a forked child: the parent's threads do not exist here) */
        threads = NULL;
        n_workers = 0;
    }
    if (n_workers != n) {
        stop_workers();
        failed = start_workers(n);
    }
    pthread_mutex_unlock(&run_mu);
    Py_END_ALLOW_THREADS
    if (failed) {
        PyErr_SetString(PyExc_RuntimeError, "qtrace: could not start the CPU worker threads");
        return NULL;
    }
    Py_RETURN_NONE;
}

/* The calling thread's part, in pieces, with Python's signals checked between them (the
 * GIL is not held on entry unless `callable`). Returns -1 with an exception set on an
 * interrupt or an error. */
static int run_own_part(int64_t start, int64_t end, int64_t unit, PyThreadState **saved)
{
    int64_t piece = end - start < FIRST_PIECE ? end - start : FIRST_PIECE;
    while (start < end) {
        int64_t stop = start + piece < end ? start + piece : end;
        int64_t t0 = now_ns();
        if (job.fn) {
            job.fn(start, stop, job.args, job.status, scratch_of(0));
        } else {
            PyEval_RestoreThread(*saved);
            PyObject *r = PyObject_CallFunction(job.callable, "LL", (long long)start, (long long)stop);
            *saved = PyEval_SaveThread();
            if (r == NULL)
                return -1;
            Py_DECREF(r);
        }
        int64_t elapsed = now_ns() - t0;
        int64_t done = stop - start;
        start = stop;
        if (start >= end)
            break;
        PyEval_RestoreThread(*saved);
        int sig = PyErr_CheckSignals();
        *saved = PyEval_SaveThread();
        if (sig < 0)
            return -1;
        if (elapsed > 0) {
            double rate = (double)done / (double)elapsed;
            int64_t next = (int64_t)(rate * SLICE_NS) / unit * unit;
            piece = next > unit ? next : unit;
        } else {
            piece = end - start;
        }
    }
    return 0;
}

/* Wait for the workers to finish their parts: spin for spin_ns, then sleep in short naps,
 * checking Python's signals every ~20 ms (a Ctrl-C while the caller's own part is done but
 * the workers' are not). On a signal the abort flag is set, so the workers' kernels stop at
 * their next chunk, and -1 is returned once they have (with the exception set). */
static int wait_for_workers(PyThreadState **saved, int check_signals)
{
    int64_t t0 = now_ns(), checked = t0;
    unsigned spins = 0;
    int interrupted = 0;
    struct timespec nap = {0, 20000};
    while (atomic_load_explicit(&remaining, memory_order_acquire) > 0) {
        if ((++spins & 63) != 0) {
            RELAX();
            continue;
        }
        int64_t now = now_ns();
        if (now - t0 <= spin_ns)
            continue;
        nanosleep(&nap, NULL);
        if (check_signals && !interrupted && now - checked > SLICE_NS) {
            checked = now;
            PyEval_RestoreThread(*saved);
            interrupted = PyErr_CheckSignals() < 0;
            *saved = PyEval_SaveThread();
            if (interrupted && abort_flag != NULL)
                *abort_flag = 1;
        }
    }
    return interrupted ? -1 : 0;
}

static PyObject *py_run(PyObject *self, PyObject *args)
{
    PyObject *target, *block;
    long long start, extent, unit, stride, max_parts = 0;
    unsigned long long status, scratch;
    if (!PyArg_ParseTuple(args, "OLLLOKKL|L", &target, &start, &extent, &unit, &block, &status,
                          &scratch, &stride, &max_parts))
        return NULL;
    void *argp = NULL;   /* the kernel's argument block: bytes (packed pointers) or None */
    if (PyBytes_Check(block)) {
        argp = PyBytes_AS_STRING(block);
    } else if (block != Py_None) {
        PyErr_SetString(PyExc_TypeError, "qtrace: a launch's argument block must be bytes or None");
        return NULL;
    }
    kernel_t fn = NULL;
    if (PyLong_Check(target)) {
        fn = (kernel_t)(uintptr_t)PyLong_AsUnsignedLongLong(target);
        if (PyErr_Occurred())
            return NULL;
    } else if (!PyCallable_Check(target)) {
        PyErr_SetString(PyExc_TypeError, "qtrace: a launch needs a kernel address or a callable");
        return NULL;
    }
    if (extent <= 0)
        Py_RETURN_NONE;
    if (unit < 1)
        unit = 1;
    PyObject *error = NULL;
    int failed = 0;
    PyThreadState *saved = PyEval_SaveThread();
    pthread_mutex_lock(&run_mu);
    if (owner != getpid() && wanted_workers > 0) {   /* a forked child: its own threads */
        threads = NULL;
        n_workers = 0;
        if (start_workers(wanted_workers) != 0)
            n_workers = 0;
    }
    int parts = n_workers + 1;
    if (max_parts > 0 && parts > max_parts)
        parts = (int)max_parts;
    if (parts > extent)
        parts = (int)extent;
    job.fn = fn;
    job.callable = fn ? NULL : target;
    job.parts = parts;
    job.args = argp;
    job.status = (void *)(uintptr_t)status;
    job.scratch = (char *)(uintptr_t)scratch;
    job.stride = stride;
    for (int i = 0; i < parts; i++) {
        int64_t b = (int64_t)((__int128)extent * i / parts);
        job.bounds[i] = start + (unit > 1 ? b / unit * unit : b);
    }
    job.bounds[parts] = start + extent;
    int workers = n_workers;
    if (workers > 0) {
        atomic_store_explicit(&remaining, workers, memory_order_relaxed);
        atomic_fetch_add_explicit(&generation, 1, memory_order_release);
        pthread_mutex_lock(&sleep_mu);
        if (sleepers > 0)
            pthread_cond_broadcast(&sleep_cv);
        pthread_mutex_unlock(&sleep_mu);
    }
    atomic_fetch_add_explicit(&stat_launches, 1, memory_order_relaxed);
    failed = run_own_part(job.bounds[0], job.bounds[1], unit, &saved);
    if (failed && workers > 0 && abort_flag != NULL)
        *abort_flag = 1;   /* the workers stop at their next chunk */
    if (workers > 0 && wait_for_workers(&saved, !failed) < 0)
        failed = 1;        /* (a Ctrl-C while waiting: wait_for_workers set the flag) */
    if (failed && abort_flag != NULL)
        *abort_flag = 0;
    error = worker_error;
    worker_error = NULL;
    job.callable = NULL;
    pthread_mutex_unlock(&run_mu);
    PyEval_RestoreThread(saved);
    if (failed) {
        Py_XDECREF(error);
        return NULL;
    }
    if (error != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(error), error);
        Py_DECREF(error);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* A block of a matrix product through a CBLAS ?gemm (row-major): a kernel_t whose argument
 * block is a struct gemm (packed by qtrace.devices.cpu_matmul), computing rows (or columns)
 * start..end of C = op(A) op(B). The BLAS is held to one thread meanwhile. */
struct gemm {
    void *fn;
    int64_t ilp64, single, trans_a, trans_b, split_rows, m, n, k;
    char *a;
    int64_t lda;
    char *b;
    int64_t ldb;
    char *c;
    int64_t ldc;
};

typedef void (*dgemm64_t)(int, int, int, int64_t, int64_t, int64_t, double, const void *, int64_t,
                          const void *, int64_t, double, void *, int64_t);
typedef void (*dgemm32_t)(int, int, int, int32_t, int32_t, int32_t, double, const void *, int32_t,
                          const void *, int32_t, double, void *, int32_t);
typedef void (*sgemm64_t)(int, int, int, int64_t, int64_t, int64_t, float, const void *, int64_t,
                          const void *, int64_t, float, void *, int64_t);
typedef void (*sgemm32_t)(int, int, int, int32_t, int32_t, int32_t, float, const void *, int32_t,
                          const void *, int32_t, float, void *, int32_t);

enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };

static void gemm_block(int64_t start, int64_t end, void *args, void *status, void *scratch)
{
    const struct gemm *g = args;
    int64_t size = g->single ? 4 : 8;
    int64_t m = g->m, n = g->n;
    const char *a = g->a, *b = g->b;
    char *c = g->c;
    if (g->split_rows) {   /* rows start..end of op(A) and of C */
        m = end - start;
        a += (g->trans_a ? start : start * g->lda) * size;
        c += start * g->ldc * size;
    } else {               /* columns start..end of op(B) and of C */
        n = end - start;
        b += (g->trans_b ? start * g->ldb : start) * size;
        c += start * size;
    }
    int ta = g->trans_a ? TRANS : NO_TRANS, tb = g->trans_b ? TRANS : NO_TRANS;
    if (g->single && g->ilp64)
        ((sgemm64_t)g->fn)(ROW_MAJOR, ta, tb, m, n, g->k, 1.0f, a, g->lda, b, g->ldb, 0.0f, c, g->ldc);
    else if (g->single)
        ((sgemm32_t)g->fn)(ROW_MAJOR, ta, tb, (int32_t)m, (int32_t)n, (int32_t)g->k, 1.0f, a,
                           (int32_t)g->lda, b, (int32_t)g->ldb, 0.0f, c, (int32_t)g->ldc);
    else if (g->ilp64)
        ((dgemm64_t)g->fn)(ROW_MAJOR, ta, tb, m, n, g->k, 1.0, a, g->lda, b, g->ldb, 0.0, c, g->ldc);
    else
        ((dgemm32_t)g->fn)(ROW_MAJOR, ta, tb, (int32_t)m, (int32_t)n, (int32_t)g->k, 1.0, a,
                           (int32_t)g->lda, b, (int32_t)g->ldb, 0.0, c, (int32_t)g->ldc);
}

static PyObject *py_stats(PyObject *self, PyObject *unused)
{
    return Py_BuildValue("{s:K,s:K,s:i}", "launches", (unsigned long long)atomic_load(&stat_launches),
                         "sleeps", (unsigned long long)atomic_load(&stat_sleeps), "workers", n_workers);
}

static PyObject *py_gemm_block(PyObject *self, PyObject *unused)
{
    return PyLong_FromVoidPtr((void *)gemm_block);
}

static PyMethodDef methods[] = {
    {"configure", py_configure, METH_VARARGS,
     "configure(workers, spin_us, abort_flag_address): start (or restart) the worker threads."},
    {"run", py_run, METH_VARARGS,
     "run(kernel_address_or_callable, start, extent, unit, args_bytes, status, scratch, stride"
     "[, max_parts]): the range [start, start + extent) split over the calling thread and the "
     "workers (at most max_parts parts when given and positive)."},
    {"stats", py_stats, METH_NOARGS, "launches, sleeps (of workers) and the number of workers."},
    {"gemm_block", py_gemm_block, METH_NOARGS,
     "The address of the kernel computing a block of a product from a CBLAS gemm (see struct gemm)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_workers", "qtrace's CPU worker threads (see _workers.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__workers(void)
{
    return PyModule_Create(&module_def);
}

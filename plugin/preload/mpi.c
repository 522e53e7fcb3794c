/*
 * libzipccl-preload.so, the MPI interposer: MPI_Init, MPI_Init_thread,
 * MPI_Allreduce, MPI_Iallreduce and MPI_Finalize (docs/preload.md).
 *
 * The library must load into processes without MPI (a NCCL job, python before
 * mpi4py dlopens libmpi), so it has no link-time reference to MPI: the real
 * functions (PMPI_*) and Open MPI's predefined handles (MPI_COMM_WORLD,
 * MPI_FLOAT, MPI_SUM are addresses of data objects in libmpi) are looked up
 * with dlsym the first time a wrapper runs. mpi.h only gives the types; its
 * handle macros are never used here. Without Open MPI's handles (another MPI),
 * every call passes through untouched.
 *
 * An eligible MPI_Allreduce (preload.h's zp_eligible, or zp_eligible_raw under
 * ZIPCCL_CODEC=none with ZIPCCL_PRELOAD_RAW=1, plus: MPI_FLOAT or MPI_DOUBLE,
 * MPI_SUM, an intracommunicator of more than one rank) runs on a zipccl communicator
 * made for its MPI communicator at its first eligible call (collective: the
 * conditions are the same on every rank of a call) over a PMPI_Comm_dup of it.
 * The zipccl communicator is cached as an MPI attribute, so that it goes when
 * the MPI communicator is freed, and kept in a list, so that MPI_Finalize can
 * destroy the rest (writing their statistics) before the real one. zipccl
 * itself is libzipccl.so.0, loaded at the first eligible call (preload.h).
 *
 * Whether zipccl is used at all is agreed by every rank inside MPI_Init, before
 * any call takes a path (mpi_agree_use): a rank whose ZIPCCL_* settings are
 * invalid or differ from the others' would otherwise pass its calls to MPI
 * while they wait in zipccl.
 */
#include "plugin/preload/preload.h"

#include "common/log.h"

#include <mpi.h>

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the real MPI ------------------------------------------------------------------------- */

typedef struct zp_mpi {
    /* pass-through: these always resolve when the wrappers are called from an MPI program */
    int (*init)(int *, char ***);
    int (*init_thread)(int *, char ***, int, int *);
    int (*finalize)(void);
    int (*allreduce)(const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm);
    int (*iallreduce)(const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm, MPI_Request *);

    /* interposition: everything below resolved */
    int interpose;
    int (*allgather)(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, MPI_Comm);
    int (*bcast)(void *, int, MPI_Datatype, int, MPI_Comm);
    int (*comm_dup)(MPI_Comm, MPI_Comm *);
    int (*comm_free)(MPI_Comm *);
    int (*comm_size)(MPI_Comm, int *);
    int (*comm_rank)(MPI_Comm, int *);
    int (*comm_test_inter)(MPI_Comm, int *);
    int (*comm_compare)(MPI_Comm, MPI_Comm, int *);
    int (*comm_create_keyval)(MPI_Comm_copy_attr_function *, MPI_Comm_delete_attr_function *, int *,
                              void *);
    int (*comm_free_keyval)(int *);
    int (*comm_get_attr)(MPI_Comm, int, void *, int *);
    int (*comm_set_attr)(MPI_Comm, int, void *);
    int (*comm_delete_attr)(MPI_Comm, int);
    int (*comm_set_errhandler)(MPI_Comm, MPI_Errhandler);
    int (*comm_call_errhandler)(MPI_Comm, int);
    int (*grequest_start)(MPI_Grequest_query_function *, MPI_Grequest_free_function *,
                          MPI_Grequest_cancel_function *, void *, MPI_Request *);
    int (*grequest_complete)(MPI_Request);
    int (*status_set_elements)(MPI_Status *, MPI_Datatype, int);
    int (*status_set_cancelled)(MPI_Status *, int);
    MPI_Comm comm_world, comm_null;
    MPI_Datatype dt_float, dt_double, dt_byte, dt_int;
    MPI_Op op_sum, op_max;
    MPI_Errhandler errors_return;
} zp_mpi_t;

static pthread_once_t mpi_once = PTHREAD_ONCE_INIT;
static zp_mpi_t mpi_real;
static int mpi_found; /* the pass-through functions resolved */
static int mpi_finalized;
static int mpi_use_zipccl; /* every rank agreed at MPI_Init: valid, alike, PRELOAD_MPI on */

/* libmpi when a dlopen with RTLD_LOCAL hid it from the global scope; NULL otherwise. */
static void *libmpi_handle(void)
{
    static const char *const names[] = {"libmpi.so.40", "libmpi.so"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        void *h = dlopen(names[i], RTLD_LAZY | RTLD_NOLOAD);
        if (h)
            return h;
    }
    return NULL;
}

static void *lookup_function(void *lib, const char *name)
{
    void *p = dlsym(RTLD_NEXT, name);
    if (!p)
        p = dlsym(RTLD_DEFAULT, name);
    if (!p && lib)
        p = dlsym(lib, name);
    return p;
}

/*
 * A data object: the global scope first, because an executable linked against
 * libmpi may hold copy-relocated predefined handles that libmpi itself then uses
 * (RTLD_NEXT would find libmpi's unused original).
 */
static void *lookup_data(void *lib, const char *name)
{
    void *p = dlsym(RTLD_DEFAULT, name);
    if (!p && lib)
        p = dlsym(lib, name);
    return p;
}

/* Assigns a looked-up address to a function pointer (ISO C has no void * to function cast). */
#define RESOLVE(field, name, missing)                                                              \
    do {                                                                                           \
        void *p_ = lookup_function(lib, name);                                                     \
        if (!p_)                                                                                   \
            missing = name;                                                                        \
        memcpy(&m->field, &p_, sizeof(p_));                                                        \
    } while (0)

#define RESOLVE_DATA(field, name, missing)                                                         \
    do {                                                                                           \
        void *p_ = lookup_data(lib, name);                                                         \
        if (!p_)                                                                                   \
            missing = name;                                                                        \
        m->field = p_;                                                                             \
    } while (0)

static void mpi_resolve(void)
{
    zp_mpi_t *m = &mpi_real;
    const char *missing = NULL, *missing_interpose = NULL;
    void *lib = libmpi_handle();

    RESOLVE(init, "PMPI_Init", missing);
    RESOLVE(init_thread, "PMPI_Init_thread", missing);
    RESOLVE(finalize, "PMPI_Finalize", missing);
    RESOLVE(allreduce, "PMPI_Allreduce", missing);
    RESOLVE(iallreduce, "PMPI_Iallreduce", missing);
    if (missing) {
        ZC_ERROR("libzipccl-preload: %s not found: the MPI wrappers were called in a process "
                 "without an MPI library",
                 missing);
        return;
    }
    mpi_found = 1;

    RESOLVE(allgather, "PMPI_Allgather", missing_interpose);
    RESOLVE(bcast, "PMPI_Bcast", missing_interpose);
    RESOLVE(comm_dup, "PMPI_Comm_dup", missing_interpose);
    RESOLVE(comm_free, "PMPI_Comm_free", missing_interpose);
    RESOLVE(comm_size, "PMPI_Comm_size", missing_interpose);
    RESOLVE(comm_rank, "PMPI_Comm_rank", missing_interpose);
    RESOLVE(comm_test_inter, "PMPI_Comm_test_inter", missing_interpose);
    RESOLVE(comm_compare, "PMPI_Comm_compare", missing_interpose);
    RESOLVE(comm_create_keyval, "PMPI_Comm_create_keyval", missing_interpose);
    RESOLVE(comm_free_keyval, "PMPI_Comm_free_keyval", missing_interpose);
    RESOLVE(comm_get_attr, "PMPI_Comm_get_attr", missing_interpose);
    RESOLVE(comm_set_attr, "PMPI_Comm_set_attr", missing_interpose);
    RESOLVE(comm_delete_attr, "PMPI_Comm_delete_attr", missing_interpose);
    RESOLVE(comm_set_errhandler, "PMPI_Comm_set_errhandler", missing_interpose);
    RESOLVE(comm_call_errhandler, "PMPI_Comm_call_errhandler", missing_interpose);
    RESOLVE(grequest_start, "PMPI_Grequest_start", missing_interpose);
    RESOLVE(grequest_complete, "PMPI_Grequest_complete", missing_interpose);
    RESOLVE(status_set_elements, "PMPI_Status_set_elements", missing_interpose);
    RESOLVE(status_set_cancelled, "PMPI_Status_set_cancelled", missing_interpose);
    /* Open MPI's predefined handles (mpi.h: OMPI_PREDEFINED_GLOBAL) */
    RESOLVE_DATA(comm_world, "ompi_mpi_comm_world", missing_interpose);
    RESOLVE_DATA(comm_null, "ompi_mpi_comm_null", missing_interpose);
    RESOLVE_DATA(dt_float, "ompi_mpi_float", missing_interpose);
    RESOLVE_DATA(dt_double, "ompi_mpi_double", missing_interpose);
    RESOLVE_DATA(dt_byte, "ompi_mpi_byte", missing_interpose);
    RESOLVE_DATA(dt_int, "ompi_mpi_int", missing_interpose);
    RESOLVE_DATA(op_sum, "ompi_mpi_op_sum", missing_interpose);
    RESOLVE_DATA(op_max, "ompi_mpi_op_max", missing_interpose);
    RESOLVE_DATA(errors_return, "ompi_mpi_errors_return", missing_interpose);
    if (missing_interpose) {
        ZC_WARN("libzipccl-preload: %s not found (the MPI library is not Open MPI?): every MPI "
                "call passes through untouched",
                missing_interpose);
        return;
    }
    m->interpose = 1;
}

/* The real MPI; NULL (logged once) when the process has none. */
static const zp_mpi_t *mpi(void)
{
    pthread_once(&mpi_once, mpi_resolve);
    return mpi_found ? &mpi_real : NULL;
}

/* ---- bootstrap over MPI ------------------------------------------------------------------- */

/* The bootstrap's context: a duplicate of the user's communicator, used only while creating. */
typedef struct boot_ctx {
    const zp_mpi_t *m;
    MPI_Comm dup;
} boot_ctx_t;

/* MPI return code -> zc_status_t (the one conversion at this edge). */
static zc_status_t mpi_to_zc(int rc)
{
    return rc == MPI_SUCCESS ? ZC_OK : ZC_ERR_IO;
}

static zc_status_t boot_allgather(void *ctx, const void *mine, size_t len, void *all)
{
    boot_ctx_t *b = ctx;
    if (len > INT_MAX)
        return ZC_ERR_INVALID_ARG;
    int rc = b->m->allgather(mine, (int)len, b->m->dt_byte, all, (int)len, b->m->dt_byte, b->dup);
    if (rc != MPI_SUCCESS)
        ZC_ERROR("libzipccl-preload: bootstrap PMPI_Allgather of %zu bytes failed (MPI error %d)",
                 len, rc);
    return mpi_to_zc(rc);
}

static zc_status_t boot_broadcast(void *ctx, void *buf, size_t len, int root)
{
    boot_ctx_t *b = ctx;
    if (len > INT_MAX)
        return ZC_ERR_INVALID_ARG;
    int rc = b->m->bcast(buf, (int)len, b->m->dt_byte, root, b->dup);
    if (rc != MPI_SUCCESS)
        ZC_ERROR("libzipccl-preload: bootstrap PMPI_Bcast of %zu bytes from rank %d failed (MPI "
                 "error %d)",
                 len, root, rc);
    return mpi_to_zc(rc);
}

/* The duplicate is freed by comm_build, never here: this may run in an attribute callback. */
static void boot_destroy(void *ctx)
{
    free(ctx);
}

static const zp_coll_ops_t boot_ops = {
    .allgather = boot_allgather,
    .broadcast = boot_broadcast,
    .destroy = boot_destroy,
};

/* The agreements' collectives: the same, on a context that is not zipccl's to free. */
static const zp_coll_ops_t agree_ops = {
    .allgather = boot_allgather,
    .broadcast = boot_broadcast,
};

/* ---- zipccl communicators of MPI communicators -------------------------------------------- */

#define STATS_PATH_MAX 4200

/* One MPI communicator's zipccl communicator; the value of the keyval attribute. */
typedef struct zp_mpi_comm {
    MPI_Comm comm;
    zc_comm_t *zc; /* NULL: creation failed; every call passes through */
    int failed;    /* a call failed here: agreed at the next eligible call (call_agree) */
    int off;       /* some rank's call failed: every later call passes through, on every rank */
    int linked;    /* in the list (under comms_lock) */
    struct zp_mpi_comm *prev, *next;
} zp_mpi_comm_t;

/* zc of an entry that has one: the engine is loaded. */
static void comm_destroy_zc(zp_mpi_comm_t *e)
{
    if (e->zc)
        zp_engine()->comm_destroy(e->zc); /* local: prints and writes the statistics */
    e->zc = NULL;
}

static pthread_mutex_t comms_lock = PTHREAD_MUTEX_INITIALIZER;
static zp_mpi_comm_t *comms; /* every entry whose attribute is set */
static int comms_keyval = MPI_KEYVAL_INVALID;
static unsigned comms_created; /* zipccl communicators made in this process */
static int stats_world_taken;  /* a communicator writes ZIPCCL_STATS_FILE's own name */

static void comm_unlink(zp_mpi_comm_t *e)
{
    pthread_mutex_lock(&comms_lock);
    if (e->linked) {
        if (e->prev)
            e->prev->next = e->next;
        else
            comms = e->next;
        if (e->next)
            e->next->prev = e->prev;
        e->linked = 0;
    }
    pthread_mutex_unlock(&comms_lock);
}

/* The communicator is being freed (MPI_Comm_free, MPI_Comm_delete_attr, MPI_Finalize). */
static int attr_delete(MPI_Comm comm, int keyval, void *value, void *extra)
{
    zp_mpi_comm_t *e = value;
    comm_unlink(e);
    comm_destroy_zc(e);
    free(e);
    return MPI_SUCCESS;
}

/* A duplicate gets its own zipccl communicator at its first eligible call. */
static int attr_copy(MPI_Comm comm, int keyval, void *extra, void *value_in, void *value_out,
                     int *flag)
{
    *flag = 0;
    return MPI_SUCCESS;
}

/*
 * ZIPCCL_STATS_FILE for a new communicator: "%r" is the MPI_COMM_WORLD rank
 * (zipccl would put the rank in this communicator); the first communicator
 * congruent to MPI_COMM_WORLD writes the name as given, every other one adds
 * ".comm<n>", n counting the zipccl communicators of this process.
 */
static void stats_path(const zp_mpi_t *m, MPI_Comm comm, const char *pattern, unsigned n, char *out,
                       size_t len)
{
    int world_rank = 0, cmp = MPI_UNEQUAL;
    size_t o = 0;

    m->comm_rank(m->comm_world, &world_rank);
    m->comm_compare(comm, m->comm_world, &cmp);
    for (const char *p = pattern; *p && o + 16 < len; p++) {
        if (p[0] == '%' && p[1] == 'r') {
            o += (size_t)snprintf(out + o, len - o, "%d", world_rank);
            p++;
        } else {
            out[o++] = *p;
        }
    }
    out[o] = '\0';
    if ((cmp == MPI_IDENT || cmp == MPI_CONGRUENT) && !stats_world_taken)
        stats_world_taken = 1;
    else
        snprintf(out + o, len - o, ".comm%u", n);
}

/*
 * Makes @p e->zc for @p e->comm (@p size ranks, this one @p rank). Collective:
 * every rank of the communicator runs it in the same call. The ranks agree
 * twice (zp_agree): before the bootstrap, that every rank has the engine (a
 * rank without it must not leave the others in the bootstrap's collectives),
 * and at the end, whether it worked (a rank that failed makes every rank pass
 * through).
 */
static void comm_build(const zp_mpi_t *m, zp_mpi_comm_t *e, int rank, int size)
{
    const zc_config_t *cfg = zp_config();
    MPI_Comm dup;
    zc_comm_t *zc = NULL;
    zc_status_t status = ZC_ERR_NO_MEMORY;
    int rc;

    rc = m->comm_dup(e->comm, &dup);
    if (rc != MPI_SUCCESS) {
        /* local failure of a collective: MPI's own error handler has had its say */
        ZC_ERROR("libzipccl-preload: PMPI_Comm_dup failed (MPI error %d): this communicator's "
                 "calls go to MPI unchanged",
                 rc);
        return;
    }
    m->comm_set_errhandler(dup, m->errors_return);

    const zp_engine_t *eng = zp_engine(); /* loads it: logged once when it cannot */
    boot_ctx_t *b = calloc(1, sizeof(*b)), agree_ctx = {.m = m, .dup = dup};
    if (!zp_agree(&agree_ops, &agree_ctx, size, eng && b)) {
        if (eng && b)
            ZC_WARN("libzipccl-preload: rank %d of %d: another rank cannot use zipccl; this "
                    "communicator's calls go to MPI unchanged",
                    rank, size);
        free(b);
        m->comm_free(&dup);
        return;
    }

    char stats_file[STATS_PATH_MAX];
    const char *stats = cfg->stats_file[0] ? stats_file : NULL;
    pthread_mutex_lock(&comms_lock);
    unsigned n = ++comms_created;
    if (stats)
        stats_path(m, e->comm, cfg->stats_file, n, stats_file, sizeof(stats_file));
    pthread_mutex_unlock(&comms_lock);

    b->m = m;
    b->dup = dup;
    status = zp_comm_init(eng, rank, size, &boot_ops, b, stats, &zc); /* takes b */

    if (!zp_agree(&agree_ops, &agree_ctx, size, status == ZC_OK)) {
        if (status != ZC_OK)
            ZC_ERROR("libzipccl-preload: rank %d of %d: cannot create the zipccl communicator: "
                     "%s; this communicator's calls go to MPI unchanged",
                     rank, size, zc_status_string(status));
        else
            ZC_WARN("libzipccl-preload: rank %d of %d: another rank could not create its zipccl "
                    "communicator; this communicator's calls go to MPI unchanged",
                    rank, size);
        if (zc)
            eng->comm_destroy(zc);
        zc = NULL;
    } else {
        ZC_INFO("libzipccl-preload: rank %d of %d: zipccl communicator %u ready%s%s", rank, size, n,
                stats ? ", statistics to " : "", stats ? stats : "");
    }
    /* the bootstrap is not used after creation */
    m->comm_free(&dup);
    e->zc = zc;
}

/*
 * The entry of @p comm, made (collectively) at its first eligible call; NULL
 * when none can be attached (the call then passes through on every rank).
 */
static zp_mpi_comm_t *comm_get(const zp_mpi_t *m, MPI_Comm comm, int rank, int size)
{
    zp_mpi_comm_t *e = NULL;
    int flag = 0, rc;

    pthread_mutex_lock(&comms_lock);
    if (comms_keyval == MPI_KEYVAL_INVALID) {
        rc = m->comm_create_keyval(attr_copy, attr_delete, &comms_keyval, NULL);
        if (rc != MPI_SUCCESS) {
            comms_keyval = MPI_KEYVAL_INVALID;
            pthread_mutex_unlock(&comms_lock);
            ZC_LOG_ONCE(ZC_LOG_ERROR,
                        "libzipccl-preload: PMPI_Comm_create_keyval failed (MPI error %d): MPI "
                        "calls pass through untouched",
                        rc);
            return NULL;
        }
    }
    int keyval = comms_keyval;
    pthread_mutex_unlock(&comms_lock);

    if (m->comm_get_attr(comm, keyval, &e, &flag) == MPI_SUCCESS && flag)
        return e;

    e = calloc(1, sizeof(*e));
    if (!e) {
        ZC_ERROR("libzipccl-preload: out of memory for a communicator entry");
        return NULL;
    }
    e->comm = comm;
    comm_build(m, e, rank, size);
    rc = m->comm_set_attr(comm, keyval, e);
    if (rc != MPI_SUCCESS) {
        ZC_ERROR("libzipccl-preload: PMPI_Comm_set_attr failed (MPI error %d)", rc);
        comm_destroy_zc(e);
        free(e);
        return NULL;
    }
    pthread_mutex_lock(&comms_lock);
    e->next = comms;
    if (comms)
        comms->prev = e;
    comms = e;
    e->linked = 1;
    pthread_mutex_unlock(&comms_lock);
    return e;
}

/* Destroys every zipccl communicator left (statistics written) and the keyval. */
static void comms_destroy_all(const zp_mpi_t *m)
{
    pthread_mutex_lock(&comms_lock);
    zp_mpi_comm_t *list = comms;
    int keyval = comms_keyval;
    comms = NULL;
    for (zp_mpi_comm_t *e = list; e; e = e->next)
        e->linked = 0;
    comms_keyval = MPI_KEYVAL_INVALID;
    pthread_mutex_unlock(&comms_lock);

    for (zp_mpi_comm_t *e = list, *next; e; e = next) {
        next = e->next;
        /* destroyed here, in creation order of the list; the callback then frees the entry */
        comm_destroy_zc(e);
        if (m->comm_delete_attr(e->comm, keyval) != MPI_SUCCESS)
            ZC_WARN("libzipccl-preload: PMPI_Comm_delete_attr failed at MPI_Finalize");
    }
    if (keyval != MPI_KEYVAL_INVALID)
        m->comm_free_keyval(&keyval);
}

/* ---- the wrappers -------------------------------------------------------------------------- */

/*
 * The zipccl element type of an eligible call, else -1: what preload.h says,
 * plus MPI_FLOAT or MPI_DOUBLE, MPI_SUM, buffers that are MPI_IN_PLACE or do
 * not overlap, an intracommunicator of more than one rank. Every condition is
 * the same on every rank of a (correct) call.
 */
static int call_dtype(const zp_mpi_t *m, const zc_config_t *cfg, const void *sendbuf,
                      const void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                      MPI_Comm comm, int *rank_p, int *size_p)
{
    zc_dtype_t dtype;
    int inter = 1;

    if (!m->interpose || !cfg || !__atomic_load_n(&mpi_use_zipccl, __ATOMIC_RELAXED) ||
        __atomic_load_n(&mpi_finalized, __ATOMIC_RELAXED))
        return -1;
    if (datatype == m->dt_float)
        dtype = ZC_DTYPE_F32;
    else if (datatype == m->dt_double)
        dtype = ZC_DTYPE_F64;
    else
        return -1;
    if (op != m->op_sum || count <= 0 ||
        !(zp_eligible(cfg, dtype, ZC_OP_SUM, (size_t)count) ||
          zp_eligible_raw(cfg, dtype, ZC_OP_SUM, (size_t)count)))
        return -1;
    if (!recvbuf || !sendbuf || comm == m->comm_null)
        return -1; /* MPI reports these */
    if (sendbuf != MPI_IN_PLACE) {
        size_t bytes = (size_t)count * zc_dtype_bytes(dtype);
        uintptr_t s = (uintptr_t)sendbuf, r = (uintptr_t)recvbuf;
        if (s < r + bytes && r < s + bytes)
            return -1; /* aliased buffers: erroneous, MPI says how */
    }
    if (m->comm_test_inter(comm, &inter) != MPI_SUCCESS || inter)
        return -1;
    if (m->comm_size(comm, size_p) != MPI_SUCCESS || *size_p < 2 ||
        m->comm_rank(comm, rank_p) != MPI_SUCCESS)
        return -1;
    return (int)dtype;
}

/* A zipccl failure: logged, MPI's error handler of @p comm called, later calls pass through. */
static int call_failed(const zp_mpi_t *m, zp_mpi_comm_t *e, const char *what, int count,
                       zc_status_t status, int rank, int size)
{
    ZC_ERROR("libzipccl-preload: rank %d of %d: %s of %d values failed in zipccl: %s; later calls "
             "on this communicator go to MPI unchanged, on every rank",
             rank, size, what, count, zc_status_string(status));
    e->failed = 1;
    m->comm_call_errhandler(e->comm, MPI_ERR_OTHER);
    return MPI_ERR_OTHER;
}

/*
 * Whether @p e's calls still go through zipccl, agreed by every rank: a failed
 * call may have failed on some ranks only (MPI_ERRORS_RETURN lets the program
 * go on), and ranks that went on with zipccl while others passed through would
 * hang. Every eligible call first reduces the local failed flags (one int, MAX)
 * on the zipccl communicator itself, not on MPI's: after a peer died (Open
 * MPI's --enable-recovery keeps the others running) an MPI collective would
 * hang, while zipccl's knows the communicator is broken and fails at once on
 * every rank (its abort reaches the others). Once any rank failed, or the
 * agreement itself fails, every rank passes through from that call on.
 */
static int call_agree(zp_mpi_comm_t *e, int rank, int size)
{
    int32_t any = 0;
    if (e->off)
        return 0;
    zc_status_t status = zp_engine()->comm_agree_max(e->zc, e->failed, &any);
    if (status != ZC_OK || any) {
        if (!e->failed)
            ZC_WARN("libzipccl-preload: rank %d of %d: %s; this communicator's calls go to MPI "
                    "unchanged from now on",
                    rank, size,
                    status != ZC_OK ? "the agreement on failed calls failed in zipccl"
                                    : "a call failed in zipccl on another rank");
        e->off = 1;
        return 0;
    }
    return 1;
}

/* Runs an eligible call through zipccl: MPI_SUCCESS, an error, or -1 to pass it through. */
static int run_zipccl(const zp_mpi_t *m, const char *what, const void *sendbuf, void *recvbuf,
                      int count, zc_dtype_t dtype, MPI_Comm comm, int rank, int size)
{
    zp_mpi_comm_t *e = comm_get(m, comm, rank, size);
    if (!e || !e->zc || !call_agree(e, rank, size))
        return -1;
    const void *src = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
    zc_status_t status = zp_allreduce(zp_engine(), e->zc, src, recvbuf, (size_t)count, dtype,
                                      ZC_OP_SUM, zp_tensor_key(recvbuf, (size_t)count));
    if (status != ZC_OK)
        return call_failed(m, e, what, count, status, rank, size);
    return MPI_SUCCESS;
}

ZP_EXPORT int MPI_Init(int *argc, char ***argv);
ZP_EXPORT int MPI_Init_thread(int *argc, char ***argv, int required, int *provided);
ZP_EXPORT int MPI_Finalize(void);
ZP_EXPORT int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                            MPI_Op op, MPI_Comm comm);
ZP_EXPORT int MPI_Iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                             MPI_Op op, MPI_Comm comm, MPI_Request *request);

/* A rank's part of the agreement on using zipccl (mpi_agree_use). */
typedef struct use_header {
    uint32_t valid; /* ZIPCCL_* parsed */
    uint32_t on;    /* ZIPCCL_PRELOAD_MPI */
    uint64_t hash;  /* of the variables every rank must set alike (common/config.h) */
} use_header_t;

/*
 * Agrees, on every rank of MPI_COMM_WORLD inside MPI_Init, whether eligible
 * calls go through zipccl: only when every rank's configuration is valid,
 * the same where it must be (the first variable that differs is named on every
 * rank), and ZIPCCL_PRELOAD_MPI is on everywhere. Otherwise every call of every
 * rank goes to MPI. One PMPI_Allgather of 16 bytes; the values themselves only
 * when the hashes differ. Collective: every rank's MPI_Init runs it.
 */
static void mpi_agree_use(const zp_mpi_t *m)
{
    const zc_config_t *cfg = zp_config(); /* NULL: invalid, logged naming the variable */
    const size_t rsize = zc_config_agreed_size();
    int rank = 0, size = 1;
    use_header_t mine = {0}, *all = NULL;
    char *records = NULL, msg[256] = "";

    m->comm_rank(m->comm_world, &rank);
    m->comm_size(m->comm_world, &size);
    all = calloc((size_t)size, sizeof(*all));
    records = calloc((size_t)size + 1, rsize);
    if (!all || !records) {
        /* a few bytes per rank at MPI_Init: like the rest of this file, give up locally */
        ZC_ERROR("libzipccl-preload: rank %d of %d: out of memory for the agreement on using "
                 "zipccl; this rank's MPI calls go to MPI unchanged",
                 rank, size);
        free(records);
        free(all);
        return;
    }
    char *own = records + (size_t)size * rsize;
    if (cfg) {
        zc_config_agreed_record(cfg, own);
        mine.valid = 1;
        mine.on = cfg->preload_mpi != 0;
        mine.hash = zc_config_agreed_hash(own);
    }
    int rc = m->allgather(&mine, (int)sizeof(mine), m->dt_byte, all, (int)sizeof(mine), m->dt_byte,
                          m->comm_world);
    int use = rc == MPI_SUCCESS, alike = 1, invalid = -1;
    for (int r = 0; rc == MPI_SUCCESS && r < size; r++) {
        if (!all[r].valid && invalid < 0)
            invalid = r;
        use &= all[r].valid && all[r].on;
        alike &= all[r].hash == all[0].hash;
    }
    if (rc == MPI_SUCCESS && invalid < 0 && !alike) {
        /* every rank is valid (so has its record): find what differs, identically everywhere */
        rc = m->allgather(own, (int)rsize, m->dt_byte, records, (int)rsize, m->dt_byte,
                          m->comm_world);
        if (rc == MPI_SUCCESS)
            zc_config_agreed_compare(records, size, msg, sizeof(msg));
        use = 0;
    }
    if (rc != MPI_SUCCESS)
        ZC_ERROR("libzipccl-preload: rank %d of %d: the agreement on using zipccl failed (MPI "
                 "error %d); every MPI call goes to MPI unchanged",
                 rank, size, rc);
    else if (invalid >= 0)
        ZC_ERROR("libzipccl-preload: rank %d of %d: rank %d's ZIPCCL_* settings are invalid (its "
                 "log names the variable); every MPI call goes to MPI unchanged, on every rank",
                 rank, size, invalid);
    else if (msg[0])
        ZC_ERROR("libzipccl-preload: rank %d of %d: %s; every MPI call goes to MPI unchanged, "
                 "on every rank",
                 rank, size, msg);
    else if (use)
        ZC_INFO("libzipccl-preload: MPI initialized; eligible MPI_Allreduce calls go through "
                "zipccl");
    __atomic_store_n(&mpi_use_zipccl, use, __ATOMIC_RELAXED);
    free(records);
    free(all);
}

static void mpi_started(void)
{
    if (mpi_real.interpose)
        mpi_agree_use(&mpi_real);
}

ZP_EXPORT int MPI_Init(int *argc, char ***argv)
{
    const zp_mpi_t *m = mpi();
    if (!m)
        return MPI_ERR_OTHER;
    int rc = m->init(argc, argv);
    if (rc == MPI_SUCCESS)
        mpi_started();
    return rc;
}

ZP_EXPORT int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    const zp_mpi_t *m = mpi();
    if (!m)
        return MPI_ERR_OTHER;
    int rc = m->init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS)
        mpi_started();
    return rc;
}

ZP_EXPORT int MPI_Finalize(void)
{
    const zp_mpi_t *m = mpi();
    if (!m)
        return MPI_ERR_OTHER;
    if (m->interpose) {
        __atomic_store_n(&mpi_finalized, 1, __ATOMIC_RELAXED);
        comms_destroy_all(m);
    }
    return m->finalize();
}

ZP_EXPORT int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                            MPI_Op op, MPI_Comm comm)
{
    const zp_mpi_t *m = mpi();
    if (!m)
        return MPI_ERR_OTHER;
    const zc_config_t *cfg = m->interpose ? zp_config() : NULL;
    int rank, size;
    int dtype = call_dtype(m, cfg, sendbuf, recvbuf, count, datatype, op, comm, &rank, &size);
    if (dtype >= 0) {
        int rc = run_zipccl(m, "MPI_Allreduce", sendbuf, recvbuf, count, (zc_dtype_t)dtype, comm,
                            rank, size);
        if (rc != -1)
            return rc;
    }
    return m->allreduce(sendbuf, recvbuf, count, datatype, op, comm);
}

/* The generalized request of an MPI_Iallreduce that zipccl completed before returning. */
static int greq_query(void *extra, MPI_Status *status)
{
    const zp_mpi_t *m = &mpi_real;
    status->MPI_SOURCE = MPI_ANY_SOURCE;
    status->MPI_TAG = MPI_ANY_TAG;
    status->MPI_ERROR = MPI_SUCCESS;
    m->status_set_elements(status, m->dt_byte, 0);
    m->status_set_cancelled(status, 0);
    return MPI_SUCCESS;
}

static int greq_free(void *extra)
{
    return MPI_SUCCESS;
}

static int greq_cancel(void *extra, int complete)
{
    return MPI_SUCCESS;
}

/*
 * An eligible MPI_Iallreduce runs to completion here (zipccl's nonblocking
 * calls need the caller to progress them, which MPI_Wait would not do) and
 * hands back a completed generalized request.
 */
ZP_EXPORT int MPI_Iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                             MPI_Op op, MPI_Comm comm, MPI_Request *request)
{
    const zp_mpi_t *m = mpi();
    if (!m)
        return MPI_ERR_OTHER;
    const zc_config_t *cfg = m->interpose ? zp_config() : NULL;
    int rank, size;
    int dtype = call_dtype(m, cfg, sendbuf, recvbuf, count, datatype, op, comm, &rank, &size);
    if (dtype >= 0 && request) {
        int rc = run_zipccl(m, "MPI_Iallreduce", sendbuf, recvbuf, count, (zc_dtype_t)dtype, comm,
                            rank, size);
        if (rc != -1) {
            int grc = m->grequest_start(greq_query, greq_free, greq_cancel, NULL, request);
            if (grc != MPI_SUCCESS)
                return grc;
            m->grequest_complete(*request);
            return rc;
        }
    }
    return m->iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request);
}

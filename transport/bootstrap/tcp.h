/*
 * The tcp bootstrap provider: rank 0 listens, every other rank connects to it
 * (a star), and each operation goes through rank 0 (allgather = gather at rank 0,
 * then broadcast of the whole; barrier = an empty allgather). Meant for small
 * blobs at start-up (worker addresses, host identities), not for bulk data.
 *
 * Rank 0 listens on the root's port on every address (dual-stack [::] where the
 * system has IPv6, else 0.0.0.0), SO_REUSEADDR, and accepts exactly size - 1
 * ranks of this job. Anyone who can reach the port may connect, so nothing a
 * connection claims is believed before it is checked, and a bad claim costs only
 * that connection: one that does not speak the protocol is dropped; one from
 * another job (job id hash), of another job size, claiming a rank out of range
 * or a rank that already joined, or failing the proof below gets a REJECT and is
 * closed; the job goes on. Up to ZC_BOOTSTRAP_PENDING_MAX connections wait for
 * their hello (or proof) at once, each for ZC_BOOTSTRAP_STEP_MS at most; a new
 * one evicts the oldest that has not sent a hello, never a rank that joined.
 *
 * With a job secret (ZIPCCL_JOB_SECRET, or one a frontend hands out through its
 * own channel: the CollNet handle) membership is proven, not claimed: rank 0
 * challenges each hello with a fresh nonce, the rank answers with a MAC keyed by
 * the secret over both sides' nonces, and rank 0 answers a valid proof with its
 * own MAC, which the rank checks (auth.h). A proven rank that claims a rank
 * already joined fails the whole job (two processes of the job think they are
 * rank r). Without a secret the bootstrap trusts the network: whoever knows the
 * job id (the default, root:host:port, is computable) can take a free rank.
 *
 * Other ranks resolve the root's host (IPv4, IPv6 or a name, via getaddrinfo) and
 * retry connecting every 100 ms until the deadline (ZIPCCL_TIMEOUT_S), then fail
 * with ZC_ERR_TIMEOUT naming the root's address. A connection that is refused,
 * reset or closed before rank 0 accepted the rank, and a REJECT that says the
 * claim may pass later, are retried the same way; a REJECT for another job, job
 * size or secret fails at once with rank 0's reason (ZC_ERR_MISMATCH).
 * zc_bootstrap_tcp_create returns once every rank joined: creation is a barrier.
 *
 * Every operation has its own deadline of timeout_s seconds. A peer that closes
 * its connection during an operation is reported at once (ZC_ERR_IO naming the
 * rank and the operation); rank 0 forwards any failure to the other ranks (an
 * ABORT message with the status and reason), so every rank fails with the same
 * explanation instead of waiting for the deadline. After an error every later
 * operation returns that error again.
 *
 * Thread safety: one thread at a time per bootstrap object.
 */
#ifndef ZC_TRANSPORT_BOOTSTRAP_TCP_H
#define ZC_TRANSPORT_BOOTSTRAP_TCP_H

#include "transport/bootstrap/bootstrap.h"

/*
 * Under torchrun the root listens on MASTER_PORT + 1: MASTER_PORT itself belongs
 * to torch's TCPStore (the elastic agent's, or rank 0's own in init_process_group).
 */
#define ZC_BOOTSTRAP_TORCHRUN_PORT_OFFSET 1

/* Milliseconds between two connection attempts to a root that is not up yet. */
#define ZC_BOOTSTRAP_RETRY_MS 100

/* Connections rank 0 holds while they have not proven a claim; more evict the oldest silent one. */
#define ZC_BOOTSTRAP_PENDING_MAX 64
/* Milliseconds a connection may take to send its hello, and then its proof. */
#define ZC_BOOTSTRAP_STEP_MS 2000

#define ZC_BOOTSTRAP_HOST_MAX 256
#define ZC_BOOTSTRAP_JOB_ID_MAX 320

/* What a rank needs to join: resolved from the configuration and the launcher. */
typedef struct zc_bootstrap_tcp_params {
    int rank;
    int size;
    char host[ZC_BOOTSTRAP_HOST_MAX]; /* root host without brackets; "" when size == 1 */
    int port;                         /* root port 1..65535; 0 when size == 1 */
    char job_id[ZC_BOOTSTRAP_JOB_ID_MAX];
    const char *secret; /* ZIPCCL_JOB_SECRET (at least ZC_BS_SECRET_MIN bytes), or NULL */
    int timeout_s;
    /* where rank and size came from, for messages: "ZIPCCL_RANK", "torchrun", ... */
    const char *launcher;
} zc_bootstrap_tcp_params_t;

/*
 * Resolves rank, size, root and job id. Each comes from @p cfg when set there
 * (ZIPCCL_RANK, ZIPCCL_SIZE, ZIPCCL_ROOT, ZIPCCL_JOB_ID), else from the first
 * launcher whose rank and size variables are both set in @p envp ("NAME=VALUE",
 * NULL-terminated; NULL: the process environment):
 *   torchrun   RANK, WORLD_SIZE; root MASTER_ADDR:MASTER_PORT+1; job TORCHELASTIC_RUN_ID
 *   Open MPI   OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE; job OMPI_MCA_ess_base_jobid
 *   Slurm      SLURM_PROCID, SLURM_NTASKS; job SLURM_JOB_ID[.SLURM_STEP_ID]
 * The root falls back to MASTER_ADDR/MASTER_PORT whatever the launcher; Open MPI
 * and Slurm provide none, so ZIPCCL_ROOT is required there (unless size is 1). A
 * job id nobody gives is "root:host:port". The secret is ZIPCCL_JOB_SECRET.
 *
 * Errors, logged naming the variable and its value (never the secret's):
 * ZC_ERR_INVALID_CONFIG for an unknown rank or size, rank >= size, a missing or
 * malformed root, a launcher variable that is not a number in range, a secret
 * shorter than ZC_BS_SECRET_MIN characters.
 */
zc_status_t zc_bootstrap_tcp_resolve(const zc_config_t *cfg, char *const *envp,
                                     zc_bootstrap_tcp_params_t *params_p);

/*
 * Splits "host:port" or "[ipv6]:port" into @p host (without brackets, @p host_len
 * bytes at most with its NUL) and @p port_p (1..65535). An IPv6 address must be in
 * brackets. ZC_ERR_INVALID_CONFIG (not logged) if malformed.
 */
zc_status_t zc_bootstrap_parse_hostport(const char *text, char *host, size_t host_len, int *port_p);

/*
 * Resolves the parameters (zc_bootstrap_tcp_resolve) and joins the job
 * (zc_bootstrap_tcp_join). @p bs_p is written only on success.
 */
zc_status_t zc_bootstrap_tcp_create(const zc_config_t *cfg, char *const *envp,
                                    zc_bootstrap_t **bs_p);

/* Everything zc_bootstrap_tcp_join needs. */
typedef struct zc_bootstrap_tcp_args {
    int rank;
    int size;
    const char *host; /* where rank 0 listens: "127.0.0.1", "::1", "node17" */
    int port;
    int listen_fd;      /* rank 0's listening socket (see _create_listener), or -1 */
    const char *job_id; /* the same string on every rank */
    /* the job secret, the same bytes on every rank (at least ZC_BS_SECRET_MIN), or NULL */
    const void *secret;
    size_t secret_len;
    int timeout_s;
} zc_bootstrap_tcp_args_t;

/*
 * Joins the job as zc_bootstrap_tcp_create_listener does, with a job secret
 * when @p args->secret is set (a secret shorter than ZC_BS_SECRET_MIN is
 * ZC_ERR_INVALID_ARG). Every rank must have the same secret, or none: a rank
 * with another secret is refused (ZC_ERR_MISMATCH, "wrong proof"), one with a
 * secret facing a root without one, or the reverse, fails with ZC_ERR_MISMATCH
 * naming ZIPCCL_JOB_SECRET. The secret is copied (as a key derived from it).
 */
zc_status_t zc_bootstrap_tcp_join(const zc_bootstrap_tcp_args_t *args, zc_bootstrap_t **bs_p);

/*
 * Joins the job, without a secret, as @p rank of @p size ranks whose rank 0 listens on @p port
 * (@p host is where the others find it: "127.0.0.1", "::1", "node17"; unused by
 * rank 0 and when size is 1). @p job_id must be the same string on every rank.
 * Blocks until every rank joined or @p timeout_s seconds passed.
 *
 * Errors (each logged once, naming the rank, peer or address): ZC_ERR_INVALID_ARG
 * for bad arguments, ZC_ERR_INVALID_CONFIG for a host that does not resolve,
 * ZC_ERR_IO when the port cannot be bound or a joined peer disconnects,
 * ZC_ERR_TIMEOUT (also when rank 0 kept refusing this rank's claim until the
 * deadline: its slot is taken), ZC_ERR_MISMATCH when rank 0 rejects this process
 * for good (another job, a different size) or the job fails for such a reason,
 * ZC_ERR_NO_MEMORY.
 */
zc_status_t zc_bootstrap_tcp_create_explicit(int rank, int size, const char *host, int port,
                                             const char *job_id, int timeout_s,
                                             zc_bootstrap_t **bs_p);

/*
 * As zc_bootstrap_tcp_create_explicit, but rank 0 accepts the ranks on
 * @p listen_fd, a socket already bound and listening (on @p port: the one the
 * others were told), instead of opening one: a frontend that had to publish its
 * address before knowing its rank (the NCCL CollNet plugin's listen handle)
 * listens first and joins later. The call takes @p listen_fd and closes it when
 * done with it, on failure too. Other ranks, and rank 0 of a job of one rank,
 * pass -1 (a socket given where none is expected, or none where one is, is
 * ZC_ERR_INVALID_ARG, and the socket is closed).
 */
zc_status_t zc_bootstrap_tcp_create_listener(int rank, int size, const char *host, int port,
                                             int listen_fd, const char *job_id, int timeout_s,
                                             zc_bootstrap_t **bs_p);

#endif

/*
 * Where the tcp bootstrap finds rank, size, root and job id: ZIPCCL_* first,
 * then torchrun, Open MPI, Slurm; the errors name the variable and its value.
 * Every environment is a local array: no test touches the process environment.
 */
#include "transport/bootstrap/tcp.h"

#include "bootstrap_test.h"
#include "common/config.h"

#include <criterion/criterion.h>

static void setup(void)
{
    bs_log_start();
}

static void teardown(void)
{
    bs_log_stop();
}

TestSuite(tcp_env, .init = setup, .fini = teardown, .timeout = 20);

static zc_status_t resolve(char *const *env, zc_bootstrap_tcp_params_t *p)
{
    zc_config_t cfg;
    cr_assert_eq(zc_config_load(env, &cfg), ZC_OK, "the test's own config is bad: %s", bs_log.text);
    return zc_bootstrap_tcp_resolve(&cfg, env, p);
}

static void resolve_fails(char *const *env, const char *message)
{
    zc_bootstrap_tcp_params_t p;
    bs_log_start();
    memset(&p, 0x5a, sizeof(p));
    zc_bootstrap_tcp_params_t before = p;
    cr_assert_eq(resolve(env, &p), ZC_ERR_INVALID_CONFIG);
    cr_assert(bs_logged(message), "expected '%s' in: %s", message, bs_log.text);
    cr_assert_eq(bs_log.errors, 1, "one error, logged once: %s", bs_log.text);
    cr_assert(memcmp(&p, &before, sizeof(p)) == 0, "params written on failure");
}

Test(tcp_env, zipccl_variables)
{
    char *env[] = {"ZIPCCL_RANK=2",       "ZIPCCL_SIZE=4",       "ZIPCCL_ROOT=node1:29500",
                   "ZIPCCL_JOB_ID=job-7", "ZIPCCL_TIMEOUT_S=12", NULL};
    zc_bootstrap_tcp_params_t p;
    cr_assert_eq(resolve(env, &p), ZC_OK, "%s", bs_log.text);
    cr_assert_eq(p.rank, 2);
    cr_assert_eq(p.size, 4);
    cr_assert_str_eq(p.host, "node1");
    cr_assert_eq(p.port, 29500);
    cr_assert_str_eq(p.job_id, "job-7");
    cr_assert_eq(p.timeout_s, 12);
    cr_assert_str_eq(p.launcher, "ZIPCCL_RANK");
}

Test(tcp_env, torchrun_listens_on_master_port_plus_one)
{
    char *env[] = {"RANK=1",
                   "WORLD_SIZE=8",
                   "MASTER_ADDR=10.0.0.1",
                   "MASTER_PORT=29500",
                   "TORCHELASTIC_RUN_ID=abc",
                   NULL};
    zc_bootstrap_tcp_params_t p;
    cr_assert_eq(resolve(env, &p), ZC_OK, "%s", bs_log.text);
    cr_assert_eq(p.rank, 1);
    cr_assert_eq(p.size, 8);
    cr_assert_str_eq(p.host, "10.0.0.1");
    cr_assert_eq(p.port, 29500 + ZC_BOOTSTRAP_TORCHRUN_PORT_OFFSET);
    cr_assert_str_eq(p.job_id, "TORCHELASTIC_RUN_ID:abc");
    cr_assert_str_eq(p.launcher, "torchrun");
    cr_assert_eq(p.timeout_s, 300, "the default ZIPCCL_TIMEOUT_S");
}

Test(tcp_env, torchrun_ipv6_master_addr_with_or_without_brackets)
{
    char *plain[] = {"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=::1", "MASTER_PORT=1000", NULL};
    char *brackets[] = {"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=[::1]", "MASTER_PORT=1000", NULL};
    zc_bootstrap_tcp_params_t p;
    cr_assert_eq(resolve(plain, &p), ZC_OK, "%s", bs_log.text);
    cr_assert_str_eq(p.host, "::1");
    cr_assert_str_eq(p.job_id, "root:[::1]:1001", "no launcher job id: the root address");
    cr_assert_eq(resolve(brackets, &p), ZC_OK, "%s", bs_log.text);
    cr_assert_str_eq(p.host, "::1");
    cr_assert_eq(p.port, 1001);
}

Test(tcp_env, openmpi_needs_zipccl_root)
{
    char *env[] = {"OMPI_COMM_WORLD_RANK=3", "OMPI_COMM_WORLD_SIZE=4",
                   "OMPI_MCA_ess_base_jobid=123", "ZIPCCL_ROOT=[fd00::2]:7000", NULL};
    zc_bootstrap_tcp_params_t p;
    cr_assert_eq(resolve(env, &p), ZC_OK, "%s", bs_log.text);
    cr_assert_eq(p.rank, 3);
    cr_assert_eq(p.size, 4);
    cr_assert_str_eq(p.host, "fd00::2");
    cr_assert_eq(p.port, 7000);
    cr_assert_str_eq(p.job_id, "OMPI_MCA_ess_base_jobid:123");
    cr_assert_str_eq(p.launcher, "Open MPI");

    char *no_root[] = {"OMPI_COMM_WORLD_RANK=3", "OMPI_COMM_WORLD_SIZE=4", NULL};
    resolve_fails(no_root, "Open MPI gives rank and size but not where rank 0 listens; set "
                           "ZIPCCL_ROOT=host:port");
}

Test(tcp_env, slurm_needs_zipccl_root)
{
    char *env[] = {"SLURM_PROCID=5",  "SLURM_NTASKS=6",        "SLURM_JOB_ID=77",
                   "SLURM_STEP_ID=3", "ZIPCCL_ROOT=head:4000", NULL};
    zc_bootstrap_tcp_params_t p;
    cr_assert_eq(resolve(env, &p), ZC_OK, "%s", bs_log.text);
    cr_assert_eq(p.rank, 5);
    cr_assert_eq(p.size, 6);
    cr_assert_str_eq(p.host, "head");
    cr_assert_str_eq(p.job_id, "SLURM_JOB_ID:77.3");
    cr_assert_str_eq(p.launcher, "Slurm");

    char *no_root[] = {"SLURM_PROCID=5", "SLURM_NTASKS=6", NULL};
    resolve_fails(no_root, "Slurm gives rank and size but not where rank 0 listens; set "
                           "ZIPCCL_ROOT=host:port");
}

Test(tcp_env, zipccl_variables_win_over_launchers)
{
    char *env[] = {"ZIPCCL_RANK=1",
                   "RANK=0",
                   "WORLD_SIZE=2",
                   "MASTER_ADDR=a",
                   "MASTER_PORT=10",
                   "ZIPCCL_ROOT=b:20",
                   "ZIPCCL_JOB_ID=mine",
                   "TORCHELASTIC_RUN_ID=theirs",
                   NULL};
    zc_bootstrap_tcp_params_t p;
    cr_assert_eq(resolve(env, &p), ZC_OK, "%s", bs_log.text);
    cr_assert_eq(p.rank, 1, "ZIPCCL_RANK over RANK");
    cr_assert_eq(p.size, 2, "ZIPCCL_SIZE is auto: WORLD_SIZE");
    cr_assert_str_eq(p.host, "b");
    cr_assert_eq(p.port, 20, "ZIPCCL_ROOT over MASTER_ADDR/MASTER_PORT, without the offset");
    cr_assert_str_eq(p.job_id, "mine");
    cr_assert_str_eq(p.launcher, "torchrun", "the size came from torchrun");
}

Test(tcp_env, launcher_order_torchrun_openmpi_slurm)
{
    /* mpirun inside a Slurm allocation: Open MPI's numbers, not the batch step's */
    char *mpi_in_slurm[] = {"SLURM_PROCID=0",
                            "SLURM_NTASKS=1",
                            "SLURM_JOB_ID=9",
                            "OMPI_COMM_WORLD_RANK=2",
                            "OMPI_COMM_WORLD_SIZE=3",
                            "ZIPCCL_ROOT=h:1",
                            NULL};
    zc_bootstrap_tcp_params_t p;
    cr_assert_eq(resolve(mpi_in_slurm, &p), ZC_OK, "%s", bs_log.text);
    cr_assert_eq(p.rank, 2);
    cr_assert_eq(p.size, 3);
    cr_assert_str_eq(p.launcher, "Open MPI");
    cr_assert_str_eq(p.job_id, "SLURM_JOB_ID:9", "no Open MPI job id: another launcher's");

    char *torch_in_slurm[] = {"SLURM_PROCID=0", "SLURM_NTASKS=2", "RANK=5", "WORLD_SIZE=16",
                              "MASTER_ADDR=h",  "MASTER_PORT=5",  NULL};
    cr_assert_eq(resolve(torch_in_slurm, &p), ZC_OK, "%s", bs_log.text);
    cr_assert_eq(p.rank, 5);
    cr_assert_eq(p.size, 16);
    cr_assert_str_eq(p.launcher, "torchrun");
}

Test(tcp_env, a_lone_rank_variable_is_no_launcher)
{
    char *env[] = {"RANK=3", "ZIPCCL_ROOT=h:1", NULL};
    resolve_fails(env, "this process's rank is unknown: set ZIPCCL_RANK and ZIPCCL_SIZE");
}

Test(tcp_env, nothing_set)
{
    char *env[] = {"PATH=/bin", NULL};
    resolve_fails(env, "this process's rank is unknown");
    char *rank_only[] = {"ZIPCCL_RANK=0", NULL};
    resolve_fails(rank_only, "the number of ranks is unknown: set ZIPCCL_SIZE");
}

Test(tcp_env, rank_not_below_size)
{
    char *env[] = {"ZIPCCL_RANK=4", "ZIPCCL_SIZE=4", "ZIPCCL_ROOT=h:1", NULL};
    resolve_fails(env, "rank 4 (ZIPCCL_RANK) is not below the number of ranks 4 (ZIPCCL_SIZE)");
    char *torch[] = {"RANK=5", "WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=1", NULL};
    resolve_fails(torch, "rank 5 (RANK) is not below the number of ranks 2 (WORLD_SIZE)");
}

Test(tcp_env, launcher_values_must_be_numbers_in_range)
{
    char *word[] = {"RANK=one", "WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=1", NULL};
    resolve_fails(word, "RANK='one' (torchrun) is not an integer in 0..1048575");
    char *zero[] = {"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=0", "ZIPCCL_ROOT=h:1", NULL};
    resolve_fails(zero, "OMPI_COMM_WORLD_SIZE='0' (Open MPI) is not an integer in 1..1048576");
    char *neg[] = {"SLURM_PROCID=-1", "SLURM_NTASKS=2", "ZIPCCL_ROOT=h:1", NULL};
    resolve_fails(neg, "SLURM_PROCID='-1' (Slurm) is not an integer");
    char *trail[] = {"SLURM_PROCID=1x", "SLURM_NTASKS=2", "ZIPCCL_ROOT=h:1", NULL};
    resolve_fails(trail, "SLURM_PROCID='1x' (Slurm)");
}

Test(tcp_env, bad_zipccl_root)
{
    static const char *const bad[] = {
        "node1", "node1:", ":5",   "node1:abc", "node1:0", "node1:65536", "node1:-5",
        "::1:5", "[::1]5", "[::1", "[]:5",      "a b:5",   "n:123456",    "[::1]:",
    };
    for (size_t i = 0; i < ZC_ARRAY_SIZE(bad); i++) {
        char entry[64];
        snprintf(entry, sizeof(entry), "ZIPCCL_ROOT=%s", bad[i]);
        char *env[] = {"ZIPCCL_RANK=0", "ZIPCCL_SIZE=2", entry, NULL};
        char message[96];
        snprintf(message, sizeof(message), "ZIPCCL_ROOT='%s' is not host:port", bad[i]);
        resolve_fails(env, message);
    }
}

Test(tcp_env, bad_master_port)
{
    char *high[] = {"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=65535", NULL};
    resolve_fails(high, "MASTER_PORT='65535' is not a port in 1..65534");
    char *word[] = {"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=http", NULL};
    resolve_fails(word, "MASTER_PORT='http'");
    char *addr[] = {"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=a b", "MASTER_PORT=1", NULL};
    resolve_fails(addr, "MASTER_ADDR='a b' is not a host name or address");
}

Test(tcp_env, torchrun_without_master_addr)
{
    char *env[] = {"RANK=0", "WORLD_SIZE=2", NULL};
    resolve_fails(env, "no root address: set ZIPCCL_ROOT=host:port");
}

Test(tcp_env, one_rank_needs_no_root)
{
    char *env[] = {"ZIPCCL_RANK=0", "ZIPCCL_SIZE=1", NULL};
    zc_bootstrap_tcp_params_t p;
    cr_assert_eq(resolve(env, &p), ZC_OK, "%s", bs_log.text);
    cr_assert_str_eq(p.host, "");
    cr_assert_eq(p.port, 0);
}

Test(tcp_env, parse_hostport_accepts)
{
    static const struct {
        const char *text, *host;
        int port;
    } good[] = {
        {"127.0.0.1:1", "127.0.0.1", 1},
        {"[::1]:65535", "::1", 65535},
        {"[fe80::1%eth0]:80", "fe80::1%eth0", 80},
        {"node-17.cluster.example:29500", "node-17.cluster.example", 29500},
        {"localhost:00080", "localhost", 80},
    };
    for (size_t i = 0; i < ZC_ARRAY_SIZE(good); i++) {
        char host[ZC_BOOTSTRAP_HOST_MAX];
        int port = -1;
        cr_assert_eq(zc_bootstrap_parse_hostport(good[i].text, host, sizeof(host), &port), ZC_OK,
                     "%s", good[i].text);
        cr_assert_str_eq(host, good[i].host);
        cr_assert_eq(port, good[i].port);
    }
}

Test(tcp_env, parse_hostport_host_too_long)
{
    char host[8];
    int port = -1;
    cr_assert_eq(zc_bootstrap_parse_hostport("1234567:5", host, sizeof(host), &port), ZC_OK);
    cr_assert_eq(zc_bootstrap_parse_hostport("12345678:5", host, sizeof(host), &port),
                 ZC_ERR_INVALID_CONFIG, "8 characters and a NUL do not fit in 8 bytes");
    cr_assert_eq(zc_bootstrap_parse_hostport(NULL, host, sizeof(host), &port),
                 ZC_ERR_INVALID_CONFIG);
}

Test(tcp_env, create_reports_resolution_errors)
{
    char *env[] = {"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2", NULL};
    zc_config_t cfg;
    zc_bootstrap_t *bs = (zc_bootstrap_t *)0x1;
    cr_assert_eq(zc_config_load(env, &cfg), ZC_OK);
    cr_assert_eq(zc_bootstrap_tcp_create(&cfg, env, &bs), ZC_ERR_INVALID_CONFIG);
    cr_assert_eq(bs, (zc_bootstrap_t *)0x1, "bs_p written on failure");
    cr_assert(bs_logged("ZIPCCL_ROOT"), "%s", bs_log.text);
    cr_assert_eq(zc_bootstrap_tcp_create(NULL, env, &bs), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_bootstrap_tcp_create(&cfg, env, NULL), ZC_ERR_INVALID_ARG);
}

Test(tcp_env, the_job_secret)
{
    char *none[] = {"ZIPCCL_RANK=1", "ZIPCCL_SIZE=2", "ZIPCCL_ROOT=node1:29500", NULL};
    char *with[] = {"ZIPCCL_RANK=1", "ZIPCCL_SIZE=2", "ZIPCCL_ROOT=node1:29500",
                    "ZIPCCL_JOB_SECRET=0123456789abcdef", NULL};
    char *empty[] = {"ZIPCCL_RANK=1", "ZIPCCL_SIZE=2", "ZIPCCL_ROOT=node1:29500",
                     "ZIPCCL_JOB_SECRET=", NULL};
    char *short_secret[] = {"ZIPCCL_RANK=1", "ZIPCCL_SIZE=2", "ZIPCCL_ROOT=node1:29500",
                            "ZIPCCL_JOB_SECRET=0123456789abcde", NULL};
    zc_bootstrap_tcp_params_t p;
    cr_assert_eq(resolve(none, &p), ZC_OK, "%s", bs_log.text);
    cr_assert_null(p.secret);
    cr_assert_eq(resolve(empty, &p), ZC_OK, "%s", bs_log.text);
    cr_assert_null(p.secret, "an empty secret is no secret");
    cr_assert_eq(resolve(with, &p), ZC_OK, "%s", bs_log.text);
    cr_assert_str_eq(p.secret, "0123456789abcdef");
    resolve_fails(short_secret, "ZIPCCL_JOB_SECRET is shorter than 16 characters");
    cr_assert(!bs_logged("0123456789abcde"), "the secret was printed: %s", bs_log.text);
}

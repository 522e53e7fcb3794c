/* Where rank, size, root and job id come from: the configuration, then the launcher. */
#include "transport/bootstrap/tcp.h"

#include "common/log.h"
#include "transport/bootstrap/auth.h"
#include "transport/bootstrap/sock.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

/* The bounds of ZIPCCL_RANK and ZIPCCL_SIZE in common/params.def. */
#define RANK_MAX 1048575
#define SIZE_MAX_RANKS 1048576

typedef struct launcher {
    const char *name;
    const char *rank_var;
    const char *size_var;
    const char *job_var;
} launcher_t;

static const launcher_t launchers[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_MCA_ess_base_jobid"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_ID"},
};

/* The value of @p name in @p envp (NULL: the environment); NULL if unset or empty. */
static const char *env_get(char *const *envp, const char *name)
{
    size_t n = strlen(name);
    char *const *e = envp ? envp : environ;
    const char *value = NULL;
    for (; e && *e; e++) {
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            value = *e + n + 1; /* the last one wins, as with putenv */
    }
    return value && *value ? value : NULL;
}

/* A decimal integer in [min, max] with nothing else but surrounding spaces. */
static int parse_int(const char *text, long min, long max, int *value_p)
{
    const char *p = text;
    while (isspace((unsigned char)*p))
        p++;
    if (!isdigit((unsigned char)*p) && *p != '-')
        return -1;
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (errno || end == p)
        return -1;
    while (isspace((unsigned char)*end))
        end++;
    if (*end || v < min || v > max)
        return -1;
    *value_p = (int)v;
    return 0;
}

static zc_status_t launcher_int(const launcher_t *l, const char *var, const char *value, long min,
                                long max, int *value_p)
{
    if (parse_int(value, min, max, value_p) < 0) {
        ZC_ERROR("bootstrap: %s='%s' (%s) is not an integer in %ld..%ld", var, value, l->name, min,
                 max);
        return ZC_ERR_INVALID_CONFIG;
    }
    return ZC_OK;
}

zc_status_t zc_bootstrap_parse_hostport(const char *text, char *host, size_t host_len, int *port_p)
{
    const char *h, *h_end, *port_text;

    if (!text)
        return ZC_ERR_INVALID_CONFIG;
    if (text[0] == '[') {
        h = text + 1;
        h_end = strchr(h, ']');
        if (!h_end || h_end[1] != ':')
            return ZC_ERR_INVALID_CONFIG;
        port_text = h_end + 2;
    } else {
        h = text;
        h_end = strchr(text, ':');
        /* an unbracketed IPv6 address: which colon starts the port? */
        if (!h_end || strchr(h_end + 1, ':'))
            return ZC_ERR_INVALID_CONFIG;
        port_text = h_end + 1;
    }
    size_t n = (size_t)(h_end - h);
    if (n == 0 || n + 1 > host_len)
        return ZC_ERR_INVALID_CONFIG;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)h[i];
        if (c <= ' ' || c == 0x7f || c == '[' || c == ']' || c == '/')
            return ZC_ERR_INVALID_CONFIG;
    }
    int port;
    for (const char *p = port_text; *p; p++) {
        if (!isdigit((unsigned char)*p))
            return ZC_ERR_INVALID_CONFIG;
    }
    if (!*port_text || strlen(port_text) > 5 || parse_int(port_text, 1, 65535, &port) < 0)
        return ZC_ERR_INVALID_CONFIG;
    memcpy(host, h, n);
    host[n] = '\0';
    *port_p = port;
    return ZC_OK;
}

static zc_status_t resolve_root(const zc_config_t *cfg, char *const *envp, const launcher_t *l,
                                zc_bootstrap_tcp_params_t *p)
{
    if (cfg->root && *cfg->root) {
        if (zc_bootstrap_parse_hostport(cfg->root, p->host, sizeof(p->host), &p->port) < 0) {
            ZC_ERROR("bootstrap: ZIPCCL_ROOT='%s' is not host:port (an IPv6 address in brackets: "
                     "[::1]:29500; port 1..65535)",
                     cfg->root);
            return ZC_ERR_INVALID_CONFIG;
        }
        return ZC_OK;
    }

    const char *addr = env_get(envp, "MASTER_ADDR");
    const char *port = env_get(envp, "MASTER_PORT");
    if (addr && port) {
        size_t n = strlen(addr);
        /* torch accepts both ::1 and [::1] */
        if (n >= 2 && addr[0] == '[' && addr[n - 1] == ']') {
            addr++;
            n -= 2;
        }
        if (n == 0 || n + 1 > sizeof(p->host) || strcspn(addr, " []/") < n) {
            ZC_ERROR("bootstrap: MASTER_ADDR='%s' is not a host name or address",
                     env_get(envp, "MASTER_ADDR"));
            return ZC_ERR_INVALID_CONFIG;
        }
        int master_port;
        if (parse_int(port, 1, 65535 - ZC_BOOTSTRAP_TORCHRUN_PORT_OFFSET, &master_port) < 0) {
            ZC_ERROR("bootstrap: MASTER_PORT='%s' is not a port in 1..%d (the bootstrap listens "
                     "on MASTER_PORT + %d)",
                     port, 65535 - ZC_BOOTSTRAP_TORCHRUN_PORT_OFFSET,
                     ZC_BOOTSTRAP_TORCHRUN_PORT_OFFSET);
            return ZC_ERR_INVALID_CONFIG;
        }
        memcpy(p->host, addr, n);
        p->host[n] = '\0';
        p->port = master_port + ZC_BOOTSTRAP_TORCHRUN_PORT_OFFSET;
        return ZC_OK;
    }

    if (p->size == 1) {
        p->host[0] = '\0';
        p->port = 0;
        return ZC_OK;
    }
    if (l && strcmp(l->name, "torchrun") != 0)
        ZC_ERROR("bootstrap: no root address: %s gives rank and size but not where rank 0 "
                 "listens; set ZIPCCL_ROOT=host:port (a free port on rank 0's host)",
                 l->name);
    else
        ZC_ERROR("bootstrap: no root address: set ZIPCCL_ROOT=host:port (a free port on rank 0's "
                 "host), or MASTER_ADDR and MASTER_PORT");
    return ZC_ERR_INVALID_CONFIG;
}

static void resolve_job_id(const zc_config_t *cfg, char *const *envp, const launcher_t *l,
                           zc_bootstrap_tcp_params_t *p)
{
    if (cfg->job_id && *cfg->job_id) {
        snprintf(p->job_id, sizeof(p->job_id), "%s", cfg->job_id);
        return;
    }
    /* the launcher that gave rank and size first, then any launcher's job variable */
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < ZC_ARRAY_SIZE(launchers); i++) {
            const launcher_t *c = &launchers[i];
            if (pass == 0 && c != l)
                continue;
            const char *job = env_get(envp, c->job_var);
            if (!job)
                continue;
            const char *step =
                strcmp(c->job_var, "SLURM_JOB_ID") == 0 ? env_get(envp, "SLURM_STEP_ID") : NULL;
            snprintf(p->job_id, sizeof(p->job_id), "%s:%s%s%s", c->job_var, job, step ? "." : "",
                     step ? step : "");
            return;
        }
    }
    char root[ZC_BOOTSTRAP_HOST_MAX + 16];
    zc_bs_hostport_string(p->host, p->port, root, sizeof(root));
    snprintf(p->job_id, sizeof(p->job_id), "root:%s", root);
}

zc_status_t zc_bootstrap_tcp_resolve(const zc_config_t *cfg, char *const *envp,
                                     zc_bootstrap_tcp_params_t *params_p)
{
    zc_bootstrap_tcp_params_t p;
    const launcher_t *l = NULL;

    memset(&p, 0, sizeof(p));
    for (size_t i = 0; i < ZC_ARRAY_SIZE(launchers) && !l; i++) {
        if (env_get(envp, launchers[i].rank_var) && env_get(envp, launchers[i].size_var))
            l = &launchers[i];
    }

    const char *rank_from, *size_from;
    if (cfg->rank != ZC_CONFIG_AUTO) {
        p.rank = (int)cfg->rank;
        rank_from = "ZIPCCL_RANK";
    } else if (l) {
        rank_from = l->rank_var;
        ZC_CHECK(launcher_int(l, l->rank_var, env_get(envp, l->rank_var), 0, RANK_MAX, &p.rank));
    } else {
        ZC_ERROR("bootstrap: this process's rank is unknown: set ZIPCCL_RANK and ZIPCCL_SIZE, or "
                 "start it with torchrun (RANK, WORLD_SIZE), Open MPI (OMPI_COMM_WORLD_RANK/SIZE) "
                 "or Slurm (SLURM_PROCID, SLURM_NTASKS)");
        return ZC_ERR_INVALID_CONFIG;
    }
    if (cfg->size != ZC_CONFIG_AUTO) {
        p.size = (int)cfg->size;
        size_from = "ZIPCCL_SIZE";
    } else if (l) {
        size_from = l->size_var;
        ZC_CHECK(
            launcher_int(l, l->size_var, env_get(envp, l->size_var), 1, SIZE_MAX_RANKS, &p.size));
    } else {
        ZC_ERROR("bootstrap: the number of ranks is unknown: set ZIPCCL_SIZE, or start the job "
                 "with torchrun (WORLD_SIZE), Open MPI (OMPI_COMM_WORLD_SIZE) or Slurm "
                 "(SLURM_NTASKS)");
        return ZC_ERR_INVALID_CONFIG;
    }
    if (p.rank >= p.size) {
        ZC_ERROR("bootstrap: rank %d (%s) is not below the number of ranks %d (%s)", p.rank,
                 rank_from, p.size, size_from);
        return ZC_ERR_INVALID_CONFIG;
    }
    p.launcher =
        cfg->rank != ZC_CONFIG_AUTO && cfg->size != ZC_CONFIG_AUTO ? "ZIPCCL_RANK" : l->name;

    ZC_CHECK(resolve_root(cfg, envp, l, &p));
    resolve_job_id(cfg, envp, l, &p);
    if (cfg->job_secret && *cfg->job_secret) {
        if (strlen(cfg->job_secret) < ZC_BS_SECRET_MIN) {
            ZC_ERROR("bootstrap: ZIPCCL_JOB_SECRET is shorter than %d characters (a short secret "
                     "can be guessed from one handshake; e.g. openssl rand -hex 32)",
                     ZC_BS_SECRET_MIN);
            return ZC_ERR_INVALID_CONFIG;
        }
        p.secret = cfg->job_secret;
    }
    p.timeout_s = (int)cfg->timeout_s;
    *params_p = p;
    return ZC_OK;
}

zc_status_t zc_bootstrap_tcp_create(const zc_config_t *cfg, char *const *envp,
                                    zc_bootstrap_t **bs_p)
{
    zc_bootstrap_tcp_params_t p;

    if (!cfg || !bs_p)
        return ZC_ERR_INVALID_ARG;
    ZC_CHECK(zc_bootstrap_tcp_resolve(cfg, envp, &p));
    ZC_DEBUG("bootstrap: rank %d of %d (%s), root %s:%d, job '%s', %s", p.rank, p.size, p.launcher,
             p.host, p.port, p.job_id,
             p.secret ? "job secret set: membership proven" : "no job secret: trusts the network");
    zc_bootstrap_tcp_args_t args = {.rank = p.rank,
                                    .size = p.size,
                                    .host = p.host,
                                    .port = p.port,
                                    .listen_fd = -1,
                                    .job_id = p.job_id,
                                    .secret = p.secret,
                                    .secret_len = p.secret ? strlen(p.secret) : 0,
                                    .timeout_s = p.timeout_s};
    return zc_bootstrap_tcp_join(&args, bs_p);
}

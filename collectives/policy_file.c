/*
 * ZIPCCL_POLICY_FILE: the policy's measured inputs kept in a file, so that a
 * later run of the same configuration on the same cluster takes its decisions
 * from the same numbers (measurements vary from run to run, and a decision
 * near a boundary with them). Rank 0 reads and writes it; measure.c hands
 * what it read to every rank.
 *
 * The file is text, one fact per line, rates as exact hex floats:
 *
 *   zipccl policy inputs 3
 *   ranks 4
 *   codec qsgd 8d0c31f2          (the parameters' hash, one line per codec in play)
 *   link_bw 0x1.2a05f2p+30
 *   link_lat 0x1.4f8b588e368f1p-17
 *   round_lat 0x1.0c6f7a0b5ed8dp-14
 *   add_bw ...
 *   zero_bw ...
 *   qsgd enc_bw ... dec_bw ... reduce_bw ... ratio ...
 *
 * The lines up to the rates name what the rates were measured for; a file
 * whose names differ holds another configuration's numbers.
 */
#include "collectives/policy.h"
#include "codec/codec.h"
#include "common/log.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * Version 2: link_lat is a ring step's median (was the fastest 8-byte step), round_lat a round
 * with every peer, and the rates are rounded to classes. Version 3: zero_bw, the speed of
 * zeroing an accumulator (sparse decodes). A file of another version is another
 * configuration's: measured anew (warned) and replaced.
 */
#define FILE_KIND "zipccl policy inputs "
#define FILE_MAGIC FILE_KIND "3\n"

/* The identity block: the magic, the rank count and each codec in play with its parameters. */
static size_t identity(const zc_policy_t *pol, char *buf, size_t len)
{
    const unsigned mask = zc_policy_codecs_in_play(pol);
    size_t off = (size_t)snprintf(buf, len, FILE_MAGIC "ranks %d\n", pol->nranks);
    for (int c = 0; c < ZC_CODEC_COUNT && off < len; c++)
        if (mask & 1u << c)
            off += (size_t)snprintf(buf + off, len - off, "codec %s %08x\n",
                                    zc_codec_name((zc_codec_id_t)c),
                                    zc_codec_params_hash(&pol->params[c]));
    return off;
}

static int rate_ok(double v)
{
    return isfinite(v) && v > 0;
}

/* Parses "<name> <hex float>" at @p s; 0 when the line is not that or the value is not a rate. */
static int read_rate(const char *s, const char *name, double *v_p)
{
    size_t n = strlen(name);
    char *end;
    if (strncmp(s, name, n) != 0 || s[n] != ' ')
        return 0;
    errno = 0;
    double v = strtod(s + n + 1, &end);
    if (errno != 0 || end == s + n + 1 || (*end != '\n' && *end != ' ' && *end != '\0') ||
        !rate_ok(v))
        return 0;
    *v_p = v;
    return 1;
}

/*
 * Reads the rates into @p in: @p line holds the first line after the identity
 * block, @p f the rest. 0 when a line is missing or bad.
 */
static int read_rates(FILE *f, char *line, size_t len, const zc_policy_t *pol,
                      zc_policy_inputs_t *in)
{
    const unsigned mask = zc_policy_codecs_in_play(pol);

    if (!read_rate(line, "link_bw", &in->link_bw) || !fgets(line, (int)len, f) ||
        !read_rate(line, "link_lat", &in->link_lat) || !fgets(line, (int)len, f) ||
        !read_rate(line, "round_lat", &in->round_lat) || !fgets(line, (int)len, f) ||
        !read_rate(line, "add_bw", &in->add_bw) || !fgets(line, (int)len, f) ||
        !read_rate(line, "zero_bw", &in->zero_bw))
        return 0;
    for (int c = 0; c < ZC_CODEC_COUNT; c++) {
        if (!(mask & 1u << c))
            continue;
        static const char *const keys[] = {"enc_bw", "dec_bw", "reduce_bw", "ratio"};
        double *dst[] = {&in->enc_bw[c], &in->dec_bw[c], &in->reduce_bw[c], &in->ratio[c]};
        const char *name = zc_codec_name((zc_codec_id_t)c);
        size_t n = strlen(name);
        if (!fgets(line, (int)len, f) || strncmp(line, name, n) != 0 || line[n] != ' ')
            return 0;
        const char *s = line + n + 1;
        for (size_t k = 0; k < ZC_ARRAY_SIZE(keys); k++) {
            if (!read_rate(s, keys[k], dst[k]))
                return 0;
            /* past "<key> <value> " to the next key */
            s = strchr(s + strlen(keys[k]) + 1, ' ');
            if (k + 1 < ZC_ARRAY_SIZE(keys) && !s++)
                return 0;
        }
    }
    return 1;
}

zc_status_t zc_policy_file_load(const zc_policy_t *pol, const char *path, zc_policy_inputs_t *in,
                                int *loaded_p)
{
    char want[512], got[512], line[256];
    size_t want_len = identity(pol, want, sizeof(want)), got_len = 0;
    int have_line = 0;

    *loaded_p = 0;
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT)
            return ZC_OK; /* first run: measured, then saved */
        ZC_ERROR("policy: cannot read ZIPCCL_POLICY_FILE=%s: %s", path, strerror(errno));
        return ZC_ERR_IO;
    }
    /* the identity block: the first line, then the ranks and codec lines */
    while (fgets(line, sizeof(line), f)) {
        size_t n = strlen(line);
        if (got_len > 0 && strncmp(line, "ranks ", 6) != 0 && strncmp(line, "codec ", 6) != 0) {
            have_line = 1;
            break;
        }
        if (got_len + n < sizeof(got)) {
            memcpy(got + got_len, line, n);
            got_len += n;
        }
    }
    zc_policy_inputs_t file_in = *in;
    zc_status_t status = ZC_OK;

    if (got_len < strlen(FILE_KIND) || memcmp(got, FILE_KIND, strlen(FILE_KIND)) != 0) {
        ZC_ERROR("policy: ZIPCCL_POLICY_FILE=%s is not a zipccl policy file (it does not start "
                 "with '%s'); it is left as it is",
                 path, FILE_KIND);
        status = ZC_ERR_INVALID_CONFIG;
    } else if (got_len != want_len || memcmp(got, want, want_len) != 0) {
        ZC_WARN("policy: ZIPCCL_POLICY_FILE=%s holds the inputs of another configuration (rank "
                "count, codec parameters or file version); measuring anew and replacing them",
                path);
    } else if (!have_line || !read_rates(f, line, sizeof(line), pol, &file_in)) {
        ZC_ERROR("policy: ZIPCCL_POLICY_FILE=%s is damaged (a rate is missing or not a positive "
                 "number); delete it to measure anew",
                 path);
        status = ZC_ERR_INVALID_CONFIG;
    } else {
        *in = file_in;
        *loaded_p = 1;
    }
    fclose(f);
    return status;
}

zc_status_t zc_policy_file_save(const zc_policy_t *pol, const char *path)
{
    const zc_policy_inputs_t *in = &pol->in;
    const unsigned mask = zc_policy_codecs_in_play(pol);
    char head[512], tmp[4200];
    int err;

    if ((size_t)snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid()) >= sizeof(tmp))
        return ZC_ERR_INVALID_CONFIG; /* ZIPCCL_POLICY_FILE is bounded well below */
    FILE *f = fopen(tmp, "w");
    if (!f)
        goto fail;
    identity(pol, head, sizeof(head));
    fputs(head, f);
    fprintf(f, "link_bw %a\nlink_lat %a\nround_lat %a\nadd_bw %a\nzero_bw %a\n", in->link_bw,
            in->link_lat, in->round_lat, in->add_bw, in->zero_bw);
    for (int c = 0; c < ZC_CODEC_COUNT; c++)
        if (mask & 1u << c)
            fprintf(f, "%s enc_bw %a dec_bw %a reduce_bw %a ratio %a\n",
                    zc_codec_name((zc_codec_id_t)c), in->enc_bw[c], in->dec_bw[c], in->reduce_bw[c],
                    in->ratio[c]);
    /* renamed whole: a reader never sees half a file */
    if (fclose(f) != 0 || rename(tmp, path) != 0)
        goto fail_unlink;
    return ZC_OK;

fail_unlink:
    err = errno;
    unlink(tmp);
    errno = err;
fail:
    ZC_WARN("policy: cannot write ZIPCCL_POLICY_FILE=%s: %s; the next run measures anew", path,
            strerror(errno));
    return ZC_ERR_IO;
}

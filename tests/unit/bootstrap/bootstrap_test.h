/* Helpers shared by the bootstrap unit tests: a thread-safe log capture and a free port. */
#ifndef ZC_TESTS_UNIT_BOOTSTRAP_TEST_H
#define ZC_TESTS_UNIT_BOOTSTRAP_TEST_H

#include "common/log.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct bs_log {
    pthread_mutex_t lock;
    int errors, warnings;
    char text[16384];
} bs_log_t;

static bs_log_t bs_log = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void bs_log_sink(void *arg, zc_log_level_t level, const char *file, int line,
                        const char *msg)
{
    pthread_mutex_lock(&bs_log.lock);
    size_t used = strlen(bs_log.text);
    snprintf(bs_log.text + used, sizeof(bs_log.text) - used, "%s: %s\n", zc_log_level_name(level),
             msg);
    bs_log.errors += level == ZC_LOG_ERROR;
    bs_log.warnings += level == ZC_LOG_WARN;
    pthread_mutex_unlock(&bs_log.lock);
}

static inline void bs_log_start(void)
{
    pthread_mutex_lock(&bs_log.lock);
    bs_log.text[0] = '\0';
    bs_log.errors = bs_log.warnings = 0;
    pthread_mutex_unlock(&bs_log.lock);
    zc_log_set_level(ZC_LOG_WARN);
    zc_log_set_sink(bs_log_sink, NULL);
}

static inline void bs_log_stop(void)
{
    zc_log_set_sink(NULL, NULL);
}

static inline int bs_logged(const char *text)
{
    pthread_mutex_lock(&bs_log.lock);
    int found = strstr(bs_log.text, text) != NULL;
    pthread_mutex_unlock(&bs_log.lock);
    return found;
}

/* A TCP port nothing listens on (bound to 127.0.0.1 and released). */
static inline int bs_free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) < 0)
        return -1;
    close(fd);
    return ntohs(a.sin_port);
}

#endif

/*
 * log.h - leveled logging to stderr, prefixed with the rank when one is set.
 */
#ifndef QE_LOG_H
#define QE_LOG_H

typedef enum qe_log_level { QE_LOG_ERROR = 0, QE_LOG_WARN, QE_LOG_INFO, QE_LOG_DEBUG } qe_log_level;

void qe_log_set_level(qe_log_level lvl);
/* Rank shown in the prefix ("[rank 1] "); -1 shows none. */
void qe_log_set_rank(int rank);
void qe_log(qe_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif

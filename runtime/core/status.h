/*
 * status.h - status codes for every qeffect library call.
 *
 * Every function that can fail returns an int: 0 (QE_OK) or a negative QE_E*
 * code.  The list below is the single source of truth: it generates the enum,
 * qe_errname() and qe_strerror().  A failing call may leave a longer message
 * (naming the file, tensor, stage or relation at fault) in a per-thread buffer
 * read with qe_last_error(); qe_fail() sets both at once.
 *
 * The contract families (stale reference ... premature commit) are the
 * violation classes of DESIGN.md section 6; each has exactly one code.
 */
#ifndef QE_STATUS_H
#define QE_STATUS_H

#include <stdarg.h>

#define QE_STATUS_LIST(X)                                                              \
	X(QE_OK, 0, "ok")                                                                  \
	X(QE_EINVAL, -1, "invalid argument")                                               \
	X(QE_ENOMEM, -2, "out of memory")                                                  \
	X(QE_EIO, -3, "input/output error")                                                \
	X(QE_ENOTFOUND, -4, "not found")                                                   \
	X(QE_ECORRUPT, -5, "corrupt data")                                                 \
	X(QE_EUNSUPPORTED, -6, "not supported")                                            \
	X(QE_ESHAPE, -7, "shape, dtype or device mismatch")                                \
	X(QE_ECAPTURE, -8, "operation not allowed while capturing")                        \
	X(QE_EMISMATCH, -9, "configuration mismatch")                                      \
	X(QE_ECOMM, -10, "communication failure")                                          \
	X(QE_ECUDA, -11, "CUDA error")                                                     \
	X(QE_ENCCL, -12, "NCCL error")                                                     \
	X(QE_ESTORE, -13, "store error")                                                   \
	X(QE_ECATALOG, -14, "catalog error")                                               \
	X(QE_EBUSY, -15, "resource busy")                                                  \
	X(QE_ESCHEDULE, -16, "malformed schedule")                                         \
	X(QE_ENUMERIC, -17, "non-finite value")                                            \
	X(QE_EEXIST, -18, "already exists")                                                \
	X(QE_ENOSPC, -19, "no space left on device")                                       \
	X(QE_ESTALE_REF, -40, "stale reference")                                           \
	X(QE_EDUP_CONSUMER, -41, "duplicate consumer")                                     \
	X(QE_EKEY_SLOT, -42, "key/slot mismatch")                                          \
	X(QE_EORDER, -43, "out-of-order state transition")                                 \
	X(QE_ESTALE_CACHE, -44, "stale weight cache")                                      \
	X(QE_EARENA, -45, "incomplete, duplicate or aliased arena write")                  \
	X(QE_EPREMATURE, -46, "premature commit or checkpoint")

enum qe_status {
#define QE_STATUS_ENUM_(name, value, text) name = (value),
	QE_STATUS_LIST(QE_STATUS_ENUM_)
#undef QE_STATUS_ENUM_
};

/* Symbolic name of a code ("QE_ESTALE_REF"); "QE_E?" for unknown codes. Static string. */
const char *qe_errname(int code);
/* Short English text of a code ("stale reference"). Static string. */
const char *qe_strerror(int code);

/*
 * Record a detailed message for the calling thread and return code, so that
 * callers can write `return qe_fail(QE_EIO, "write %s: %s", path, strerror(errno));`.
 * The message is formatted like printf; it replaces any earlier message.
 */
int qe_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int qe_vfail(int code, const char *fmt, va_list ap);
/* Prefix the current message with "context: " (for callers adding where). Returns code. */
int qe_fail_ctx(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The calling thread's last message; "" when none. Valid until the next qe_fail on this thread. */
const char *qe_last_error(void);
/* Forget the calling thread's last message. */
void qe_clear_error(void);

/*
 * The code for a failed system call's errno: QE_ENOSPC when the disk (or the
 * user's quota) is full (ENOSPC, EDQUOT), else QE_EIO.  A full disk is the
 * failure users can fix themselves, so it is never reported as an I/O error.
 */
int qe_errno_status(int err);

/*
 * Evaluate a call returning a status; return that status from the caller when
 * it is not QE_OK.  The one macro that hides a return, against STYLE.md's
 * rule, and kept on purpose (runtime/README.md, "Conventions here"): only in
 * a function that holds nothing to undo - no goto cleanup chain, no
 * allocation - where a straight run of calls each sets its own message.
 * tests/build/conventions.py (ctest build_conventions) enforces that.
 */
#define QE_TRY(expr)                   \
	do {                           \
		int qe_try_rc_ = (expr); \
		if (qe_try_rc_)        \
			return qe_try_rc_; \
	} while (0)

#endif

/*
 * status.c - code tables generated from QE_STATUS_LIST and the per-thread
 * last-error message that gives each failing call its context.
 */
#include "runtime/core/status.h"

#include "runtime/core/fault.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define QE_MSG_MAX 1024
#pragma GCC diagnostic ignored "-Wformat-truncation"
static _Thread_local char last_msg[QE_MSG_MAX];

const char *qe_errname(int code)
{
	switch (code) {
#define QE_STATUS_NAME_(name, value, text) \
	case value:                        \
		return #name;
		QE_STATUS_LIST(QE_STATUS_NAME_)
#undef QE_STATUS_NAME_
	}
	return "QE_E?";
}

const char *qe_strerror(int code)
{
	switch (code) {
#define QE_STATUS_TEXT_(name, value, text) \
	case value:                        \
		return text;
		QE_STATUS_LIST(QE_STATUS_TEXT_)
#undef QE_STATUS_TEXT_
	}
	return "unknown status";
}

int qe_errno_status(int err)
{
	return err == ENOSPC || err == EDQUOT ? QE_ENOSPC : QE_EIO;
}

int qe_vfail(int code, const char *fmt, va_list ap)
{
	vsnprintf(last_msg, sizeof(last_msg), fmt, ap);
	qe_fault__annotate(last_msg, sizeof(last_msg));
	return code;
}

int qe_fail(int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	qe_vfail(code, fmt, ap);
	va_end(ap);
	return code;
}

int qe_fail_ctx(int code, const char *fmt, ...)
{
	char prefix[QE_MSG_MAX], old[QE_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(prefix, sizeof(prefix), fmt, ap);
	va_end(ap);
	memcpy(old, last_msg, sizeof(old));
	if (old[0])
		snprintf(last_msg, sizeof(last_msg), "%s: %s", prefix, old);
	else
		snprintf(last_msg, sizeof(last_msg), "%s: %s", prefix, qe_strerror(code));
	qe_fault__annotate(last_msg, sizeof(last_msg));
	return code;
}

const char *qe_last_error(void)
{
	return last_msg;
}

void qe_clear_error(void)
{
	last_msg[0] = '\0';
}

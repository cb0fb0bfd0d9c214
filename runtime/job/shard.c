/*
 * shard.c - the llm.c shard writer (format and crash behaviour: shard.h).
 *
 * Tokens go through a small little-endian staging buffer into stdio, so the
 * file is the same bytes on any host; the header is written last, over the
 * zeros left for it, once the count is known.
 */
#include "runtime/job/shard.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "runtime/core/status.h"

static void put32(unsigned char *p, int32_t v)
{
	uint32_t u = (uint32_t)v;
	p[0] = (unsigned char)u;
	p[1] = (unsigned char)(u >> 8);
	p[2] = (unsigned char)(u >> 16);
	p[3] = (unsigned char)(u >> 24);
}

int qe_shard_create(qe_shard_writer *w, const char *path)
{
	memset(w, 0, sizeof(*w));
	w->max_token = -1;
	if (strlen(path) >= sizeof(w->path))
		return qe_fail(QE_EINVAL, "shard path too long: '%.80s...'", path);
	snprintf(w->path, sizeof(w->path), "%s", path);
	snprintf(w->tmp, sizeof(w->tmp), "%s.tmp.%d", path, (int)getpid());
	w->f = fopen(w->tmp, "wb");
	if (!w->f) {
		int rc = qe_fail(QE_EIO, "cannot create '%s': %s", w->tmp, strerror(errno));
		w->tmp[0] = 0;
		return rc;
	}
	static const unsigned char zeros[QE_SHARD_HEADER_INTS * 4];
	if (fwrite(zeros, sizeof(zeros), 1, w->f) != 1) {
		int rc = qe_fail(QE_EIO, "cannot write '%s': %s", w->tmp, strerror(errno));
		qe_shard_abort(w);
		return rc;
	}
	return QE_OK;
}

int qe_shard_append(qe_shard_writer *w, const int32_t *tok, size_t n)
{
	unsigned char buf[8192];
	size_t k = 0;
	if ((int64_t)n > INT32_MAX - w->ntokens)
		return qe_fail(QE_EINVAL, "shard '%s': more than %d tokens do not fit the header's count", w->path,
			       INT32_MAX);
	for (size_t i = 0; i < n; i++) {
		if (tok[i] < 0 || tok[i] > 65535)
			return qe_fail(QE_EINVAL, "shard '%s': token %d at %lld does not fit uint16", w->path, tok[i],
				       (long long)(w->ntokens + (int64_t)i));
		if (tok[i] > w->max_token)
			w->max_token = tok[i];
		buf[k++] = (unsigned char)tok[i];
		buf[k++] = (unsigned char)(tok[i] >> 8);
		if (k == sizeof(buf) || i + 1 == n) {
			if (fwrite(buf, 1, k, w->f) != k)
				return qe_fail(QE_EIO, "cannot write '%s': %s", w->tmp, strerror(errno));
			k = 0;
		}
	}
	w->ntokens += (int64_t)n;
	return QE_OK;
}

int qe_shard_finish(qe_shard_writer *w)
{
	unsigned char hdr[QE_SHARD_HEADER_INTS * 4] = { 0 };
	put32(hdr, QE_SHARD_MAGIC);
	put32(hdr + 4, QE_SHARD_VERSION);
	put32(hdr + 8, (int32_t)w->ntokens);
	const char *step = "write the header of";
	if (fseek(w->f, 0, SEEK_SET) || fwrite(hdr, sizeof(hdr), 1, w->f) != 1)
		goto report_step;
	step = "flush";
	if (fflush(w->f))
		goto report_step;
	step = "fsync";
	if (fsync(fileno(w->f)))
		goto report_step;
	step = "close";
	FILE *f = w->f;
	w->f = NULL;
	if (fclose(f))
		goto report_step;
	return QE_OK;
report_step:
	return qe_fail(QE_EIO, "cannot %s '%s': %s", step, w->tmp, strerror(errno));
}

int qe_shard_publish(qe_shard_writer *w)
{
	if (rename(w->tmp, w->path)) {
		int rc = qe_fail(QE_EIO, "cannot rename '%s' to '%s': %s", w->tmp, w->path, strerror(errno));
		qe_shard_abort(w);
		return rc;
	}
	w->tmp[0] = 0;
	/* The folder's entry for the new name: fsync the folder. */
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s", w->path);
	char *slash = strrchr(dir, '/');
	if (slash)
		*(slash == dir ? slash + 1 : slash) = 0;
	else
		snprintf(dir, sizeof(dir), ".");
	int dfd = open(dir, O_RDONLY | O_DIRECTORY);
	if (dfd < 0)
		return qe_fail(QE_EIO, "cannot open folder '%s' to fsync '%s': %s", dir, w->path, strerror(errno));
	int bad = fsync(dfd);
	int e = errno;
	close(dfd);
	return bad ? qe_fail(QE_EIO, "cannot fsync folder '%s' of '%s': %s", dir, w->path, strerror(e)) : QE_OK;
}

void qe_shard_abort(qe_shard_writer *w)
{
	if (w->f) {
		fclose(w->f);
		w->f = NULL;
	}
	if (w->tmp[0]) {
		unlink(w->tmp);
		w->tmp[0] = 0;
	}
}

/*
 * export_file.c - Redis's durable save for export's outputs: write a
 * temporary file beside the target, fsync it, rename it into place, fsync
 * the folder.  A reader never sees a half-written model file, and a failure
 * at any step removes the temporary file and names the step and the path.
 */
#include "cli/export.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/core/status.h"

int cli_xfile_open(cli_xfile *x, const char *path)
{
	memset(x, 0, sizeof(*x));
	if (strlen(path) >= sizeof(x->path))
		return qe_fail(QE_EINVAL, "output path too long: '%s'", path);
	snprintf(x->path, sizeof(x->path), "%s", path);
	snprintf(x->tmp, sizeof(x->tmp), "%s.tmp.%ld", path, (long)getpid());
	int fd = open(x->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		int e = errno;
		x->tmp[0] = 0;
		return qe_fail(QE_EIO, "create '%s.tmp.%ld': %s", path, (long)getpid(), strerror(e));
	}
	x->f = fdopen(fd, "wb");
	if (!x->f) {
		int e = errno;
		close(fd);
		unlink(x->tmp);
		x->tmp[0] = 0;
		return qe_fail(QE_EIO, "open '%s': %s", path, strerror(e));
	}
	return QE_OK;
}

int cli_xfile_write(cli_xfile *x, const void *p, size_t n, int64_t off)
{
	if (off >= 0 && fseeko(x->f, (off_t)off, SEEK_SET))
		return qe_fail(QE_EIO, "seek in '%s' to %lld: %s", x->tmp, (long long)off, strerror(errno));
	if (n && fwrite(p, 1, n, x->f) != n)
		return qe_fail(QE_EIO, "write '%s': %s", x->tmp, strerror(errno));
	x->bytes += n;
	return QE_OK;
}

int cli_xfile_sync(cli_xfile *x)
{
	int rc = QE_OK;
	if (fflush(x->f))
		rc = qe_fail(QE_EIO, "write '%s': %s", x->tmp, strerror(errno));
	else if (fsync(fileno(x->f)))
		rc = qe_fail(QE_EIO, "fsync '%s': %s", x->tmp, strerror(errno));
	if (fclose(x->f) && !rc)
		rc = qe_fail(QE_EIO, "close '%s': %s", x->tmp, strerror(errno));
	x->f = NULL;
	return rc;
}

int cli_xfile_commit(cli_xfile *x)
{
	if (rename(x->tmp, x->path))
		return qe_fail(QE_EIO, "rename '%s' to '%s': %s", x->tmp, x->path, strerror(errno));
	x->tmp[0] = 0;
	return QE_OK;
}

void cli_xfile_abort(cli_xfile *x)
{
	if (x->f)
		fclose(x->f);
	x->f = NULL;
	if (x->tmp[0])
		unlink(x->tmp);
	x->tmp[0] = 0;
}

int cli_fsync_dir_of(const char *path)
{
	char buf[4096];
	snprintf(buf, sizeof(buf), "%s", path);
	const char *dir = dirname(buf);
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return qe_fail(QE_EIO, "open folder '%s': %s", dir, strerror(errno));
	int rc = fsync(fd) ? qe_fail(QE_EIO, "fsync folder '%s': %s", dir, strerror(errno)) : QE_OK;
	close(fd);
	return rc;
}

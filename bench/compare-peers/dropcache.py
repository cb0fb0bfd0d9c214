"""dropcache.py - drop the files under the given paths from the page cache (no root needed).

    python3 bench/compare-peers/dropcache.py PATH...

fsync, then posix_fadvise(POSIX_FADV_DONTNEED) on every regular file, so a restore that follows
reads from the disk rather than from memory; prints how many files and bytes it covered.  The
DCP benchmark (bench/peers/dcp_ckpt.py --cold 1) does the same before its load.
"""
import os
import sys


def main():
    files = size = 0
    for top in sys.argv[1:]:
        for root, _, names in os.walk(top):
            for n in names:
                p = os.path.join(root, n)
                try:
                    fd = os.open(p, os.O_RDONLY)
                except OSError:
                    continue
                try:
                    os.fsync(fd)
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    files += 1
                    size += os.fstat(fd).st_size
                except OSError:
                    pass
                finally:
                    os.close(fd)
    print("dropped from the page cache: %d files, %d bytes" % (files, size))


if __name__ == "__main__":
    main()

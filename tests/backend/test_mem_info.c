/*
 * test_mem_info.c - the backend's memory probe (the mem_info op): the cpu
 * backend reports the host's RAM, the cuda backend (when a device is there)
 * the device's; free never exceeds total, and a missing out pointer is
 * refused on both with the same message.
 */
#include <string.h>

#include "bk_util.h"

static void probe(const char *name)
{
	qe_backend *b = NULL;
	int rc = qe_backend_open(name, &b);
	if (rc) {
		printf("%s backend not available (%s): skipped\n", name, qe_last_error());
		return;
	}
	size_t free_b = 0, total = 0;
	CHECK(b->ops->mem_info != NULL, "%s: no mem_info op", name);
	if (!b->ops->mem_info) {
		qe_backend_close(b);
		return;
	}
	CHECK_OK(b->ops->mem_info(b, &free_b, &total));
	CHECK(total > 0, "%s: total %zu bytes", name, total);
	CHECK(free_b <= total, "%s: free %zu above total %zu", name, free_b, total);
	printf("%s: %zu of %zu bytes free\n", name, free_b, total);

	/* a device allocation of 64 MiB is seen (cuda) or at least does not break the probe (cpu) */
	void *p = NULL;
	CHECK_OK(b->ops->alloc(b, 64u << 20, &p));
	size_t free2 = 0, total2 = 0;
	CHECK_OK(b->ops->mem_info(b, &free2, &total2));
	CHECK(total2 == total, "%s: total changed from %zu to %zu", name, total, total2);
	if (strcmp(name, "cuda") == 0)
		CHECK(free2 + (64u << 20) <= free_b + (8u << 20), "cuda: free %zu -> %zu after a 64 MiB alloc", free_b,
		      free2);
	b->ops->free(b, p);

	rc = b->ops->mem_info(b, NULL, &total);
	CHECK(rc == QE_EINVAL && strstr(qe_last_error(), "mem_info: NULL free_bytes"), "%s: NULL free -> %s: %s", name,
	      qe_errname(rc), qe_last_error());
	rc = b->ops->mem_info(b, &free_b, NULL);
	CHECK(rc == QE_EINVAL && strstr(qe_last_error(), "mem_info: NULL total_bytes"), "%s: NULL total -> %s: %s",
	      name, qe_errname(rc), qe_last_error());
	qe_backend_close(b);
}

int main(void)
{
	probe("cpu");
	probe("cuda");
	return qe_test_done("backend_test_mem_info");
}

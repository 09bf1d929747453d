/* tally.c - the shared tally: an unlinked file in /dev/shm mapped by the
 * bench and, through an inherited descriptor, by its worker processes. */
#include "tally.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

tally *tally_create(int *fd, char *err, size_t errlen)
{
	char path[] = "/dev/shm/shardq-bench-XXXXXX";
	char alt[] = "/tmp/shardq-bench-XXXXXX";
	char *used = path;
	int f = mkstemp(path);
	if (f < 0) {
		used = alt;
		f = mkstemp(alt);
	}
	if (f < 0) {
		snprintf(err, errlen, "cannot make the shared tally in /dev/shm or /tmp: %s",
			 strerror(errno));
		return NULL;
	}
	unlink(used); /* gone when the last process unmaps it */
	if (ftruncate(f, (off_t)sizeof(tally))) {
		snprintf(err, errlen, "cannot size the shared tally: %s", strerror(errno));
		close(f);
		return NULL;
	}
	tally *t = tally_attach(f, err, errlen);
	if (!t) {
		close(f);
		return NULL;
	}
	*fd = f;
	return t;
}

tally *tally_attach(int fd, char *err, size_t errlen)
{
	void *p = mmap(NULL, sizeof(tally), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		snprintf(err, errlen, "cannot map the shared tally: %s", strerror(errno));
		return NULL;
	}
	return p;
}

void tally_unmap(tally *t)
{
	if (t)
		munmap(t, sizeof(tally));
}

void tally_reset(tally *t)
{
	size_t off = offsetof(tally, enqueued);
	memset((char *)t + off, 0, sizeof(tally) - off);
}

void tally_warmup_from(tally *t, int64_t origin_us, int64_t warmup_ms)
{
	int64_t from = wall_us() - mono_us() + origin_us + warmup_ms * 1000, none = 0;
	if (warmup_ms > 0)
		atomic_compare_exchange_strong(&t->e2s_from, &none, from);
}

void tally_hold_depth(tally *t, int64_t depth, int64_t n, _Atomic int *stop)
{
	if (depth <= 0)
		return;
	struct timespec pause = {0, 100 * 1000};
	while (!atomic_load(stop)) {
		int64_t open =
			(int64_t)atomic_load(&t->enqueued) - (int64_t)atomic_load(&t->completed);
		if (open + n <= depth || open <= 0)
			return;
		nanosleep(&pause, NULL);
	}
}

int64_t mono_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t wall_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void tally_first(_Atomic int64_t *first, int64_t v)
{
	int64_t cur = atomic_load_explicit(first, memory_order_relaxed);
	while ((cur == 0 || v < cur) &&
	       !atomic_compare_exchange_weak_explicit(first, &cur, v, memory_order_relaxed,
						      memory_order_relaxed))
		;
}

void tally_last(_Atomic int64_t *last, int64_t v)
{
	int64_t cur = atomic_load_explicit(last, memory_order_relaxed);
	while (v > cur && !atomic_compare_exchange_weak_explicit(
				  last, &cur, v, memory_order_relaxed, memory_order_relaxed))
		;
}

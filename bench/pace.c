/* pace.c - see pace.h. */
#include "pace.h"

#include "tally.h"

#include <stdatomic.h>
#include <time.h>

void pace_init(pace *p, int n)
{
	atomic_store(&p->origin, 0);
	atomic_store(&p->joined, 0);
	p->n = n;
}

int64_t pace_join(pace *p, const _Atomic int *stop)
{
	if (atomic_fetch_add(&p->joined, 1) + 1 >= p->n)
		atomic_store(&p->origin, mono_us());
	int64_t o;
	while (!(o = atomic_load(&p->origin)) && !(stop && atomic_load(stop)))
		pace_sleep_until(mono_us() + 1000);
	return o ? o : mono_us();
}

int64_t pace_due(const pace *p, int64_t origin, int i, int64_t sent, double rate, int batch)
{
	if (rate <= 0)
		return 0;
	double offset = p->n > 1 ? (double)i / p->n * batch : 0;
	return origin + (int64_t)(((double)sent + offset) / rate * 1e6);
}

void pace_sleep_until(int64_t at_us)
{
	int64_t now = mono_us();
	if (at_us <= now)
		return;
	int64_t d = at_us - now;
	struct timespec ts = {(time_t)(d / 1000000), (long)(d % 1000000) * 1000};
	nanosleep(&ts, NULL);
}

/* result.c - allocation of a phase's histograms and time series, and of a
 * [rebalance] run's windows. */
#include "result.h"

#include <stdlib.h>
#include <string.h>

int phase_init(phase *p, const char *key)
{
	memset(p, 0, sizeof(*p));
	strncpy(p->key, key, sizeof(p->key) - 1);
	p->enq_rate = p->claim_rate = p->complete_rate = p->e2e_rate = -1;
	p->cpu_bench_s = p->cpu_pg_s = p->cpu_other_s = -1;
	p->slot_idle = -1;
	hist **hs[] = {&p->e2s,       &p->claim_rtt,    &p->enq_rtt,
		       &p->start_rtt, &p->complete_rtt, &p->e2s_warm};
	for (size_t i = 0; i < sizeof(hs) / sizeof(hs[0]); i++)
		if (!(*hs[i] = calloc(1, sizeof(hist)))) {
			phase_free(p);
			return -1;
		}
	return 0;
}

void phase_free(phase *p)
{
	free(p->e2s);
	free(p->claim_rtt);
	free(p->enq_rtt);
	free(p->start_rtt);
	free(p->complete_rtt);
	free(p->e2s_warm);
	free(p->series);
	if (p->rb) {
		rb_result_free(p->rb);
		free(p->rb);
		p->rb = NULL;
	}
	p->e2s = p->claim_rtt = p->enq_rtt = p->start_rtt = p->complete_rtt = p->e2s_warm = NULL;
	p->series = NULL;
	p->nseries = p->capseries = 0;
}

void phase_add_sample(phase *p, const sample *s)
{
	if (p->nseries == p->capseries) {
		size_t cap = p->capseries ? 2 * p->capseries : 256;
		sample *n = realloc(p->series, cap * sizeof(*n));
		if (!n)
			return;
		p->series = n;
		p->capseries = cap;
	}
	p->series[p->nseries++] = *s;
}

const char *const rb_window_names[RB_NWIN] = {"before", "adding", "between", "draining", "after"};

int rb_result_init(rb_result *r)
{
	memset(r, 0, sizeof(*r));
	for (int i = 0; i < RB_NWIN; i++)
		if (!(r->w[i].e2s = calloc(1, sizeof(hist))))
			return -1;
	return 0;
}

void rb_result_free(rb_result *r)
{
	for (int i = 0; r && i < RB_NWIN; i++) {
		free(r->w[i].e2s);
		r->w[i].e2s = NULL;
	}
}

/* hrw.c - weighted rendezvous (highest random weight) placement. */
#include "hrw.h"

#include <math.h>
#include <string.h>
#include <xxhash.h>

static double score(uint32_t p, const char *id, double w)
{
	uint64_t h = XXH3_64bits_withSeed(id, strlen(id), (uint64_t)p * 0x9E3779B97F4A7C15ull + 1);
	/* u in (0, 1): 53 random bits, never 0 */
	double u = ((double)(h >> 11) + 0.5) / 9007199254740992.0;
	return -w / log(u);
}

int sq_hrw_plan(uint32_t partitions, int nshards, const char *const *ids, const double *weights,
		int *out)
{
	int any = 0;
	for (int s = 0; s < nshards; s++)
		if (weights[s] > 0)
			any = 1;
	if (!any)
		return -1;
	for (uint32_t p = 0; p < partitions; p++) {
		int best = -1;
		double bs = 0;
		for (int s = 0; s < nshards; s++) {
			if (weights[s] <= 0)
				continue;
			double sc = score(p, ids[s], weights[s]);
			if (best < 0 || sc > bs) {
				best = s;
				bs = sc;
			}
		}
		out[p] = best;
	}
	return 0;
}

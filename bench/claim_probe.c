/* claim_probe.c - the claim statement's cost on the server: its backend's CPU per job claimed. */
/*
 * usage: claim-probe CONFIG JOBS ROUNDS [START [LIMIT]]
 *
 * Per round, on the config's first shard (a cluster of one shard is
 * meant): enqueues JOBS keyless jobs of type `p`, then claims them all in
 * claims of LIMIT (default 2,048; START of each straight to running,
 * default 0), and
 * prints the CPU time (user + system, /proc/PID/stat) that the shard's
 * backend spent on the claims, per job. Then it deletes them. The type
 * needs a starting_timeout longer than a round, or the claims take back
 * their own expired leases. docs/benchmarks.md ("The claim's update
 * without a join") has the commands. Only for a shard on this machine.
 */
#include "client.h"
#include "cpu.h"
#include "config.h"
#include "shardq.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int claim_all(sq_client *c, sq_claim_req *req, size_t *total, sq_error *err)
{
	size_t got;
	int claims = 0;
	do {
		sq_job *jobs;
		if (sq_claim(c, "probe", req, 1, &jobs, &got, err) != SQ_OK)
			return -1;
		sq_jobs_free(jobs, got);
		*total += got;
		claims++;
	} while (got > 0);
	return claims;
}

int main(int argc, char **argv)
{
	sq_config *cfg;
	sq_client *c;
	sq_error err;
	if (argc < 4) {
		fprintf(stderr, "usage: claim-probe CONFIG JOBS ROUNDS [START [LIMIT]]\n");
		return 2;
	}
	int n = atoi(argv[2]), rounds = atoi(argv[3]), start = argc > 4 ? atoi(argv[4]) : 0;
	int limit = argc > 5 ? atoi(argv[5]) : 2048;
	if (n < 1000 || rounds < 1 || limit < 1 || limit > 100000 || start < 0 || start > limit) {
		fprintf(stderr, "claim-probe: JOBS at least 1000, ROUNDS at least 1, LIMIT in "
				"1..100000, START in 0..LIMIT\n");
		return 2;
	}
	if (sq_config_load(argv[1], &cfg, &err) != SQ_OK ||
	    sq_client_open(cfg, 0, &c, &err) != SQ_OK) {
		fprintf(stderr, "claim-probe: %s\n", err.msg);
		return 1;
	}
	static sq_job_spec js[1000];
	static sq_enqueue_result rs[1000];
	for (int i = 0; i < 1000; i++)
		js[i].type = "p";
	for (int r = 0; r < rounds; r++) {
		for (int i = 0; i < n; i += 1000)
			if (sq_enqueue(c, js, 1000, rs, &err) != SQ_OK) {
				fprintf(stderr, "claim-probe: enqueue: %s\n", err.msg);
				return 1;
			}
		/* one claim first, so that the session and its plan exist */
		sq_claim_req req = {"p", 1, 0};
		size_t total = 0;
		sq_job *jobs;
		size_t got;
		if (sq_claim(c, "probe", &req, 1, &jobs, &got, &err) != SQ_OK) {
			fprintf(stderr, "claim-probe: claim: %s\n", err.msg);
			return 1;
		}
		sq_jobs_free(jobs, got);
		total += got;
		int pid = PQbackendPID(c->shards[0].conn);
		double c0 = cpu_process_s(pid);
		req.limit = limit;
		req.start = start;
		int claims = claim_all(c, &req, &total, &err);
		if (claims < 0) {
			fprintf(stderr, "claim-probe: claim: %s\n", err.msg);
			return 1;
		}
		double c1 = cpu_process_s(PQbackendPID(c->shards[0].conn));
		printf("round %d: %zu jobs claimed in %d claims; backend CPU %.3f s (%.2f "
		       "us/job)\n",
		       r + 1, total, claims, c1 - c0, (c1 - c0) * 1e6 / (double)total);
		PGconn *adm = PQconnectdb(cfg->shards[0].dsn);
		PQclear(PQexec(adm, "DELETE FROM shardq.jobs"));
		PQclear(PQexec(adm, "VACUUM shardq.jobs"));
		PQfinish(adm);
	}
	sq_client_close(c);
	sq_config_free(cfg);
	return 0;
}

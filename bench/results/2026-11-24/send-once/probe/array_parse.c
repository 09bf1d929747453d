/* array_parse.c - what parsing the enqueue's eleven text arrays costs the shard.
 * One session runs SELECT count(*) over unnest of the eleven arrays of 1000
 * elements each as sq_enqueue sends them (q), and over two of them with the
 * other nine passed as plain text (q2); 100 times, best of 5.
 * Build: gcc -O2 -o array_parse array_parse.c -I/usr/include/postgresql -lpq
 * (a database shardq_lat on port 55631; no tables needed) */
#include <libpq-fe.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>
static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}
int main(void)
{
	PGconn *c = PQconnectdb("host=127.0.0.1 port=55631 dbname=shardq_lat user=postgres");
	static char a[11][40000];
	const char *v[11];
	for (int k = 0; k < 11; k++) {
		char *p = a[k];
		*p++ = '{';
		for (int i = 0; i < 1000; i++) {
			if (k == 3)
				p += sprintf(p, "NULL,");
			else if (k == 2)
				p += sprintf(p, "noop,");
			else if (k == 4)
				p += sprintf(p, "\"{\\\"t\\\":1700000000000000}\",");
			else if (k == 10)
				p += sprintf(p, "i,");
			else
				p += sprintf(p, "%d,", 123456789 + i);
		}
		p[-1] = '}';
		*p = 0;
		v[k] = a[k];
	}
	PQclear(PQprepare(c, "q",
			  "SELECT count(*) FROM unnest($1::bigint[], $2::int[], $3::text[], "
			  "$4::text[], $5::text[], $6::int[], $7::bigint[], $8::bigint[], "
			  "$9::bigint[], $10::int[], $11::text[])",
			  0, NULL));
	PQclear(PQprepare(
		c, "q2",
		"SELECT count(*) FROM unnest($1::bigint[], $5::text[]) WHERE $2::text IS NOT NULL "
		"AND $3::text IS NOT NULL AND $4::text IS NOT NULL AND $6::text IS NOT NULL AND "
		"$7::text IS NOT NULL AND $8::text IS NOT NULL AND $9::text IS NOT NULL AND "
		"$10::text IS NOT NULL AND $11::text IS NOT NULL",
		0, NULL));
	const char *names[] = {"q", "q2"};
	for (int q = 0; q < 2; q++) {
		double best = 1e9;
		for (int r = 0; r < 5; r++) {
			double t0 = now();
			for (int i = 0; i < 100; i++) {
				PGresult *res = PQexecPrepared(c, names[q], 11, v, NULL, NULL, 0);
				if (PQresultStatus(res) != PGRES_TUPLES_OK) {
					fprintf(stderr, "%s", PQerrorMessage(c));
					return 1;
				}
				PQclear(res);
			}
			double d = (now() - t0) / 100 * 1000;
			if (d < best)
				best = d;
		}
		printf("%s: %.3f ms per 1000 rows\n", names[q], best);
	}
	return 0;
}

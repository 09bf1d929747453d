/* cmd_moves.c - `shardq move`, `rebalance` and `moves`: moving partitions
 * between shards online, with progress, and recovering a mover that died. */
#include "cli.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct progress {
	int tty;
	int64_t parts_total, parts_done, rows;
	double stall_max, stall_sum;
	int stalls, last_set;
	int64_t t0_us;
} progress;

static void on_progress(const sq_move_info *m, int set, int nsets, void *arg)
{
	progress *p = arg;
	if (!strcmp(m->step, "frozen")) {
		p->stall_sum += m->stall_ms;
		p->stalls++;
		if (m->stall_ms > p->stall_max)
			p->stall_max = m->stall_ms;
	}
	if (!strcmp(m->step, "done")) {
		p->parts_done += m->npartitions;
		p->rows += m->rows > 0 ? m->rows : 0;
	}
	double el = (double)(cli_now_us() - p->t0_us) / 1e6;
	if (p->tty) {
		int width = 30,
		    fill = p->parts_total ? (int)(width * p->parts_done / p->parts_total) : 0;
		char bar[64];
		memset(bar, '#', (size_t)fill);
		memset(bar + fill, '.', (size_t)(width - fill));
		bar[width] = '\0';
		fprintf(stderr,
			"\r[%s] set %d/%d  %" PRId64 "/%" PRId64 " partitions  %" PRId64
			" rows  stall %.1fms  %s %s->%s  %.0fs   ",
			bar, set, nsets, p->parts_done, p->parts_total, p->rows, m->stall_ms,
			m->step, m->from, m->to, el);
	} else if (!strcmp(m->step, "done") || set != p->last_set) {
		if (!strcmp(m->step, "done"))
			fprintf(stderr,
				"move %" PRId64 " (%s -> %s, %d partitions, %" PRId64
				" rows, stall %.1f ms) done; set %d/%d, %" PRId64 "/%" PRId64
				" partitions, %.1fs\n",
				m->move_id, m->from, m->to, m->npartitions, m->rows, m->stall_ms,
				set, nsets, p->parts_done, p->parts_total, el);
	}
	p->last_set = set;
}

static void summary(const progress *p)
{
	double el = (double)(cli_now_us() - p->t0_us) / 1e6;
	if (p->tty)
		fprintf(stderr, "\n");
	printf("moved %" PRId64 " partitions (%" PRId64 " rows) in %.1fs; write stall per set: "
	       "avg %.1f ms, max %.1f ms\n",
	       p->parts_done, p->rows, el, p->stalls ? p->stall_sum / p->stalls : 0, p->stall_max);
}

/* "1,2,5-9" -> partitions, each in 0..partitions-1 and named once. Every
 * bound is checked before a range is expanded. Returns the count, or -1
 * with the message printed. */
static long parse_list(const char *list, uint32_t partitions, uint32_t **out)
{
	unsigned char *seen = calloc(partitions / 8 + 1, 1);
	uint32_t *v = malloc(sizeof(*v) * partitions);
	const char *p = list;
	size_t n = 0;
	if (!seen || !v) {
		fprintf(stderr, "shardq move: out of memory\n");
		goto bad;
	}
	while (*p) {
		size_t len = strcspn(p, ",");
		const char *dash = len > 1 ? memchr(p + 1, '-', len - 1) : NULL;
		size_t alen = dash ? (size_t)(dash - p) : len;
		int64_t a = 0, b = 0;
		int ea = cli_int(p, alen, 0, (int64_t)partitions - 1, &a), eb = ea;
		if (dash)
			eb = cli_int(dash + 1, len - alen - 1, 0, (int64_t)partitions - 1, &b);
		else
			b = a;
		if (ea == -1 || eb == -1 || !len) {
			fprintf(stderr,
				"shardq move: --partitions: '%.*s' is not a partition or a range "
				"like 5-9\n",
				(int)len, p);
			goto bad;
		}
		if (ea || eb) {
			fprintf(stderr,
				"shardq move: --partitions: '%.*s' is out of range; the cluster's "
				"partitions are 0..%u\n",
				(int)len, p, partitions - 1);
			goto bad;
		}
		if (b < a) {
			fprintf(stderr,
				"shardq move: --partitions: the range '%.*s' runs backwards\n",
				(int)len, p);
			goto bad;
		}
		for (int64_t i = a; i <= b; i++) {
			if (seen[i / 8] & (1u << (i % 8))) {
				fprintf(stderr,
					"shardq move: --partitions: partition %" PRId64
					" is named twice\n",
					i);
				goto bad;
			}
			seen[i / 8] |= (unsigned char)(1u << (i % 8));
			v[n++] = (uint32_t)i;
		}
		p += len;
		if (*p == ',' && !*++p) {
			fprintf(stderr, "shardq move: --partitions '%s' ends with a comma\n", list);
			goto bad;
		}
	}
	free(seen);
	*out = v;
	return (long)n;
bad:
	free(seen);
	free(v);
	return -1;
}

static const struct option move_opts[] = {
	{"config", required_argument, NULL, 'c'},
	{"help", no_argument, NULL, 'h'},
	{"partitions", required_argument, NULL, 'p'},
	{"to", required_argument, NULL, 't'},
	{"from", required_argument, NULL, 'f'},
	{"count", required_argument, NULL, 'n'},
	{"set-size", required_argument, NULL, 's'},
	{"pause", required_argument, NULL, 'P'},
	{"lock-timeout", required_argument, NULL, 'l'},
	{"dry-run", no_argument, NULL, 'd'},
	{NULL, 0, NULL, 0},
};

static int common_opt(int c, cli *x, sq_move_opts *o, const char *cmd)
{
	int64_t v;
	int rc;
	switch (c) {
	case 'c': x->config_path = optarg; return 0;
	case 's':
		if ((rc = cli_opt_int(cmd, "--set-size", optarg, 1, SQ_MAX_PARTITIONS, &v)))
			return rc;
		o->set_size = (int)v;
		return 0;
	/* at most an hour: the pause sleeps in microseconds of 32 bits, and
	 * lock_timeout is a PostgreSQL int of milliseconds */
	case 'P': return cli_opt_dur(cmd, "--pause", optarg, 0, 3600000, &o->pause_ms);
	case 'l':
		return cli_opt_dur(cmd, "--lock-timeout", optarg, 1, 3600000, &o->lock_timeout_ms);
	}
	return -1;
}

static int shard_named(const cli *x, const char *opt, const char *id)
{
	int s = sq_config_shard_index(x->cfg, id);
	if (s < 0)
		fprintf(stderr, "shardq move: %s: no shard '%s' in the config\n", opt, id);
	return s;
}

int cmd_move(cli *x, int argc, char **argv)
{
	sq_move_opts o;
	const char *list = NULL, *to = NULL, *from = NULL;
	int64_t count = 0;
	int c, rc, dry = 0;
	sq_move_opts_init(&o);
	while ((c = getopt_long(argc, argv, ":c:hp:t:f:n:s:P:l:d", move_opts, NULL)) != -1) {
		if ((rc = common_opt(c, x, &o, "move")) >= 0) {
			if (rc)
				return rc;
			continue;
		}
		switch (c) {
		case 'p': list = optarg; break;
		case 't': to = optarg; break;
		case 'f': from = optarg; break;
		case 'n':
			if ((rc = cli_opt_int("move", "--count", optarg, 1, SQ_MAX_PARTITIONS,
					      &count)))
				return rc;
			break;
		case 'd': dry = 1; break;
		case 'h':
			printf("usage: shardq [-c FILE] move --partitions LIST --to SHARD\n"
			       "       shardq [-c FILE] move --count N --from SHARD --to SHARD\n"
			       "              [--set-size N] [--lock-timeout D] [--pause D] "
			       "[--dry-run]\n\n"
			       "Moves partitions online (LIST: 1,2,5-9). Writes to them wait for\n"
			       "milliseconds during the freeze; nothing is lost or run twice. "
			       "Large\n"
			       "lists go in sets of --set-size (256), one move each. A mover that "
			       "dies\n"
			       "is resumed by `shardq moves --resume ID` (or `shardq "
			       "rebalance`).\n"
			       "--dry-run checks everything and prints what would move.\n");
			return EX_OK;
		default: return cli_bad_option("move", c, argv);
		}
	}
	if ((rc = cli_no_args("move", argc, argv, "partitions go in --partitions LIST")))
		return rc;
	if (!to || !list == !(count > 0 && from) || (list && (count || from))) {
		fprintf(stderr, "shardq move: give --to and either --partitions or --count with "
				"--from; see --help\n");
		return EX_USAGE;
	}
	if ((rc = cli_load_config(x, "move")))
		return rc;
	uint32_t *parts = NULL;
	long n = 0;
	int fs = from ? shard_named(x, "--from", from) : 0;
	if (shard_named(x, "--to", to) < 0 || fs < 0)
		return EX_USAGE;
	if (list && (n = parse_list(list, sq_config_partitions(x->cfg), &parts)) < 0)
		return EX_USAGE;
	if ((rc = cli_connect(x, "move", 0))) {
		free(parts);
		return rc;
	}
	if (!list) {
		parts = malloc(sizeof(uint32_t) * (size_t)count);
		for (uint32_t p = 0; parts && p < sq_config_partitions(x->cfg) && n < count; p++)
			if (sq_client_shard_of_partition(x->client, p) == fs)
				parts[n++] = p;
		if (n == 0) {
			fprintf(stderr, "shardq move: shard %s holds no partition\n", from);
			free(parts);
			return EX_STATE;
		}
	}
	if (dry) {
		/* each set as the move would take it: the same checks, nothing
		 * changed */
		for (long i = 0; i < n; i += o.set_size) {
			size_t k = (size_t)(n - i < o.set_size ? n - i : o.set_size);
			sq_error err;
			if (sq_move_check(x->client, parts + i, k, to, &err) != SQ_OK) {
				rc = cli_fail("move", &err);
				fprintf(stderr,
					"shardq move: --dry-run: the move would be refused; "
					"nothing was changed\n");
				free(parts);
				return rc;
			}
		}
		int ns = sq_config_shard_count(x->cfg);
		long *per = calloc((size_t)ns, sizeof(long));
		for (long i = 0; per && i < n; i++)
			per[sq_client_shard_of_partition(x->client, parts[i])]++;
		printf("would move %ld partitions to %s in sets of %d; from:", n, to, o.set_size);
		for (int s = 0; per && s < ns; s++)
			if (per[s])
				printf(" %s=%ld", sq_config_shard_id(x->cfg, s), per[s]);
		printf("\n");
		free(per);
		free(parts);
		return EX_OK;
	}
	progress pr = {isatty(2), n, 0, 0, 0, 0, 0, 0, cli_now_us()};
	o.progress = on_progress;
	o.progress_arg = &pr;
	sq_error err;
	rc = EX_OK;
	for (long i = 0; i < n && rc == EX_OK; i += o.set_size) {
		size_t k = (size_t)(n - i < o.set_size ? n - i : o.set_size);
		sq_move_info mi;
		memset(&mi, 0, sizeof(mi)); /* sq_move may fail before it fills it */
		if (sq_move(x->client, parts + i, k, to, &o, &mi, &err) != SQ_OK) {
			if (pr.tty)
				fprintf(stderr, "\n");
			rc = cli_fail("move", &err);
			if (mi.move_id && mi.step[0])
				fprintf(stderr,
					"shardq move: move %" PRId64 " stopped at step '%s'; run "
					"`shardq moves --resume %" PRId64 "` (or --abort)\n",
					mi.move_id, mi.step, mi.move_id);
		}
	}
	if (rc == EX_OK)
		summary(&pr);
	free(parts);
	return rc;
}

int cmd_rebalance(cli *x, int argc, char **argv)
{
	sq_move_opts o;
	int c, rc, dry = 0;
	sq_move_opts_init(&o);
	while ((c = getopt_long(argc, argv, ":c:hs:P:l:d", move_opts, NULL)) != -1) {
		if ((rc = common_opt(c, x, &o, "rebalance")) >= 0) {
			if (rc)
				return rc;
			continue;
		}
		switch (c) {
		case 'd': dry = 1; break;
		case 'h':
			printf("usage: shardq [-c FILE] rebalance [--dry-run] [--set-size N] "
			       "[--pause D]\n"
			       "                  [--lock-timeout D]\n\n"
			       "Plans the partition map from the config's shards and weights "
			       "(weighted\n"
			       "rendezvous hashing: adding or removing a shard moves about 1/N of "
			       "the\n"
			       "partitions and nothing else; weight 0 drains a shard), prints the "
			       "plan,\n"
			       "and carries it out online in sets of --set-size partitions (256), "
			       "with\n"
			       "--pause between sets. Unfinished moves are resumed first. Run\n"
			       "`shardq init` first after adding a shard to the config.\n");
			return EX_OK;
		default: return cli_bad_option("rebalance", c, argv);
		}
	}
	if ((rc = cli_no_args("rebalance", argc, argv, NULL)))
		return rc;
	if ((rc = cli_open(x, "rebalance", 0)))
		return rc;
	sq_plan *p;
	sq_error err;
	if (sq_rebalance_plan(x->client, &p, &err) != SQ_OK)
		return cli_fail("rebalance", &err);
	printf("%-12s %10s %10s\n", "SHARD", "BEFORE", "AFTER");
	for (int s = 0; s < p->nshards; s++)
		printf("%-12s %10" PRId64 " %10" PRId64 "\n", sq_config_shard_id(x->cfg, s),
		       p->before[s], p->after[s]);
	printf("%" PRId64 " of %u partitions move (%.1f%%)\n", p->moving, p->partitions,
	       100.0 * (double)p->moving / p->partitions);
	int64_t moving = p->moving;
	sq_plan_free(p);
	fflush(stdout);
	if (dry || moving == 0) {
		if (!moving)
			printf("nothing to move\n");
		return EX_OK;
	}
	progress pr = {isatty(2), moving, 0, 0, 0, 0, 0, 0, cli_now_us()};
	o.progress = on_progress;
	o.progress_arg = &pr;
	if (sq_rebalance(x->client, &o, &err) != SQ_OK) {
		if (pr.tty)
			fprintf(stderr, "\n");
		rc = cli_fail("rebalance", &err);
		fprintf(stderr, "shardq rebalance: run it again to resume (shardq moves lists what "
				"is unfinished)\n");
		return rc;
	}
	summary(&pr);
	return EX_OK;
}

int cmd_moves(cli *x, int argc, char **argv)
{
	static const struct option opts[] = {
		{"config", required_argument, NULL, 'c'}, {"help", no_argument, NULL, 'h'},
		{"all", no_argument, NULL, 'a'},          {"resume", required_argument, NULL, 'r'},
		{"abort", required_argument, NULL, 'x'},  {NULL, 0, NULL, 0},
	};
	int c, rc, all = 0, resume_all = 0;
	int64_t resume_id = 0, abort_id = 0;
	while ((c = getopt_long(argc, argv, ":c:har:x:", opts, NULL)) != -1) {
		rc = 0;
		switch (c) {
		case 'c': x->config_path = optarg; break;
		case 'a': all = 1; break;
		case 'r':
			if (!strcmp(optarg, "all"))
				resume_all = 1;
			else
				rc = cli_opt_int("moves", "--resume", optarg, 1, INT64_MAX,
						 &resume_id);
			break;
		case 'x':
			rc = cli_opt_int("moves", "--abort", optarg, 1, INT64_MAX, &abort_id);
			break;
		case 'h':
			printf("usage: shardq [-c FILE] moves [--all]\n"
			       "       shardq [-c FILE] moves --resume ID|all\n"
			       "       shardq [-c FILE] moves --abort ID\n\n"
			       "Lists unfinished moves (--all: every move) with their step, rows\n"
			       "copied, write stall and last error. --resume carries a move on "
			       "from\n"
			       "its step; --abort undoes one that has not passed the copy commit\n"
			       "(the partitions stay with their old shard).\n");
			return EX_OK;
		default: return cli_bad_option("moves", c, argv);
		}
		if (rc)
			return rc;
	}
	if ((rc = cli_no_args("moves", argc, argv, NULL)))
		return rc;
	if ((resume_all || resume_id) + !!abort_id + all > 1) {
		fprintf(stderr, "shardq moves: give one of --all, --resume and --abort\n");
		return EX_USAGE;
	}
	if ((rc = cli_open(x, "moves", 0)))
		return rc;
	sq_error err;
	if (abort_id > 0) {
		if (sq_move_abort(x->client, abort_id, &err) != SQ_OK)
			return cli_fail("moves", &err);
		printf("move %" PRId64 " aborted; its partitions stay where they were\n", abort_id);
		return EX_OK;
	}
	if (resume_all || resume_id) {
		sq_move_info *v;
		size_t n;
		if (sq_moves_list(x->client, 0, &v, &n, &err) != SQ_OK)
			return cli_fail("moves", &err);
		int64_t one = resume_id;
		rc = EX_OK;
		for (size_t i = 0; i < n && rc == EX_OK; i++) {
			sq_move_info mi;
			if (one && v[i].move_id != one)
				continue;
			if (sq_move_resume(x->client, v[i].move_id, NULL, &mi, &err) != SQ_OK)
				rc = cli_fail("moves", &err);
			else
				printf("move %" PRId64 " resumed from '%s': done (%" PRId64
				       " rows)\n",
				       v[i].move_id, v[i].step, mi.rows);
		}
		if (one && rc == EX_OK) {
			int found = 0;
			for (size_t i = 0; i < n; i++)
				found |= v[i].move_id == one;
			sq_move_info *every = NULL;
			size_t nall = 0;
			if (!found && sq_moves_list(x->client, 1, &every, &nall, &err) != SQ_OK)
				rc = cli_fail("moves", &err);
			for (size_t i = 0; !found && rc == EX_OK && i < nall; i++)
				if (every[i].move_id == one) {
					found = 1;
					printf("move %" PRId64 " is %s; nothing to do\n", one,
					       every[i].step);
				}
			if (!found && rc == EX_OK) {
				/* as --abort of an unknown id says it */
				err.code = SQ_ENOTFOUND;
				snprintf(err.msg, sizeof(err.msg),
					 "no move with id %" PRId64 " (see shardq moves --all)",
					 one);
				rc = cli_fail("moves", &err);
			}
			free(every);
		}
		free(v);
		return rc;
	}
	sq_move_info *v;
	size_t n;
	if (sq_moves_list(x->client, all, &v, &n, &err) != SQ_OK)
		return cli_fail("moves", &err);
	printf("%-6s %-8s %-8s %6s %-9s %10s %9s %9s  %s\n", "ID", "FROM", "TO", "PARTS", "STEP",
	       "ROWS", "STALL", "ELAPSED", "ERROR");
	for (size_t i = 0; i < n; i++)
		printf("%-6" PRId64 " %-8s %-8s %6d %-9s %10" PRId64 " %7.1fms %8.1fs  %s\n",
		       v[i].move_id, v[i].from, v[i].to, v[i].npartitions, v[i].step, v[i].rows,
		       v[i].stall_ms, v[i].elapsed_ms / 1000.0, v[i].error);
	if (!n)
		printf("(no %smoves)\n", all ? "" : "unfinished ");
	free(v);
	return EX_OK;
}

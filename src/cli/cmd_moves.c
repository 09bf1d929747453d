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
	const char *cmd; /* "move", "rebalance", "moves" */
} progress;

/* A mover waiting for the meta database, and the wait's end: one line. */
static void on_meta_note(const char *line, void *arg)
{
	const progress *p = arg;
	fprintf(stderr, "%sshardq %s: %s\n", p->tty ? "\n" : "", p->cmd, line);
}

/* What every mover of the CLI does while the meta database is away: waits
 * (--meta-wait), says so, and stops on SIGTERM/SIGINT. */
static void meta_wait_opts(sq_move_opts *o, progress *p, const char *cmd)
{
	p->cmd = cmd;
	o->progress_arg = p;
	o->meta_note = on_meta_note;
	o->handle_signals = 1;
}

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
	{"config", required_argument, NULL, 'c'},       {"help", no_argument, NULL, 'h'},
	{"partitions", required_argument, NULL, 'p'},   {"to", required_argument, NULL, 't'},
	{"from", required_argument, NULL, 'f'},         {"count", required_argument, NULL, 'n'},
	{"set-size", required_argument, NULL, 's'},     {"pause", required_argument, NULL, 'P'},
	{"lock-timeout", required_argument, NULL, 'l'}, {"dry-run", no_argument, NULL, 'd'},
	{"meta-wait", required_argument, NULL, 'M'},    {NULL, 0, NULL, 0},
};

/* --meta-wait D: how long a mover waits for the meta database (0: not). */
static int meta_wait_opt(const char *cmd, sq_move_opts *o)
{
	return cli_opt_dur(cmd, "--meta-wait", optarg, 0, 86400000, &o->meta_wait_ms);
}

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
	case 'M': return meta_wait_opt(cmd, o);
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

static void print_move_help(void)
{
	printf("usage: shardq [-c FILE] move --partitions LIST --to SHARD\n"
	       "       shardq [-c FILE] move --count N --from SHARD --to SHARD\n"
	       "              [--set-size N] [--lock-timeout D] [--pause D] "
	       "[--meta-wait D] [--dry-run]\n\n"
	       "Moves partitions online (LIST: 1,2,5-9). Writes to them wait for\n"
	       "milliseconds during the freeze; nothing is lost or run twice. "
	       "Large\n"
	       "lists go in sets of --set-size (256), one move each. A mover that "
	       "dies\n"
	       "is resumed by `shardq moves --resume ID` (or `shardq "
	       "rebalance`).\n"
	       "A step that cannot reach the meta database waits for it, trying "
	       "every\n"
	       "second, for --meta-wait (5m; 0: stops at once), then goes on by "
	       "itself.\n"
	       "--dry-run checks everything and prints what would move.\n");
}

/* What `shardq move` was asked to move, and how. */
typedef struct move_args {
	sq_move_opts o;
	const char *list, *to, *from;
	int64_t count;
	int dry;
} move_args;

/* The options; 0 to go on, or the exit code with *stop set. */
static int move_options(cli *x, move_args *a, int argc, char **argv, int *stop)
{
	int c, rc;
	*stop = 1;
	while ((c = getopt_long(argc, argv, ":c:hp:t:f:n:s:P:l:dM:", move_opts, NULL)) != -1) {
		if ((rc = common_opt(c, x, &a->o, "move")) >= 0) {
			if (rc)
				return rc;
			continue;
		}
		switch (c) {
		case 'p': a->list = optarg; break;
		case 't': a->to = optarg; break;
		case 'f': a->from = optarg; break;
		case 'n':
			if ((rc = cli_opt_int("move", "--count", optarg, 1, SQ_MAX_PARTITIONS,
					      &a->count)))
				return rc;
			break;
		case 'd': a->dry = 1; break;
		case 'h': print_move_help(); return EX_OK;
		default: return cli_bad_option("move", c, argv);
		}
	}
	if ((rc = cli_no_args("move", argc, argv, "partitions go in --partitions LIST")))
		return rc;
	if (!a->to || !a->list == !(a->count > 0 && a->from) ||
	    (a->list && (a->count || a->from))) {
		fprintf(stderr, "shardq move: give --to and either --partitions or --count with "
				"--from; see --help\n");
		return EX_USAGE;
	}
	*stop = 0;
	return 0;
}

/* --count N --from SHARD: the first N partitions that shard owns. */
static int partitions_of(cli *x, const move_args *a, int from, uint32_t **parts, long *n)
{
	*parts = malloc(sizeof(uint32_t) * (size_t)a->count);
	for (uint32_t p = 0; *parts && p < sq_config_partitions(x->cfg) && *n < a->count; p++)
		if (sq_client_shard_of_partition(x->client, p) == from)
			(*parts)[(*n)++] = p;
	if (*n == 0) {
		fprintf(stderr, "shardq move: shard %s holds no partition\n", a->from);
		return EX_STATE;
	}
	return 0;
}

/* A move refused for what its command line named (SQ_EINVAL: partitions
 * already on --to, a shard not in the config) is a bad command line (2),
 * as the other checks of its options are. One line, with `then` after the
 * reason ("" for none). */
static int move_fail(const sq_error *err, const char *then)
{
	fprintf(stderr, "shardq move: %s%s\n", err->msg, then);
	return err->code == SQ_EINVAL ? EX_USAGE : cli_exit_code(err->code);
}

/* --dry-run: each set as the move would take it, the same checks with
 * nothing changed; then how many partitions would leave each shard. */
static int dry_run(cli *x, const move_args *a, const uint32_t *parts, long n)
{
	int set = a->o.set_size;
	for (long i = 0; i < n; i += set) {
		size_t k = (size_t)(n - i < set ? n - i : set);
		sq_error err;
		if (sq_move_check(x->client, parts + i, k, a->to, &err) != SQ_OK) {
			return move_fail(&err, " (--dry-run: the move would be refused; nothing "
					       "was changed)");
		}
	}
	int ns = sq_config_shard_count(x->cfg);
	long *per = calloc((size_t)ns, sizeof(long));
	for (long i = 0; per && i < n; i++)
		per[sq_client_shard_of_partition(x->client, parts[i])]++;
	printf("would move %ld partitions to %s in sets of %d; from:", n, a->to, set);
	for (int s = 0; per && s < ns; s++)
		if (per[s])
			printf(" %s=%ld", sq_config_shard_id(x->cfg, s), per[s]);
	printf("\n");
	free(per);
	return EX_OK;
}

/* One move per set of --set-size partitions, with progress; a move that
 * stops is named with the step to resume it from. */
static int run_moves(cli *x, move_args *a, const uint32_t *parts, long n)
{
	progress pr = {isatty(2), n, 0, 0, 0, 0, 0, 0, cli_now_us(), NULL};
	int set = a->o.set_size, rc = EX_OK;
	sq_error err;
	a->o.progress = on_progress;
	meta_wait_opts(&a->o, &pr, "move");
	for (long i = 0; i < n && rc == EX_OK; i += set) {
		size_t k = (size_t)(n - i < set ? n - i : set);
		sq_move_info mi;
		memset(&mi, 0, sizeof(mi)); /* sq_move may fail before it fills it */
		if (sq_move(x->client, parts + i, k, a->to, &a->o, &mi, &err) != SQ_OK) {
			if (pr.tty)
				fprintf(stderr, "\n");
			rc = move_fail(&err, "");
			if (mi.move_id && mi.step[0])
				fprintf(stderr,
					"shardq move: move %" PRId64 " stopped at step '%s'; run "
					"`shardq moves --resume %" PRId64 "` (or --abort)\n",
					mi.move_id, mi.step, mi.move_id);
		}
	}
	if (rc == EX_OK)
		summary(&pr);
	return rc;
}

int cmd_move(cli *x, int argc, char **argv)
{
	move_args a = {0};
	uint32_t *parts = NULL;
	long n = 0;
	int stop, rc;
	sq_move_opts_init(&a.o);
	rc = move_options(x, &a, argc, argv, &stop);
	if (stop)
		return rc;
	if ((rc = cli_load_config(x, "move")))
		return rc;
	int fs = a.from ? shard_named(x, "--from", a.from) : 0;
	if (shard_named(x, "--to", a.to) < 0 || fs < 0)
		return EX_USAGE;
	if (a.list && (n = parse_list(a.list, sq_config_partitions(x->cfg), &parts)) < 0)
		return EX_USAGE;
	if ((rc = cli_connect(x, "move", 0)) == EX_OK && !a.list)
		rc = partitions_of(x, &a, fs, &parts, &n);
	if (rc == EX_OK)
		rc = a.dry ? dry_run(x, &a, parts, n) : run_moves(x, &a, parts, n);
	free(parts);
	return rc;
}

int cmd_rebalance(cli *x, int argc, char **argv)
{
	sq_move_opts o;
	int c, rc, dry = 0;
	sq_move_opts_init(&o);
	while ((c = getopt_long(argc, argv, ":c:hs:P:l:dM:", move_opts, NULL)) != -1) {
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
			       "                  [--lock-timeout D] [--meta-wait D]\n\n"
			       "Plans the partition map from the config's shards and weights "
			       "(weighted\n"
			       "rendezvous hashing: adding or removing a shard moves about 1/N of "
			       "the\n"
			       "partitions and nothing else; weight 0 drains a shard), prints the "
			       "plan,\n"
			       "and carries it out online in sets of --set-size partitions (256), "
			       "with\n"
			       "--pause between sets. Unfinished moves are resumed first. Run\n"
			       "`shardq init` first after adding a shard to the config. A step\n"
			       "that cannot reach the meta database waits for it for --meta-wait\n"
			       "(5m; 0: stops at once).\n");
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
	progress pr = {isatty(2), moving, 0, 0, 0, 0, 0, 0, cli_now_us(), NULL};
	o.progress = on_progress;
	meta_wait_opts(&o, &pr, "rebalance");
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

static void print_moves_help(void)
{
	printf("usage: shardq [-c FILE] moves [--all]\n"
	       "       shardq [-c FILE] moves --resume ID|all [--meta-wait D]\n"
	       "       shardq [-c FILE] moves --abort ID\n\n"
	       "Lists unfinished moves (--all: every move) with their step, rows\n"
	       "copied, write stall and last error. --resume carries a move on "
	       "from\n"
	       "its step; --abort undoes one that has not passed the copy commit\n"
	       "(the partitions stay with their old shard). A resumed move waits\n"
	       "for the meta database as `shardq move` does (--meta-wait, 5m).\n");
}

/* What `shardq moves` was asked: a list, a resume or an abort. */
typedef struct moves_args {
	int all, resume_all;
	int64_t resume_id, abort_id;
	sq_move_opts o;
} moves_args;

/* The options; 0 to go on, or the exit code with *stop set. */
static int moves_options(cli *x, moves_args *a, int argc, char **argv, int *stop)
{
	static const struct option opts[] = {
		{"config", required_argument, NULL, 'c'},
		{"help", no_argument, NULL, 'h'},
		{"all", no_argument, NULL, 'a'},
		{"resume", required_argument, NULL, 'r'},
		{"abort", required_argument, NULL, 'x'},
		{"meta-wait", required_argument, NULL, 'M'},
		{NULL, 0, NULL, 0},
	};
	int c, rc;
	*stop = 1;
	while ((c = getopt_long(argc, argv, ":c:har:x:M:", opts, NULL)) != -1) {
		rc = 0;
		switch (c) {
		case 'c': x->config_path = optarg; break;
		case 'a': a->all = 1; break;
		case 'r':
			if (!strcmp(optarg, "all"))
				a->resume_all = 1;
			else
				rc = cli_opt_int("moves", "--resume", optarg, 1, INT64_MAX,
						 &a->resume_id);
			break;
		case 'x':
			rc = cli_opt_int("moves", "--abort", optarg, 1, INT64_MAX, &a->abort_id);
			break;
		case 'M': rc = meta_wait_opt("moves", &a->o); break;
		case 'h': print_moves_help(); return EX_OK;
		default: return cli_bad_option("moves", c, argv);
		}
		if (rc)
			return rc;
	}
	if ((rc = cli_no_args("moves", argc, argv, NULL)))
		return rc;
	if ((a->resume_all || a->resume_id) + !!a->abort_id + a->all > 1) {
		fprintf(stderr, "shardq moves: give one of --all, --resume and --abort\n");
		return EX_USAGE;
	}
	*stop = 0;
	return 0;
}

static int abort_move(cli *x, int64_t id)
{
	sq_error err;
	if (sq_move_abort(x->client, id, &err) != SQ_OK)
		return cli_fail("moves", &err);
	printf("move %" PRId64 " aborted; its partitions stay where they were\n", id);
	return EX_OK;
}

/* --resume ID of a move that is not unfinished: says it is finished (and
 * how), or fails as --abort of an unknown id does. */
static int not_unfinished(cli *x, int64_t id)
{
	sq_move_info *every = NULL;
	size_t nall = 0;
	sq_error err;
	int rc = EX_OK, found = 0;
	if (sq_moves_list(x->client, 1, &every, &nall, &err) != SQ_OK)
		rc = cli_fail("moves", &err);
	for (size_t i = 0; !found && rc == EX_OK && i < nall; i++)
		if (every[i].move_id == id) {
			found = 1;
			printf("move %" PRId64 " is %s; nothing to do\n", id, every[i].step);
		}
	if (!found && rc == EX_OK) {
		err.code = SQ_ENOTFOUND;
		snprintf(err.msg, sizeof(err.msg),
			 "no move with id %" PRId64 " (see shardq moves --all)", id);
		rc = cli_fail("moves", &err);
	}
	free(every);
	return rc;
}

/* Resumes every unfinished move (one: 0), or only move `one`. */
static int resume_moves(cli *x, int64_t one, sq_move_opts *o)
{
	sq_move_info *v;
	size_t n;
	sq_error err;
	int rc = EX_OK, found = 0;
	progress pr = {0};
	meta_wait_opts(o, &pr, "moves");
	if (sq_moves_list(x->client, 0, &v, &n, &err) != SQ_OK)
		return cli_fail("moves", &err);
	for (size_t i = 0; i < n && rc == EX_OK; i++) {
		sq_move_info mi;
		if (one && v[i].move_id != one)
			continue;
		memset(&mi, 0, sizeof(mi));
		if (sq_move_resume(x->client, v[i].move_id, o, &mi, &err) != SQ_OK) {
			rc = cli_fail("moves", &err);
			if (mi.step[0])
				fprintf(stderr,
					"shardq moves: move %" PRId64 " stopped at step '%s'; run "
					"`shardq moves --resume %" PRId64 "` again (or --abort)\n",
					v[i].move_id, mi.step, v[i].move_id);
		} else
			printf("move %" PRId64 " resumed from '%s': done (%" PRId64 " rows)\n",
			       v[i].move_id, v[i].step, mi.rows);
	}
	for (size_t i = 0; i < n; i++)
		found |= v[i].move_id == one;
	free(v);
	if (one && rc == EX_OK && !found)
		rc = not_unfinished(x, one);
	return rc;
}

static int list_moves(cli *x, int all)
{
	sq_move_info *v;
	size_t n;
	sq_error err;
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

int cmd_moves(cli *x, int argc, char **argv)
{
	moves_args a = {0};
	sq_move_opts_init(&a.o);
	int stop, rc = moves_options(x, &a, argc, argv, &stop);
	if (stop)
		return rc;
	if ((rc = cli_open(x, "moves", 0)))
		return rc;
	if (a.abort_id > 0)
		return abort_move(x, a.abort_id);
	if (a.resume_all || a.resume_id)
		return resume_moves(x, a.resume_id, &a.o);
	return list_moves(x, a.all);
}

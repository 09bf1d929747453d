/* cmd_work.c - `shardq work`: the worker runtime running a command per job.
 * The job's params go to the command's stdin and its fields to environment
 * variables; exit 0 completes the job, PERMANENT_EXIT fails it for good, any
 * other exit fails it under the type's retry policy. */
#define _GNU_SOURCE
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define PERMANENT_EXIT 100
#define LEASE_CHECK_MS 100    /* how often a run looks at its lease */
#define MAX_SLOTS      1024   /* per type, as sq_worker_add takes */
#define MAX_HELD       100000 /* --buffer and --prefetch */

/* The program that runs each job's command (src/cli/jobexec_guard.c),
 * installed next to `shardq`; the variable overrides where it is. */
#define HELPER_NAME "shardq-exec"
#define HELPER_ENV  "SHARDQ_EXEC_HELPER"

extern char **environ;

typedef struct exec_ctx {
	const char *cmd;
	const char *worker;
	char helper[PATH_MAX];
	char parent[24]; /* our pid, for the helper to check who its parent is */
	int quiet;       /* do not forward the command's output */
} exec_ctx;

static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;

/* One of the command's outputs: forwarded line by line with a [job ID]
 * prefix; the last non-empty line is kept for the job's error. */
typedef struct stream {
	int fd;
	FILE *to;
	char buf[8192];
	size_t n;
	char last[512];
	int open;
} stream;

static void emit(stream *st, int64_t id, const char *line, size_t n, int quiet)
{
	if (n > 0) {
		size_t k = n < sizeof(st->last) - 1 ? n : sizeof(st->last) - 1;
		memcpy(st->last, line, k);
		st->last[k] = '\0';
	}
	if (quiet)
		return;
	pthread_mutex_lock(&out_mu);
	fprintf(st->to, "[job %" PRId64 "] %.*s\n", id, (int)n, line);
	fflush(st->to);
	pthread_mutex_unlock(&out_mu);
}

/* Reads what is there; at end of input flushes a last partial line. */
static void stream_read(stream *st, int64_t id, int quiet)
{
	ssize_t r = read(st->fd, st->buf + st->n, sizeof(st->buf) - st->n);
	if (r <= 0) {
		if (st->n)
			emit(st, id, st->buf, st->n, quiet);
		st->n = 0;
		st->open = 0;
		return;
	}
	st->n += (size_t)r;
	size_t used = 0;
	for (;;) {
		char *nl = memchr(st->buf + used, '\n', st->n - used);
		if (!nl)
			break;
		emit(st, id, st->buf + used, (size_t)(nl - (st->buf + used)), quiet);
		used = (size_t)(nl - st->buf) + 1;
	}
	if (used == 0 && st->n == sizeof(st->buf)) {
		emit(st, id, st->buf, st->n, quiet); /* a line longer than the buffer */
		used = st->n;
	}
	memmove(st->buf, st->buf + used, st->n - used);
	st->n -= used;
}

static char **job_env(const sq_job *job, const char *worker)
{
	size_t n = 0;
	while (environ[n])
		n++;
	char **env = calloc(n + 8, sizeof(char *));
	if (!env)
		return NULL;
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "SHARDQ_JOB_", 11))
			env[k++] = strdup(environ[i]);
	char tmp[1024];
	snprintf(tmp, sizeof(tmp), "SHARDQ_JOB_ID=%" PRId64, job->id);
	env[k++] = strdup(tmp);
	snprintf(tmp, sizeof(tmp), "SHARDQ_JOB_TYPE=%s", job->type);
	env[k++] = strdup(tmp);
	snprintf(tmp, sizeof(tmp), "SHARDQ_JOB_KEY=%s", job->key ? job->key : "");
	env[k++] = strdup(tmp);
	snprintf(tmp, sizeof(tmp), "SHARDQ_JOB_ATTEMPT=%d", job->tries);
	env[k++] = strdup(tmp);
	snprintf(tmp, sizeof(tmp), "SHARDQ_JOB_MAX_ATTEMPTS=%d", job->max_attempts);
	env[k++] = strdup(tmp);
	snprintf(tmp, sizeof(tmp), "SHARDQ_WORKER=%s", worker);
	env[k++] = strdup(tmp);
	return env;
}

static void env_free(char **env)
{
	for (size_t i = 0; env && env[i]; i++)
		free(env[i]);
	free(env);
}

/* Starts the helper on the job's pipes with the job's environment, every
 * signal at its default and none blocked (this handler thread blocks them
 * all), in a process group of its own (a ^C meant for the worker does not
 * reach the job) and with none of our other descriptors. posix_spawn does
 * not copy this process, however large: it runs the child on our memory
 * until the exec (vfork). Returns the pid or -errno. */
static pid_t spawn_helper(const exec_ctx *x, int in, int out, int err, char **env)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	sigset_t none, all;
	pid_t pid;
	char *argv[] = {HELPER_NAME, (char *)x->parent, (char *)x->cmd, NULL};
	sigemptyset(&none);
	sigfillset(&all);
	int rc = posix_spawn_file_actions_init(&fa);
	if (rc)
		return -rc;
	rc = posix_spawnattr_init(&at);
	if (rc) {
		posix_spawn_file_actions_destroy(&fa);
		return -rc;
	}
	rc = posix_spawn_file_actions_adddup2(&fa, in, 0);
	if (!rc)
		rc = posix_spawn_file_actions_adddup2(&fa, out, 1);
	if (!rc)
		rc = posix_spawn_file_actions_adddup2(&fa, err, 2);
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 34)
	if (!rc)
		rc = posix_spawn_file_actions_addclosefrom_np(&fa, 3);
#endif
	if (!rc)
		rc = posix_spawnattr_setsigmask(&at, &none);
	if (!rc)
		rc = posix_spawnattr_setsigdefault(&at, &all);
	if (!rc)
		rc = posix_spawnattr_setpgroup(&at, 0);
	if (!rc)
		rc = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
							   POSIX_SPAWN_SETPGROUP);
	if (!rc)
		rc = posix_spawn(&pid, x->helper, &fa, &at, argv, env);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	return rc ? -rc : pid;
}

/* One run of a job's command, seen from the handler thread: the helper's
 * pid, our ends of its pipes and how far each has got. */
typedef struct job_run {
	pid_t pid;
	int in;  /* the command's stdin; -1 once the params are all written */
	int pfd; /* a pidfd on the helper, or -1 */
	stream so, se;
	const char *params;
	size_t plen, sent;
	int exited;  /* the helper exited (or, without a pidfd, is not watched) */
	int stopped; /* SIGTERM sent: the lease was lost */
} job_run;

static void close_pipe(int p[2])
{
	for (int i = 0; i < 2; i++)
		if (p[i] >= 0)
			close(p[i]);
}

/* Starts the helper on three fresh pipes, with the job's environment.
 * Returns 0, or -1 with why in errbuf. */
static int start_run(const exec_ctx *x, const sq_job *job, job_run *r, char *errbuf, size_t errlen)
{
	int in[2] = {-1, -1}, out[2] = {-1, -1}, er[2] = {-1, -1};
	char **env = job_env(job, x->worker);
	if (!env || pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(er, O_CLOEXEC)) {
		snprintf(errbuf, errlen, "cannot start the command: %s", strerror(errno));
		env_free(env);
		close_pipe(in);
		close_pipe(out);
		close_pipe(er);
		return -1;
	}
	/* the helper runs the command and watches this thread: if the worker
	 * dies, the job's processes die with it (see jobexec_guard.c) */
	pid_t pid = spawn_helper(x, in[0], out[1], er[1], env);
	close(in[0]);
	close(out[1]);
	close(er[1]);
	env_free(env);
	if (pid < 0) {
		snprintf(errbuf, errlen, "cannot start %s: %s", x->helper, strerror((int)-pid));
		close(in[1]);
		close(out[0]);
		close(er[0]);
		return -1;
	}
	r->pid = pid;
	r->in = in[1];
	r->so = (stream){.fd = out[0], .to = stdout, .open = 1};
	r->se = (stream){.fd = er[0], .to = stderr, .open = 1};
	r->params = job->params ? job->params : "{}";
	r->plen = strlen(r->params);
	r->sent = 0;
	fcntl(r->in, F_SETFL, O_NONBLOCK);
	/* the helper's exit, watched beside the outputs (a command may close
	 * them and go on); without pidfds, only the outputs are */
#ifdef SYS_pidfd_open
	r->pfd = (int)syscall(SYS_pidfd_open, pid, 0);
#else
	r->pfd = -1;
#endif
	r->exited = r->pfd < 0;
	r->stopped = 0;
	return 0;
}

/* Writes what the command's stdin takes of the params; closes it when all
 * are written or it is gone. */
static void feed_params(job_run *r)
{
	ssize_t w = write(r->in, r->params + r->sent, r->plen - r->sent);
	if (w > 0)
		r->sent += (size_t)w;
	if (w < 0 || r->sent == r->plen) {
		close(r->in);
		r->in = -1;
	}
}

/* Feeds stdin and drains both outputs at once, so that a large params
 * document or a chatty command cannot deadlock against us, until the
 * outputs are closed and the helper has exited. */
static void pump_run(const exec_ctx *x, const sq_job *job, job_run *r)
{
	while (r->so.open || r->se.open || !r->exited) {
		struct pollfd p[4];
		int np = 0, iin = -1, iout = -1, ierr = -1, ipid = -1;
		if (r->in >= 0)
			p[iin = np++] = (struct pollfd){r->in, POLLOUT, 0};
		if (r->so.open)
			p[iout = np++] = (struct pollfd){r->so.fd, POLLIN, 0};
		if (r->se.open)
			p[ierr = np++] = (struct pollfd){r->se.fd, POLLIN, 0};
		if (!r->exited)
			p[ipid = np++] = (struct pollfd){r->pfd, POLLIN, 0};
		/* a lease this worker lost: the run stops (the helper kills all
		 * of it on SIGTERM), before another worker's claim can take the
		 * job (sq_job_lease_lost) */
		if (!r->stopped && sq_job_lease_lost(job)) {
			kill(r->pid, SIGTERM);
			r->stopped = 1;
		}
		int n = poll(p, (nfds_t)np, r->stopped ? -1 : LEASE_CHECK_MS);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (ipid >= 0 && p[ipid].revents)
			r->exited = 1;
		if (iin >= 0 && p[iin].revents)
			feed_params(r);
		if (iout >= 0 && p[iout].revents)
			stream_read(&r->so, job->id, x->quiet);
		if (ierr >= 0 && p[ierr].revents)
			stream_read(&r->se, job->id, x->quiet);
	}
}

/* Closes what is left of the run and reaps the helper; its wait status. */
static int end_run(job_run *r)
{
	int status = 0;
	if (r->in >= 0)
		close(r->in);
	if (r->pfd >= 0)
		close(r->pfd);
	close(r->so.fd);
	close(r->se.fd);
	while (waitpid(r->pid, &status, 0) < 0 && errno == EINTR)
		;
	return status;
}

/* The job's result from the helper's wait status; the error names the
 * command's last line of output (stderr's, else stdout's). */
static sq_job_result run_result(const job_run *r, int status, char *errbuf, size_t errlen)
{
	const char *last = r->se.last[0] ? r->se.last : r->so.last;
	if (r->stopped) {
		/* discarded by the worker in any case: for the log only */
		snprintf(errbuf, errlen, "stopped: this worker no longer holds the job's lease");
		return SQ_RESULT_RETRY;
	}
	if (WIFEXITED(status)) {
		int code = WEXITSTATUS(status);
		if (code == 0)
			return SQ_RESULT_DONE;
		if (code == 126 || code == 127) {
			snprintf(errbuf, errlen, "the command could not be started (exit %d): %s",
				 code, last[0] ? last : "not found or not executable");
			return SQ_RESULT_RETRY;
		}
		snprintf(errbuf, errlen, "%s", last[0] ? last : "");
		if (!last[0])
			snprintf(errbuf, errlen, "exit code %d", code);
		return code == PERMANENT_EXIT ? SQ_RESULT_FAIL : SQ_RESULT_RETRY;
	}
	snprintf(errbuf, errlen, "killed by signal %d%s%s", WTERMSIG(status), last[0] ? ": " : "",
		 last);
	return SQ_RESULT_RETRY;
}

/* The handler of every type: runs the job's command under the helper. */
static sq_job_result exec_handler(const sq_job *job, void *arg, char *errbuf, size_t errlen)
{
	exec_ctx *x = arg;
	job_run r;
	if (start_run(x, job, &r, errbuf, errlen))
		return SQ_RESULT_RETRY;
	pump_run(x, job, &r);
	int status = end_run(&r);
	return run_result(&r, status, errbuf, errlen);
}

/* Whether the shell itself takes word at the start of a command: a
 * reserved word (if, case, while, { ...), a builtin, or an assignment
 * (VAR=1 cmd). What it starts is the shell's to find. */
static int shell_word(const char *word)
{
	static const char *const words[] = {
		/* reserved words */
		"if", "then", "else", "elif", "fi", "case", "esac", "for", "while", "until", "do",
		"done", "in", "!", "{", "}", "function", "select", "time",
		/* POSIX special and regular builtins */
		":", ".", "break", "continue", "eval", "exec", "exit", "export", "readonly",
		"return", "set", "shift", "times", "trap", "unset", "alias", "bg", "cd", "command",
		"false", "fc", "fg", "getopts", "hash", "jobs", "kill", "pwd", "read", "true",
		"type", "ulimit", "umask", "unalias", "wait", "echo", "printf", "test", "[", NULL};
	for (int i = 0; words[i]; i++)
		if (!strcmp(word, words[i]))
			return 1;
	/* NAME=value: an assignment, then (maybe) the command */
	size_t name =
		strspn(word, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_0123456789");
	return name > 0 && word[name] == '=' && !(word[0] >= '0' && word[0] <= '9');
}

/* The first word of the command must be something we can run; a shell
 * construct (quotes, variables, reserved words, builtins, assignments) is
 * left to the shell. */
static int check_command(const char *cmd, char *why, size_t len)
{
	char word[512];
	size_t n = strcspn(cmd, " \t\n;|&<>()$`\"'\\");
	while (*cmd == ' ' || *cmd == '\t')
		cmd++, n = strcspn(cmd, " \t\n;|&<>()$`\"'\\");
	if (n == 0 || n >= sizeof(word))
		return 0;
	if (cmd[n] && strchr(";|&<>()$`\"'\\", cmd[n]))
		return 0;
	memcpy(word, cmd, n);
	word[n] = '\0';
	if (shell_word(word))
		return 0;
	if (strchr(word, '/')) {
		struct stat sb;
		if (stat(word, &sb) != 0) {
			snprintf(why, len, "cannot run '%s': %s", word, strerror(errno));
			return -1;
		}
		if (!S_ISREG(sb.st_mode) || access(word, X_OK) != 0) {
			snprintf(why, len, "cannot run '%s': not an executable file", word);
			return -1;
		}
		return 0;
	}
	const char *path = getenv("PATH");
	char buf[4096];
	snprintf(buf, sizeof(buf), "%s", path ? path : "/usr/bin:/bin");
	for (char *save = NULL, *dir = strtok_r(buf, ":", &save); dir;
	     dir = strtok_r(NULL, ":", &save)) {
		char full[1024];
		snprintf(full, sizeof(full), "%s/%s", dir, word);
		if (access(full, X_OK) == 0)
			return 0;
	}
	snprintf(why, len, "cannot run '%s': not found in PATH", word);
	return -1;
}

/* Where the helper is: $SHARDQ_EXEC_HELPER, else next to this program.
 * Returns 0, or -1 with why. */
static int find_helper(char *path, size_t len, char *why, size_t wlen)
{
	const char *env = getenv(HELPER_ENV);
	struct stat sb;
	if (env && *env) {
		snprintf(path, len, "%s", env);
		errno = 0;
		if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode) || access(path, X_OK) != 0) {
			snprintf(why, wlen, "%s=%s: %s", HELPER_ENV, env,
				 errno ? strerror(errno) : "not an executable file");
			return -1;
		}
		return 0;
	}
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0) {
		snprintf(why, wlen, "cannot find %s: /proc/self/exe: %s; set %s", HELPER_NAME,
			 strerror(errno), HELPER_ENV);
		return -1;
	}
	self[n] = '\0';
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", self);
	if ((size_t)snprintf(path, len, "%s/%s", dirname(dir), HELPER_NAME) >= len) {
		snprintf(why, wlen, "cannot find %s: the path of %s is too long", HELPER_NAME,
			 self);
		return -1;
	}
	errno = 0;
	if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode) || access(path, X_OK) != 0) {
		snprintf(why, wlen, "cannot find %s next to %s (%s: %s); reinstall, or set %s",
			 HELPER_NAME, self, path,
			 errno ? strerror(errno) : "not an executable file", HELPER_ENV);
		return -1;
	}
	return 0;
}

/* A job's pipes must not land on 0, 1 or 2 (a worker started with one of
 * them closed): the helper gets its stdin, stdout and stderr by dup2. */
static void open_std_fds(void)
{
	for (int fd = 0; fd < 3; fd++)
		if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", O_RDWR) < 0)
			break;
}

/* A whole integer of lo..hi; else prints why (naming opt) and returns -1. */
static int parse_count(const char *opt, const char *s, long lo, long hi, int *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi) {
		fprintf(stderr, "shardq work: %s must be a whole number of %ld..%ld, not '%s'\n",
			opt, lo, hi, s);
		return -1;
	}
	*out = (int)v;
	return 0;
}

static void report(const sq_worker_stats *st, void *arg)
{
	(void)arg;
	pthread_mutex_lock(&out_mu);
	int slots = 0;
	for (int t = 0; t < st->ntypes; t++)
		slots += st->types[t].concurrency;
	fprintf(stderr,
		"shardq work: running %d of %d slots, buffered %d (up to %d), claims %" PRIu64
		", claim rtt %.1fms, idle slots %.1f%%\n",
		st->running, slots, st->buffered, st->capacity - slots, st->claims,
		st->claim_rtt_ms, st->slot_idle_ratio * 100);
	if (st->db_errors)
		fprintf(stderr, "  database errors: %" PRIu64 " (retried); last: %s\n",
			st->db_errors, st->last_error);
	for (int t = 0; t < st->ntypes; t++) {
		const sq_worker_type_stats *s = &st->types[t];
		fprintf(stderr,
			"  %-16s done %" PRIu64 " retried %" PRIu64 " failed %" PRIu64
			" lost %" PRIu64 " released %" PRIu64
			" running %d buffered %d prefetch %d exec %.1fms\n",
			s->type, s->done, s->retried, s->failed, s->lost, s->released, s->running,
			s->buffered, s->prefetch, s->exec_ms);
	}
	pthread_mutex_unlock(&out_mu);
}

/* The meta database stops answering, or answers again (the worker's watch
 * on it, on a thread of its own): one line. */
static void meta_log(const char *line, void *arg)
{
	(void)arg;
	pthread_mutex_lock(&out_mu);
	fprintf(stderr, "shardq work: %s\n", line);
	pthread_mutex_unlock(&out_mu);
}

static void print_work_help(void)
{
	printf("usage: shardq [-c FILE] work --types T[:N][,T[:N]...] --exec CMD\n"
	       "              [--concurrency N] [--worker ID] [--buffer N] "
	       "[--prefetch N]\n"
	       "              [--no-listen] [--poll D] [--grace D] [--quiet] "
	       "[-v]\n\n"
	       "Runs CMD (with /bin/sh -c) for each claimed job of the types, N at "
	       "a\n"
	       "time per type (T:N, else --concurrency, default 1). The job's "
	       "params are\n"
	       "on CMD's stdin; its fields in SHARDQ_JOB_ID, SHARDQ_JOB_TYPE,\n"
	       "SHARDQ_JOB_KEY, SHARDQ_JOB_ATTEMPT, SHARDQ_JOB_MAX_ATTEMPTS and\n"
	       "SHARDQ_WORKER. Exit 0 completes the job; exit %d fails it for "
	       "good; any\n"
	       "other exit fails it under the type's retry policy. CMD's output "
	       "is\n"
	       "forwarded with a [job ID] prefix; its last line on stderr (else\n"
	       "stdout) becomes the job's error.\n\n"
	       "Claimed jobs wait in a local buffer (status starting) until a "
	       "slot\n"
	       "frees; the buffer holds the predicted prefetch (fast jobs) or "
	       "nothing\n"
	       "beyond free slots (long jobs), never more than --buffer (default: "
	       "the\n"
	       "total concurrency, at least 1024). Running jobs heartbeat. An idle "
	       "worker polls "
	       "with\n"
	       "backoff up to --poll (1s) and wakes on NOTIFY (off: "
	       "--no-listen).\n\n"
	       "SIGTERM or SIGINT: stop claiming, hand buffered jobs back at once, "
	       "let\n"
	       "running jobs finish within --grace (30s), exit 0. A second signal\n"
	       "exits at once (exit 1); leases bring back what was left.\n\n"
	       "Each job runs under shardq-exec (next to this program, or\n"
	       "$SHARDQ_EXEC_HELPER), in a process group of its own: what CMD "
	       "leaves\n"
	       "running is killed when it exits, and if the worker dies, every\n"
	       "process of its jobs is killed with it.\n"
	       "  -v   print the worker's figures every 2s\n",
	       PERMANENT_EXIT);
}

/* What `shardq work` was asked to run, and how. */
typedef struct work_args {
	const char *types, *cmd;
	int conc; /* per type, unless the type names its own */
	sq_worker_opts wo;
	exec_ctx ex;
} work_args;

/* --poll and --grace: a duration of at least min_ms. */
static int work_duration(const char *opt, const char *s, int64_t min_ms, const char *example,
			 int64_t *out)
{
	*out = sq_parse_duration_ms(s);
	if (*out < min_ms) {
		fprintf(stderr, "shardq work: %s takes a duration such as %s\n", opt, example);
		return EX_USAGE;
	}
	return 0;
}

/* The options; 0 to go on, or the exit code with *stop set. */
static int work_options(cli *x, work_args *a, int argc, char **argv, int *stop)
{
	static const struct option opts[] = {
		{"config", required_argument, NULL, 'c'},
		{"help", no_argument, NULL, 'h'},
		{"types", required_argument, NULL, 't'},
		{"concurrency", required_argument, NULL, 'n'},
		{"exec", required_argument, NULL, 'e'},
		{"worker", required_argument, NULL, 'w'},
		{"buffer", required_argument, NULL, 'b'},
		{"prefetch", required_argument, NULL, 'p'},
		{"listen", no_argument, NULL, 'L'},
		{"no-listen", no_argument, NULL, 'N'},
		{"poll", required_argument, NULL, 'P'},
		{"grace", required_argument, NULL, 'g'},
		{"quiet", no_argument, NULL, 'q'},
		{"verbose", no_argument, NULL, 'v'},
		{NULL, 0, NULL, 0},
	};
	sq_worker_opts *wo = &a->wo;
	int c, rc = 0;
	*stop = 1;
	while ((c = getopt_long(argc, argv, "c:ht:n:e:w:b:p:LNP:g:qv", opts, NULL)) != -1) {
		switch (c) {
		case 'c': x->config_path = optarg; break;
		case 't': a->types = optarg; break;
		case 'n': rc = parse_count("--concurrency", optarg, 1, MAX_SLOTS, &a->conc); break;
		case 'e': a->cmd = optarg; break;
		case 'w': wo->worker_id = optarg; break;
		case 'b': rc = parse_count("--buffer", optarg, 0, MAX_HELD, &wo->buffer); break;
		case 'p':
			rc = parse_count("--prefetch", optarg, 0, MAX_HELD, &wo->min_prefetch);
			break;
		case 'L': wo->listen = 1; break;
		case 'N': wo->listen = 0; break;
		case 'P':
			if ((rc = work_duration("--poll", optarg, 1, "1s", &wo->poll_max_ms)))
				return rc;
			if (wo->poll_min_ms > wo->poll_max_ms)
				wo->poll_min_ms = wo->poll_max_ms;
			break;
		case 'g': rc = work_duration("--grace", optarg, 0, "30s", &wo->grace_ms); break;
		case 'q': a->ex.quiet = 1; break;
		case 'v': wo->report_ms = 2000; break;
		case 'h': print_work_help(); return EX_OK;
		default: return EX_USAGE;
		}
		if (rc)
			return EX_USAGE;
	}
	*stop = 0;
	return 0;
}

/* The per-type counts of --types, checked before anything is connected or
 * claimed. */
static int check_type_counts(const char *types)
{
	char *list = strdup(types);
	if (!list)
		return EX_FAIL;
	int ntypes = 0;
	for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save), ntypes++) {
		char *colon = strchr(tok, ':');
		int n;
		char opt[160];
		snprintf(opt, sizeof(opt), "the count of type '%.*s' in --types",
			 colon ? (int)(colon - tok) : (int)strlen(tok), tok);
		if (colon && parse_count(opt, colon + 1, 1, MAX_SLOTS, &n)) {
			free(list);
			return EX_USAGE;
		}
	}
	free(list);
	if (ntypes == 0) {
		fprintf(stderr, "shardq work: --types names no type\n");
		return EX_USAGE;
	}
	return 0;
}

/* Each type of --types, with its count or --concurrency, on the handler
 * that runs the command. */
static int add_types(sq_worker *w, work_args *a)
{
	sq_error err;
	char *list = strdup(a->types);
	int rc = list ? EX_OK : EX_FAIL;
	for (char *save = NULL, *tok = list ? strtok_r(list, ",", &save) : NULL; tok;
	     tok = strtok_r(NULL, ",", &save)) {
		char *colon = strchr(tok, ':');
		int n = a->conc;
		if (colon) {
			*colon = '\0';
			n = (int)strtol(colon + 1, NULL, 10); /* checked above */
		}
		if (sq_worker_add(w, tok, n, exec_handler, &a->ex, &err) != SQ_OK) {
			rc = cli_fail("work", &err);
			break;
		}
	}
	free(list);
	return rc;
}

/* Runs the worker until a signal stops it; a worker that fails exits at
 * once. */
static void run_worker(cli *x, sq_worker *w)
{
	sq_error err;
	fprintf(stderr, "shardq work: worker %s on %d shards\n", sq_worker_id(w),
		sq_config_shard_count(x->cfg));
	sq_status st = sq_worker_run(w, &err);
	sq_worker_stats s;
	sq_worker_get_stats(w, &s);
	report(&s, NULL);
	if (st != SQ_OK) {
		fprintf(stderr, "shardq work: %s\n", err.msg);
		fflush(NULL);
		_exit(EX_FAIL); /* handler threads may still run: do not wait */
	}
	fprintf(stderr, "shardq work: stopped cleanly\n");
}

int cmd_work(cli *x, int argc, char **argv)
{
	work_args a = {.conc = 1};
	char why[600];
	int stop, rc;
	sq_worker_opts_init(&a.wo);
	a.wo.handle_signals = 1;
	a.wo.listen = 1;
	rc = work_options(x, &a, argc, argv, &stop);
	if (stop)
		return rc;
	if (!a.types || !a.cmd) {
		fprintf(stderr, "shardq work: --types and --exec are required; see --help\n");
		return EX_USAGE;
	}
	if (check_command(a.cmd, why, sizeof(why))) {
		fprintf(stderr, "shardq work: %s; nothing was claimed\n", why);
		return EX_INPUT;
	}
	if ((rc = check_type_counts(a.types)))
		return rc;
	if (find_helper(a.ex.helper, sizeof(a.ex.helper), why, sizeof(why))) {
		fprintf(stderr, "shardq work: %s; nothing was claimed\n", why);
		return EX_FAIL;
	}
	open_std_fds();
	snprintf(a.ex.parent, sizeof(a.ex.parent), "%ld", (long)getpid());
	a.wo.report = report;
	a.wo.meta_log = meta_log;
	a.ex.cmd = a.cmd;
	if ((rc = cli_load_config(x, "work")))
		return rc;
	sq_worker *w;
	sq_error err;
	if (sq_worker_create(x->cfg, &a.wo, &w, &err) != SQ_OK)
		return cli_fail("work", &err);
	a.ex.worker = sq_worker_id(w);
	rc = add_types(w, &a);
	if (rc == EX_OK)
		run_worker(x, w);
	sq_worker_destroy(w);
	return rc;
}

/* jobexec_guard.c - shardq-exec: one job's command, killed with the job or with the worker. */
/*
 * usage: shardq-exec PARENT_PID CMD
 *
 * The worker starts this program with posix_spawn for every job; its stdin,
 * stdout, stderr and environment are the job's. It runs `/bin/sh -c CMD` in
 * a process group of its own and waits for it:
 *
 * - CMD exits: whatever it left running (its process group, and every
 *   descendant that was orphaned and came to us as the subreaper, setsid or
 *   not) is killed with SIGKILL and reaped; then this program exits with
 *   CMD's exit code, or dies of the signal that killed CMD, so the worker
 *   sees the same status as if it had run CMD itself.
 * - The worker dies (PR_SET_PDEATHSIG: the kernel sends PARENT_GONE when
 *   the worker *thread* that started us ends; the worker's handler thread
 *   waits for us, so it lives as long as the job), or we get SIGTERM,
 *   SIGINT, SIGHUP or SIGQUIT: everything of the job is killed and reaped,
 *   then this program dies of that signal.
 *
 * PARENT_PID is the worker's pid: if our parent is already another process
 * when the death signal is armed, the worker died before we could watch it,
 * and nothing is started. 0 skips that check (for running it by hand).
 * Exit 127 with a message on stderr: the command could not be started.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* What the kernel sends us when the worker's thread ends. */
#define PARENT_GONE SIGUSR1

#define CANNOT_START 127

static const int stop_signals[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, PARENT_GONE};

static void say(const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	dprintf(2, "shardq-exec: %s\n", msg);
}

/* In the child: the command, with every signal at its default and none
 * blocked, in a process group of its own (the caller sets it too, so that
 * either order works). */
static void run_command(const char *cmd)
{
	setpgid(0, 0);
	for (int s = 1; s < NSIG; s++)
		if (s != SIGKILL && s != SIGSTOP)
			signal(s, SIG_DFL); /* fails harmlessly on libc's own signals */
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
	say("cannot run /bin/sh: %s", strerror(errno));
	_exit(CANNOT_START);
}

/* SIGKILLs every process whose parent is us, from the kernel's list of our
 * children (the command, and what was orphaned below us since we are the
 * subreaper). Returns how many were signalled, or -1 if the list cannot be
 * read (a kernel without CONFIG_PROC_CHILDREN). */
static int kill_children_listed(void)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/task/%d/children", (int)getpid());
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	int pid, n = 0;
	while (fscanf(f, "%d", &pid) == 1)
		if (pid > 0 && kill(pid, SIGKILL) == 0)
			n++;
	fclose(f);
	return n;
}

/* Same, by reading every /proc/PID/stat: slower, always there. */
static int kill_children_scanned(void)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	int n = 0, me = (int)getpid();
	if (!d)
		return 0;
	while ((e = readdir(d)) != NULL) {
		char path[300], buf[512];
		char *end;
		long pid = strtol(e->d_name, &end, 10);
		if (*end || pid <= 0)
			continue;
		snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		ssize_t r = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (r <= 0)
			continue;
		buf[r] = '\0';
		/* "PID (COMM) STATE PPID ...": COMM may hold ')' itself */
		char *paren = strrchr(buf, ')');
		int ppid;
		char state;
		if (paren && sscanf(paren + 1, " %c %d", &state, &ppid) == 2 && ppid == me &&
		    kill((pid_t)pid, SIGKILL) == 0)
			n++;
	}
	closedir(d);
	return n;
}

/* Kills and reaps every process that is still ours, until we have no child
 * left. A process that was our child stays ours until we reap it, so a pid
 * signalled here cannot be someone else's. Killing a child orphans its own
 * children, which then come to us: the loop goes on until none are left. */
static void sweep(void)
{
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	for (;;) {
		pid_t p;
		while ((p = waitpid(-1, NULL, WNOHANG)) > 0)
			;
		if (p < 0 && errno == ECHILD)
			return; /* nothing of the job is left */
		if (kill_children_listed() <= 0)
			kill_children_scanned();
		struct timespec tick = {0, 20 * 1000 * 1000};
		sigtimedwait(&chld, NULL, &tick);
	}
}

/* Reaps what died without being the command; returns 1 once the command
 * has exited (left as a zombie: its pid, which is also its process group's
 * id, stays reserved until we reap it, so killing the group is safe). */
static int command_exited(pid_t cmd)
{
	for (;;) {
		siginfo_t si;
		memset(&si, 0, sizeof(si));
		if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == 0)
			return 0;
		if (si.si_pid == cmd)
			return 1;
		waitpid(si.si_pid, NULL, 0); /* an orphan of the job that ended */
	}
}

/* Ends this process the way `status` says: the exit code, or death by the
 * same signal (without a core file of ours). */
static void die_like(int sig)
{
	struct rlimit none = {0, 0};
	setrlimit(RLIMIT_CORE, &none);
	signal(sig, SIG_DFL);
	sigset_t one;
	sigemptyset(&one);
	sigaddset(&one, sig);
	raise(sig);
	sigprocmask(SIG_UNBLOCK, &one, NULL);
	_exit(128 + sig); /* a signal whose default is not to end a process */
}

int main(int argc, char **argv)
{
	if (argc != 3 || !argv[1][0]) {
		say("usage: shardq-exec PARENT_PID CMD (started by `shardq work --exec`)");
		return CANNOT_START;
	}
	char *end;
	errno = 0;
	long expect = strtol(argv[1], &end, 10);
	if (errno || *end || expect < 0 || expect > INT_MAX) {
		say("PARENT_PID must be a process id, not '%s'", argv[1]);
		return CANNOT_START;
	}
	/* the signals we act on wait in the mask for sigwaitinfo; the worker's
	 * death is armed only once they are blocked, so it cannot be missed */
	sigset_t wait_for;
	sigemptyset(&wait_for);
	sigaddset(&wait_for, SIGCHLD);
	for (size_t i = 0; i < sizeof(stop_signals) / sizeof(stop_signals[0]); i++)
		sigaddset(&wait_for, stop_signals[i]);
	sigprocmask(SIG_BLOCK, &wait_for, NULL);
	signal(SIGPIPE, SIG_IGN); /* a message to a dead worker must not end us */
	if (prctl(PR_SET_PDEATHSIG, PARENT_GONE) != 0) {
		say("cannot watch the worker (PR_SET_PDEATHSIG): %s", strerror(errno));
		return CANNOT_START;
	}
	if (expect && getppid() != (pid_t)expect)
		return CANNOT_START; /* the worker is already gone */
	if (getpgrp() != getpid() && setpgid(0, 0) != 0) {
		say("cannot make a process group: %s", strerror(errno));
		return CANNOT_START;
	}
	if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
		say("cannot become the subreaper of the job (PR_SET_CHILD_SUBREAPER): %s",
		    strerror(errno));
		return CANNOT_START;
	}
	pid_t cmd = fork();
	if (cmd == 0)
		run_command(argv[2]);
	if (cmd < 0) {
		say("cannot fork: %s", strerror(errno));
		return CANNOT_START;
	}
	setpgid(cmd, cmd); /* also done by the child; one of the two wins */
	/* the job's stdin is the command's alone: if it stops reading, the
	 * worker's write fails instead of filling a pipe nobody reads */
	int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (null >= 0) {
		dup2(null, 0);
		close(null);
	} else {
		close(0);
	}

	int status = 0, sig = 0;
	for (;;) {
		siginfo_t si;
		int s = sigwaitinfo(&wait_for, &si);
		if (s < 0)
			continue; /* EINTR */
		if (s == SIGCHLD) {
			if (!command_exited(cmd))
				continue;
			kill(-cmd, SIGKILL); /* what it left running in its group */
			waitpid(cmd, &status, 0);
			break;
		}
		/* told to stop, or the worker is gone: the job goes with it */
		sig = s;
		kill(-cmd, SIGKILL);
		kill(cmd, SIGKILL); /* in case it left its group */
		waitpid(cmd, &status, 0);
		break;
	}
	sweep();
	if (sig)
		die_like(sig);
	if (WIFSIGNALED(status))
		die_like(WTERMSIG(status));
	return WIFEXITED(status) ? WEXITSTATUS(status) : CANNOT_START;
}

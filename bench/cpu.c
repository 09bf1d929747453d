/* cpu.c - CPU time of processes, read from /proc/PID/stat. */
#include "cpu.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct pstat {
	int ppid;
	unsigned long long utime, stime, cutime, cstime; /* clock ticks */
} pstat;

/* Fields after "(comm)" in /proc/PID/stat; comm may hold spaces and ')'. */
static int read_stat(int pid, pstat *ps)
{
	char path[64], buf[1024];
	FILE *f;
	size_t n;
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	if (!(f = fopen(path, "r")))
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	char *p = strrchr(buf, ')');
	if (!p)
		return -1;
	/* state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
	 * utime stime cutime cstime */
	char state;
	unsigned long skip;
	if (sscanf(p + 2, "%c %d %lu %lu %lu %lu %lu %lu %lu %lu %lu %llu %llu %llu %llu", &state,
		   &ps->ppid, &skip, &skip, &skip, &skip, &skip, &skip, &skip, &skip, &skip,
		   &ps->utime, &ps->stime, &ps->cutime, &ps->cstime) != 15)
		return -1;
	return 0;
}

static double ticks(unsigned long long t)
{
	static long hz;
	if (!hz)
		hz = sysconf(_SC_CLK_TCK);
	return (double)t / (double)(hz > 0 ? hz : 100);
}

double cpu_self_s(void)
{
	pstat ps;
	if (read_stat((int)getpid(), &ps))
		return 0;
	return ticks(ps.utime + ps.stime + ps.cutime + ps.cstime);
}

double cpu_process_s(int pid)
{
	pstat ps;
	return read_stat(pid, &ps) ? -1 : ticks(ps.utime + ps.stime);
}

int cpu_parent_of(int pid)
{
	pstat ps;
	return read_stat(pid, &ps) ? -1 : ps.ppid;
}

double cpu_server_s(int pm)
{
	pstat ps;
	unsigned long long sum;
	DIR *d;
	struct dirent *e;
	if (pm <= 0 || read_stat(pm, &ps))
		return -1;
	/* a backend that exited is in the postmaster's cutime/cstime */
	sum = ps.utime + ps.stime + ps.cutime + ps.cstime;
	if (!(d = opendir("/proc")))
		return -1;
	while ((e = readdir(d)) != NULL) {
		char *end;
		long pid = strtol(e->d_name, &end, 10);
		pstat c;
		if (*end || pid <= 0 || pid == pm)
			continue;
		if (read_stat((int)pid, &c) == 0 && c.ppid == pm)
			sum += c.utime + c.stime;
	}
	closedir(d);
	return ticks(sum);
}

double cpu_servers_s(const int *pids, int n)
{
	double sum = 0;
	for (int i = 0; i < n; i++) {
		double s = cpu_server_s(pids[i]);
		if (s < 0)
			return -1;
		sum += s;
	}
	return sum;
}

double cpu_machine_s(void)
{
	unsigned long long v[8] = {0};
	FILE *f = fopen("/proc/stat", "r");
	if (!f)
		return -1;
	/* cpu  user nice system idle iowait irq softirq steal */
	int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
		       &v[4], &v[5], &v[6], &v[7]);
	fclose(f);
	if (n < 7)
		return -1;
	return ticks(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]);
}

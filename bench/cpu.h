/* cpu.h - CPU seconds from /proc: of this process (with its reaped
 * children, i.e. the worker processes) and of whole PostgreSQL servers (a
 * postmaster, its live children, and the children it has reaped). */
#ifndef BENCH_CPU_H
#define BENCH_CPU_H

/* utime + stime + cutime + cstime of this process, in seconds. */
double cpu_self_s(void);
/* CPU seconds of the process tree under a postmaster; -1 if unreadable. */
double cpu_server_s(int postmaster_pid);
/* Sum over n servers; -1 if any is unreadable. */
double cpu_servers_s(const int *pids, int n);
/* Busy CPU seconds of the whole machine (all processes, all cores), from
 * /proc/stat: what is left after the bench and the servers is other load. */
double cpu_machine_s(void);
/* utime + stime of one process (all its threads), in seconds; -1 if
 * unreadable. */
double cpu_process_s(int pid);
/* The parent of a process (a backend's postmaster); -1 if unknown. */
int cpu_parent_of(int pid);

#endif

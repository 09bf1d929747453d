/* monitor.c - progress line and time series of a running phase. */
#include "monitor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Off a terminal, one plain line this often. */
#define PLAIN_EVERY_US 5000000
/* On a terminal, the line is redrawn this often. */
#define TTY_EVERY_US 250000

int monitor_start(monitor *m, phase *ph, tally *t, const char *label, int64_t t0, int sample_ms,
		  int quiet)
{
	memset(m, 0, sizeof(*m));
	m->ph = ph;
	m->t = t;
	m->label = label;
	m->t0 = m->last_t = t0;
	m->sample_ms = sample_ms;
	m->tty = isatty(2);
	m->quiet = quiet;
	m->next_sample = t0 + (int64_t)sample_ms * 1000;
	m->next_print = t0 + (m->tty ? TTY_EVERY_US : PLAIN_EVERY_US);
	m->prev = calloc(1, sizeof(hist));
	m->cur = calloc(1, sizeof(hist));
	m->diff = calloc(1, sizeof(hist));
	if (!m->prev || !m->cur || !m->diff) {
		free(m->prev);
		free(m->cur);
		free(m->diff);
		return -1;
	}
	return 0;
}

static void human(double v, char *out, size_t len)
{
	if (v >= 1e6)
		snprintf(out, len, "%.2fM", v / 1e6);
	else if (v >= 1e4)
		snprintf(out, len, "%.1fk", v / 1e3);
	else
		snprintf(out, len, "%.0f", v);
}

static void take_sample(monitor *m, int64_t now)
{
	tally *t = m->t;
	sample s;
	uint64_t done = atomic_load(&t->completed);
	double dt = (double)(now - m->last_t) / 1e6;
	memset(&s, 0, sizeof(s));
	s.t = (double)(now - m->t0) / 1e6;
	s.enqueued = atomic_load(&t->enqueued);
	s.claimed = atomic_load(&t->claimed);
	s.done = done;
	s.done_rate = dt > 0 ? (double)(done - m->last_done) / dt : 0;
	/* the series shows every second, the warm-up's too */
	hist_copy(m->cur, &t->e2s);
	hist_add(m->cur, &t->e2s_warm);
	hist_diff(m->diff, m->cur, m->prev);
	if (hist_count(m->diff)) {
		s.e2s_p50_ms = (double)hist_percentile(m->diff, 50) / 1000.0;
		s.e2s_p99_ms = (double)hist_percentile(m->diff, 99) / 1000.0;
	} else {
		s.e2s_p50_ms = s.e2s_p99_ms = -1;
	}
	hist *swap = m->prev;
	m->prev = m->cur;
	m->cur = swap;
	m->last_done = done;
	m->last_t = now;
	phase_add_sample(m->ph, &s);
}

static void print_line(monitor *m, int64_t now, uint64_t target)
{
	tally *t = m->t;
	uint64_t done = atomic_load(&t->completed), enq = atomic_load(&t->enqueued);
	double el = (double)(now - m->t0) / 1e6;
	double avg = el > 0 ? (double)done / el : 0;
	double cur = m->ph->nseries ? m->ph->series[m->ph->nseries - 1].done_rate : avg;
	char a[16], b[16], eta[32] = "";
	human(cur, a, sizeof(a));
	human(avg, b, sizeof(b));
	if (target && avg > 0 && done < target)
		snprintf(eta, sizeof(eta), "  ETA %.0fs", (double)(target - done) / avg);
	if (target)
		fprintf(stderr, "%s%-7s %6.1fs  done %llu/%llu (%.0f%%)  now %s/s  avg %s/s%s",
			m->tty ? "\r\033[K" : "", m->label, el, (unsigned long long)done,
			(unsigned long long)target, 100.0 * (double)done / (double)target, a, b,
			eta);
	else
		fprintf(stderr, "%s%-7s %6.1fs  done %llu  now %s/s  avg %s/s",
			m->tty ? "\r\033[K" : "", m->label, el, (unsigned long long)done, a, b);
	if (enq)
		fprintf(stderr, "  queued %lld", (long long)(enq - (done < enq ? done : enq)));
	fputs(m->tty ? "" : "\n", stderr);
	fflush(stderr);
	m->printed = 1;
}

void monitor_tick(monitor *m, uint64_t target)
{
	int64_t now = mono_us();
	if (now >= m->next_sample) {
		take_sample(m, now);
		m->next_sample += (int64_t)m->sample_ms * 1000;
		if (m->next_sample < now)
			m->next_sample = now + (int64_t)m->sample_ms * 1000;
	}
	if (!m->quiet && now >= m->next_print) {
		print_line(m, now, target);
		m->next_print = now + (m->tty ? TTY_EVERY_US : PLAIN_EVERY_US);
	}
}

void monitor_end(monitor *m)
{
	int64_t now = mono_us();
	if (now > m->last_t + 1000)
		take_sample(m, now);
	if (!m->quiet && m->tty && m->printed)
		fputs("\n", stderr);
	free(m->prev);
	free(m->cur);
	free(m->diff);
	m->prev = m->cur = m->diff = NULL;
}

/* rebalance.c - the driver of a [rebalance] run (see rebalance.h): the
 * added shard's weight goes to 1 and `sq_rebalance` moves its share of
 * the partitions to it, set by set, under load; then to 0, and it is
 * drained. */
#include "rebalance.h"

#include <shardq.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double since_s(const rb_driver *d)
{
	return (double)(mono_us() - d->t0) / 1e6;
}

/* The pickup histogram now: the measured jobs' and the warm-up's. */
static void pickup_now(const rb_driver *d, hist *out)
{
	hist warm;
	hist_copy(out, &d->t->e2s);
	hist_copy(&warm, &d->t->e2s_warm);
	hist_add(out, &warm);
}

static void window_open(rb_driver *d, int w)
{
	d->res->w[w].t0 = since_s(d);
	d->done_mark = atomic_load(&d->t->completed);
	pickup_now(d, d->mark);
}

static void window_close(rb_driver *d, int w)
{
	hist now;
	rb_window *win = &d->res->w[w];
	win->t1 = since_s(d);
	win->done = atomic_load(&d->t->completed) - d->done_mark;
	pickup_now(d, &now);
	hist_diff(win->e2s, &now, d->mark);
}

/* Sleeps ms, in short steps so that a stop is not kept waiting. */
static void steady(rb_driver *d, int64_t ms)
{
	for (int64_t left = ms; left > 0 && !atomic_load(&d->stop); left -= 50) {
		struct timespec ts = {0, (long)(left < 50 ? left : 50) * 1000000L};
		nanosleep(&ts, NULL);
	}
}

/* sq_rebalance's progress: a set that is done counts with its stall. */
static void on_progress(const sq_move_info *m, int set, int nsets, void *arg)
{
	rb_window *win = arg;
	(void)set;
	(void)nsets;
	if (strcmp(m->step, "done"))
		return;
	win->moves++;
	win->parts += m->npartitions;
	win->rows += m->rows > 0 ? m->rows : 0;
	win->stall_sum_ms += m->stall_ms;
	if (m->stall_ms > win->stall_max_ms)
		win->stall_max_ms = m->stall_ms;
	win->stalls_over_100ms += m->stall_ms > 100;
}

/* One rebalance to config text `cfg` (weight: the last shard's, for the
 * message), in window w. */
static int rebalance_to(rb_driver *d, const char *cfg_text, double weight, int w, char *err,
			size_t errlen)
{
	sq_config *cfg = NULL;
	sq_client *c = NULL;
	sq_error e = {SQ_OK, ""};
	sq_move_opts o;
	int rc = -1;
	sq_move_opts_init(&o);
	o.set_size = d->sc->rb_set_size;
	o.progress = on_progress;
	o.progress_arg = &d->res->w[w];
	window_open(d, w);
	if (sq_config_parse(cfg_text, "shardq-bench rebalance config", &cfg, &e) == SQ_OK &&
	    sq_client_open(cfg, 0, &c, &e) == SQ_OK && sq_rebalance(c, &o, &e) == SQ_OK)
		rc = 0;
	window_close(d, w);
	if (rc)
		snprintf(err, errlen, "rebalance (%s, weight %g): %s", rb_window_names[w], weight,
			 e.msg);
	sq_client_close(c);
	sq_config_free(cfg);
	return rc;
}

static void *driver_main(void *arg)
{
	rb_driver *d = arg;
	rb_result *r = d->res;
	int64_t st = d->sc->rb_steady_ms;
	char err[512] = "";
	steady(d, d->sc->warmup_ms); /* the start's pickups are not the fleet's */
	window_open(d, RB_BEFORE);
	steady(d, st);
	window_close(d, RB_BEFORE);
	if (!atomic_load(&d->stop) && !rebalance_to(d, d->cfg_in, 1, RB_ADDING, err, sizeof(err))) {
		window_open(d, RB_BETWEEN);
		steady(d, st);
		window_close(d, RB_BETWEEN);
		if (!atomic_load(&d->stop) &&
		    !rebalance_to(d, d->cfg_out, 0, RB_DRAINING, err, sizeof(err))) {
			window_open(d, RB_AFTER);
			steady(d, st);
			window_close(d, RB_AFTER);
		}
	}
	r->ok = !err[0] && !atomic_load(&d->stop);
	snprintf(r->error, sizeof(r->error), "%s", err);
	atomic_store(&d->finished, 1);
	return NULL;
}

int rb_start(rb_driver *d, const scenario *sc, const char *cfg_in, const char *cfg_out, tally *t,
	     int64_t t0, rb_result *res, char *err, size_t errlen)
{
	memset(d, 0, sizeof(*d));
	d->sc = sc;
	d->cfg_in = cfg_in;
	d->cfg_out = cfg_out;
	d->t = t;
	d->t0 = t0;
	d->res = res;
	if (!(d->mark = calloc(1, sizeof(hist))) || pthread_create(&d->th, NULL, driver_main, d)) {
		free(d->mark);
		d->mark = NULL;
		snprintf(err, errlen, "cannot start the rebalance driver");
		return -1;
	}
	return 0;
}

int rb_finished(rb_driver *d)
{
	return atomic_load(&d->finished);
}

void rb_join(rb_driver *d, int stop)
{
	if (!d->mark)
		return;
	if (stop)
		atomic_store(&d->stop, 1);
	pthread_join(d->th, NULL);
	free(d->mark);
	d->mark = NULL;
}

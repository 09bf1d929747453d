/* router_internal.c - the calls of router_internal.h that exist for
 * shardqd alone: small reads of the config, the client and the LISTEN
 * connections, so that the router needs none of their structs. The calls
 * it shares with the rest of the library are defined in their modules. */
#include "router_internal.h"

#include "client.h"
#include "listener.h"
#include "config.h"
#include "error.h"

#include <stdlib.h>

const sq_daemon_conf *sq_config_daemon(const sq_config *cfg)
{
	return &cfg->daemon;
}

int sq_config_token_count(const sq_config *cfg)
{
	return cfg->ntokens;
}

const sq_token_conf *sq_config_token(const sq_config *cfg, int i)
{
	return i >= 0 && i < cfg->ntokens ? &cfg->tokens[i] : NULL;
}

double sq_config_shard_weight(const sq_config *cfg, int i)
{
	return i >= 0 && i < cfg->nshards ? cfg->shards[i].weight : 0;
}

int sq_config_runs_schedules(const sq_config *cfg)
{
	return cfg->scheduler.enabled && cfg->nschedules > 0;
}

double sq_config_connect_timeout_s(const sq_config *cfg)
{
	return (double)cfg->connect_timeout_ms / 1000.0;
}

const char *sq_config_type_lookup(const sq_config *cfg, const char *name)
{
	const sq_type_conf *t = name ? sq_config_type(cfg, name) : NULL;
	return t ? t->name : NULL;
}

void sq_client_answer_wait_for_leases(sq_client *c)
{
	for (int t = 0; t < c->cfg->ntypes; t++)
		sq_client_answer_wait_for_lease(c, &c->cfg->types[t]);
}

double sq_config_lease_answer_wait(const sq_config *cfg, double wait_s)
{
	for (int t = 0; t < cfg->ntypes; t++)
		wait_s = sq_lease_answer_wait(wait_s, &cfg->types[t]);
	return wait_s;
}

int sq_client_shard_up(const sq_client *c, int s)
{
	PGconn *conn = s >= 0 && s < c->nshards ? c->shards[s].conn : NULL;
	return conn && PQstatus(conn) == CONNECTION_OK;
}

sq_listener *sq_listener_create(const sq_config *cfg, int shard, sq_error *err)
{
	sq_listener *l = calloc(1, sizeof(*l));
	if (!l) {
		sq_err(err, SQ_ENOMEM, "out of memory");
		return NULL;
	}
	if (sq_listener_init(l, cfg, shard, err) != SQ_OK) {
		free(l);
		return NULL;
	}
	return l;
}

void sq_listener_destroy(sq_listener *l)
{
	if (!l)
		return;
	sq_listener_free(l);
	free(l);
}

sq_status sq_listener_connect_within(sq_listener *l, const char *channel, double wait_s,
				     sq_error *err)
{
	sq_pgconn_set_connect_wait(&l->pc, wait_s);
	sq_status st = sq_listener_connect(l, channel, err);
	sq_pgconn_set_connect_wait(&l->pc, SQ_LOOP_CONNECT_WAIT_S);
	return st;
}

int sq_listener_connecting(const sq_listener *l)
{
	return sq_pgconn_connecting(&l->pc);
}

int sq_listener_pending(const sq_listener *l)
{
	return sq_pgconn_connecting(&l->pc) || (!l->conn && l->pc.conn);
}

int sq_listener_socket(const sq_listener *l)
{
	return l->conn ? PQsocket(l->conn) : -1;
}

"""The producer and the client's errors, against a real shardqd."""

import pytest

import shardq
from conftest import TOKENS


def test_batched_enqueue_answers_each_jobs_dedup_outcome(cluster):
    p = shardq.Producer(cluster.producer_client, batch_size=20)
    first = p.enqueue([shardq.NewJob("dd", {"n": i}, key=f"k{i}") for i in range(50)])
    assert [r.outcome for r in first] == ["inserted"] * 50
    assert len({r.id for r in first}) == 50
    assert {r.shard for r in first} == {"s1", "s2"}  # both shards, one call per batch

    # 25 keys again (still live: nobody runs type dd) and 25 new ones, as
    # dicts this time, in batches that straddle the two halves
    again = p.enqueue([{"type": "dd", "key": f"k{i}", "params": {"n": -i}} for i in range(25, 75)])
    assert [r.outcome for r in again[:25]] == ["duplicate"] * 25
    assert [r.id for r in again[:25]] == [r.id for r in first[25:]]  # the kept job's id
    assert all(r.duplicate and r.written for r in again[:25])
    assert [r.outcome for r in again[25:]] == ["inserted"] * 25
    assert cluster.live("dd") == 75

    # a duplicate kept the first job's params
    assert cluster.producer_client.get_job(first[30].id).params == {"n": 30}

    one = p.enqueue_one("dd", {"x": 1}, key="k3")
    assert one.outcome == "duplicate" and one.id == first[3].id

    # the same key twice in one batch: the second is the first's duplicate
    twice = p.enqueue([shardq.NewJob("dd", key="same"), shardq.NewJob("dd", key="same")])
    assert [r.outcome for r in twice] == ["inserted", "duplicate"], twice
    assert twice[0].id == twice[1].id


def test_a_refused_job_is_named_by_its_place_in_the_whole_list(cluster):
    p = shardq.Producer(cluster.producer_client, batch_size=20)
    jobs = [shardq.NewJob("pt", {"i": i}) for i in range(40)]
    jobs[37] = shardq.NewJob("no_such_type")
    with pytest.raises(shardq.BadRequestError) as e:
        p.enqueue(jobs)
    assert e.value.status == 400 and e.value.code == "bad_job"
    assert e.value.message.startswith("job 37: unknown task type 'no_such_type'"), e.value.message
    assert "job 37" in str(e.value)


def test_errors_name_what_was_wrong(cluster):
    bad = shardq.Client(cluster.url, "not-a-token-of-this-daemon")
    with pytest.raises(shardq.AuthError) as e:
        shardq.Producer(bad).enqueue_one("pt")
    assert e.value.status == 401 and e.value.code == "unauthorized"

    worker_only = shardq.Client(cluster.url, TOKENS["worker"])
    with pytest.raises(shardq.AuthError) as e:
        shardq.Producer(worker_only).enqueue_one("pt")
    assert e.value.status == 403 and e.value.code == "forbidden"

    # a worker whose token lacks the worker scope stops, raising the error
    w = shardq.Worker(cluster.producer_client, {"pt": 1}, lambda j: None, install_signals=False)
    with pytest.raises(shardq.AuthError) as e:
        w.run()
    assert e.value.status == 403 and "claim of pt: shardqd answered 403 forbidden" in str(e.value)

    # a type the daemon does not know
    w = shardq.Worker(shardq.Client(cluster.url, TOKENS["worker"]), {"nope": 1}, lambda j: None,
                      install_signals=False)
    with pytest.raises(shardq.BadRequestError) as e:
        w.run()
    assert str(e.value).startswith("claim of nope: shardqd answered 400 bad_request: types[0]: "
                                   "not a configured type"), str(e.value)

    with pytest.raises(shardq.NotFoundError) as e:
        cluster.producer_client.get_job(12345)
    assert e.value.code == "not_found"
    assert cluster.producer_client.find_job(12345) is None

    with pytest.raises(shardq.ConfigError):
        shardq.Client("ftp://x", "t")
    with pytest.raises(shardq.ConfigError):
        shardq.Producer(cluster.producer_client, batch_size=0)
    with pytest.raises(shardq.ConfigError):
        shardq.Worker(cluster.producer_client, {"pt": 0}, lambda j: None)

    # nothing listens there: a transport error naming the address, after
    # the retry budget
    closed = shardq.Client("http://127.0.0.1:9", "t", timeout=2, retry_budget=0)
    with pytest.raises(shardq.TransportError) as e:
        closed.get_job(1)
    assert "127.0.0.1:9" in str(e.value)


def test_cancel_by_id_and_by_key(cluster):
    p = shardq.Producer(cluster.producer_client)
    rs = p.enqueue([shardq.NewJob("dd", key="cancel-me"), shardq.NewJob("dd")])
    c = cluster.producer_client
    assert c.cancel([rs[1].id, 12]) == {rs[1].id: "ok", 12: "not_found"}
    assert c.cancel_key("dd", "cancel-me") == rs[0].id
    assert c.get_job(rs[0].id).status == "cancelled"
    with pytest.raises(shardq.NotFoundError):
        c.cancel_key("dd", "cancel-me")

"""A client of shardqd, the HTTP router of the shardq job queue, on the
Python standard library alone.

    import shardq

    client = shardq.Client("http://127.0.0.1:8080", token="...")
    shardq.Producer(client).enqueue([shardq.NewJob("email", {"to": "a@b.c"}, key="user:42")])

    def handle(job: shardq.Job) -> None:
        print(job.id, job.params)

    shardq.Worker(client, {"email": 8}, handle).run()   # SIGTERM stops it cleanly

See the README next to this package, and docs/http.md of shardq for the API.
"""

from .client import BATCH_MAX, Client, Connection, FencedReply, Reply
from .errors import (ApiError, AuthError, BadRequestError, ConfigError, LostError, NotFoundError,
                     ShardqError, TransportError, UnavailableError)
from .jobs import OUTCOMES, EnqueueResult, Job, NewJob
from .producer import Producer
from .worker import Handler, PermanentError, Worker, WorkerStats

__version__ = "0.1.0"

__all__ = [
    "BATCH_MAX", "OUTCOMES", "ApiError", "AuthError", "BadRequestError", "Client", "ConfigError",
    "Connection", "EnqueueResult", "FencedReply", "Handler", "Job", "LostError", "NewJob",
    "NotFoundError", "PermanentError", "Producer", "Reply", "ShardqError", "TransportError",
    "UnavailableError", "Worker", "WorkerStats", "__version__",
]

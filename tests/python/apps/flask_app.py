"""A Flask application for the gunicorn run of test_flask.py: one route limited to
RATEWIN_TEST_LIMIT (default "5/minute") per client, on an engine sharing its counts in
the Redis at RATEWIN_REDIS. Each gunicorn worker imports it and so has its own
engine; the limit holds across them only through Redis."""

from __future__ import annotations

import os
import time

import flask

import ratewin
from ratewin.flask import Limiter

app = flask.Flask(__name__)


@app.before_request
def hold() -> None:
    # Registered before the limiter's check, so it runs first: each request keeps its
    # worker busy for a moment, and requests sent together spread over the workers.
    time.sleep(0.02)


# Deadlines that only bound a failure (the kit's PATIENCE): a Redis reply late on a busy
# machine must not make a decision degraded (decided on the worker's own counts).
engine = ratewin.Engine(os.environ["RATEWIN_REDIS"], connect_timeout=60, command_timeout=60)
limiter = Limiter(app, engine=engine)


@app.after_request
def worker(response: flask.Response) -> flask.Response:
    response.headers["X-Worker"] = str(os.getpid())
    return response


@app.route("/")
@limiter.limit(os.environ.get("RATEWIN_TEST_LIMIT", "5/minute"))
def index() -> str:
    return "hello"

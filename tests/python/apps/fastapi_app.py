"""The FastAPI application of test_fastapi.py's uvicorn run: GET /limited admits
RATEWIN_TEST_LIMIT requests a minute per client, counted on the Redis of RATEWIN_REDIS
(shared by uvicorn's workers). Every answer names the worker's PID in X-Worker."""

from __future__ import annotations

import os
from typing import Awaitable, Callable

from fastapi import Depends, FastAPI, Request, Response

import ratewin
import ratewin.fastapi

app = FastAPI()
# Deadlines that only bound a failure (the kit's PATIENCE): a Redis reply late on a busy
# machine must not make a decision degraded (decided on the worker's own counts).
engine = ratewin.Engine(os.environ["RATEWIN_REDIS"], connect_timeout=60, command_timeout=60)
ratewin.fastapi.install(app, engine)


@app.middleware("http")
async def name_the_worker(request: Request,
                          call_next: Callable[[Request], Awaitable[Response]]) -> Response:
    response = await call_next(request)
    response.headers["X-Worker"] = str(os.getpid())
    return response


@app.get("/limited")
async def limited(
    rl: ratewin.fastapi.RequestLimit = Depends(
        ratewin.fastapi.limit(os.environ.get("RATEWIN_TEST_LIMIT", "5") + "/minute")),
) -> dict[str, int]:
    return {"remaining": rl.remaining}

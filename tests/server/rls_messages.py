"""What the gRPC end-to-end tests import first: the module is skipped whole when this
ratewin-server was built without gRPC (RATEWIN_GRPC=OFF), and otherwise gives grpc
(Debian's python3-grpcio), rls_pb2 and health_pb2 (with health_pb2_grpc's HealthStub),
the messages this build generated for Python (the folder RATEWIN_RLS_PYTHON names)."""

from __future__ import annotations

import os
import sys

import pytest

if os.environ.get("RATEWIN_GRPC", "ON") == "OFF":
    pytest.skip("this ratewin-server was built without gRPC (RATEWIN_BUILD_GRPC=OFF)",
                allow_module_level=True)

import grpc  # noqa: E402,F401  (python3-grpcio)

_python = os.environ.get("RATEWIN_RLS_PYTHON", "")
if not _python or not os.path.isdir(_python):
    pytest.fail("RATEWIN_RLS_PYTHON must name the folder of the RLS messages for Python "
                "(build/cmd/server/rls/python)", pytrace=False)
sys.path.insert(0, _python)
from envoy.service.ratelimit.v3 import rls_pb2  # noqa: E402,F401
# (protoc's and grpc_python_plugin's, as grpcio's health package names them.)
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402,F401

# A folder's one file: domain `edge`, 1000 calls a minute per remote_address (the
# transport tests' folder: a limit they do not reach).
CONFIG = """\
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 1000}
"""

__all__ = ["CONFIG", "grpc", "health_pb2", "health_pb2_grpc", "rls_pb2"]

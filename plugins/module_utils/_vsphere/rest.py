# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""vCenter REST (vSphere Automation API) adapter: one session, JSON calls with a timeout, errors turned into ours.

Login: ``POST /api/session`` with basic authentication returns the session id, sent back in the
``vmware-api-session-id`` header; ``DELETE /api/session`` ends it (vSphere Automation API, CIS Session). Errors come as
``{"error_type": "NOT_FOUND", "messages": [{"default_message": ...}]}`` with a 4xx/5xx status.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Optional

from ansible.module_utils.urls import Request

from ansible_collections.gpuops.provision.plugins.module_utils._common import bounds
from ansible_collections.gpuops.provision.plugins.module_utils._vsphere.api import TRANSPORT_ERRORS, VsphereError

try:  # Python 3
    from urllib.error import HTTPError
except ImportError:  # pragma: no cover
    HTTPError = Exception  # type: ignore[misc,assignment]

SESSION_HEADER = "vmware-api-session-id"


class RestError(VsphereError):
    """An error answer: ``status`` and vCenter's ``error_type``."""

    def __init__(self, message: str, status: int, error_type: Optional[str]) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type


def error_text(body: bytes) -> tuple[Optional[str], str]:
    """(error_type, messages joined) of a vAPI error body; (None, the text) for anything else."""
    try:
        data = json.loads(body.decode("utf-8", "replace") or "null")
    except ValueError:
        return None, body.decode("utf-8", "replace")[:200]
    if not isinstance(data, dict):
        return None, str(data)[:200]
    messages = [m.get("default_message") or m.get("id") or "" for m in data.get("messages") or [] if isinstance(m, dict)]
    return data.get("error_type") or data.get("type"), "; ".join(m for m in messages if m)


class RestSession:
    """A vCenter REST session opened from the vSphere connection options."""

    def __init__(self, params: Mapping[str, Any]) -> None:
        verify, dummy = bounds.tls_verify(params["validate_certs"], params.get("ca_path"))
        self.base = "https://%s:%s" % (params["hostname"], params["port"])
        self.timeout = params.get("api_timeout") or 30
        self.request = Request(validate_certs=bool(verify), ca_path=verify if isinstance(verify, str) else None,
                               timeout=self.timeout, headers={"Content-Type": "application/json", "Accept": "application/json"})
        token = self.call("POST", "/api/session", auth=(params["username"], params["password"]), what="login as %s" % params["username"])
        if not isinstance(token, str) or not token:
            raise VsphereError("login to %s: /api/session answered no session id" % params["hostname"])
        self.token: Optional[str] = token

    def call(self, method: str, path: str, body: Any = None, auth: Optional[tuple[str, str]] = None,
             what: Optional[str] = None) -> Any:
        """The decoded JSON answer (None for an empty one); RestError for an error answer, VsphereError when there is
        no usable answer."""
        what = what or "%s %s" % (method, path)
        headers = {SESSION_HEADER: self.token} if getattr(self, "token", None) else {}
        kwargs: dict[str, Any] = dict(method=method, headers=headers,
                                      data=json.dumps(body) if body is not None else None)
        if auth is not None:
            kwargs.update(url_username=auth[0], url_password=auth[1], force_basic_auth=True)
        try:
            resp = self.request.open(url=self.base + path, **kwargs)
            data = resp.read()
        except HTTPError as e:
            kind, msg = error_text(e.read() if hasattr(e, "read") else b"")
            raise RestError("%s: HTTP %s %s%s" % (what, e.code, kind or "", (": " + msg) if msg else ""), int(e.code), kind)
        except TRANSPORT_ERRORS as e:
            raise VsphereError("%s got no usable answer from vCenter (%s: %s)" % (what, type(e).__name__, e))
        if not data:
            return None
        try:
            return json.loads(data.decode("utf-8"))
        except ValueError as e:
            raise VsphereError("%s: the answer is not JSON (%s)" % (what, e))

    def close(self) -> None:
        if self.token:
            try:
                self.call("DELETE", "/api/session")
            except VsphereError:
                pass  # a failed logout does not change the module's result
            self.token = None
